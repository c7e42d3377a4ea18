// Reverse-mode autodiff: one reverse walk over the forward nodes (see autodiff.h).
#include "passes/autodiff.h"

#include <algorithm>

#include <fmt/format.h>

#include "ir/grad.h"

namespace kiln::passes {
using namespace kiln::ir;

namespace {

// Values the loss depends on: walk back from the loss over operands.
std::vector<bool> reachesLoss(const Graph &g, ValueId loss) {
  std::vector<bool> live(g.numValues(), false);
  live[loss] = true;
  for (NodeId n = static_cast<NodeId>(g.nodes().size()) - 1; n >= 0; --n) {
    const Node &node = g.node(n);
    bool any = false;
    for (ValueId r : node.results)
      any = any || live[r];
    if (any)
      for (ValueId v : node.operands)
        live[v] = true;
  }
  return live;
}

// Values that depend on a `wrt` argument through differentiable float ops.
std::vector<bool> dependsOnWrt(const Graph &g, const std::vector<ValueId> &wrt) {
  std::vector<bool> dep(g.numValues(), false);
  for (ValueId v : wrt)
    dep[v] = true;
  for (const Node &node : g.nodes()) {
    if (opInfo(node.op).differentiable == Differentiable::No)
      continue;
    bool any = false;
    for (ValueId v : node.operands)
      any = any || (dep[v] && isFloat(g.type(v).dtype));
    if (any)
      for (ValueId r : node.results)
        dep[r] = isFloat(g.type(r).dtype);
  }
  return dep;
}

} // namespace

Expected<Graph> differentiate(const Graph &forward, const AutodiffOptions &options) {
  const Output *lossOut = options.loss.empty() ? forward.findOutput(OutputRole::Loss)
                                               : forward.findOutput(options.loss);
  if (!lossOut && options.loss.empty())
    return makeError("autodiff: graph @{} has no loss output to differentiate", forward.name());
  if (!lossOut)
    return makeError("autodiff: graph @{} has no output \"{}\" to differentiate", forward.name(),
                     options.loss);
  const Type &lossType = forward.type(lossOut->value);
  if (!isFloat(lossType.dtype) || lossType.numElements() != 1)
    return makeError("autodiff: the loss \"{}\" must be a float scalar, it is {}", lossOut->name,
                     typeString(lossType));

  std::vector<const Arg *> wrt;
  if (options.wrt.empty()) {
    for (const Arg &a : forward.args())
      if (a.kind == Arg::Kind::Param && isFloat(forward.type(a.value).dtype))
        wrt.push_back(&a);
  } else {
    for (const std::string &name : options.wrt) {
      const Arg *a = forward.findArg(name);
      if (!a)
        return makeError("autodiff: no input or parameter named \"{}\"", name);
      if (!isFloat(forward.type(a->value).dtype))
        return makeError("autodiff: cannot differentiate with respect to \"{}\" of type {}", name,
                         typeString(forward.type(a->value)));
      wrt.push_back(a);
    }
  }

  for (const Arg *a : wrt)
    if (forward.findOutput(options.gradPrefix + a->name))
      return makeError("autodiff: graph @{} already has an output \"{}{}\" (differentiated "
                       "already?)",
                       forward.name(), options.gradPrefix, a->name);
  Graph g = forward;
  ValueId loss = lossOut->value;
  std::vector<ValueId> wrtValues;
  for (const Arg *a : wrt)
    wrtValues.push_back(a->value);
  std::vector<bool> live = reachesLoss(forward, loss);
  std::vector<bool> dep = dependsOnWrt(forward, wrtValues);

  // grad[v]: the accumulated gradient of value v, kNone while nothing has flowed into it.
  std::vector<ValueId> grad(forward.numValues(), kNone);
  {
    Expected<NodeId> one =
        g.addNode(OpKind::Constant, {},
                  {{"value", 1.0}, {"shape", lossType.shape}, {"dtype", lossType.dtype}});
    grad[loss] = g.result(*one);
  }

  auto wants = [&](ValueId v) {
    return v < forward.numValues() && live[v] && dep[v] && isFloat(forward.type(v).dtype);
  };
  if (Status s = backpropagate(g, 0, static_cast<NodeId>(forward.nodes().size()), grad, wants); !s)
    return s.error();

  // Training differentiates by all parameters; a loss that none of them reaches (an edited IR
  // file's loss of the targets alone, or behind stop_gradient) would train nothing, unsaid.
  if (options.wrt.empty() &&
      std::none_of(wrt.begin(), wrt.end(), [&](const Arg *a) { return grad[a->value] != kNone; }))
    return makeError("autodiff: the loss \"{}\" of graph @{} depends on no parameter{}: its "
                     "training would change nothing",
                     lossOut->name, forward.name(), wrt.empty() ? " (it has none)" : "");
  for (const Arg *a : wrt) {
    ValueId gv = grad[a->value];
    if (gv == kNone) { // the loss does not depend on it: its gradient is zero
      const Type &t = forward.type(a->value);
      gv = g.result(*g.addNode(OpKind::Constant, {},
                               {{"value", 0.0}, {"shape", t.shape}, {"dtype", t.dtype}}));
    }
    g.addOutput(options.gradPrefix + a->name, gv, OutputRole::Gradient,
                static_cast<int32_t>(a - forward.args().data()));
  }
  return g;
}

} // namespace kiln::passes
