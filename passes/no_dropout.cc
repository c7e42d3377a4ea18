// Evaluation mode, as PyTorch's eval(): no dropout.
//   dropout(x){p}                =>  x
//   attention(...){dropout = p}  =>  attention(...){dropout = 0}
// A validation loss is the model's without dropout (stages.cc validationForward: kiln train's,
// and a training bundle's eval program), and so is a forward bundle of an IR file (an IR file's
// dropout nodes are its own, which no setting reaches). Exact: at p = 0 dropout keeps every
// element, unscaled.
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace kiln::passes {

Expected<bool> runNoDropout(ir::Graph &g, PassStats &stats) {
  int64_t attentions = 0;
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    ir::Node &n = g.node(id);
    if (!n.erased && n.op == ir::OpKind::Attention && n.attrs.getFloat("dropout") != 0) {
      if (Status s = n.attrs.set("dropout", 0.0); !s)
        return s.error();
      ++attentions;
    }
  }
  if (attentions > 0)
    stats.count("attention dropouts turned off: {}", attentions);
  Expected<bool> removed = rewriteNodes(g, ir::OpKind::Dropout, stats, "dropouts removed: {}",
                                        [](Rewriter &r, ir::NodeId id) -> Expected<bool> {
                                          const ir::Node &n = r.g.node(id);
                                          r.replace(n.results[0], n.operands[0]);
                                          r.g.eraseNode(id);
                                          return true;
                                        });
  if (!removed)
    return removed;
  return *removed || attentions > 0;
}

} // namespace kiln::passes
