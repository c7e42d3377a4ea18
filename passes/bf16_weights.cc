// Mixed precision for inference: a weight read only by bf16 products is stored in bf16.
//   param W: f32, every use matmul(x, W){bf16_products}  =>  param W: bf16
// The products round W to bf16 anyway (ir/ops/matmul.h), so every result keeps its bits, while
// the weight takes half the bytes: in memory, and read per decoded token, where a decoding
// step's matrix-vector products are bound by reading the weights (runtime/kernels/gemm.h:
// MatrixRef::bf16). A weight with any other use (a tied embedding's lookup, a norm's scale)
// stays f32. Checkpoints stay f32: loading or writing one into such a weight rounds it
// (runtime::Executable::write). Only inference stages run it (passes/stages.h): a training step
// updates its f32 master weights.
#include "passes/passes.h"

namespace kiln::passes {

Expected<bool> runBf16Weights(ir::Graph &g, PassStats &stats) {
  std::vector<bool> onlyProducts(static_cast<size_t>(g.numValues()), true);
  for (const ir::Node &n : g.nodes()) {
    if (n.erased)
      continue;
    const bool product = n.op == ir::OpKind::Matmul && n.attrs.getBool("bf16_products");
    for (size_t i = 0; i < n.operands.size(); ++i)
      if (!product || i != 1 || n.operands[0] == n.operands[1])
        onlyProducts[static_cast<size_t>(n.operands[i])] = false;
  }
  for (const ir::Output &o : g.outputs())
    onlyProducts[static_cast<size_t>(o.value)] = false;
  const std::vector<int32_t> uses = g.useCounts();
  int64_t stored = 0;
  for (int32_t a = 0; a < static_cast<int32_t>(g.args().size()); ++a) {
    const ir::Arg &arg = g.args()[static_cast<size_t>(a)];
    const ir::Type &t = g.type(arg.value);
    if (arg.kind != ir::Arg::Kind::Param || t.dtype != ir::DType::F32 ||
        !onlyProducts[static_cast<size_t>(arg.value)] || uses[static_cast<size_t>(arg.value)] == 0)
      continue;
    g.setArgDType(a, ir::DType::BF16);
    ++stored;
  }
  if (stored == 0)
    return false;
  stats.count("{} weights stored in bf16", stored);
  return true;
}

} // namespace kiln::passes
