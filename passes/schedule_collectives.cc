// Collectives scheduled for overlap:
//   x = f(..); ...; y = all_reduce_start(x){..}; z = all_reduce_wait(y){..}; g(z)
//     =>  x = f(..); y = all_reduce_start(x){..}; ...; z = all_reduce_wait(y){..}; g(z)
// Each start moves up to just after the node that makes its operand (an argument's: to the top),
// so that its reduction runs while the rest of the step computes; each wait stays where the order
// puts it, just before its first user. The starts keep the order of their operands' making, the
// same on every rank (one program for all), which MPI asks of collectives. It runs last before the
// memory plan (the `lower` pipeline): later passes keep a valid order (Graph::compact).
#include "passes/passes.h"

namespace kiln::passes {

Expected<bool> runScheduleCollectives(ir::Graph &g, PassStats &stats) {
  const auto count = static_cast<ir::NodeId>(g.nodes().size());
  std::vector<std::vector<ir::NodeId>> after(count); // the starts to place after each node
  std::vector<ir::NodeId> first;                     // the starts of arguments: at the top
  int64_t starts = 0;
  for (ir::NodeId id = 0; id < count; ++id) {
    const ir::Node &n = g.node(id);
    if (n.erased || n.op != ir::OpKind::AllReduceStart)
      continue;
    const ir::NodeId def = g.value(n.operands[0]).def;
    (def == ir::kNone ? first : after[def]).push_back(id);
    ++starts;
  }
  if (starts == 0)
    return false;
  std::vector<ir::NodeId> order = first;
  for (ir::NodeId id = 0; id < count; ++id) {
    const ir::Node &n = g.node(id);
    if (n.erased || n.op == ir::OpKind::AllReduceStart)
      continue;
    order.push_back(id);
    order.insert(order.end(), after[id].begin(), after[id].end());
  }
  bool same = true;
  for (size_t i = 0; i < order.size() && same; ++i)
    same = order[i] == static_cast<ir::NodeId>(i);
  if (same)
    return false;
  g.reorder(order);
  stats.count("{} reductions started as soon as their operand is made", starts);
  return true;
}

} // namespace kiln::passes
