// Shape/dtype inference, reference loops and decompositions of the reductions (sum, mean, max)
// and of softmax / log_softmax. The loops are the oracle: one pass over the input, accumulating
// in input (row-major) order, so every backend can be compared against an obvious sum. (The
// gradient rules are in reduce_grad.cc.)
#include "ir/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/builder.h"
#include "ir/ops/elementwise.h"

namespace kiln::ir {
namespace {

// The reduced axes of a rank-`rank` operand as a mask; empty `axes` reduces every axis.
Expected<std::vector<bool>> reducedMask(std::span<const int64_t> axes, int64_t rank) {
  std::vector<bool> mask(rank, axes.empty());
  for (int64_t a : axes) {
    Expected<int64_t> n = normalizeAxis(a, rank);
    if (!n)
      return makeError("axes {}: {}", shapeString(axes), n.error().message);
    if (mask[*n])
      return makeError("axes {} name axis {} more than once", shapeString(axes), *n);
    mask[*n] = true;
  }
  return mask;
}

Expected<std::vector<Type>> inferReduce(const Type &x, const Attrs &attrs) {
  Expected<std::vector<bool>> mask = reducedMask(attrs.getInts("axes"), x.rank());
  if (!mask)
    return makeError("{} (operand {})", mask.error().message, typeString(x));
  bool keep = attrs.getBool("keepdims");
  Shape shape;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (!(*mask)[d])
      shape.push_back(x.shape[d]);
    else if (keep)
      shape.push_back(1);
  }
  return std::vector<Type>{Type{x.dtype, std::move(shape)}};
}

// For each input element (row-major), the flat index of the output element it reduces into.
// The output's layout is the same with and without keepdims (size-1 dims add no offset).
std::vector<int64_t> reduceIndexMap(std::span<const int64_t> shape, const std::vector<bool> &mask) {
  Shape kept(shape.begin(), shape.end());
  for (size_t d = 0; d < kept.size(); ++d)
    if (mask[d])
      kept[d] = 1;
  std::vector<int64_t> keptStrides = stridesOf(kept);
  std::vector<int64_t> map;
  map.reserve(numElements(shape));
  forEachIndex(shape, [&](std::span<const int64_t> idx) {
    int64_t k = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      if (!mask[d])
        k += idx[d] * keptStrides[d];
    map.push_back(k);
  });
  return map;
}

// The reduced-into index map of a node's operand. The attributes were verified by inference.
std::vector<int64_t> reduceIndexMap(const Attrs &attrs, const Type &x) {
  return reduceIndexMap(x.shape, *reducedMask(attrs.getInts("axes"), x.rank()));
}

// The elements of one softmax row: `count` elements `stride` apart, from `start`.
struct Row {
  int64_t start, stride, count;
};

// Calls fn(row) for each 1-D row of `shape` along `axis`.
template <class Fn> void forEachRow(std::span<const int64_t> shape, int64_t axis, Fn &&fn) {
  if (numElements(shape) == 0)
    return;
  int64_t dim = shape[axis];
  int64_t inner = stridesOf(shape)[axis]; // elements after the axis
  int64_t outer = numElements(shape) / (dim * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      fn(Row{o * dim * inner + i, inner, dim});
}

// Maximum of a row, NaN if any element is NaN (torch.max). -inf for an empty row.
template <class F> F rowMax(const std::vector<F> &x, Row r) {
  F m = -std::numeric_limits<F>::infinity();
  for (int64_t j = 0; j < r.count; ++j) {
    F v = x[r.start + j * r.stride];
    if (std::isnan(v) || v > m)
      m = v;
    if (std::isnan(m))
      break;
  }
  return m;
}

} // namespace

Expected<std::vector<Type>> inferReduceNumeric(std::span<const Type> in, const Attrs &attrs) {
  if (in[0].dtype == DType::Bool)
    return makeError("operand has dtype bool, expected a numeric dtype (cast it first)");
  return inferReduce(in[0], attrs);
}

Expected<std::vector<Type>> inferReduceFloat(std::span<const Type> in, const Attrs &attrs) {
  if (!isFloat(in[0].dtype))
    return makeError("operand has dtype {}, expected a float dtype (f32, f64, bf16)",
                     dtypeName(in[0].dtype));
  return inferReduce(in[0], attrs);
}

Expected<std::vector<Type>> inferSoftmax(std::span<const Type> in, const Attrs &attrs) {
  const Type &x = in[0];
  if (!isFloat(x.dtype))
    return makeError("operand has dtype {}, expected a float dtype (f32, f64, bf16)",
                     dtypeName(x.dtype));
  if (Expected<int64_t> a = normalizeAxis(attrs.getInt("axis"), x.rank()); !a)
    return makeError("{} (operand {})", a.error().message, typeString(x));
  return std::vector<Type>{x};
}

Expected<std::vector<Type>> inferCrossEntropy(std::span<const Type> in, const Attrs &attrs) {
  const Type &x = in[0], &t = in[1];
  if (!isFloat(x.dtype) || x.rank() < 1)
    return makeError("logits {}: expected a float tensor [..., V]", typeString(x));
  if (t.dtype != DType::I32 && t.dtype != DType::I64)
    return makeError("targets {}: expected class ids of dtype i32 or i64", typeString(t));
  Shape lead(x.shape.begin(), x.shape.end() - 1);
  if (t.shape != lead)
    return makeError("targets {} do not match logits {}: expected targets of shape {}",
                     typeString(t), typeString(x), shapeString(lead));
  if (double eps = attrs.getFloat("label_smoothing"); !(eps >= 0 && eps <= 1))
    return makeError("label_smoothing {} is not in [0, 1]", eps);
  const Type y{x.dtype, lead};
  return std::vector<Type>{y, y};
}

// Sums in F (floats) or int64 (integers; an i32 result wraps like a cast to i32 would).
template <class F> KILN_REF_FN(refReduceSum) {
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  std::vector<int64_t> map = reduceIndexMap(attrs, x.type);
  if (x.isFloatStorage()) {
    for (int64_t k = 0; k < x.size(); ++k)
      y.f[map[k]] += x.f[k];
  } else {
    for (int64_t k = 0; k < x.size(); ++k)
      y.i[map[k]] += x.i[k];
    if (y.type.dtype == DType::I32)
      for (int64_t &v : y.i)
        v = static_cast<int32_t>(v);
  }
  return {};
}
KILN_REF_INSTANTIATE(refReduceSum);

// sum / n with the sum accumulated in F (an f32 mean accumulates in float in f32 mode, as
// PyTorch's CPU kernel does). An empty reduction is 0/0 = NaN, as in PyTorch.
template <class F> KILN_REF_FN(refReduceMean) {
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  std::vector<int64_t> map = reduceIndexMap(attrs, x.type);
  for (int64_t k = 0; k < x.size(); ++k)
    y.f[map[k]] += x.f[k];
  if (y.size() == 0)
    return {};
  F n = F(x.size() / y.size()); // every output element reduces the same number of inputs
  for (F &v : y.f)
    v /= n;
  return {};
}
KILN_REF_INSTANTIATE(refReduceMean);

// NaN propagating maximum. An empty reduction gives the identity of max, the lowest value of
// the dtype (-inf for floats), as XLA does; so softmax over an empty axis stays well defined.
template <class F> KILN_REF_FN(refReduceMax) {
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  std::vector<int64_t> map = reduceIndexMap(attrs, x.type);
  if (x.isFloatStorage()) {
    std::fill(y.f.begin(), y.f.end(), -std::numeric_limits<F>::infinity());
    for (int64_t k = 0; k < x.size(); ++k) {
      F &m = y.f[map[k]];
      if (std::isnan(x.f[k]) || x.f[k] > m) // once m is NaN, nothing compares greater
        m = x.f[k];
    }
  } else {
    int64_t lowest = y.type.dtype == DType::I32 ? std::numeric_limits<int32_t>::min()
                                                : std::numeric_limits<int64_t>::min();
    std::fill(y.i.begin(), y.i.end(), lowest);
    for (int64_t k = 0; k < x.size(); ++k)
      y.i[map[k]] = std::max(y.i[map[k]], x.i[k]);
  }
  return {};
}
KILN_REF_INSTANTIATE(refReduceMax);

// y_j = exp(x_j - m) / sum_k exp(x_k - m), m = max_k x_k. Subtracting m is exact algebra that
// keeps exp from overflowing. A row of all -inf -- a fully masked attention row -- gives zeros
// (PyTorch gives NaN, which then poisons a whole training step):
//   m' = (m == -inf ? 0 : m),  e_j = exp(x_j - m'),  y_j = e_j / max(sum_k e_k, 1).
// For any other row m' = m, so sum_k e_k >= e_argmax = 1 and both guards change nothing; for an
// all -inf row e = 0 and y = 0 / 1. A NaN or +inf element gives NaN for the row, as in PyTorch.
template <class F> KILN_REF_FN(refSoftmax) {
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  int64_t axis = *normalizeAxis(attrs.getInt("axis"), x.type.rank());
  forEachRow(x.type.shape, axis, [&](Row r) {
    F m = rowMax(x.f, r);
    m = m == -std::numeric_limits<F>::infinity() ? F(0) : m;
    F sum = 0;
    for (int64_t j = 0; j < r.count; ++j) {
      int64_t k = r.start + j * r.stride;
      y.f[k] = std::exp(x.f[k] - m);
      sum += y.f[k];
    }
    sum = scalarFormula<formula::Max>(sum, F(1));
    for (int64_t j = 0; j < r.count; ++j)
      y.f[r.start + j * r.stride] /= sum;
  });
  return {};
}
KILN_REF_INSTANTIATE(refSoftmax);

// y_j = s_j - log(sum_k exp(s_k)), s = x - max(x): the log-sum-exp trick.
template <class F> KILN_REF_FN(refLogSoftmax) {
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  int64_t axis = *normalizeAxis(attrs.getInt("axis"), x.type.rank());
  forEachRow(x.type.shape, axis, [&](Row r) {
    F m = rowMax(x.f, r);
    F sum = 0;
    for (int64_t j = 0; j < r.count; ++j)
      sum += std::exp(x.f[r.start + j * r.stride] - m);
    F logSum = std::log(sum);
    for (int64_t j = 0; j < r.count; ++j) {
      int64_t k = r.start + j * r.stride;
      y.f[k] = (x.f[k] - m) - logSum;
    }
  });
  return {};
}
KILN_REF_INSTANTIATE(refLogSoftmax);

// Row by row: log_softmax's max and sum, then the target's and (smoothing) every class's -logp.
template <class F> KILN_REF_FN(refCrossEntropy) {
  const RefTensor<F> &x = *in[0], &t = *in[1];
  RefTensor<F> &loss = out[0], &lse = out[1];
  const int64_t v = x.type.shape.back();
  const F eps = static_cast<F>(attrs.getFloat("label_smoothing"));
  const int64_t ignored = attrs.getInt("ignore_index");
  for (int64_t r = 0; r < loss.size(); ++r)
    if ((t.i[r] < 0 || t.i[r] >= v) && t.i[r] != ignored)
      return makeError("target {} at position {} is outside the {} classes [0, {}) and not the "
                       "ignored id {} (cross_entropy's ignore_index)",
                       t.i[r], r, v, v, ignored);
  for (int64_t r = 0; r < loss.size(); ++r) {
    const Row row{r * v, 1, v};
    const F m = rowMax(x.f, row);
    F sum = 0;
    for (int64_t j = 0; j < v; ++j)
      sum += std::exp(x.f[r * v + j] - m);
    const F logSum = std::log(sum);
    lse.f[r] = m + logSum;
    const int64_t c = t.i[r];
    F l = 0;
    if (c >= 0 && c < v)
      l = (1 - eps) * (logSum - (x.f[r * v + c] - m));
    if (eps > 0) {
      F all = 0;
      for (int64_t j = 0; j < v; ++j)
        all += logSum - (x.f[r * v + j] - m);
      l += eps / static_cast<F>(v) * all;
    }
    loss.f[r] = l;
  }
  return {};
}
KILN_REF_INSTANTIATE(refCrossEntropy);

std::vector<bool> reducedAxes(const Attrs &attrs, int64_t rank) {
  return *reducedMask(attrs.getInts("axes"), rank);
}

// The decompositions copy what they need from `n` before appending: `n` may be a node of `g`,
// which appending can move. Their nodes keep n's location and, for a backward node, its gradOf.

// reduce_mean(x) = reduce_sum(x) / n, n = the number of elements reduced into each result.
// Dividing (rather than multiplying by 1/n) rounds as the reference does.
Expected<std::vector<int32_t>> decomposeReduceMean(Graph &g, const Node &n) {
  ValueId x = n.operands[0];
  std::vector<int64_t> axes = n.attrs.getInts("axes");
  bool keep = n.attrs.getBool("keepdims");
  Type t = g.type(x);
  std::vector<bool> mask = reducedAxes(n.attrs, t.rank());
  int64_t count = 1;
  for (int64_t d = 0; d < t.rank(); ++d)
    if (mask[d])
      count *= t.shape[d];
  Builder b(g, n.loc, n.gradOf);
  // 0 / 0 = NaN for an empty reduction, as the mean itself.
  ValueId sum = b.sum(x, axes, keep);
  return std::vector<int32_t>{b.div(sum, b.scalar(double(count), t.dtype))};
}

ValueId softmaxShift(Builder &b, ValueId m) {
  DType t = b.type(m).dtype;
  ValueId dead = b.emit(OpKind::Eq, {m, b.scalar(-std::numeric_limits<double>::infinity(), t)});
  return b.select(dead, b.scalar(0, t), m);
}

// softmax(x) = e / max(reduce_sum(e), 1),  e = exp(x - m'),  m' = select(m == -inf, 0, m),
// m = reduce_max(x), the reductions keepdims on the axis (refSoftmax's guards: an all -inf row
// gives zeros).
Expected<std::vector<int32_t>> decomposeSoftmax(Graph &g, const Node &n) {
  ValueId x = n.operands[0];
  std::vector<int64_t> axis = {n.attrs.getInt("axis")};
  Builder b(g, n.loc, n.gradOf);
  DType t = b.type(x).dtype;
  ValueId m = softmaxShift(b, b.emit(OpKind::ReduceMax, {x}, {{"axes", axis}, {"keepdims", true}}));
  ValueId e = b.emit(OpKind::Exp, {b.sub(x, m)});
  ValueId s = b.emit(OpKind::Max, {b.sum(e, axis, true), b.scalar(1, t)});
  return std::vector<int32_t>{b.div(e, s)};
}

// log_softmax(x) = s - log(reduce_sum(exp(s))),  s = x - reduce_max(x).
Expected<std::vector<int32_t>> decomposeLogSoftmax(Graph &g, const Node &n) {
  ValueId x = n.operands[0];
  std::vector<int64_t> axis = {n.attrs.getInt("axis")};
  Builder b(g, n.loc, n.gradOf);
  ValueId m = b.emit(OpKind::ReduceMax, {x}, {{"axes", axis}, {"keepdims", true}});
  ValueId s = b.sub(x, m);
  ValueId sum = b.sum(b.emit(OpKind::Exp, {s}), axis, true);
  return std::vector<int32_t>{b.sub(s, b.emit(OpKind::Log, {sum}))};
}

} // namespace kiln::ir
