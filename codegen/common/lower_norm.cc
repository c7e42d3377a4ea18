// The norms on the Highway backend: layer_norm, rms_norm, their residual-add forms and their
// backward ops as calls of the kernel ABI's kiln_norm / kiln_norm_backward, for f32 (y in bf16
// under bf16_y). Operands that are absent (has_weight, has_bias false) have no place; a residual
// operand must cover whole rows (its shape a suffix of the sum's, the last axis included), else
// the op runs by reference.
#include "codegen/common/lowering.h"

namespace kiln::codegen {
using namespace kiln::ir;

namespace {

// Rows of n elements that `t` holds if it broadcasts to `full` by whole rows, else nullopt.
std::optional<int64_t> wholeRows(const Shape &t, const Shape &full) {
  size_t lead = 0; // leading 1s broadcast like absent axes
  while (lead + 1 < t.size() && t[lead] == 1)
    ++lead;
  const size_t rank = t.size() - lead;
  if (rank == 0 || rank > full.size() || t.back() != full.back())
    return std::nullopt;
  for (size_t d = 0; d < rank; ++d)
    if (t[lead + d] != full[full.size() - rank + d])
      return std::nullopt;
  return numElements(t) / std::max<int64_t>(1, full.back());
}

} // namespace

runtime::Step lowerNorm(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  for (ValueId v : n.operands)
    if (l.type(v).dtype != DType::F32)
      return lowerReference(l, id);
  auto in = [&](size_t i) { return abiPlace(l.place(n.operands[i])); };
  // An operand by name: absent where the op has none or its has_* flag is off.
  auto named = [&](std::string_view name) {
    ValueId v = operandOf(n, name);
    return v == kNone ? kiln_place{-1, 0} : abiPlace(l.place(v));
  };
  auto out = [&](size_t i) { return abiPlace(l.place(n.results[i])); };
  const kiln_place absent{-1, 0};
  const Shape &shape = l.type(n.results[0]).shape;
  const int64_t cols = shape.empty() ? 1 : shape.back();
  const int64_t rows = cols == 0 ? 0 : numElements(shape) / cols;
  const std::string kind(mnemonic(n.op));

  if (n.op == OpKind::LayerNormBackward || n.op == OpKind::RmsNormBackward) {
    kiln_norm_backward_args b{};
    b.rows = rows, b.n = cols;
    b.x = named("x"), b.mean = named("mean"), b.rstd = named("rstd"), b.dy = named("dy");
    b.weight = named("weight");
    b.dx = out(0);
    b.dweight = b.weight.region >= 0 ? out(1) : absent;
    return kernelStep(kind, &kiln_norm_backward, "kiln_norm_backward", b);
  }

  const bool add = n.op == OpKind::AddLayerNorm || n.op == OpKind::AddRmsNorm;
  const bool centered = n.op == OpKind::LayerNorm || n.op == OpKind::AddLayerNorm;
  std::optional<int64_t> aRows = wholeRows(l.type(n.operands[0]).shape, shape), bRows = rows;
  if (add)
    bRows = wholeRows(l.type(n.operands[1]).shape, shape);
  if (!aRows || !bRows)
    return lowerReference(l, id);
  kiln_norm_args f{};
  f.rows = rows, f.n = cols, f.centered = centered, f.eps = n.attrs.getFloat("eps");
  f.a = in(0), f.a_rows = *aRows;
  f.b = add ? in(1) : absent, f.b_rows = *bRows;
  f.sum = add ? out(0) : absent;
  f.weight = named("weight"), f.bias = named("bias");
  const auto y = static_cast<size_t>(opInfo(n.op).bf16YResult);
  f.y = out(y), f.y_bf16 = n.attrs.getBool("bf16_y");
  f.mean = centered ? out(y + 1) : absent;
  f.rstd = out(centered ? y + 2 : y + 1);
  return kernelStep(kind, &kiln_norm, "kiln_norm", f);
}

} // namespace kiln::codegen
