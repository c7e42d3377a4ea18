// Inference, reference and gradient of the collectives (see collective.h).
#include "ir/ops/collective.h"

#include "ir/grad.h"

namespace kiln::ir {

Expected<std::vector<Type>> inferAllReduce(std::span<const Type> in, const Attrs &attrs) {
  // f32 only: what gradients are, and what the kernel sums.
  if (in[0].dtype != DType::F32)
    return makeError("x has dtype {}, expected f32", dtypeName(in[0].dtype));
  if (const int64_t ranks = attrs.getInt("ranks"); ranks < 1)
    return makeError("ranks must be at least 1, got {}", ranks);
  return std::vector<Type>{in[0]};
}

namespace {
// f32 x of one dimension (the sharded optimizer's flat vectors).
Status checkFlat(const Type &x) {
  if (x.dtype != DType::F32 || x.shape.size() != 1)
    return makeError("x is {}, expected f32 of one dimension", typeString(x));
  return {};
}
} // namespace

Expected<std::vector<Type>> inferReduceScatter(std::span<const Type> in, const Attrs &attrs) {
  if (Status s = checkFlat(in[0]); !s)
    return s.error();
  const int64_t ranks = attrs.getInt("ranks"), n = in[0].shape[0];
  if (ranks < 1)
    return makeError("ranks must be at least 1, got {}", ranks);
  if (n % ranks != 0)
    return makeError("x has {} elements, expected a multiple of ranks = {} (one equal part each)",
                     n, ranks);
  return std::vector<Type>{Type{DType::F32, {n / ranks}}};
}

Expected<std::vector<Type>> inferRankChunk(std::span<const Type> in, const Attrs &attrs) {
  int64_t n = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype != DType::F32)
      return makeError("operand {} is {}, expected f32", i, typeString(in[i]));
    n += in[i].numElements();
  }
  return inferReduceScatter(std::vector<Type>{Type{DType::F32, {n}}}, attrs);
}

template <class F> KILN_REF_FN(refRankChunk) {
  if (const int64_t ranks = attrs.getInt("ranks"); ranks != 1)
    return refAllReduce<F>(attrs, in, out);
  out[0].f.clear();
  for (const RefTensor<F> *x : in)
    out[0].f.insert(out[0].f.end(), x->f.begin(), x->f.end());
  return {};
}
KILN_REF_INSTANTIATE(refRankChunk);

Expected<std::vector<Type>> inferAllGather(std::span<const Type> in, const Attrs &attrs) {
  if (Status s = checkFlat(in[0]); !s)
    return s.error();
  const int64_t ranks = attrs.getInt("ranks");
  if (ranks < 1)
    return makeError("ranks must be at least 1, got {}", ranks);
  return std::vector<Type>{Type{DType::F32, {in[0].shape[0] * ranks}}};
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
  c.dx[0] = c.mul(c.emit(OpKind::AllGather, {c.dy[0]}, {{"ranks", ranks}}), c.k(1.0 / ranks));
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
