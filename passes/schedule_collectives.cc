// Collectives scheduled for overlap:
//   x = f(..); ...; y = all_reduce_start(x){..}; z = all_reduce_wait(y){..}; g(z)
//     =>  x = f(..); y = all_reduce_start(x){..}; ...; z = all_reduce_wait(y){..}; g(z)
// Each start, with the nodes that pack a bucket for it alone (its operand's concat and the
// reshapes that feed only that concat, passes/data_parallel.cc), moves up to just after the last
// node that makes what it reads (an argument's: to the top), so that its reduction runs while the
// rest of the step computes; each wait stays where the order puts it, just before its first user.
// The starts keep the order in which they become ready, the same on every rank (one program for
// all), which MPI asks of collectives. It runs last before the memory plan (the `lower`
// pipeline): later passes keep a valid order (Graph::compact).
#include "passes/hoist.h"
#include "passes/passes.h"

namespace kiln::passes {

Expected<bool> runScheduleCollectives(ir::Graph &g, PassStats &stats) {
  const auto count = static_cast<ir::NodeId>(g.nodes().size());
  const std::vector<int32_t> uses = g.useCounts();
  // The nodes to move: the starts and their packing, `early` in the graph's order.
  std::vector<bool> early(count, false);
  auto onlyFor = [&](ir::ValueId v, ir::OpKind op) { // v's maker, when it is `op` and v feeds one
    const ir::NodeId def = g.value(v).def;
    return def != ir::kNone && g.node(def).op == op && uses[v] == 1 ? def : ir::kNone;
  };
  int64_t starts = 0;
  for (ir::NodeId id = 0; id < count; ++id) {
    const ir::Node &n = g.node(id);
    if (n.erased || n.op != ir::OpKind::AllReduceStart)
      continue;
    early[id] = true, ++starts;
    if (const ir::NodeId concat = onlyFor(n.operands[0], ir::OpKind::Concat); concat != ir::kNone) {
      early[concat] = true;
      for (ir::ValueId v : g.node(concat).operands)
        if (const ir::NodeId reshape = onlyFor(v, ir::OpKind::Reshape); reshape != ir::kNone)
          early[reshape] = true;
    }
  }
  if (starts == 0)
    return false;
  // Every other node in its place; after each, the early nodes whose operands are all made.
  const std::vector<ir::NodeId> order = hoistedOrder(g, early);
  std::vector<bool> placed(count, false);
  for (ir::NodeId id : order)
    placed[id] = true;
  for (ir::NodeId id = 0; id < count; ++id) // (each early node reads what is made before it)
    if (!g.node(id).erased && !placed[id])
      return makeError("schedule-collectives: node %{} reads a value that nothing before it makes",
                       id);
  bool same = order.size() == static_cast<size_t>(count);
  for (size_t i = 0; i < order.size() && same; ++i)
    same = order[i] == static_cast<ir::NodeId>(i);
  if (same)
    return false;
  g.reorder(order);
  stats.count("{} reductions started as soon as their gradients are made", starts);
  return true;
}

} // namespace kiln::passes
