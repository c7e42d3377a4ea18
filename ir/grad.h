// What a gradient rule sees and uses. Autodiff (passes/autodiff) walks the graph in reverse and,
// for each node that gradient reaches, calls the op's rule (OpInfo::grad) with a GradContext:
// the forward node, the gradient of each of its results, and a Builder whose nodes carry the
// forward node's location and record it as `gradOf`. The rule sets the gradient of each operand.
// Rules are written in IR ops, so a backward graph is an ordinary graph: it prints, parses, runs,
// and can itself be differentiated.
#pragma once

#include <functional>
#include <vector>

#include "ir/builder.h"

namespace kiln::ir {

struct GradContext : Builder {
  GradContext(Graph &g, NodeId forwardId, std::vector<ValueId> resultGrads);

  NodeId forwardId;
  Node forward;            // a copy: the graph's node list grows while the rule runs
  std::vector<ValueId> dy; // gradient of each result (a zero constant where none flows)
  std::vector<ValueId> dx; // set by the rule, one per operand; kNone = no gradient

  ValueId x(int i = 0) const { return forward.operands[i]; }
  ValueId y(int i = 0) const { return forward.results[i]; }
  const Attrs &attrs() const { return forward.attrs; }
  // A scalar constant of the first result's dtype.
  ValueId k(double v) { return scalar(v, type(y()).dtype); }
  // Sets the gradient of operand i, summed back to its shape (undoing broadcasting).
  void setGrad(int i, ValueId g) { dx[i] = sumToShape(g, Shape(type(x(i)).shape)); }
};

// Whether v is a zero constant: what autodiff hands a rule for a result no gradient reaches.
bool isZeroConstant(const Graph &g, ValueId v);

// The reverse walk itself, shared by autodiff (over the whole forward graph) and by region ops
// (over their inlined body). Visits nodes [begin, end) of g last to first; `grad[v]` holds the
// gradient accumulated into value v so far (kNone: none), is read for each node's results and
// gets each operand's gradient added in (fan-out sums); it grows with g. Gradient flows only
// into values for which `wants(v)` holds (v < the number of values g had when the walk began).
// Non-differentiable ops stop it. Errors name the node whose rule failed.
Status backpropagate(Graph &g, NodeId begin, NodeId end, std::vector<ValueId> &grad,
                     const std::function<bool(ValueId)> &wants);

} // namespace kiln::ir
