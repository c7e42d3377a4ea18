// Reverse-mode automatic differentiation on the IR.
//   graph with a loss output  =>  the same graph plus, for each argument A in `wrt`, an output
//   "grad.A" of role gradient(A) holding d loss / d A, computed by backward nodes appended after
//   the forward ones.
// The pass walks the nodes in reverse and calls each op's gradient rule from the op table
// (OpInfo::grad); it has no per-op code. Fan-out accumulates by addition, broadcasting is undone
// by the rules (GradContext::sumToShape), integer and bool values carry no gradient, ops marked
// not differentiable (compare, constants, stop_gradient) stop it, and outputs that do not reach
// the loss are left as they are.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln::passes {

struct AutodiffOptions {
  // The scalar float output to differentiate, by name; empty: the graph's loss output (role).
  std::string loss = {};
  std::vector<std::string> wrt;     // argument names (inputs or parameters); empty = all parameters
  std::string gradPrefix = "grad."; // the gradient of A is named "grad.A" (for people; its role
                                    // says what it is)
};

// Errors: no such loss output, a loss that is not a float scalar, an unknown or non-float `wrt`
// argument, an op on the path without a gradient rule; with `wrt` empty (all parameters, as a
// training step), a loss that no parameter reaches. (A named `wrt` the loss does not reach gets
// a zero gradient.)
Expected<ir::Graph> differentiate(const ir::Graph &g, const AutodiffOptions &options = {});

} // namespace kiln::passes
