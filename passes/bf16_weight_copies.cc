// Mixed-precision training: the bf16 products read a bf16 copy of each weight, which the
// optimizer's update writes beside the f32 master weight.
//   param W: f32, uses matmul(.., W, ..){bf16_products}, output "new.W" (update of W) = W'
//     =>  state "bf16_copy.W": bf16 (kBf16CopyPrefix), each such use reads it instead of W,
//         output "new.bf16_copy.W" (update of the copy) = cast(W'){dtype = bf16}
// The products round W to bf16 as they pack it (ir/ops/matmul.h); the copy holds those very
// values, so every result keeps its bits. What changes is the bytes: a weight is read by its
// forward product and by its input gradient's, each reading 2 bytes an element instead of 4 and
// packing without rounding; the update writes 2 more beside its 24 (W, m, v read and written).
// This is what PyTorch's autocast does by casting each weight once a step, but without the
// cast's extra pass over W: elementwise fusion puts the cast into the update's region (a weight
// gradient's GEMM epilogue, passes/schedule_updates.cc). GPT-2 124M: see the README's bf16
// paragraph. W keeps every other use (a lookup of a tied embedding, its update) and stays the
// master weight that checkpoints hold; the copy is never saved: the runtime writes it whenever
// W is written (runtime::Executable::write), and a step keeps the two equal after.
// Training stages only (passes/stages.h), after bf16-products marks the products and before
// elementwise fusion; inference stores such a weight in bf16 outright (bf16-weights).
#include <fmt/format.h>

#include "passes/passes.h"

namespace kiln::passes {
using namespace kiln::ir;

Expected<bool> runBf16WeightCopies(Graph &g, PassStats &stats) {
  // Per value: the (node, operand) places where a bf16 product reads it.
  std::vector<std::vector<std::pair<NodeId, size_t>>> reads(static_cast<size_t>(g.numValues()));
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node &n = g.node(id);
    if (!n.erased && n.op == OpKind::Matmul && n.attrs.getBool("bf16_products"))
      for (size_t i = 0; i < n.operands.size(); ++i)
        reads[static_cast<size_t>(n.operands[i])].emplace_back(id, i);
  }
  const std::vector<ValueId> updates = updateValues(g);
  const auto params = static_cast<int32_t>(g.args().size());
  int64_t copies = 0;
  for (int32_t a = 0; a < params; ++a) {
    const Arg arg = g.args()[static_cast<size_t>(a)]; // a copy: addState grows the list
    const Type type = g.type(arg.value);
    if (arg.kind != Arg::Kind::Param || type.dtype != DType::F32 ||
        reads[static_cast<size_t>(arg.value)].empty())
      continue;
    const std::string name = fmt::format("{}{}", kBf16CopyPrefix, arg.name);
    // Before the optimizer (before autodiff, or a forward graph) a product that read the copy, a
    // state, would leave W's gradient without its part: zero, silently.
    if (updates[static_cast<size_t>(a)] == kNone)
      return makeError("bf16-weight-copies: parameter \"{}\" has no update output: the copies "
                       "are a training step's, made after its optimizer (kiln's training stage "
                       "runs them there); a graph before autodiff would lose the products' "
                       "gradients of it (a forward graph stores its weights in bf16 with "
                       "bf16-weights)",
                       arg.name);
    if (g.argIndex(name) != kNone)
      return makeError("bf16-weight-copies: the graph already has an argument \"{}\"", name);
    const ValueId copy = g.addState(name, Type{DType::BF16, type.shape});
    for (auto [id, i] : reads[static_cast<size_t>(arg.value)])
      g.node(id).operands[i] = copy;
    Expected<NodeId> cast =
        g.addNode(OpKind::Cast, {updates[static_cast<size_t>(a)]}, {{"dtype", DType::BF16}});
    if (!cast)
      return makeError("bf16-weight-copies: {}", cast.error().message);
    g.addOutput("new." + name, g.result(*cast), OutputRole::Update, g.argIndex(name));
    ++copies;
  }
  if (copies == 0)
    return false;
  g.dropMemoryPlan();
  stats.count("{} weights read by bf16 products from a bf16 copy", copies);
  return true;
}

} // namespace kiln::passes
