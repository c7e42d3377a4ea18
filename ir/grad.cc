// GradContext construction.
#include "ir/grad.h"

namespace kiln::ir {

GradContext::GradContext(Graph &g, NodeId id, std::vector<ValueId> resultGrads)
    : Builder(g, g.node(id).loc, id), forwardId(id), forward(g.node(id)),
      dy(std::move(resultGrads)), dx(forward.operands.size(), kNone) {}

} // namespace kiln::ir
