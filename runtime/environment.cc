// The start's environment variables (see environment.h).
#include "runtime/environment.h"

#include "runtime/kernels/bf16_instructions.h"
#include "runtime/thread_pool.h"

namespace kiln::runtime {

Status useEnvironment() {
  if (Expected<std::optional<int>> v = ThreadPool::threadsVariable(); !v)
    return v.error();
  return kernels::useBf16InstructionsVariable();
}

} // namespace kiln::runtime
