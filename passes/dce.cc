// Dead code elimination:  a node none of whose results reaches a graph output  =>  (removed).
// A plain reverse walk marking what the outputs need. Arguments (inputs, parameters, state) are
// the graph's interface and always stay, used or not. IR ops have no side effects, so a node's
// only reason to exist is its results.
#include <vector>

#include "passes/passes.h"

namespace kiln::passes {

Expected<bool> runDce(ir::Graph &g, PassStats &stats) {
  std::vector<bool> live(g.numValues(), false);
  for (const ir::Output &o : g.outputs())
    live[o.value] = true;
  int64_t removed = 0;
  for (ir::NodeId id = static_cast<ir::NodeId>(g.nodes().size()); id-- > 0;) {
    const ir::Node &n = g.node(id);
    if (n.erased)
      continue;
    bool needed = false;
    for (ir::ValueId r : n.results)
      needed = needed || live[r];
    if (!needed) {
      g.eraseNode(id);
      ++removed;
      continue;
    }
    for (ir::ValueId v : n.operands)
      live[v] = true;
  }
  if (removed == 0)
    return false;
  stats.count("removed {} dead nodes", removed);
  g.compact();
  return true;
}

} // namespace kiln::passes
