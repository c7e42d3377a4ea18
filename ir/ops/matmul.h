// Batched matrix multiplication: a [..., M, K] x b [..., K, N] -> [..., M, N], with numpy
// broadcasting over the leading (batch) dimensions and either operand optionally transposed in
// its last two dimensions (a stored [..., K, M], b stored [..., N, K], e.g. a Linear weight).
#pragma once

#include "ir/op.h"
#include "ir/ops/ref_util.h"

namespace kiln::ir {

// bf16_products: mixed precision (passes/bf16_products.cc). Each operand element is rounded to
// bf16 (to nearest, ties to even) before it is multiplied; the products are exact in f32 and the
// sums run in the result's dtype. The operands and the result keep their dtype in memory; an f32
// a may then take a bf16 b (a weight stored in bf16, passes/bf16_weights.cc: rounding it is the
// identity), the result f32.
inline constexpr AttrSpec kMatmulAttrs[] = {{"transpose_a", AttrKind::Bool, false, 0},
                                            {"transpose_b", AttrKind::Bool, false, 0},
                                            {"bf16_products", AttrKind::Bool, false, 0}};
inline constexpr std::string_view kMatmulOperands[] = {"a", "b"};

// Both operands float of one dtype, rank >= 2; inner dimensions equal; batch dims broadcast.
Expected<std::vector<Type>> inferMatmul(std::span<const Type> in, const Attrs &attrs);
template <class F> KILN_REF_FN(refMatmul);
// dA = dy B^T, dB = A^T dy on the logical matrices; see matmul_grad.cc.
Status gradMatmul(GradContext &c);
// The GEMM kernel's packing buffers (support/workspace.h).
int64_t scratchMatmul(const Graph &g, const Node &n);

inline constexpr OpInfo kMatmulOp{.kind = OpKind::Matmul,
                                  .mnemonic = "matmul",
                                  .summary = "batched a @ b with broadcast batch dims",
                                  .operands = kMatmulOperands,
                                  .attrs = kMatmulAttrs,
                                  .infer = &inferMatmul,
                                  .ref32 = &refMatmul<float>,
                                  .ref64 = &refMatmul<double>,
                                  .grad = &gradMatmul,
                                  .regionRole = RegionRole::Matmul,
                                  .scratchBytes = &scratchMatmul};

} // namespace kiln::ir
