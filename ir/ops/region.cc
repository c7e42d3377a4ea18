// The fusion region op: body rules, inference, reference, gradient and inlining (see region.h).
#include "ir/ops/region.h"

#include <utility>

#include <fmt/format.h>

#include "ir/evaluate.h"
#include "ir/grad.h"
#include "support/workspace.h"

namespace kiln::ir {
const Graph &regionBody(const Node &n) {
  const Region &r = std::get<Region>(n.attrs.values().at(n.attrs.indexOf("body")));
  return *r.graph;
}

namespace {

// S: the broadcast of every shape the loop nest computes, widened one shape at a time.
struct IterationSpace {
  Shape shape;
  bool empty = true;

  Status widen(const Shape &s) {
    if (empty) {
      shape = s;
      empty = false;
      return {};
    }
    if (s == shape) // the common case, without building the broadcast
      return {};
    Expected<Shape> b = broadcastShapes(shape, s);
    if (!b)
      return makeError("values of shapes {} and {} do not share one iteration space",
                       shapeString(shape), shapeString(s));
    shape = *b;
    return {};
  }
};

// Every output that is not a reduction's, and every reduction's operand, spans S.
Status checkSpans(const Graph &body, const RegionInfo &info, IterationSpace &space) {
  for (const Output &o : body.outputs()) {
    const Value &v = body.value(o.value);
    bool reduced = v.def != kNone && regionRole(body.node(v.def).op) == RegionRole::Reduction;
    if (space.empty && !reduced) // no node at all: the outputs are inputs passed through
      if (Status s = space.widen(body.type(o.value).shape); !s)
        return s;
    if (!reduced && body.type(o.value).shape != space.shape)
      return makeError("output \"{}\" has shape {}, not the iteration space {}", o.name,
                       shapeString(body.type(o.value).shape), shapeString(space.shape));
  }
  for (NodeId r : info.reductions)
    if (body.type(body.node(r).operands[0]).shape != space.shape)
      return makeError(
          "{}: reduces a value of shape {}, not the iteration space {}", placeOf(body.node(r), r),
          shapeString(body.type(body.node(r).operands[0]).shape), shapeString(space.shape));
  return {};
}

} // namespace

Expected<RegionInfo> analyzeRegion(const Graph &body) {
  RegionInfo info;
  for (const Arg &a : body.args())
    if (a.kind != Arg::Kind::Input)
      return makeError("the body has {} \"{}\"; a region's body takes only inputs",
                       a.kind == Arg::Kind::Param ? "parameter" : "state", a.name);
  if (body.outputs().empty())
    return makeError("the body has no outputs");
  IterationSpace space;
  std::vector<bool> used(body.numValues(), false); // read by a live body node
  for (const Node &n : body.nodes())
    if (!n.erased)
      for (ValueId v : n.operands)
        used[v] = true;
  for (NodeId id = 0; id < static_cast<NodeId>(body.nodes().size()); ++id) {
    const Node &n = body.node(id);
    switch (regionRole(n.op)) {
    case RegionRole::None:
      return makeError("{}: {} cannot be part of a fusion region (only pointwise ops, trailing "
                       "reductions and one leading matmul)",
                       placeOf(n, id), mnemonic(n.op));
    case RegionRole::Matmul:
      if (info.matmul != kNone)
        return makeError("{}: a region holds at most one matmul", placeOf(n, id));
      for (ValueId v : n.operands)
        if (body.value(v).def != kNone)
          return makeError("{}: the matmul's operands must be body inputs", placeOf(n, id));
      info.matmul = id;
      break;
    case RegionRole::Reduction:
      for (ValueId r : n.results)
        if (used[r])
          return makeError("{}: a reduction's result may only be a body output (reductions come "
                           "at the end)",
                           placeOf(n, id));
      info.reductions.push_back(id);
      if (Status s = space.widen(body.type(n.operands[0]).shape); !s)
        return makeError("{}: {}", placeOf(n, id), s.error().message);
      continue;
    case RegionRole::Pointwise:
      break;
    }
    for (ValueId r : n.results)
      if (Status s = space.widen(body.type(r).shape); !s)
        return makeError("{}: {}", placeOf(n, id), s.error().message);
  }
  if (info.matmul != kNone && !info.reductions.empty())
    return makeError("a region with a matmul cannot also reduce");
  if (Status s = checkSpans(body, info, space); !s)
    return s.error();
  info.space = space.shape;
  return info;
}

Expected<std::vector<Type>> inferFusion(std::span<const Type> in, const Attrs &attrs) {
  const Region &r = std::get<Region>(attrs.values().at(attrs.indexOf("body")));
  if (!r.graph)
    return makeError("needs a body graph");
  const Graph &body = *r.graph;
  if (std::vector<Error> errors = verify(body); !errors.empty()) {
    std::string text = "body @" + body.name() + ":";
    for (const Error &e : errors)
      text += " " + e.message + ";";
    text.pop_back();
    return makeError("{}", text);
  }
  if (Expected<RegionInfo> info = analyzeRegion(body); !info)
    return makeError("body @{}: {}", body.name(), info.error().message);
  if (body.args().size() != in.size())
    return makeError("the body takes {} inputs, but the node has {} operands", body.args().size(),
                     in.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (body.type(body.args()[i].value) != in[i])
      return makeError("operand {} is {} but body input \"{}\" is {}", i, typeString(in[i]),
                       body.args()[i].name, typeString(body.type(body.args()[i].value)));
  std::vector<Type> out;
  for (const Output &o : body.outputs())
    out.push_back(body.type(o.value));
  return out;
}

template <class F> KILN_REF_FN(refFusion) {
  const Graph &body = *std::get<Region>(attrs.values().at(attrs.indexOf("body"))).graph;
  std::vector<RefTensor<F>> values(body.numValues());
  for (size_t i = 0; i < in.size(); ++i)
    values[body.args()[i].value] = *in[i];
  if (Status s = evaluate(body, values); !s)
    return s;
  for (size_t k = 0; k < out.size(); ++k)
    out[k] = values[body.outputs()[k].value];
  return {};
}
KILN_REF_INSTANTIATE(refFusion);

// The body's nodes appended to g, body input i read as operand i; returns the outputs.
bool fusionWritesOver(const Node &n, int result, int operand) {
  const Graph &body = regionBody(n);
  Expected<RegionInfo> info = analyzeRegion(body);
  if (!info)
    return false;
  ValueId in = body.args()[operand].value, out = body.outputs()[result].value;
  if (body.type(in).shape != info->space || body.type(out).shape != info->space)
    return false;
  NodeId def = body.value(out).def;
  if (def != kNone && regionRole(body.node(def).op) == RegionRole::Reduction)
    return false;
  return !matmulReadsInput(body, in);
}

bool matmulReadsInput(const Graph &body, ValueId in) {
  for (const Node &b : body.nodes())
    if (b.op == OpKind::Matmul)
      for (ValueId v : b.operands)
        if (v == in)
          return true;
  return false;
}

// A matmul's workspace and, past it, room for its product C: the GEMM writes C into one of the
// region's results when the plan gives one bytes of its own, else there (a result in place over
// an input must not be overwritten before the epilogue reads that input).
int64_t scratchFusion(const Graph &, const Node &n) {
  const Graph &body = regionBody(n);
  int64_t most = 0;
  for (const Node &b : body.nodes())
    if (const OpInfo &op = opInfo(b.op); op.scratchBytes) {
      int64_t bytes = op.scratchBytes(body, b);
      if (b.op == OpKind::Matmul)
        bytes = addSat(workspace::regionBlockOffset(bytes), body.type(b.results[0]).bytes());
      most = std::max(most, bytes);
    }
  return most;
}

Expected<std::vector<int32_t>> decomposeFusion(Graph &g, const Node &node) {
  const Node n = node; // a copy: `node` may be in g, whose node list grows
  const Graph &body = regionBody(n);
  std::vector<ValueId> map(body.numValues(), kNone);
  for (size_t i = 0; i < body.args().size(); ++i)
    map[body.args()[i].value] = n.operands[i];
  for (const Node &b : body.nodes()) {
    std::vector<ValueId> operands;
    for (ValueId v : b.operands)
      operands.push_back(map[v]);
    Expected<NodeId> id = g.addNode(b.op, operands, b.attrs, n.loc);
    if (!id)
      return makeError("inlining {}: {}", mnemonic(b.op), id.error().message);
    g.node(*id).gradOf = n.gradOf;
    for (size_t k = 0; k < b.results.size(); ++k)
      map[b.results[k]] = g.node(*id).results[k];
  }
  std::vector<int32_t> outs;
  for (const Output &o : body.outputs())
    outs.push_back(map[o.value]);
  return outs;
}

// Inline the body (recomputing it, its matmul included), then run the reverse walk over the
// inlined nodes. An operand passed twice gets the sum once, on its first position.
Status gradFusion(GradContext &ctx) {
  Graph &g = ctx.graph;
  NodeId begin = static_cast<NodeId>(g.nodes().size());
  Expected<std::vector<int32_t>> outs = decomposeFusion(g, ctx.forward);
  if (!outs)
    return outs.error();
  NodeId end = static_cast<NodeId>(g.nodes().size());
  std::vector<ValueId> grad(g.numValues(), kNone);
  for (size_t k = 0; k < outs->size(); ++k) {
    ValueId y = (*outs)[k];
    NodeId d = g.value(ctx.dy[k]).def;
    bool zero = d != kNone && g.node(d).op == OpKind::Constant &&
                g.node(d).attrs.getFloat("value") == 0; // a result no gradient reaches
    if (!isFloat(g.type(y).dtype) || zero)
      continue;
    grad[y] = grad[y] == kNone ? ctx.dy[k] : ctx.add(grad[y], ctx.dy[k]);
  }
  auto wants = [&](ValueId v) { return isFloat(g.type(v).dtype); };
  if (Status s = backpropagate(g, begin, end, grad, wants); !s)
    return s;
  // All of it is this node's gradient (the inlined nodes are not forward nodes of the graph).
  for (NodeId id = begin; id < static_cast<NodeId>(g.nodes().size()); ++id)
    g.node(id).gradOf = ctx.forwardId;
  grad.resize(g.numValues(), kNone);
  for (size_t i = 0; i < ctx.forward.operands.size(); ++i) {
    ValueId x = ctx.forward.operands[i];
    bool seen = false;
    for (size_t j = 0; j < i; ++j)
      seen = seen || ctx.forward.operands[j] == x;
    if (!seen && isFloat(g.type(x).dtype))
      ctx.dx[i] = grad[x];
  }
  return {};
}

} // namespace kiln::ir
