/* The kernel ABI and bundle headers are C: this file compiles them as strict C11 (with -Werror
 * -pedantic), as a bundle's C users and generated C headers will. */
#include "runtime/bundle.h"
#include "runtime/kernel_abi.h"

#define KILN_ENTRY(name) name,
static const kiln_kernel kKernels[] = {KILN_KERNELS(KILN_ENTRY)};

int kiln_abi_c11_check(const kiln_run *run, const kiln_gemm_args *args, const kiln_bundle *b) {
  int64_t failed = 0;
  return (int)kKernels[0](run, args) + (int)sizeof(kiln_region_args) + (int)b->run(run, &failed);
}
