// Gradient rules of the data-movement ops, in IR ops (see ir/grad.h). Each op is linear in its
// float operand, y = M x, so its gradient is the transpose dx = M^T dy: the inverse reshape or
// permutation, a sum for broadcast, a pad for slice and a slice for pad (the pair are each
// other's transposes), slices for concat, scatter_add for gather and gather for scatter_add.
#include "ir/grad.h"
#include "ir/ops/shape.h"

namespace kiln::ir {
using K = OpKind;

namespace {
// The op's `axis` attribute, in [0, rank). Inference has already checked it.
int64_t axisOf(GradContext &c, int64_t rank) {
  return *normalizeAxis(c.attrs().getInt("axis"), rank);
}
} // namespace

// dx = reshape(dy, x.shape)
Status gradReshape(GradContext &c) {
  Shape shape = c.type(c.x()).shape;
  c.dx[0] = c.reshape(c.dy[0], shape);
  return {};
}

// y dim i = x dim perm[i]  =>  dx = transpose(dy, inv) with inv[perm[i]] = i.
Status gradTranspose(GradContext &c) {
  const std::vector<int64_t> &perm = c.attrs().getInts("perm");
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[perm[i]] = static_cast<int64_t>(i);
  c.dx[0] = c.emit(K::Transpose, {c.dy[0]}, {{"perm", inv}});
  return {};
}

// Each x element is copied to every position broadcasting stretches it to: dx sums them.
Status gradBroadcast(GradContext &c) {
  c.setGrad(0, c.dy[0]);
  return {};
}

// y[j] = x[start + j step], j < m  =>  dx = dy placed at start, start + step, ..., zeros between
// and around: pad(dy, low = start, interior = step - 1, high = n - (start + (m-1) step + 1)),
// which makes the padded length n. (m = 0: low = start, high = n - start.)
Status gradSlice(GradContext &c) {
  int64_t axis = axisOf(c, c.type(c.x()).rank());
  int64_t n = c.type(c.x()).shape[axis], m = c.type(c.y()).shape[axis];
  int64_t start = c.attrs().getInt("start"), step = c.attrs().getInt("step");
  int64_t high = m == 0 ? n - start : n - (start + (m - 1) * step + 1);
  c.dx[0] = c.emit(K::Pad, {c.dy[0]},
                   {{"axis", axis}, {"low", start}, {"high", high}, {"interior", step - 1}});
  return {};
}

// y[low + j (interior + 1)] = x[j], j < n; the rest is the constant `value`  =>
// dx = slice(dy, start = low, end = low + (n-1)(interior+1) + 1, step = interior + 1).
Status gradPad(GradContext &c) {
  int64_t axis = axisOf(c, c.type(c.x()).rank());
  int64_t n = c.type(c.x()).shape[axis];
  int64_t low = c.attrs().getInt("low"), step = c.attrs().getInt("interior") + 1;
  int64_t end = n == 0 ? low : low + (n - 1) * step + 1;
  c.dx[0] =
      c.emit(K::Slice, {c.dy[0]}, {{"axis", axis}, {"start", low}, {"end", end}, {"step", step}});
  return {};
}

// Operand k occupies [offset_k, offset_k + n_k) of the axis: dx_k = slice(dy, offset_k, +n_k).
Status gradConcat(GradContext &c) {
  int64_t axis = axisOf(c, c.type(c.y()).rank());
  int64_t offset = 0;
  for (size_t k = 0; k < c.forward.operands.size(); ++k) {
    int64_t n = c.type(c.x(static_cast<int>(k))).shape[axis];
    c.dx[k] = c.emit(K::Slice, {c.dy[0]}, {{"axis", axis}, {"start", offset}, {"end", offset + n}});
    offset += n;
  }
  return {};
}

// y[p, i, s] = table[p, indices[i], s]  =>  dtable[p, r, s] = sum over i with indices[i] = r of
// dy[p, i, s] = scatter_add(indices, dy){axis, size = table.shape[axis]}. No gradient to indices.
Status gradGather(GradContext &c) {
  int64_t axis = axisOf(c, c.type(c.x(0)).rank());
  int64_t size = c.type(c.x(0)).shape[axis];
  c.dx[0] = c.emit(K::ScatterAdd, {c.x(1), c.dy[0]}, {{"axis", axis}, {"size", size}});
  if (c.attrs().getBool("widen")) // dy is f32, the table bf16
    c.dx[0] = c.emit(K::Cast, {c.dx[0]}, {{"dtype", c.type(c.x(0)).dtype}});
  return {};
}

// y[p, indices[i], s] += updates[p, i, s]  =>  dupdates[p, i, s] = dy[p, indices[i], s]
// = gather(dy, indices){axis}; y = base + ...  =>  dbase = dy. No gradient to indices.
// The slice each i replaced: slot = (iota along axis == index[i]); the base's gradient is dy off
// the slots, the update's dy on them (a slot written by no index: the base's everywhere).
Status gradUpdateSlice(GradContext &c) {
  const Type &t = c.type(c.y());
  const int64_t axis = axisOf(c, t.rank());
  Shape along(static_cast<size_t>(t.rank()), 1), rows(static_cast<size_t>(t.rank()), 1);
  along[axis] = t.shape[axis];
  rows[0] = t.shape[0];
  const ValueId positions = c.emit(K::Iota, {}, {{"shape", along}, {"axis", axis}});
  const ValueId slot = c.emit(K::Eq, {positions, c.reshape(c.cast(c.x(2), DType::I64), rows)});
  const ValueId zero = c.k(0);
  c.setGrad(0, c.select(slot, zero, c.dy[0]));
  c.dx[1] = c.sum(c.select(slot, c.dy[0], zero), {axis}, true);
  return {};
}

Status gradScatterAdd(GradContext &c) {
  int64_t axis = axisOf(c, c.type(c.y()).rank());
  c.dx[1] = c.emit(K::Gather, {c.dy[0], c.x(0)}, {{"axis", axis}});
  if (c.dx.size() == 3)
    c.dx[2] = c.dy[0];
  return {};
}

} // namespace kiln::ir
