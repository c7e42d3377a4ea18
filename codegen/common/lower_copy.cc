// Data movement on the Highway backend, any dtype: slice, pad, concat and broadcast as strided
// copies (the kernel ABI's kiln_strided_copy; pad fills its result first), stop_gradient as a
// copy. Each element's bytes move unchanged, as the reference moves them.
#include "codegen/common/lowering.h"
#include "support/element.h"

namespace kiln::codegen {
using namespace kiln::ir;

namespace {

// Row-major element strides of a shape.
std::vector<int64_t> rowMajor(const Shape &s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d)
    st[d] = st[d + 1] * s[d + 1];
  return st;
}

// A copy over `shape` from x to y at the given strides; byte offsets added to both places.
kiln_strided_copy_args strided(const Shape &shape, int64_t elementBytes,
                               const std::vector<int64_t> &xs, const std::vector<int64_t> &ys,
                               kiln_place x, kiln_place y) {
  kiln_strided_copy_args a{};
  a.rank = static_cast<int64_t>(shape.size()), a.element_bytes = elementBytes;
  for (int64_t d = 0; d < a.rank; ++d)
    a.shape[d] = shape[d], a.x_strides[d] = xs[d], a.y_strides[d] = ys[d];
  a.x = x, a.y = y;
  return a;
}

kiln_place shifted(kiln_place p, int64_t bytes) {
  return {p.region, p.offset + bytes};
}

// What each copy lowering works with: the result's type and place, its element size and
// row-major strides, and the step its calls go into.
struct Copy {
  const Lowering &l;
  const Node &n;
  const Type &out;
  int64_t e;
  kiln_place y;
  std::vector<int64_t> ys;
  runtime::Step s;

  Copy(const Lowering &lowering, NodeId id)
      : l(lowering), n(l.g->node(id)), out(l.type(n.results[0])), e(dtypeBytes(out.dtype)),
        y(abiPlace(l.place(n.results[0]))), ys(rowMajor(out.shape)) {
    s.kind = std::string(mnemonic(n.op));
  }
  kiln_place x(size_t i) const { return abiPlace(l.place(n.operands[i])); }
  const Shape &inShape(size_t i) const { return l.type(n.operands[i]).shape; }
  int64_t axis() const { return *normalizeAxis(n.attrs.getInt("axis"), out.rank()); }
  runtime::Step copy(const kiln_strided_copy_args &a) {
    s.calls.push_back(runtime::KernelCall::of(&kiln_strided_copy, "kiln_strided_copy", a));
    return s;
  }
};

// One op's copies, by reference past KILN_MAX_RANK.
template <runtime::Step (*F)(Copy &)> runtime::Step lowered(const Lowering &l, NodeId id) {
  if (l.type(l.g->node(id).results[0]).rank() > KILN_MAX_RANK)
    return lowerReference(l, id);
  Copy c(l, id);
  return F(c);
}

runtime::Step stopGradient(Copy &c) {
  return kernelStep(c.s.kind, &kiln_copy, "kiln_copy", kiln_copy_args{c.out.bytes(), c.x(0), c.y});
}

runtime::Step broadcast(Copy &c) {
  return c.copy(
      strided(c.out.shape, c.e, broadcastStrides(c.inShape(0), c.out.shape), c.ys, c.x(0), c.y));
}

runtime::Step slice(Copy &c) {
  const int64_t axis = c.axis(), start = c.n.attrs.getInt("start");
  std::vector<int64_t> xs = rowMajor(c.inShape(0));
  const int64_t along = xs[axis];
  // (A step only matters between two elements: none past a result of one, whatever its size.)
  xs[axis] = c.out.shape[axis] > 1 ? xs[axis] * c.n.attrs.getInt("step") : 0;
  return c.copy(strided(c.out.shape, c.e, xs, c.ys, shifted(c.x(0), start * along * c.e), c.y));
}

// The fill value everywhere, then x's elements at low + k (interior + 1) along the axis.
runtime::Step pad(Copy &c) {
  const int64_t axis = c.axis();
  kiln_fill_args f{c.out.numElements(), c.e, 0, c.y};
  element::set(c.out.dtype, reinterpret_cast<uint8_t *>(&f.bits), c.n.attrs.getFloat("value"));
  c.s.calls.push_back(runtime::KernelCall::of(&kiln_fill, "kiln_fill", f));
  const Shape &in = c.inShape(0);
  std::vector<int64_t> into = c.ys;
  into[axis] = in[axis] > 1 ? c.ys[axis] * (c.n.attrs.getInt("interior") + 1) : 0;
  return c.copy(strided(in, c.e, rowMajor(in), into, c.x(0),
                        shifted(c.y, c.n.attrs.getInt("low") * c.ys[axis] * c.e)));
}

runtime::Step concat(Copy &c) {
  const int64_t axis = c.axis();
  int64_t at = 0;
  for (size_t i = 0; i < c.n.operands.size(); ++i) {
    const Shape &in = c.inShape(i);
    c.copy(strided(in, c.e, rowMajor(in), c.ys, c.x(i), shifted(c.y, at * c.ys[axis] * c.e)));
    at += in[axis];
  }
  return c.s;
}

} // namespace

runtime::Step lowerStopGradient(const Lowering &l, NodeId id) {
  return lowered<&stopGradient>(l, id);
}
runtime::Step lowerBroadcast(const Lowering &l, NodeId id) {
  return lowered<&broadcast>(l, id);
}
runtime::Step lowerSlice(const Lowering &l, NodeId id) {
  return lowered<&slice>(l, id);
}
runtime::Step lowerPad(const Lowering &l, NodeId id) {
  return lowered<&pad>(l, id);
}
runtime::Step lowerConcat(const Lowering &l, NodeId id) {
  return lowered<&concat>(l, id);
}

} // namespace kiln::codegen
