// The buffers a graph's memory plan holds in its arena, with their lifetimes: one per value that
// has bytes of its own, live from its node to the last use of it or of a value sharing its bytes
// (as passes/memory_plan.cc forms them). For tests of the placement and of the plan verifier.
#pragma once

#include <algorithm>
#include <vector>

#include "ir/graph.h"
#include "passes/best_fit.h"

namespace kiln::test_util {

// `roots` (if given) gets each buffer's first value, whose slot holds the buffer's offset.
inline std::vector<passes::Lifetime> arenaLifetimes(const ir::Graph &g,
                                                    std::vector<ir::ValueId> *roots = nullptr) {
  using namespace kiln::ir;
  const MemoryPlan &plan = *g.memoryPlan();
  std::vector<int32_t> last = lastUses(g);
  std::vector<ValueId> root(g.numValues(), kNone);
  std::vector<int32_t> index(g.numValues(), kNone);
  std::vector<passes::Lifetime> out;
  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes().size()); ++n)
    for (ValueId r : g.node(n).results) {
      const MemorySlot &s = plan.slots[r];
      if (s.region != MemRegion::Arena)
        continue;
      root[r] = s.share == MemorySlot::Share::None ? r : root[s.of];
      if (root[r] == r) {
        index[r] = static_cast<int32_t>(out.size());
        out.push_back({n, last[r], (s.bytes + kMemAlignment - 1) / kMemAlignment * kMemAlignment});
        if (roots)
          roots->push_back(r);
      }
      passes::Lifetime &b = out[index[root[r]]];
      b.end = std::max(b.end, last[r]);
    }
  return out;
}

} // namespace kiln::test_util
