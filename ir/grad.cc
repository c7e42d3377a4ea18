// GradContext construction, and the reverse walk that calls the gradient rules (see grad.h).
#include "ir/grad.h"

#include <fmt/format.h>

namespace kiln::ir {

bool isZeroConstant(const Graph &g, ValueId v) {
  NodeId d = g.value(v).def;
  return d != kNone && g.node(d).op == OpKind::Constant && g.node(d).attrs.getFloat("value") == 0;
}

GradContext::GradContext(Graph &g, NodeId id, std::vector<ValueId> resultGrads)
    : Builder(g, g.node(id).loc, id), forwardId(id), forward(g.node(id)),
      dy(std::move(resultGrads)), dx(forward.operands.size(), kNone) {}

Status backpropagate(Graph &g, NodeId begin, NodeId end, std::vector<ValueId> &grad,
                     const std::function<bool(ValueId)> &wants) {
  for (NodeId id = end - 1; id >= begin; --id) {
    const Node node = g.node(id); // a copy: rules append to g
    const OpInfo &op = opInfo(node.op);
    grad.resize(g.numValues(), kNone);
    std::vector<ValueId> dys;
    bool any = false;
    for (ValueId r : node.results) {
      bool flows = wants(r) && grad[r] != kNone;
      dys.push_back(flows ? grad[r] : kNone);
      any = any || flows;
    }
    if (!any || op.differentiable == Differentiable::No)
      continue;
    if (!op.grad)
      return makeError("{}: autodiff: op '{}' has no gradient rule", placeOf(node, id),
                       op.mnemonic);
    // Rules may assume a gradient for every result: give unused results a zero gradient.
    for (size_t k = 0; k < dys.size(); ++k)
      if (dys[k] == kNone) {
        Type t = g.type(node.results[k]);
        Expected<NodeId> z =
            g.addNode(OpKind::Constant, {},
                      {{"value", 0.0}, {"shape", t.shape}, {"dtype", t.dtype}}, node.loc);
        g.node(*z).gradOf = id;
        dys[k] = g.result(*z);
      }
    GradContext ctx(g, id, std::move(dys));
    if (Status s = op.grad(ctx); !s)
      return makeError("{}: autodiff: {}: {}", placeOf(node, id), op.mnemonic, s.error().message);
    grad.resize(g.numValues(), kNone);
    for (size_t i = 0; i < node.operands.size(); ++i) {
      ValueId x = node.operands[i], dx = ctx.dx[i];
      if (dx == kNone || !wants(x))
        continue;
      // A gradient has its value's dtype: a bf16-stored weight that bf16 products read (their
      // results, and so the rule's gradient, are f32) takes its gradient rounded to bf16, as
      // PyTorch's .grad of a bf16 tensor is bf16.
      if (const DType want = g.type(x).dtype; g.type(dx).dtype != want) {
        Expected<NodeId> cast = g.addNode(OpKind::Cast, {dx}, {{"dtype", want}}, node.loc);
        if (!cast)
          return makeError("{}: autodiff: {}: {}", placeOf(node, id), op.mnemonic,
                           cast.error().message);
        g.node(*cast).gradOf = id;
        dx = g.result(*cast);
      }
      if (grad[x] == kNone) {
        grad[x] = dx;
      } else { // fan-out: the gradients of all uses add up
        Expected<NodeId> sum = g.addNode(OpKind::Add, {grad[x], dx}, {}, node.loc);
        if (!sum)
          return makeError("{}: autodiff: {}: the gradients of operand {} do not add up: {}",
                           placeOf(node, id), op.mnemonic, i, sum.error().message);
        g.node(*sum).gradOf = id;
        grad[x] = g.result(*sum);
      }
    }
  }
  return {};
}

} // namespace kiln::ir
