// The loop the node-replacing fold passes share (fold-batch-sum, fold-head-transpose,
// fold-scatter-add). Each live node of kind `op` that the graph held when the pass began (not
// those a rewrite appends) is offered to `rewrite`, which declines (false) or appends what takes
// the node's place, names each replaced result with Rewriter::replace and erases the nodes it
// made dead. Afterwards every use of a replaced value reads its replacement (one walk,
// Graph::replaceUses), the graph is compacted, and `stats` counts the rewrites as `what` (a
// PassStats counter: "{}" stands for the number).
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

struct Rewriter {
  ir::Graph &g;
  std::vector<int32_t> uses; // each value's use count when the pass began
  std::vector<ir::ValueId> repl;

  void replace(ir::ValueId from, ir::ValueId to) { repl[from] = to; }
};

// Its Error stops the pass (the graph as the rewrites so far left it).
using RewriteFn = std::function<Expected<bool>(Rewriter &r, ir::NodeId id)>;

Expected<bool> rewriteNodes(ir::Graph &g, ir::OpKind op, PassStats &stats, std::string_view what,
                            const RewriteFn &rewrite);

} // namespace kiln::passes
