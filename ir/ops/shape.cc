// Shape/dtype inference and reference loops of the data-movement ops: reshape, transpose,
// broadcast, slice, pad, concat, gather and scatter_add. Each reference loop walks the output
// and reads the operand element that lands there, which is the definition of the op; pad and
// scatter_add, which also write elements no operand lands on, fill first and then walk the
// operand. (The gradient rules are in shape_grad.cc.)
#include "ir/ops/shape.h"

#include <algorithm>

#include <fmt/format.h>

#include "ir/graph.h"

namespace kiln::ir {
namespace {

// Copies element `from` of x to element `to` of y, whatever the storage.
template <class F>
void copyElement(const RefTensor<F> &x, int64_t from, RefTensor<F> &y, int64_t to) {
  if (x.isFloatStorage())
    y.f[to] = x.f[from];
  else
    y.i[to] = x.i[from];
}

// Every index is in [0, dim), checked before any element moves (even where no element would).
// `what` names the indexed axis for the message, e.g. "axis 0 of table [3,2]".
template <class F>
Status checkIndices(const RefTensor<F> &indices, int64_t dim, const std::string &what) {
  int64_t at = 0;
  Status status;
  forEachIndex(indices.type.shape, [&](std::span<const int64_t> idx) {
    int64_t row = indices.i[at++];
    if (status && (row < 0 || row >= dim))
      status = makeError("index {} at position {} of indices {} is outside [0, {}) ({})", row,
                         shapeString(idx), shapeString(indices.type.shape), dim, what);
  });
  return status;
}

} // namespace

Expected<std::vector<Type>> inferReshape(std::span<const Type> in, const Attrs &attrs) {
  const Shape &shape = attrs.getInts("shape");
  if (Status s = checkShapeDims(shape); !s)
    return s.error();
  if (Status s = checkType(Type{in[0].dtype, shape}); !s)
    return s.error();
  if (numElements(shape) != in[0].numElements())
    return makeError("cannot reshape {} ({} elements) to {} ({} elements)",
                     shapeString(in[0].shape), in[0].numElements(), shapeString(shape),
                     numElements(shape));
  return std::vector<Type>{Type{in[0].dtype, shape}};
}

Expected<std::vector<Type>> inferTranspose(std::span<const Type> in, const Attrs &attrs) {
  const Type &x = in[0];
  const std::vector<int64_t> &perm = attrs.getInts("perm");
  std::string_view want = "expected a permutation of 0..rank-1";
  if (static_cast<int64_t>(perm.size()) != x.rank())
    return makeError("perm {} has {} entries for operand {} of rank {}; {}", shapeString(perm),
                     perm.size(), shapeString(x.shape), x.rank(), want);
  std::vector<bool> seen(perm.size(), false);
  Shape shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank())
      return makeError("perm {} has entry {} outside [0, {}); {}", shapeString(perm), p, x.rank(),
                       want);
    if (seen[p])
      return makeError("perm {} names dimension {} twice; {}", shapeString(perm), p, want);
    seen[p] = true;
    shape.push_back(x.shape[p]);
  }
  return std::vector<Type>{Type{x.dtype, std::move(shape)}};
}

Expected<std::vector<Type>> inferBroadcast(std::span<const Type> in, const Attrs &attrs) {
  const Type &x = in[0];
  const Shape &shape = attrs.getInts("shape");
  if (Status s = checkShapeDims(shape); !s)
    return s.error();
  if (static_cast<int64_t>(shape.size()) < x.rank())
    return makeError(
        "cannot broadcast {} to {}: the target's rank {} is less than the operand's {}",
        shapeString(x.shape), shapeString(shape), shape.size(), x.rank());
  // Trailing dims align; each operand dim must equal the target's or be 1.
  size_t offset = shape.size() - x.shape.size();
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (x.shape[d] != 1 && x.shape[d] != shape[offset + d])
      return makeError("cannot broadcast {} to {}: operand dimension {} is {}, expected {} or 1",
                       shapeString(x.shape), shapeString(shape), d, x.shape[d], shape[offset + d]);
  return std::vector<Type>{Type{x.dtype, shape}};
}

