// Inference, reference and gradient of the collectives (see collective.h).
#include "ir/ops/collective.h"

#include <algorithm>

#include "ir/grad.h"
#include "support/checked.h"

namespace kiln::ir {

Expected<std::vector<Type>> inferAllReduce(std::span<const Type> in, const Attrs &attrs) {
  // f32 only: what gradients are, and what the kernel sums.
  if (in[0].dtype != DType::F32)
    return makeError("x has dtype {}, expected f32", dtypeName(in[0].dtype));
  if (const int64_t ranks = attrs.getInt("ranks"); ranks < 1)
    return makeError("ranks must be at least 1, got {}", ranks);
  return std::vector<Type>{in[0]};
}

Expected<std::vector<Type>> inferRankPart(std::span<const Type> in, const Attrs &attrs) {
  int64_t n = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype != DType::F32)
      return makeError("operand {} is {}, expected f32", i, typeString(in[i]));
    n = addSat(n, in[i].numElements());
  }
  const int64_t ranks = attrs.getInt("ranks");
  if (ranks < 1)
    return makeError("ranks must be at least 1, got {}", ranks);
  if (n == kSaturated)
    return makeError("the operands have too many elements to count");
  if (n % ranks != 0)
    return makeError("the operands have {} elements, expected a multiple of ranks = {} (one "
                     "equal part each)",
                     n, ranks);
  return std::vector<Type>{Type{DType::F32, {n / ranks}}};
}

template <class F> KILN_REF_FN(refRankPart) {
  if (const int64_t ranks = attrs.getInt("ranks"); ranks != 1)
    return refAllReduce<F>(attrs, in, out);
  out[0].f.clear();
  for (const RefTensor<F> *x : in)
    out[0].f.insert(out[0].f.end(), x->f.begin(), x->f.end());
  return {};
}
KILN_REF_INSTANTIATE(refRankPart);

Expected<std::vector<Type>> inferAllGather(std::span<const Type> in, const Attrs &attrs) {
  if (in[0].dtype != DType::F32 || in[0].shape.size() != 1)
    return makeError("x is {}, expected f32 of one dimension", typeString(in[0]));
  const int64_t ranks = attrs.getInt("ranks");
  if (ranks < 1)
    return makeError("ranks must be at least 1, got {}", ranks);
  const int64_t n = mulSat(in[0].shape[0], ranks);
  if (n == kSaturated)
    return makeError("{} elements x ranks = {} is too many", in[0].shape[0], ranks);
  return std::vector<Type>{Type{DType::F32, {n}}};
}

int64_t reduceScatterPiece(int64_t ranks, int64_t part) {
  const int64_t fewest = (part + kReduceScatterMessages - 1) / kReduceScatterMessages;
  return std::min(part, std::max({kReduceScatterPiece / ranks, int64_t{1024}, fewest}));
}

int64_t scratchReduceScatter(const Graph &g, const Node &n) {
  const int64_t ranks = n.attrs.getInt("ranks");
  return ranks * reduceScatterPiece(ranks, g.type(n.results[0]).numElements()) *
         static_cast<int64_t>(sizeof(float));
}

template <class F> KILN_REF_FN(refAllReduce) {
  if (const int64_t ranks = attrs.getInt("ranks"); ranks != 1)
    return makeError("a collective over {} ranks: the reference interpreter is one process (run "
                     "the program under mpirun -np {} on the highway or llvm backend)",
                     ranks, ranks);
  out[0].f = in[0]->f;
  return {};
}
KILN_REF_INSTANTIATE(refAllReduce);

Status gradAllReduce(GradContext &c) {
  c.dx[0] = c.emit(OpKind::AllReduce, {c.dy[0]}, {{"ranks", c.attrs().getInt("ranks")}});
  return {};
}

Status gradAllReduceStart(GradContext &c) {
  return gradAllReduce(c);
}

Status gradReduceScatter(GradContext &c) {
  const int64_t ranks = c.attrs().getInt("ranks");
  const ValueId all =
      c.mul(c.emit(OpKind::AllGather, {c.dy[0]}, {{"ranks", ranks}}), c.k(1.0 / ranks));
  int64_t start = 0; // each operand's elements of the joined x, in its shape
  for (size_t i = 0; i < c.forward.operands.size(); ++i) {
    const Shape shape = c.type(c.x(static_cast<int>(i))).shape;
    const int64_t end = start + c.type(c.x(static_cast<int>(i))).numElements();
    c.dx[i] = c.reshape(
        c.emit(OpKind::Slice, {all}, {{"axis", int64_t{0}}, {"start", start}, {"end", end}}),
        shape);
    start = end;
  }
  return {};
}

Status gradAllGather(GradContext &c) {
  const int64_t ranks = c.attrs().getInt("ranks");
  c.dx[0] = c.mul(c.emit(OpKind::ReduceScatter, {c.dy[0]}, {{"ranks", ranks}}), c.k(ranks));
  return {};
}

Status gradRankChunk(GradContext &) {
  return makeError("rank_chunk has no gradient: the sharded optimizer adds it after the backward");
}

Status gradAllReduceWait(GradContext &c) {
  c.dx[0] = c.dy[0];
  return {};
}

} // namespace kiln::ir
