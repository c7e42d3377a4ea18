// The norms on the Highway backend: layer_norm, rms_norm, their residual-add forms and their
// backward ops as calls of runtime/kernels/norm.h, for f32. Operands that are absent (has_weight,
// has_bias false) are null; a residual operand must cover whole rows (its shape a suffix of the
// sum's, the last axis included), else the op runs by reference.
#include "codegen/highway/lowering.h"
#include "runtime/kernels/norm.h"

namespace kiln::highway {
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
  const bool hasWeight = n.attrs.getBool("has_weight");
  // Only the ops that declare has_bias take one (rms norms and the backward ops do not).
  const bool hasBias = n.attrs.indexOf("has_bias") >= 0 && n.attrs.getBool("has_bias");
  std::vector<Place> in, out;
  for (ValueId v : n.operands)
    in.push_back(l.place(v));
  for (ValueId v : n.results)
    out.push_back(l.place(v));
  const Shape &shape = l.type(n.results[0]).shape;
  const int64_t cols = shape.empty() ? 1 : shape.back();
  const int64_t rows = cols == 0 ? 0 : numElements(shape) / cols;
  const std::string kind(mnemonic(n.op));

  if (n.op == OpKind::LayerNormBackward || n.op == OpKind::RmsNormBackward) {
    const bool ln = n.op == OpKind::LayerNormBackward;
    const size_t first = ln ? 4 : 3; // the weight, after x, [mean,] rstd, dy
    return {kind, [=](const runtime::StepContext &ctx) {
              auto at = [&](const Place &p) { return ctx.at(p.region, p.offset); };
              kernels::NormBackward b;
              b.rows = rows, b.n = cols;
              b.x = at(in[0]);
              b.mean = ln ? at(in[1]) : nullptr;
              b.rstd = at(in[ln ? 2 : 1]);
              b.dy = at(in[ln ? 3 : 2]);
              b.weight = hasWeight ? at(in[first]) : nullptr;
              b.dx = at(out[0]);
              b.dweight = hasWeight ? at(out[1]) : nullptr;
              kernels::normBackward(b, ctx.pool);
              return Status{};
            }};
  }

  const bool add = n.op == OpKind::AddLayerNorm || n.op == OpKind::AddRmsNorm;
  const bool centered = n.op == OpKind::LayerNorm || n.op == OpKind::AddLayerNorm;
  const size_t affine = add ? 2 : 1; // where weight (then bias) start
  std::optional<int64_t> aRows = wholeRows(l.type(n.operands[0]).shape, shape), bRows = rows;
  if (add)
    bRows = wholeRows(l.type(n.operands[1]).shape, shape);
  if (!aRows || !bRows)
    return lowerReference(l, id);
  const float eps = static_cast<float>(n.attrs.getFloat("eps"));
  return {kind, [=, aRows = *aRows, bRows = *bRows](const runtime::StepContext &ctx) {
            auto at = [&](const Place &p) { return ctx.at(p.region, p.offset); };
            kernels::NormForward f;
            f.rows = rows, f.n = cols, f.centered = centered, f.eps = eps;
            f.a = at(in[0]), f.aRows = aRows;
            if (add)
              f.b = at(in[1]), f.bRows = bRows, f.sum = at(out[0]);
            f.weight = hasWeight ? at(in[affine]) : nullptr;
            f.bias = hasBias ? at(in[affine + (hasWeight ? 1 : 0)]) : nullptr;
            const size_t y = add ? 1 : 0;
            f.y = at(out[y]);
            f.mean = centered ? at(out[y + 1]) : nullptr;
            f.rstd = at(out[centered ? y + 2 : y + 1]);
            kernels::normForward(f, ctx.pool);
            return Status{};
          }};
}

} // namespace kiln::highway
