// Cross-entropy fusion:
//   neg(reduce_sum(log_softmax(x) * w, last axis)),  w = cast(eq(reshape(t, [..., 1]), iota(V)))
//                                                    or w * (1 - ε) + ε / V (label smoothing)
//     =>  cross_entropy(x, t){label_smoothing = ε, ignore_index = i}, its loss  (ir/ops/reduce.h)
// what the DSL's crossEntropy (frontend/nn_loss.cc) spells out, the products in either order; i
// the id that its mean leaves out, select(ne(t, i), the loss, 0) (-100 without one), so that a
// target neither a class nor i is an error, where the one-hot scored it as nothing.
// Why: spelled out, the step wrote log_softmax's logp and the one-hot weights, two tensors of the
// logits' size, and kept both for the backward, whose one-hot product and softmax wrote two more;
// fused, the forward reads the logits twice and writes two numbers a row (the loss and the lse
// its gradient needs), and the gradient is one pointwise region over the logits. GPT-2 124M's
// logits are 256 x 50257 at T 64, batch 4 (51 MB a tensor); at T 1024, batch 8, 1.6 GB each.
// The loss's values are the spelled-out form's (the same roundings of logp), except that a -inf
// logit no longer makes it NaN (its weight 0 times logp -inf).
// The matched nodes stay for dce where nothing else reads them (log_softmax may have other uses).
#include <cmath>
#include <optional>
#include <vector>

#include "ir/builder.h"
#include "ir/ops/reduce.h"
#include "passes/passes.h"
#include "passes/pattern.h"
#include "passes/rewrite.h"

namespace kiln::passes {
using namespace kiln::ir;
namespace pt = pattern;

namespace {

// The operand of a one-hot of `v` classes: eq(reshape(t, t.shape + [1]), iota([v])) (either
// order) cast to `dtype`, t of i32 or i64; kNone if w is not that.
ValueId oneHotTargets(const Graph &g, ValueId w, int64_t v, DType dtype) {
  const Node *cast = pt::defIs(g, w, OpKind::Cast);
  if (!cast || g.type(w).dtype != dtype)
    return kNone;
  const Node *eq = pt::defIs(g, cast->operands[0], OpKind::Eq);
  if (!eq)
    return kNone;
  for (int side = 0; side < 2; ++side) {
    const Node *iota = pt::defIs(g, eq->operands[1 - side], OpKind::Iota);
    const Node *reshape = pt::defIs(g, eq->operands[side], OpKind::Reshape);
    if (!iota || !reshape || iota->attrs.getInts("shape") != std::vector<int64_t>{v})
      continue;
    const ValueId t = reshape->operands[0];
    Shape want = g.type(t).shape;
    want.push_back(1);
    const DType td = g.type(t).dtype;
    if (g.type(reshape->results[0]).shape == want && g.type(eq->operands[1 - side]).dtype == td &&
        (td == DType::I32 || td == DType::I64))
      return t;
  }
  return kNone;
}

// The targets and smoothing ε of the weights w: a one-hot, or one-hot * (1 - ε) + ε / v.
bool targetWeights(const Graph &g, ValueId w, int64_t v, DType dtype, ValueId &t, double &eps) {
  eps = 0;
  if ((t = oneHotTargets(g, w, v, dtype)) != kNone)
    return true;
  const Node *add = pt::defIs(g, w, OpKind::Add);
  if (!add)
    return false;
  for (int side = 0; side < 2; ++side) {
    std::optional<double> shift = pt::uniformValue(g, add->operands[1 - side]);
    double scale = 1;
    std::optional<ValueId> hot = pt::peelScalar(g, add->operands[side], scale);
    if (!shift || !hot || g.type(add->operands[side]).shape != g.type(w).shape)
      continue;
    eps = *shift * static_cast<double>(v);
    if ((t = oneHotTargets(g, *hot, v, dtype)) != kNone && eps > 0 && eps <= 1 &&
        std::fabs(scale - (1 - eps)) <= 1e-6)
      return true;
  }
  return false;
}

// The id i that the mean over the scored targets leaves out of `loss` (t's per-target losses):
// select(ne(t, i), loss, 0), ne's operands in either order; -100 (the op's default, PyTorch's)
// without one.
int64_t ignoredId(const Graph &g, ValueId t, ValueId loss) {
  for (const Node &n : g.nodes()) {
    if (n.erased || n.op != OpKind::Select || n.operands[1] != loss)
      continue;
    const Node *ne = pt::defIs(g, n.operands[0], OpKind::Ne);
    for (int side = 0; ne && side < 2; ++side)
      if (ne->operands[side] == t)
        if (std::optional<double> i = pt::uniformValue(g, ne->operands[1 - side]))
          return static_cast<int64_t>(*i);
  }
  return -100;
}

Expected<bool> fuse(Rewriter &rw, NodeId id) {
  Graph &g = rw.g;
  const Node &neg = g.node(id);
  const Node *sum = pt::defIs(g, neg.operands[0], OpKind::ReduceSum);
  if (!sum || sum->attrs.getBool("keepdims") || !pt::reducesLastAxis(g, *sum))
    return false;
  const Node *mul = pt::defIs(g, sum->operands[0], OpKind::Mul);
  if (!mul || g.type(mul->operands[0]) != g.type(mul->operands[1]))
    return false;
  for (int side = 0; side < 2; ++side) {
    const Node *logp = pt::defIs(g, mul->operands[side], OpKind::LogSoftmax);
    if (!logp)
      continue;
    const ValueId x = logp->operands[0];
    const Type &xt = g.type(x);
    const Expected<int64_t> axis = normalizeAxis(logp->attrs.getInt("axis"), xt.rank());
    if (!axis || *axis != xt.rank() - 1)
      continue;
    ValueId t = kNone;
    double eps = 0;
    if (!targetWeights(g, mul->operands[1 - side], xt.shape.back(), xt.dtype, t, eps))
      continue;
    // Copies: emitting nodes may move the graph's node storage under neg.
    const ValueId old = neg.results[0];
    const SourceLoc loc = neg.loc;
    Builder b(g, loc, neg.gradOf);
    const ValueId operands[] = {x, t};
    std::vector<ValueId> r =
        pt::emitMulti(b, OpKind::CrossEntropy, operands,
                      {{"label_smoothing", eps}, {"ignore_index", ignoredId(g, t, old)}}, loc);
    rw.replace(old, r[0]);
    g.eraseNode(id, g.value(r[0]).def);
    return true;
  }
  return false;
}

} // namespace

Expected<bool> runFuseCrossEntropy(Graph &g, PassStats &stats) {
  return rewriteNodes(g, OpKind::Neg, stats, "fused {} cross entropies", &fuse);
}

} // namespace kiln::passes