Expected<std::vector<Type>> inferSlice(std::span<const Type> in, const Attrs &attrs) {
  const Type &x = in[0];
  Expected<int64_t> axis = normalizeAxis(attrs.getInt("axis"), x.rank());
  if (!axis)
    return makeError("{} (operand {})", axis.error().message, shapeString(x.shape));
  int64_t start = attrs.getInt("start"), end = attrs.getInt("end"), step = attrs.getInt("step");
  int64_t dim = x.shape[*axis];
  if (!(0 <= start && start <= end && end <= dim))
    return makeError("slice [{}:{}] of axis {} (size {}) of {}: expected 0 <= start <= end <= {}",
                     start, end, *axis, dim, shapeString(x.shape), dim);
  if (step < 1)
    return makeError("step {} is not positive", step);
  Shape shape = x.shape;
  // ceil((end - start) / step), without forming end - start + step - 1 (step may be ~2^63).
  shape[*axis] = (end - start) / step + ((end - start) % step != 0);
  return std::vector<Type>{Type{x.dtype, std::move(shape)}};
}

Expected<std::vector<Type>> inferConcat(std::span<const Type> in, const Attrs &attrs) {
  const Type &first = in[0];
  Expected<int64_t> axis = normalizeAxis(attrs.getInt("axis"), first.rank());
  if (!axis)
    return makeError("{} (operand 0 {})", axis.error().message, shapeString(first.shape));
  Shape shape = first.shape;
  for (size_t k = 1; k < in.size(); ++k) {
    const Type &t = in[k];
    if (t.dtype != first.dtype)
      return makeError("operand {} is {}, operand 0 is {}: dtypes differ (insert a cast)", k,
                       typeString(t), typeString(first));
    if (t.rank() != first.rank())
      return makeError("operand {} is {}, operand 0 is {}: ranks differ", k, shapeString(t.shape),
                       shapeString(first.shape));
    for (int64_t d = 0; d < t.rank(); ++d)
      if (d != *axis && t.shape[d] != first.shape[d])
        return makeError("operand {} is {}, operand 0 is {}: dimension {} differs ({} vs {}); only "
                         "the concat axis {} may",
                         k, shapeString(t.shape), shapeString(first.shape), d, t.shape[d],
                         first.shape[d], *axis);
    shape[*axis] = addSat(shape[*axis], t.shape[*axis]); // too large: rejected by inferTypes
  }
  return std::vector<Type>{Type{first.dtype, std::move(shape)}};
}

Expected<std::vector<Type>> inferGather(std::span<const Type> in, const Attrs &attrs) {
  const Type &table = in[0], &indices = in[1];
  if (!isInteger(indices.dtype))
    return makeError("indices have dtype {}, expected i32 or i64", dtypeName(indices.dtype));
  Expected<int64_t> axis = normalizeAxis(attrs.getInt("axis"), table.rank());
  if (!axis)
    return makeError("{} (table {})", axis.error().message, shapeString(table.shape));
  // table.shape[:axis] + indices.shape + table.shape[axis+1:]
  Shape shape(table.shape.begin(), table.shape.begin() + *axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), table.shape.begin() + *axis + 1, table.shape.end());
  const bool widen = attrs.getBool("widen");
  if (widen && table.dtype != DType::BF16)
    return makeError("widen: the table has dtype {}, expected bf16", dtypeName(table.dtype));
  return std::vector<Type>{Type{widen ? DType::F32 : table.dtype, std::move(shape)}};
}

Expected<std::vector<Type>> inferPad(std::span<const Type> in, const Attrs &attrs) {
  const Type &x = in[0];
  Expected<int64_t> axis = normalizeAxis(attrs.getInt("axis"), x.rank());
  if (!axis)
    return makeError("{} (operand {})", axis.error().message, shapeString(x.shape));
  int64_t low = attrs.getInt("low"), high = attrs.getInt("high"),
          interior = attrs.getInt("interior");
  if (low < 0 || high < 0 || interior < 0)
    return makeError("low = {}, high = {}, interior = {}: expected each >= 0", low, high, interior);
  if (Status s = checkValueFits(attrs.getFloat("value"), x.dtype); !s)
    return makeError("{} (operand {})", s.error().message, typeString(x));
  Shape shape = x.shape;
  int64_t n = shape[*axis];
  // Saturating: attributes from text may be near 2^63; inferTypes rejects a result that large.
  int64_t spread = n == 0 ? 0 : addSat(n, mulSat(n - 1, interior));
  shape[*axis] = addSat(addSat(low, high), spread);
  return std::vector<Type>{Type{x.dtype, std::move(shape)}};
}

