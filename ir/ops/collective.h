// Collectives: what the ranks of a data-parallel run compute together. The data-parallel pass
// (passes/data_parallel.cc) inserts them; the backends call the kernel kiln_all_reduce, which
// runs over the run's Communicator (MPI under mpirun).
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
    .writesOver = &writesOverElementwise};

} // namespace kiln::ir
