// hoistedOrder (see hoist.h): each movable node counts what it still waits for; placing a node
// releases its waiters, and the ready ones are placed smallest id first.
#include "passes/hoist.h"

#include <functional>
#include <queue>

namespace kiln::passes {

std::vector<ir::NodeId> hoistedOrder(const ir::Graph &g, const std::vector<bool> &movable,
                                     const std::vector<std::vector<ir::NodeId>> &after) {
  const auto count = static_cast<ir::NodeId>(g.nodes().size());
  std::vector<int32_t> pending(count, 0);
  std::vector<std::vector<ir::NodeId>> waiters(count);
  auto wait = [&](ir::NodeId id, ir::NodeId on) {
    if (on != ir::kNone && on != id) {
      ++pending[id];
      waiters[on].push_back(id);
    }
  };
  std::priority_queue<ir::NodeId, std::vector<ir::NodeId>, std::greater<>> ready;
  for (ir::NodeId id = 0; id < count; ++id) {
    if (g.node(id).erased || !movable[id])
      continue;
    for (ir::ValueId v : g.node(id).operands)
      wait(id, g.value(v).def);
    if (static_cast<size_t>(id) < after.size())
      for (ir::NodeId on : after[id])
        wait(id, on);
    if (pending[id] == 0)
      ready.push(id);
  }
  std::vector<ir::NodeId> order;
  auto place = [&](ir::NodeId id) {
    order.push_back(id);
    for (ir::NodeId w : waiters[id])
      if (--pending[w] == 0)
        ready.push(w);
  };
  auto placeReady = [&] {
    while (!ready.empty()) {
      const ir::NodeId id = ready.top();
      ready.pop();
      place(id);
    }
  };
  placeReady();
  for (ir::NodeId id = 0; id < count; ++id)
    if (!g.node(id).erased && !movable[id]) {
      place(id);
      placeReady();
    }
  return order;
}

} // namespace kiln::passes