Expected<std::vector<Type>> inferScatterAdd(std::span<const Type> in, const Attrs &attrs) {
  const Type &indices = in[0], &updates = in[1];
  if (!isInteger(indices.dtype))
    return makeError("indices have dtype {}, expected i32 or i64", dtypeName(indices.dtype));
  if (updates.dtype == DType::Bool)
    return makeError("updates have dtype bool, expected a numeric dtype (cast them first)");
  int64_t size = attrs.getInt("size");
  if (size < 0)
    return makeError("size {} is negative", size);
  int64_t ir = indices.rank();
  if (updates.rank() < ir)
    return makeError("updates {} have rank {}, less than the rank {} of indices {}",
                     shapeString(updates.shape), updates.rank(), ir, shapeString(indices.shape));
  // The result has updates' rank with the indices' dims replaced by one axis of `size`.
  Expected<int64_t> axis = normalizeAxis(attrs.getInt("axis"), updates.rank() - ir + 1);
  if (!axis)
    return makeError("{} (result of updates {} scattered by indices {})", axis.error().message,
                     shapeString(updates.shape), shapeString(indices.shape));
  auto at = updates.shape.begin() + *axis;
  if (!std::equal(at, at + ir, indices.shape.begin(), indices.shape.end()))
    return makeError("updates {} have {} at axis {}, expected the indices shape {}",
                     shapeString(updates.shape),
                     shapeString(std::span<const int64_t>(updates.shape).subspan(*axis, ir)), *axis,
                     shapeString(indices.shape));
  Shape shape(updates.shape.begin(), at);
  shape.push_back(size);
  shape.insert(shape.end(), at + ir, updates.shape.end());
  Type out{updates.dtype, std::move(shape)};
  if (in.size() == 3 && in[2] != out)
    return makeError("base {} does not match the result {}: expected the same type",
                     typeString(in[2]), typeString(out));
  return std::vector<Type>{std::move(out)};
}

bool scatterAddWritesOver(const Node &node, int result, int operand) {
  return result == 0 && operand == 2 && node.operands.size() == 3;
}

Expected<std::vector<Type>> inferUpdateSlice(std::span<const Type> in, const Attrs &attrs) {
  const Type &base = in[0], &update = in[1], &index = in[2];
  if (base.rank() < 2)
    return makeError("base {} has rank {}, expected at least 2 (axis 0, then the slices' axis)",
                     typeString(base), base.rank());
  Expected<int64_t> axis = normalizeAxis(attrs.getInt("axis"), base.rank());
  if (!axis)
    return makeError("{} (base {})", axis.error().message, typeString(base));
  if (*axis == 0)
    return makeError("axis 0 of base {}: expected a later axis (axis 0 holds the index's rows)",
                     typeString(base));
  Shape want = base.shape;
  want[*axis] = 1;
  if (update.dtype != base.dtype || update.shape != want)
    return makeError("update {} does not fit base {}: expected {}", typeString(update),
                     typeString(base), typeString(Type{base.dtype, want}));
  if (!isInteger(index.dtype) || index.shape != Shape{base.shape[0]})
    return makeError("index {} does not fit base {}: expected integers [{}]", typeString(index),
                     typeString(base), base.shape[0]);
  return std::vector<Type>{base};
}

bool updateSliceWritesOver(const Node &, int result, int operand) {
  return result == 0 && operand == 0;
}

// Row-major order is unchanged by a reshape: the elements are copied as they are.
template <class F> KILN_REF_FN(refReshape) {
  (void)attrs;
  out[0].f = in[0]->f;
  out[0].i = in[0]->i;
  return {};
}
KILN_REF_INSTANTIATE(refReshape);

// y[idx] = x[j] where j[perm[d]] = idx[d].
template <class F> KILN_REF_FN(refTranspose) {
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  const std::vector<int64_t> &perm = attrs.getInts("perm");
  std::vector<int64_t> xStrides = stridesOf(x.type.shape);
  int64_t k = 0;
  forEachIndex(y.type.shape, [&](std::span<const int64_t> idx) {
    int64_t from = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      from += idx[d] * xStrides[perm[d]];
    copyElement(x, from, y, k++);
  });
  return {};
}
KILN_REF_INSTANTIATE(refTranspose);

