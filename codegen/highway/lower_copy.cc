// Data movement on the Highway backend, any dtype: slice, pad, concat and broadcast as strided
// copies (the kernel ABI's kiln_strided_copy; pad fills its result first), stop_gradient as a
// copy. Each element's bytes move unchanged, as the reference moves them.
#include "codegen/highway/lowering.h"
#include "support/element.h"

namespace kiln::highway {
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

} // namespace

runtime::Step lowerCopy(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const Type &out = l.type(n.results[0]);
  if (out.rank() > KILN_MAX_RANK)
    return lowerReference(l, id);
  const int64_t e = dtypeBytes(out.dtype);
  const kiln_place y = abiPlace(l.place(n.results[0]));
  const std::vector<int64_t> ys = rowMajor(out.shape);
  auto x = [&](size_t i) { return abiPlace(l.place(n.operands[i])); };
  const std::string kind(mnemonic(n.op));
  runtime::Step s;
  s.kind = kind;
  auto copy = [&](const kiln_strided_copy_args &a) {
    s.calls.push_back(runtime::KernelCall::of(&kiln_strided_copy, "kiln_strided_copy", a));
  };
  switch (n.op) {
  case OpKind::StopGradient:
    return kernelStep(kind, &kiln_copy, "kiln_copy", kiln_copy_args{out.bytes(), x(0), y});
  case OpKind::Broadcast:
    copy(strided(out.shape, e, broadcastStrides(l.type(n.operands[0]).shape, out.shape), ys, x(0),
                 y));
    return s;
  case OpKind::Slice: {
    const int64_t axis = *normalizeAxis(n.attrs.getInt("axis"), out.rank()),
                  start = n.attrs.getInt("start");
    std::vector<int64_t> xs = rowMajor(l.type(n.operands[0]).shape);
    const int64_t along = xs[axis];
    // (A step only matters between two elements: none past a result of one, whatever its size.)
    xs[axis] = out.shape[axis] > 1 ? xs[axis] * n.attrs.getInt("step") : 0;
    copy(strided(out.shape, e, xs, ys, shifted(x(0), start * along * e), y));
    return s;
  }
  case OpKind::Pad: {
    const int64_t axis = *normalizeAxis(n.attrs.getInt("axis"), out.rank());
    kiln_fill_args f{out.numElements(), e, 0, y};
    element::set(out.dtype, reinterpret_cast<uint8_t *>(&f.bits), n.attrs.getFloat("value"));
    s.calls.push_back(runtime::KernelCall::of(&kiln_fill, "kiln_fill", f));
    const Shape &in = l.type(n.operands[0]).shape;
    std::vector<int64_t> into = ys;
    into[axis] = in[axis] > 1 ? ys[axis] * (n.attrs.getInt("interior") + 1) : 0;
    copy(
        strided(in, e, rowMajor(in), into, x(0), shifted(y, n.attrs.getInt("low") * ys[axis] * e)));
    return s;
  }
  case OpKind::Concat: {
    const int64_t axis = *normalizeAxis(n.attrs.getInt("axis"), out.rank());
    int64_t at = 0;
    for (size_t i = 0; i < n.operands.size(); ++i) {
      const Shape &in = l.type(n.operands[i]).shape;
      copy(strided(in, e, rowMajor(in), ys, x(i), shifted(y, at * ys[axis] * e)));
      at += in[axis];
    }
    return s;
  }
  default:
    return lowerReference(l, id);
  }
}

} // namespace kiln::highway
