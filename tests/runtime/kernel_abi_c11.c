/* The kernel ABI header is C: this file compiles it as strict C11 (with -Werror -pedantic), as
 * a bundle's C users and generated C headers will. */
#include "runtime/kernel_abi.h"

int kiln_abi_c11_check(const kiln_run *run, const kiln_gemm_args *args) {
  kiln_gemm(run, args);
  return (int)sizeof(kiln_gemm_args);
}