template <class F> KILN_REF_FN(refBroadcast) {
  (void)attrs;
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  std::vector<int64_t> map = broadcastIndexMap(x.type.shape, y.type.shape);
  for (int64_t k = 0; k < y.size(); ++k)
    copyElement(x, map[k], y, k);
  return {};
}
KILN_REF_INSTANTIATE(refBroadcast);

// y[..., j, ...] = x[..., start + j * step, ...] along `axis`.
template <class F> KILN_REF_FN(refSlice) {
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  int64_t axis = *normalizeAxis(attrs.getInt("axis"), x.type.rank());
  int64_t start = attrs.getInt("start"), step = attrs.getInt("step");
  std::vector<int64_t> xStrides = stridesOf(x.type.shape);
  int64_t k = 0;
  forEachIndex(y.type.shape, [&](std::span<const int64_t> idx) {
    int64_t from = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      from += (int64_t(d) == axis ? start + idx[d] * step : idx[d]) * xStrides[d];
    copyElement(x, from, y, k++);
  });
  return {};
}
KILN_REF_INSTANTIATE(refSlice);

// Each output index reads the operand whose range of the axis holds it, at the offset within.
template <class F> KILN_REF_FN(refConcat) {
  RefTensor<F> &y = out[0];
  int64_t axis = *normalizeAxis(attrs.getInt("axis"), y.type.rank());
  std::vector<std::vector<int64_t>> strides;
  for (const RefTensor<F> *x : in)
    strides.push_back(stridesOf(x->type.shape));
  int64_t k = 0;
  forEachIndex(y.type.shape, [&](std::span<const int64_t> idx) {
    int64_t pos = idx[axis];
    size_t o = 0;
    while (pos >= in[o]->type.shape[axis]) // skips empty operands too
      pos -= in[o++]->type.shape[axis];
    int64_t from = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      from += (int64_t(d) == axis ? pos : idx[d]) * strides[o][d];
    copyElement(*in[o], from, y, k++);
  });
  return {};
}
KILN_REF_INSTANTIATE(refConcat);

// out[p, i, s] = table[p, indices[i], s]: p the first `axis` output dims, i the next
// indices.rank() dims, s the rest. Every index is checked, even where the output is empty.
template <class F> KILN_REF_FN(refGather) {
  const RefTensor<F> &table = *in[0], &indices = *in[1];
  RefTensor<F> &y = out[0];
  int64_t axis = *normalizeAxis(attrs.getInt("axis"), table.type.rank());
  if (Status s =
          checkIndices(indices, table.type.shape[axis],
                       fmt::format("axis {} of table {}", axis, shapeString(table.type.shape)));
      !s)
    return s;
  size_t ir = indices.type.shape.size();
  std::vector<int64_t> tStrides = stridesOf(table.type.shape);
  std::vector<int64_t> iStrides = stridesOf(indices.type.shape);
  int64_t k = 0;
  forEachIndex(y.type.shape, [&](std::span<const int64_t> idx) {
    int64_t pos = 0; // flat position in `indices`
    for (size_t d = 0; d < ir; ++d)
      pos += idx[axis + d] * iStrides[d];
    int64_t from = indices.i[pos] * tStrides[axis];
    for (int64_t d = 0; d < axis; ++d)
      from += idx[d] * tStrides[d];
    for (size_t d = axis + 1; d < table.type.shape.size(); ++d)
      from += idx[d - 1 + ir] * tStrides[d];
    copyElement(table, from, y, k++);
  });
  return {};
}
KILN_REF_INSTANTIATE(refGather);

