// Compiled by tests/CMakeLists.txt with exactly the include path of the runtime library: the
// runtime headers must compile there, and the IR's must not be found (a standalone executable
// links runtime/ and generated code only).
#include "runtime/checkpoint.h"
#include "runtime/kernels/gemm.h"
#include "runtime/kernels/target.h"
#include "runtime/executable.h"
#include "runtime/thread_pool.h"
#include "runtime/trainer.h"
#include "runtime/weights.h"
#ifdef KILN_PROBE_IR
#include "ir/graph.h"
#endif
