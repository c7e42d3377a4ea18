// Collectives: what the ranks of a data-parallel run compute together. The data-parallel pass
// (passes/data_parallel.cc) inserts them; the backends call their kernels (kiln_all_reduce,
// kiln_all_reduce_start, kiln_all_reduce_wait), which run over the run's Communicator (MPI under
// mpirun).
#pragma once

#include "ir/op.h"
#include "ir/ops/ref_util.h"

namespace kiln::ir {

// all_reduce: y = (x_0 + ... + x_{N-1}) / N over the N = `ranks` ranks, x_r rank r's x; every rank
// gets the same y. `ranks` is the number the program was compiled for (a run with another number
// is refused at the first step).
inline constexpr std::string_view kAllReduceOperands[] = {"x"};
inline constexpr AttrSpec kAllReduceAttrs[] = {{"ranks", AttrKind::Int, true}};

Expected<std::vector<Type>> inferAllReduce(std::span<const Type> in, const Attrs &attrs);
// One process holds one rank: ranks = 1 is the identity; more is an Error (the reference runs no
// other ranks, and the interpreter must not pass x off as their mean).
template <class F> KILN_REF_FN(refAllReduce);
// The loss is the sum of every rank's; each y feeds them all, so dx_r = sum_r' dy_r' / N: the
// same all_reduce of dy.
Status gradAllReduce(GradContext &c);

inline constexpr OpInfo kAllReduceOp{
    .kind = OpKind::AllReduce,
    .mnemonic = "all_reduce",
    .summary = "the mean of x over the `ranks` ranks of a data-parallel run",
    .operands = kAllReduceOperands,
    .attrs = kAllReduceAttrs,
    .infer = &inferAllReduce,
    .ref32 = &refAllReduce<float>,
    .ref64 = &refAllReduce<double>,
    .grad = &gradAllReduce,
    // Element k of y is the mean of the ranks' element k: y may take x's buffer.
    .writesOver = &writesOverElementwise,
    .collective = true};

// all_reduce split in two, so that the reduction runs while the step goes on (overlap):
//   y = all_reduce_start(x){ranks}   hands x's bytes (in y's buffer) to the communicator
//   z = all_reduce_wait(y){ranks}    z = all_reduce(x) once the reduction has finished
// (each with all_reduce's types, attribute and one-process reference: at one rank the identity)
// y's buffer belongs to the reduction between the two: only the wait reads y. The data-parallel
// pass makes each gradient's pair and schedule-collectives puts each start right after the node
// that makes its operand (the wait stays just before its first user).
Status gradAllReduceStart(GradContext &c); // the all_reduce of dy, as all_reduce's
Status gradAllReduceWait(GradContext &c);  // dy: the wait is the identity on values
inline constexpr OpInfo kAllReduceStartOp{
    .kind = OpKind::AllReduceStart,
    .mnemonic = "all_reduce_start",
    .summary = "start the mean of x over the `ranks` ranks (all_reduce_wait ends it)",
    .operands = kAllReduceOperands,
    .attrs = kAllReduceAttrs,
    .infer = &inferAllReduce,
    .ref32 = &refAllReduce<float>,
    .ref64 = &refAllReduce<double>,
    .grad = &gradAllReduceStart,
    .writesOver = &writesOverElementwise,
    .collective = true};
inline constexpr OpInfo kAllReduceWaitOp{.kind = OpKind::AllReduceWait,
                                         .mnemonic = "all_reduce_wait",
                                         .summary =
                                             "the mean that all_reduce_start began, once finished",
                                         .operands = kAllReduceOperands,
                                         .attrs = kAllReduceAttrs,
                                         .infer = &inferAllReduce,
                                         .ref32 = &refAllReduce<float>,
                                         .ref64 = &refAllReduce<double>,
                                         .grad = &gradAllReduceWait,
                                         .writesOver = &writesOverElementwise,
                                         .collective = true};

} // namespace kiln::ir
