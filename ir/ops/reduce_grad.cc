// Gradient rules of the reductions and of softmax / log_softmax, in IR ops (see ir/grad.h).
// A reduction's dy has the reduced shape; it is reshaped to keepdims form (reduced axes of size
// 1) so that it broadcasts back against x.
#include "ir/grad.h"
#include "ir/ops/reduce.h"

namespace kiln::ir {
using K = OpKind;

namespace {

// x's shape with the reduced axes set to 1, and the number of elements reduced into each result.
struct Kept {
  Shape shape;
  int64_t count = 1;
};
Kept keptShape(GradContext &c) {
  Kept k{c.type(c.x()).shape};
  std::vector<bool> mask = reducedAxes(c.attrs(), static_cast<int64_t>(k.shape.size()));
  for (size_t d = 0; d < k.shape.size(); ++d)
    if (mask[d]) {
      k.count *= k.shape[d];
      k.shape[d] = 1;
    }
  return k;
}

// v (a result-shaped value) in keepdims form.
ValueId keepDims(GradContext &c, ValueId v, const Shape &kept) {
  return c.type(v).shape == kept ? v : c.reshape(v, kept);
}

ValueId broadcastTo(GradContext &c, ValueId v, const Shape &shape) {
  return c.type(v).shape == shape ? v : c.emit(K::Broadcast, {v}, {{"shape", shape}});
}

} // namespace

// y = sum_r x:  dx = dy, broadcast back over the reduced axes.
Status gradReduceSum(GradContext &c) {
  Shape xShape = c.type(c.x()).shape;
  Kept k = keptShape(c);
  c.dx[0] = broadcastTo(c, keepDims(c, c.dy[0], k.shape), xShape);
  return {};
}

// y = (sum_r x) / n:  dx = dy / n, broadcast back.
Status gradReduceMean(GradContext &c) {
  Shape xShape = c.type(c.x()).shape;
  Kept k = keptShape(c);
  ValueId dy = keepDims(c, c.dy[0], k.shape);
  ValueId scaled = c.div(dy, c.k(double(k.count)));
  c.dx[0] = broadcastTo(c, scaled, xShape);
  return {};
}

// y = max_r x, with PyTorch's amax convention: dy is shared evenly among the tied maxima,
//   dx = dy * [x == y] / #{x == y}   (over each reduced group).
Status gradReduceMax(GradContext &c) {
  std::vector<int64_t> axes = c.attrs().getInts("axes");
  DType t = c.type(c.x()).dtype;
  Kept k = keptShape(c);
  ValueId y = keepDims(c, c.y(), k.shape), dy = keepDims(c, c.dy[0], k.shape);
  ValueId isMax = c.cast(c.emit(K::Eq, {c.x(), y}), t);
  ValueId count = c.sum(isMax, axes, true);
  c.setGrad(0, c.mul(isMax, c.div(dy, count)));
  return {};
}

// y = softmax(x):  dy/dx = diag(y) - y y^T along the axis, so
//   dx = y * (dy - sum(dy * y, axis, keepdims)).
Status gradSoftmax(GradContext &c) {
  std::vector<int64_t> axis = {c.attrs().getInt("axis")};
  ValueId y = c.y(), dy = c.dy[0];
  c.dx[0] = c.mul(y, c.sub(dy, c.sum(c.mul(dy, y), axis, true)));
  return {};
}

// y = x - log(sum(exp(x))):  dy_j/dx_i = [i == j] - softmax(x)_i, softmax(x) = exp(y), so
//   dx = dy - exp(y) * sum(dy, axis, keepdims).
Status gradLogSoftmax(GradContext &c) {
  std::vector<int64_t> axis = {c.attrs().getInt("axis")};
  ValueId dy = c.dy[0];
  ValueId softmax = c.emit(K::Exp, {c.y()});
  c.dx[0] = c.sub(dy, c.mul(softmax, c.sum(dy, axis, true)));
  return {};
}

// loss = -sum_j q_j logp_j (reduce.h), per row; with p = exp(x - lse) = softmax(x):
//   dloss/dx_j = Σq p_j - q_j,  dlse/dx_j = p_j,  so
//   dx = (dloss Σq + dlse) p - dloss q,  Σq = (1 - ε) [0 <= t < V] + ε,  q = (1 - ε) onehot + ε / V
// all pointwise over the logits from per-row values: one fusion region, whose one-hot is an
// integer compare (no logits-sized tensor is saved). The targets get no gradient.
Status gradCrossEntropy(GradContext &c) {
  const Type x = c.type(c.x(0)), t = c.type(c.x(1));
  const int64_t v = x.shape.back();
  const double eps = c.attrs().getFloat("label_smoothing");
  Shape rows = t.shape;
  rows.push_back(1); // per-row values broadcast along the classes
  const bool viaLoss = !isZeroConstant(c.graph, c.dy[0]);
  const bool viaLse = !isZeroConstant(c.graph, c.dy[1]);
  auto perRow = [&](ValueId a) { return c.reshape(c.sumToShape(a, t.shape), rows); };
  auto affine = [&](ValueId a, double scale, double shift) { // a (1 - ε) + shift, for ε > 0
    return eps > 0 ? c.add(c.mul(a, c.scalar(scale, x.dtype)), c.scalar(shift, x.dtype)) : a;
  };
  const ValueId targets = c.reshape(c.x(1), rows);
  ValueId factor = kNone, minus = kNone; // dx = factor p - minus
  if (viaLoss) {
    const ValueId dl = perRow(c.dy[0]);
    const ValueId inRange = c.emit(K::LogicalAnd, {c.emit(K::Ge, {targets, c.scalar(0, t.dtype)}),
                                                   c.emit(K::Lt, {targets, c.scalar(v, t.dtype)})});
    factor = c.mul(dl, affine(c.cast(inRange, x.dtype), 1 - eps, eps));
    const ValueId classes =
        c.emit(K::Iota, {}, {{"shape", Shape{v}}, {"axis", 0}, {"dtype", t.dtype}});
    const ValueId onehot = c.cast(c.emit(K::Eq, {targets, classes}), x.dtype);
    minus = c.mul(dl, affine(onehot, 1 - eps, eps / static_cast<double>(v)));
  }
  if (viaLse) {
    const ValueId dlse = perRow(c.dy[1]);
    factor = factor == kNone ? dlse : c.add(factor, dlse);
  }
  if (factor == kNone)
    return {};
  const ValueId p = c.emit(K::Exp, {c.sub(c.x(0), c.reshape(c.y(1), rows))});
  const ValueId along = c.mul(factor, p);
  c.setGrad(0, minus == kNone ? along : c.sub(along, minus));
  return {};
}

} // namespace kiln::ir
