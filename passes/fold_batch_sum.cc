// Batch-sum folding into matmul:
//   reduce_sum(matmul(a, b){transpose_a}, axes = every batch axis)
//     =>  matmul(reshape(a, [Z*K, M]), reshape(b, [Z*K, N])){transpose_a}   (reshaped back if
//                                                                            keepdims)
// for a [z..., K, M], b [z..., K, N] with the same batch axes z... (Z elements), because
//   sum_z A_z^T B_z = sum_z sum_k A_z[k,:]^T B_z[k,:] = [A_1; ...; A_Z]^T [B_1; ...; B_Z],
// the rows of every A_z stacked, which is a's own row-major layout. This is the gradient of a
// weight shared by a batch (dW = sum over batch and positions of dy^T x): autodiff emits the
// batched product and sums it to the weight's shape; folded, it is one GEMM with a long K
// instead of Z products of K rows, with no [Z, M, N] intermediate (16 MiB per weight of the
// benchmark GPT). Only when the matmul's result has no other use. Sums in another order (by k
// over all Z*K rows), so values round differently.
// One walk; the uses of the folded sums are redirected once at the end (Graph::replaceUses), not
// by a walk of the whole graph per fold. A sum that reads a folded sum does not fold either way:
// its operand is then defined by the erased sum, as before by the new 2-D matmul or its reshape.
#include <vector>

#include "ir/builder.h"
#include "ir/ops/reduce.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace kiln::passes {

namespace {

// reduce_sum %id of a single-use matmul(a, b){transpose_a} over exactly its batch axes.
Expected<bool> foldBatchSum(Rewriter &rw, ir::NodeId id) {
  ir::Graph &g = rw.g;
  const ir::Node &r = g.node(id);
  const ir::ValueId product = r.operands[0];
  const ir::NodeId mid = g.value(product).def;
  if (mid == ir::kNone || g.node(mid).erased || rw.uses[product] != 1)
    return false;
  const ir::Node &mm = g.node(mid);
  if (mm.op != ir::OpKind::Matmul || !mm.attrs.getBool("transpose_a") ||
      mm.attrs.getBool("transpose_b"))
    return false;
  const ir::Shape &out = g.type(product).shape;
  const int64_t rank = static_cast<int64_t>(out.size());
  if (rank < 3)
    return false;
  const ir::Shape &a = g.type(mm.operands[0]).shape, &b = g.type(mm.operands[1]).shape;
  std::vector<bool> axes = ir::reducedAxes(r.attrs, rank);
  bool batchOnly = a.size() == out.size() && b.size() == out.size();
  int64_t z = 1;
  for (int64_t d = 0; d < rank && batchOnly; ++d) {
    batchOnly = axes[d] == (d < rank - 2);
    if (d < rank - 2) {
      batchOnly = batchOnly && a[d] == out[d] && b[d] == out[d];
      z *= out[d];
    }
  }
  if (!batchOnly)
    return false;
  const int64_t k = a[rank - 2], m = a[rank - 1], n = b[rank - 1];
  // Copies: emitting nodes may move the graph's node storage under r and mm.
  const ir::ValueId opA = mm.operands[0], opB = mm.operands[1], old = r.results[0];
  const ir::Attrs attrs = mm.attrs; // transpose_a, and bf16_products if set
  const ir::Shape want = g.type(old).shape;
  ir::Builder bld(g, r.loc, r.gradOf);
  ir::ValueId a2 = bld.reshape(opA, {z * k, m});
  ir::ValueId b2 = bld.reshape(opB, {z * k, n});
  const ir::ValueId operands[] = {a2, b2};
  ir::ValueId c = bld.emit(ir::OpKind::Matmul, operands, attrs);
  if (g.type(c).shape != want)
    c = bld.reshape(c, want);
  rw.replace(old, c);
  g.eraseNode(id, g.value(c).def);
  g.eraseNode(mid, g.value(c).def);
  return true;
}

} // namespace

Expected<bool> runFoldBatchSum(ir::Graph &g, PassStats &stats) {
  return rewriteNodes(g, ir::OpKind::ReduceSum, stats, "folded {} batch sums into matmul",
                      &foldBatchSum);
}

} // namespace kiln::passes
