// update_slice (a KV cache's write) by kiln_update_slice, any dtype, i64 indices; and
// gather (embedding lookup) and scatter_add (its gradient, into a base or not) along axis 0 on
// the Highway backend: the kernel ABI's kiln_gather / kiln_scatter_add over rows of f32 (a
// widening gather's table: rows of bf16). They check
// every index before writing anything; if one is out of range the op's reference runs instead,
// which reports it (the same error, at the node).
#include "codegen/common/lowering.h"

namespace kiln::codegen {
using namespace kiln::ir;

runtime::Step lowerIndex(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const bool gather = n.op == OpKind::Gather;
  const ValueId idxV = n.operands[gather ? 1 : 0], dataV = n.operands[gather ? 0 : 1];
  const Type &data = l.type(dataV), &idx = l.type(idxV), &out = l.type(n.results[0]);
  const bool widen = gather && n.attrs.getBool("widen"); // bf16 rows, f32 out
  if (n.attrs.getInt("axis") != 0 || data.dtype != (widen ? DType::BF16 : DType::F32) ||
      idx.dtype != DType::I64)
    return lowerReference(l, id);
  const int64_t count = idx.numElements();
  const int64_t dim = gather ? data.shape[0] : n.attrs.getInt("size");
  const int64_t row = dim == 0 || out.numElements() == 0
                          ? 0
                          : (gather ? data.numElements() / dim : out.numElements() / dim);
  const bool hasBase = !gather && n.operands.size() == 3;
  const kiln_index_args a{count,
                          dim,
                          row,
                          abiPlace(l.place(dataV)),
                          abiPlace(l.place(idxV)),
                          abiPlace(l.place(n.results[0])),
                          hasBase ? abiPlace(l.place(n.operands[2])) : kiln_place{-1, 0},
                          widen ? 1 : 0};
  runtime::Step s = gather ? kernelStep("gather", &kiln_gather, "kiln_gather", a)
                           : kernelStep("scatter_add", &kiln_scatter_add, "kiln_scatter_add", a);
  s.run = lowerReference(l, id).run;
  return s;
}

runtime::Step lowerUpdateSlice(const Lowering &l, NodeId id) {
  const Node &n = l.g->node(id);
  const Type &base = l.type(n.operands[0]);
  if (l.type(n.operands[2]).dtype != DType::I64)
    return lowerReference(l, id);
  const int64_t axis = *normalizeAxis(n.attrs.getInt("axis"), base.rank());
  kiln_update_slice_args a{};
  a.rows = base.shape[0], a.size = base.shape[static_cast<size_t>(axis)];
  a.outer = a.inner = 1;
  for (int64_t d = 1; d < base.rank(); ++d) {
    const int64_t dim = base.shape[static_cast<size_t>(d)];
    if (d < axis)
      a.outer *= dim;
    else if (d > axis)
      a.inner *= dim;
  }
  a.elem_bytes = dtypeBytes(base.dtype);
  a.base = abiPlace(l.place(n.operands[0])), a.update = abiPlace(l.place(n.operands[1]));
  a.index = abiPlace(l.place(n.operands[2])), a.out = abiPlace(l.place(n.results[0]));
  return kernelStep("update_slice", &kiln_update_slice, "kiln_update_slice", a);
}

} // namespace kiln::codegen
