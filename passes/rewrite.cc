// The fold passes' rewrite loop (see rewrite.h).
#include "passes/rewrite.h"

namespace kiln::passes {

Expected<bool> rewriteNodes(ir::Graph &g, ir::OpKind op, PassStats &stats, std::string_view what,
                            const RewriteFn &rewrite) {
  Rewriter r{g, g.useCounts(), std::vector<ir::ValueId>(g.numValues(), ir::kNone)};
  int64_t rewritten = 0;
  const auto end = static_cast<ir::NodeId>(g.nodes().size()); // not the nodes appended here
  for (ir::NodeId id = 0; id < end; ++id) {
    if (g.node(id).erased || g.node(id).op != op)
      continue;
    Expected<bool> done = rewrite(r, id);
    if (!done)
      return done.error();
    rewritten += *done;
  }
  if (rewritten == 0)
    return false;
  g.replaceUses(r.repl);
  g.compact();
  stats.count(what, rewritten);
  return true;
}

} // namespace kiln::passes
