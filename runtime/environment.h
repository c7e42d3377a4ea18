// The environment variables that kiln and a compiled executable read at their start, in one place
// so that the two agree: KILN_THREADS (the default thread count: ThreadPool::threadsVariable) and
// KILN_BF16_INSTRUCTIONS (kernels/bf16_instructions.h). A bad value is an error naming it.
#pragma once

#include "support/status.h"

namespace kiln::runtime {

// Checks KILN_THREADS and applies KILN_BF16_INSTRUCTIONS.
Status useEnvironment();

} // namespace kiln::runtime
