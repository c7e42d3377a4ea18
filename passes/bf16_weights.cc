// Mixed precision for inference: a weight read by bf16 products, and by nothing else but lookups,
// is stored in bf16, and its lookups widen it back to f32.
//   param W: f32, a use matmul(x, W){bf16_products}, every other one too or gather(W, ids){axis 0}
//     =>  param W: bf16, each gather(W, ids){axis = 0, widen}
// The products round W to bf16 anyway (ir/ops/matmul.h), so their results keep their bits; a
// lookup reads W's rounded values, which f32 weights holding those values give bit for bit (the
// tests' oracle). The weight takes half the bytes: in memory, in a bundle, and read per decoded
// token, where a decoding step's matrix-vector products are bound by reading the weights
// (runtime/kernels/gemm.h: MatrixRef::bf16); a tied embedding is both the lookup's table and the
// vocabulary's product. A weight with any other use (a norm's scale, a bias) stays f32, and so
// does a table that only lookups read (an untied token embedding, positions): a decoding step
// reads a row of it, and the decode program looks positions up where prefill slices them, so
// the two programs of a model could not agree on its dtype.
// Checkpoints stay f32: loading or writing one into such a weight rounds it
// (runtime::Executable::write). Only inference stages run it (passes/stages.h): a training step
// updates its f32 master weights.
#include "passes/passes.h"

namespace kiln::passes {

Expected<bool> runBf16Weights(ir::Graph &g, PassStats &stats) {
  auto lookup = [](const ir::Node &n) {
    return n.op == ir::OpKind::Gather && n.attrs.getInt("axis") == 0 && !n.attrs.getBool("widen");
  };
  std::vector<bool> onlyProducts(static_cast<size_t>(g.numValues()), true),
      inProduct(static_cast<size_t>(g.numValues()), false);
  for (const ir::Node &n : g.nodes()) {
    if (n.erased)
      continue;
    const bool product = n.op == ir::OpKind::Matmul && n.attrs.getBool("bf16_products") &&
                         n.operands[0] != n.operands[1];
    if (product)
      inProduct[static_cast<size_t>(n.operands[1])] = true;
    for (size_t i = 0; i < n.operands.size(); ++i)
      if (!(product && i == 1) && !(lookup(n) && i == 0))
        onlyProducts[static_cast<size_t>(n.operands[i])] = false;
  }
  for (const ir::Output &o : g.outputs())
    onlyProducts[static_cast<size_t>(o.value)] = false;
  std::vector<bool> retyped(static_cast<size_t>(g.numValues()), false);
  int64_t stored = 0;
  for (int32_t a = 0; a < static_cast<int32_t>(g.args().size()); ++a) {
    const ir::Arg &arg = g.args()[static_cast<size_t>(a)];
    const ir::Type &t = g.type(arg.value);
    if (arg.kind != ir::Arg::Kind::Param || t.dtype != ir::DType::F32 ||
        !onlyProducts[static_cast<size_t>(arg.value)] || !inProduct[static_cast<size_t>(arg.value)])
      continue;
    g.setArgDType(a, ir::DType::BF16);
    retyped[static_cast<size_t>(arg.value)] = true;
    ++stored;
  }
  if (stored == 0)
    return false;
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    ir::Node &n = g.node(id);
    if (!n.erased && lookup(n) && retyped[static_cast<size_t>(n.operands[0])])
      if (Status s = n.attrs.set("widen", true); !s)
        return s.error();
  }
  stats.count("{} weights stored in bf16", stored);
  return true;
}

} // namespace kiln::passes