// y is `value` everywhere, then x[..., j, ...] lands at y[..., low + j * (interior + 1), ...].
template <class F> KILN_REF_FN(refPad) {
  const RefTensor<F> &x = *in[0];
  RefTensor<F> &y = out[0];
  int64_t axis = *normalizeAxis(attrs.getInt("axis"), x.type.rank());
  int64_t low = attrs.getInt("low"), stride = attrs.getInt("interior") + 1;
  double value = attrs.getFloat("value");
  if (y.isFloatStorage())
    std::fill(y.f.begin(), y.f.end(), static_cast<F>(value));
  else
    std::fill(y.i.begin(), y.i.end(), static_cast<int64_t>(value));
  std::vector<int64_t> yStrides = stridesOf(y.type.shape);
  int64_t k = 0;
  forEachIndex(x.type.shape, [&](std::span<const int64_t> idx) {
    int64_t to = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      to += (int64_t(d) == axis ? low + idx[d] * stride : idx[d]) * yStrides[d];
    copyElement(x, k++, y, to);
  });
  return {};
}
KILN_REF_INSTANTIATE(refPad);

// y = 0, then y[p, indices[i], s] += updates[p, i, s] in updates' row-major order: p the first
// `axis` dims, i the next indices.rank() dims, s the rest; then a base adds to the named slices.
// Integers add in int64 (an i32 result wraps like a cast to i32 would).
template <class F> KILN_REF_FN(refScatterAdd) {
  const RefTensor<F> &indices = *in[0], &updates = *in[1];
  RefTensor<F> &y = out[0];
  int64_t axis = *normalizeAxis(attrs.getInt("axis"), y.type.rank());
  if (Status s =
          checkIndices(indices, y.type.shape[axis],
                       fmt::format("axis {} of the result {}", axis, shapeString(y.type.shape)));
      !s)
    return s;
  size_t ir = indices.type.shape.size();
  std::vector<int64_t> yStrides = stridesOf(y.type.shape);
  std::vector<int64_t> iStrides = stridesOf(indices.type.shape);
  int64_t k = 0;
  forEachIndex(updates.type.shape, [&](std::span<const int64_t> idx) {
    int64_t pos = 0; // flat position in `indices`
    for (size_t d = 0; d < ir; ++d)
      pos += idx[axis + d] * iStrides[d];
    int64_t to = indices.i[pos] * yStrides[axis];
    for (int64_t d = 0; d < axis; ++d)
      to += idx[d] * yStrides[d];
    for (size_t d = axis + 1; d < y.type.shape.size(); ++d)
      to += idx[d - 1 + ir] * yStrides[d];
    if (y.isFloatStorage())
      y.f[to] += updates.f[k++];
    else
      y.i[to] += updates.i[k++];
  });
  if (in.size() == 3) { // base + the sum on the slices an index names, base on the others
    const RefTensor<F> &base = *in[2];
    const int64_t size = y.type.shape[axis], inner = yStrides[axis];
    std::vector<bool> named(size, false);
    for (int64_t r : indices.i)
      named[r] = true;
    for (int64_t t = 0; t < y.type.numElements(); ++t) {
      const bool add = named[t / inner % size];
      if (y.isFloatStorage())
        y.f[t] = add ? base.f[t] + y.f[t] : base.f[t];
      else
        y.i[t] = add ? base.i[t] + y.i[t] : base.i[t];
    }
  }
  if (y.type.dtype == DType::I32)
    for (int64_t &v : y.i)
      v = static_cast<int32_t>(v);
  return {};
}
KILN_REF_INSTANTIATE(refScatterAdd);

// y = base; then y[i, .., index[i], ..] = update[i, .., 0, ..] along `axis` where index[i] is in
// range.
template <class F> KILN_REF_FN(refUpdateSlice) {
  const RefTensor<F> &base = *in[0], &update = *in[1], &index = *in[2];
  RefTensor<F> &y = out[0];
  y.f = base.f;
  y.i = base.i;
  const int64_t axis = *normalizeAxis(attrs.getInt("axis"), y.type.rank());
  const int64_t size = y.type.shape[axis], inner = stridesOf(y.type.shape)[axis];
  const int64_t outer = y.type.numElements() / (y.type.shape[0] * size * inner); // between
  for (int64_t i = 0; i < y.type.shape[0]; ++i) {
    const int64_t p = index.i[i];
    if (p < 0 || p >= size)
      continue;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t e = 0; e < inner; ++e)
        copyElement(update, (i * outer + o) * inner + e, y,
                    ((i * outer + o) * size + p) * inner + e);
  }
  return {};
}
KILN_REF_INSTANTIATE(refUpdateSlice);

} // namespace kiln::ir
