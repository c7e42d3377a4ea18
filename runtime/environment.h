// The environment variables that kiln and a compiled executable read at their start, in one place
// so that the two agree: KILN_THREADS (the default thread count: ThreadPool::threadsVariable) and
// KILN_BF16_INSTRUCTIONS (kernels/bf16_instructions.h). A bad value is an error naming it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::runtime {

// What kiln's and an executable's main do first of all, alike: for a `train` command (argv[1]),
// SIGUSR1 held as a stop request from now on (InterruptGuard::holdStopRequestsOfTraining), and
// closed standard descriptors held on /dev/null (holdStandardDescriptors, output_file.h).
void startProcess(int argc, char **argv);

// Checks KILN_THREADS and applies KILN_BF16_INSTRUCTIONS.
Status useEnvironment();

// The note a run with bf16 products prints once on stderr where they run on f32 FMAs (this CPU
// has no bf16 instructions, or KILN_BF16_INSTRUCTIONS=none forbids them), `program` its name
// (kiln, or the executable's) and `faster` what runs faster there (kiln: "--precision f32");
// nullopt where they run on bf16 instructions.
std::optional<std::string> bf16FallbackNote(std::string_view program, std::string_view faster);

} // namespace kiln::runtime
