// The list scheduling schedule-collectives and schedule-updates share: some nodes move up to just
// after what they wait for, every other node keeps its place.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

// The live nodes of g in an order where each `movable` node comes right after the last node it
// waits for (the makers of its operands, and the nodes after[id] names), the others in their own
// order; movable nodes ready at once go in graph order. A movable node that can never be placed
// (it waits on itself through another) is missing from the order: callers compare its size.
std::vector<ir::NodeId> hoistedOrder(const ir::Graph &g, const std::vector<bool> &movable,
                                     const std::vector<std::vector<ir::NodeId>> &after = {});

} // namespace kiln::passes
