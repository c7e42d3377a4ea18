// gather (embedding lookup) and scatter_add (its gradient) along axis 0 on the Highway backend:
// row copies and row sums of f32 rows. Indices are checked before anything is written; if one is
// out of range the op's reference runs instead, which reports it (the same error, at the node).
// scatter_add adds each update row in index order, as the reference does (bit for bit); the
// threads split the columns, never the rows.
#include <algorithm>
#include <cstring>

#include "codegen/highway/lowering.h"

namespace kiln::highway {
using namespace kiln::ir;

namespace {

bool inRange(const int64_t *idx, int64_t count, int64_t dim) {
  for (int64_t k = 0; k < count; ++k)
    if (idx[k] < 0 || idx[k] >= dim)
      return false;
  return true;
}

} // namespace

runtime::Step lowerIndex(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const bool gather = n.op == OpKind::Gather;
  const ValueId idxV = n.operands[gather ? 1 : 0], dataV = n.operands[gather ? 0 : 1];
  const Type &data = l.type(dataV), &idx = l.type(idxV), &out = l.type(n.results[0]);
  if (n.attrs.getInt("axis") != 0 || data.dtype != DType::F32 || idx.dtype != DType::I64)
    return lowerReference(l, id);
  const int64_t count = idx.numElements();
  const int64_t dim = gather ? data.shape[0] : n.attrs.getInt("size");
  const int64_t row = dim == 0 || out.numElements() == 0
                          ? 0
                          : (gather ? data.numElements() / dim : out.numElements() / dim);
  const Place pd = l.place(dataV), pi = l.place(idxV), po = l.place(n.results[0]);
  return {std::string(mnemonic(n.op)),
          [=, ref = lowerReference(l, id).run](const runtime::StepContext &ctx) -> Status {
            const int64_t *ix = ctx.at<int64_t>(pi.region, pi.offset);
            if (!inRange(ix, count, dim))
              return ref(ctx);
            const float *src = ctx.at(pd.region, pd.offset);
            float *dst = ctx.at(po.region, po.offset);
            constexpr int64_t kColumns = 256;
            if (gather) {
              const int64_t perPart = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row));
              runtime::runParts(ctx.pool, (count + perPart - 1) / perPart, [&](int64_t q, int) {
                for (int64_t k = q * perPart; k < std::min(count, (q + 1) * perPart); ++k)
                  std::memcpy(dst + k * row, src + ix[k] * row, sizeof(float) * row);
              });
              return Status{};
            }
            runtime::runParts(ctx.pool, (row + kColumns - 1) / kColumns, [&](int64_t q, int) {
              const int64_t c0 = q * kColumns, w = std::min(kColumns, row - c0);
              for (int64_t r = 0; r < dim; ++r)
                std::fill_n(dst + r * row + c0, w, 0.0f);
              for (int64_t k = 0; k < count; ++k) {
                float *to = dst + ix[k] * row + c0;
                const float *from = src + k * row + c0;
                for (int64_t j = 0; j < w; ++j)
                  to[j] += from[j];
              }
            });
            return Status{};
          }};
}

} // namespace kiln::highway
