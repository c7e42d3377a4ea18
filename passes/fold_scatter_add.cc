// Scatter-add folding into its addend:
//   add(x, scatter_add(indices, updates))  or  add(scatter_add(indices, updates), x)
//     =>  scatter_add(indices, updates, x)
// when the scatter_add has no other use and x has the sum's type (no broadcast). A tied
// embedding's gradient is such a sum: the lm head's dW, a [V, D] product, plus the lookup's
// scatter_add of the tokens' rows. Unfolded, the step zero-fills a [V, D] table, adds the rows
// into it, then adds two [V, D] tables; folded, the memory plan lets the result take x's bytes
// (scatter_add may write over its base) and the kernel writes only the rows the tokens name.
// GPT-2 (V 50257, D 768): 21 ms of a training step and a 147 MiB temporary. The bits are the
// add's, except that a -0 of x on a row no index names stays -0 (the add made it +0).
#include <vector>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace kiln::passes {

namespace {

// add %id, where one operand is a single-use two-operand scatter_add of the sum's type.
Expected<bool> foldScatterAdd(Rewriter &r, ir::NodeId id) {
  ir::Graph &g = r.g;
  const ir::Node &add = g.node(id);
  const ir::Type &sum = g.type(add.results[0]);
  for (int side = 0; side < 2; ++side) {
    const ir::ValueId s = add.operands[side], x = add.operands[1 - side];
    const ir::NodeId def = g.value(s).def;
    if (def == ir::kNone || r.uses[s] != 1 || g.type(s) != sum || g.type(x) != sum)
      continue;
    const ir::Node &scatter = g.node(def);
    if (scatter.erased || scatter.op != ir::OpKind::ScatterAdd || scatter.operands.size() != 2)
      continue;
    // Copies: adding a node may move the graph's node storage under add and scatter.
    const std::vector<ir::ValueId> operands = {scatter.operands[0], scatter.operands[1], x};
    const ir::Attrs attrs = scatter.attrs;
    const ir::ValueId old = add.results[0];
    const ir::SourceLoc loc = scatter.loc;
    const ir::NodeId gradOf = scatter.gradOf;
    Expected<ir::NodeId> into = g.addNode(ir::OpKind::ScatterAdd, operands, attrs, loc);
    if (!into)
      return makeError("fold-scatter-add: add %{}: {}", old, into.error().message);
    g.node(*into).gradOf = gradOf;
    r.replace(old, g.node(*into).results[0]);
    g.eraseNode(id, *into);
    g.eraseNode(def, *into);
    return true;
  }
  return false;
}

} // namespace

Expected<bool> runFoldScatterAdd(ir::Graph &g, PassStats &stats) {
  return rewriteNodes(g, ir::OpKind::Add, stats, "scatter_adds folded into their addend: {}",
                      &foldScatterAdd);
}

} // namespace kiln::passes
