// The start's environment variables (see environment.h).
#include "runtime/environment.h"

#include <fmt/format.h>

#include "runtime/communicator.h"
#include "runtime/interrupt.h"
#include "runtime/kernels/bf16_instructions.h"
#include "runtime/kernels/gemm.h"
#include "runtime/output_file.h"
#include "runtime/thread_pool.h"

namespace kiln::runtime {

void startProcess(int argc, char **argv) {
  InterruptGuard::holdStopRequestsOfTraining(argc, argv);
  holdStandardDescriptors();
}

Status useEnvironment() {
  if (Expected<std::optional<int>> v = ThreadPool::threadsVariable(); !v)
    return v.error();
  return kernels::useBf16InstructionsVariable();
}

std::optional<std::string> bf16FallbackNote(std::string_view program, std::string_view faster) {
  if (kernels::gemmBf16Engine() != "f32 FMAs" || launchedAsLaterRank()) // (rank 0 says it)
    return std::nullopt;
  return fmt::format("{}: note: {}: bf16 products run on f32 FMAs, slower than {}\n", program,
                     kernels::bf16InstructionsForbidden()
                         ? "KILN_BF16_INSTRUCTIONS=none"
                         : "this CPU has no bf16 instructions (AMX-BF16, AVX512_BF16)",
                     faster);
}

} // namespace kiln::runtime
