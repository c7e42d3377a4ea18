/* The kernel ABI header is C: this file compiles it as strict C11 (with -Werror -pedantic), as
 * a bundle's C users and generated C headers will. */
#include "runtime/kernel_abi.h"

int kiln_abi_c11_check(const kiln_run *run, const kiln_gemm_args *args) {
  const kiln_kernel kernels[] = {kiln_gemm,         kiln_region,     kiln_attention,
                                 kiln_attention_backward, kiln_norm, kiln_norm_backward,
                                 kiln_gather,       kiln_scatter_add, kiln_softmax,
                                 kiln_log_softmax,  kiln_reduce,     kiln_permute,
                                 kiln_copy,         kiln_dropout};
  return (int)kernels[0](run, args) + (int)sizeof(kiln_region_args);
}
