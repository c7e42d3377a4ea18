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

template <class F> KILN_REF_FN(refAllReduce) {
  if (const int64_t ranks = attrs.getInt("ranks"); ranks != 1)
    return makeError("all_reduce over {} ranks: the reference interpreter is one process (run "
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

Status gradAllReduceWait(GradContext &c) {
  c.dx[0] = c.dy[0];
  return {};
}

} // namespace kiln::ir
