// Collectives: what the ranks of a data-parallel run compute together. The data-parallel pass
// (passes/data_parallel.cc) and the sharded optimizer (passes/optimizer.cc) insert them; the
// backends call their kernels (kiln_all_reduce, kiln_all_reduce_start, kiln_all_reduce_wait,
// kiln_reduce_scatter, kiln_all_gather, kiln_rank_chunk), which run over the run's Communicator
// (MPI under mpirun).
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

// The sharded optimizer's three (ZeRO stage 1): rank r of N owns elements [rC, (r+1)C) of the
// parameters flattened into one vector of N C (zero-padded), keeps their optimizer state alone,
// updates them, and hands them to the others:
// With x = x1, .., xk flattened and joined (N C elements in all, the xi of any shapes: each is read
// where it lies, with no concat):
//   y = reduce_scatter(x1, .., xk){ranks}  y: [C], rank r's part of x's mean over the ranks
//   y = rank_chunk(x1, .., xk){ranks}      y: [C] = x[rC, (r+1)C) (no communication, but r is the
//                                          run's, so it is computed in each run as the others are)
//   y = all_gather(x){ranks}   x: [C]; y: [N C], every rank's x in rank order (rank r's at rC)
// All three are f32; at one rank each is the identity (x joined). Gradients, as all_reduce's (the
// loss is the sum of every rank's): reduce_scatter's dx = all_gather(dy) / N, sliced back into the
// operands (x_r's part k feeds rank k's y, divided by N); all_gather's dx = N reduce_scatter(dy)
// (x_r feeds every rank's y at rC). rank_chunk has none (its dx would be dy at rC and zeros
// elsewhere, which no op makes from r): the optimizer adds it after the backward, and autodiff says
// so.
Expected<std::vector<Type>> inferRankPart(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferAllGather(std::span<const Type> in, const Attrs &attrs);
template <class F> KILN_REF_FN(refRankPart);
Status gradReduceScatter(GradContext &c);
Status gradAllGather(GradContext &c);
Status gradRankChunk(GradContext &c);
// reduce_scatter packs x's elements for each message into the scratch region, a piece at a time
// (so a model's gradients are never copied into one vector): reduceScatterPiece floats of each
// rank's part per message, kReduceScatterPiece in all (4 MiB) unless that would take more than
// kReduceScatterMessages messages, each of which pays the network's latency over about N hops
// (GPT-2 124M's part on 512 ranks would go in 118 messages of 8 KiB).
inline constexpr int64_t kReduceScatterPiece = int64_t{1} << 20;
inline constexpr int64_t kReduceScatterMessages = 16;
int64_t reduceScatterPiece(int64_t ranks, int64_t part);
int64_t scratchReduceScatter(const Graph &g, const Node &n);
inline constexpr OpInfo kReduceScatterOp{
    .kind = OpKind::ReduceScatter,
    .mnemonic = "reduce_scatter",
    .summary = "this rank's part of the mean of the operands joined, over the `ranks` ranks",
    .operands = kAllReduceOperands,
    .variadic = true,
    .attrs = kAllReduceAttrs,
    .infer = &inferRankPart,
    .ref32 = &refRankPart<float>,
    .ref64 = &refRankPart<double>,
    .grad = &gradReduceScatter,
    .scratchBytes = &scratchReduceScatter,
    .collective = true};
inline constexpr OpInfo kAllGatherOp{.kind = OpKind::AllGather,
                                     .mnemonic = "all_gather",
                                     .summary = "every rank's x, in rank order",
                                     .operands = kAllReduceOperands,
                                     .attrs = kAllReduceAttrs,
                                     .infer = &inferAllGather,
                                     .ref32 = &refAllReduce<float>,
                                     .ref64 = &refAllReduce<double>,
                                     .grad = &gradAllGather,
                                     .collective = true};
inline constexpr OpInfo kRankChunkOp{.kind = OpKind::RankChunk,
                                     .mnemonic = "rank_chunk",
                                     .summary = "this rank's part of the operands joined, one of "
                                                "`ranks` equal parts",
                                     .operands = kAllReduceOperands,
                                     .variadic = true,
                                     .attrs = kAllReduceAttrs,
                                     .infer = &inferRankPart,
                                     .ref32 = &refRankPart<float>,
                                     .ref64 = &refRankPart<double>,
                                     .grad = &gradRankChunk,
                                     .collective = true};

} // namespace kiln::ir
