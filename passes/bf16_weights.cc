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
// The programs of one model (translate's encoder and decoding step) store the same weights in
// bf16 (storeWeightsInBf16, passes/stages.h: optimizedForwards): the encoder reads the tied
// embedding only as its lookup table, which alone it would leave f32, and its lookups would then
// differ from the decoder's and from the forward program's (a translation from a checkpoint and
// from its bf16 bundle disagreed).
// Checkpoints stay f32: loading or writing one into such a weight rounds it
// (runtime::Executable::write). Only inference stages run it (passes/stages.h): a training step
// updates its f32 master weights.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "passes/passes.h"

namespace kiln::passes {

namespace {

bool lookup(const ir::Node &n) {
  return n.op == ir::OpKind::Gather && n.attrs.getInt("axis") == 0 && !n.attrs.getBool("widen");
}

// The f32 params that only bf16 products (as their B) and lookups read (storable), and of those,
// the ones a product reads here.
struct Readers {
  std::vector<bool> storable, inProduct;
};
Readers readersOf(const ir::Graph &g) {
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
  Readers r{std::vector<bool>(static_cast<size_t>(g.numValues()), false), std::move(inProduct)};
  for (const ir::Arg &arg : g.args())
    r.storable[static_cast<size_t>(arg.value)] = arg.kind == ir::Arg::Kind::Param &&
                                                 g.type(arg.value).dtype == ir::DType::F32 &&
                                                 onlyProducts[static_cast<size_t>(arg.value)];
  return r;
}

// Stores the params `store` picks (of the storable ones) in bf16, their lookups widened: how many.
Expected<int64_t> storeInBf16(ir::Graph &g, const std::function<bool(const ir::Arg &)> &store) {
  const Readers r = readersOf(g);
  std::vector<bool> retyped(static_cast<size_t>(g.numValues()), false);
  int64_t stored = 0;
  for (int32_t a = 0; a < static_cast<int32_t>(g.args().size()); ++a) {
    const ir::Arg &arg = g.args()[static_cast<size_t>(a)];
    if (!r.storable[static_cast<size_t>(arg.value)] || !store(arg))
      continue;
    retyped[static_cast<size_t>(arg.value)] = true;
    g.setArgDType(a, ir::DType::BF16);
    ++stored;
  }
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    ir::Node &n = g.node(id);
    if (!n.erased && lookup(n) && retyped[static_cast<size_t>(n.operands[0])])
      if (Status s = n.attrs.set("widen", true); !s)
        return s.error();
  }
  return stored;
}

} // namespace

Expected<bool> runBf16Weights(ir::Graph &g, PassStats &stats) {
  const std::vector<bool> inProduct = readersOf(g).inProduct;
  Expected<int64_t> stored =
      storeInBf16(g, [&](const ir::Arg &arg) { return inProduct[static_cast<size_t>(arg.value)]; });
  if (!stored)
    return stored.error();
  if (*stored == 0)
    return false;
  stats.count("{} weights stored in bf16", *stored);
  return true;
}

Expected<int64_t> storeWeightsInBf16(ir::Graph &g, const std::set<std::string> &names) {
  return storeInBf16(g, [&](const ir::Arg &arg) { return names.count(arg.name) > 0; });
}

} // namespace kiln::passes
