// Reductions over axes (sum, mean, max, with keepdims), the normalised exponentials softmax
// and log_softmax, whose decompositions into primitives are the numerically stable forms, and
// cross_entropy, log_softmax and a target's pick in one.
#pragma once

#include "ir/op.h"
#include "ir/ops/ref_util.h"

namespace kiln::ir {

class Builder;

// axes: the axes reduced (negative counts from the end; empty = all axes), each at most once.
// keepdims: reduced axes stay as size 1.
inline constexpr AttrSpec kReduceAttrs[] = {{"axes", AttrKind::Ints},
                                            {"keepdims", AttrKind::Bool, false, 0}};
inline constexpr AttrSpec kSoftmaxAttrs[] = {{"axis", AttrKind::Int, false, -1}};
inline constexpr std::string_view kReduceOperands[] = {"x"};

// ---- cross_entropy(logits, targets) -> loss, lse ----  (over the last axis of logits [..., V])
// With t = targets[...] (i32 or i64), logp = log_softmax(logits) and the target distribution
// q_j = (1 - ε) [j == t] + ε / V (ε = label_smoothing; t = ignore_index outside [0, V) matches no
// class, and any other t outside [0, V) is an error, an index out of range: a target that is
// neither a class nor the ignored id was scored as nothing and still counted in the mean):
//   loss = -sum_j q_j logp_j = (1 - ε) (-logp_t) + ε / V sum_j (-logp_j)
//   lse = m + log(s),  m = max_j x_j,  s = sum_j exp(x_j - m),  -logp_j = log(s) - (x_j - m)
// (log_softmax's rounding: x_j - m first). fuse-cross-entropy (passes/fuse_cross_entropy.cc)
// makes it of the log_softmax and one-hot weighted sum that the DSL's crossEntropy spells out,
// which wrote two tensors of the logits' size (logp, the one-hot) and, differentiated, two more.
// lse is kept for the gradient, which is pointwise over the logits (dloss, dlse per row):
//   dlogits_j = (dloss Σq + dlse) exp(x_j - lse) - dloss q_j,  Σq = (1 - ε) [0 <= t < V] + ε.
// Where the spelled-out form gave NaN for a -inf logit (its one-hot weight 0 times logp -inf),
// the loss is finite, as PyTorch's.
inline constexpr std::string_view kCrossEntropyOperands[] = {"logits", "targets"};
inline constexpr AttrSpec kCrossEntropyAttrs[] = {{"label_smoothing", AttrKind::Float, false, 0},
                                                  {"ignore_index", AttrKind::Int, false, -100}};

Expected<std::vector<Type>> inferReduceNumeric(std::span<const Type> in,
                                               const Attrs &attrs); // sum, max
Expected<std::vector<Type>> inferReduceFloat(std::span<const Type> in, const Attrs &attrs); // mean
Expected<std::vector<Type>> inferSoftmax(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferCrossEntropy(std::span<const Type> in, const Attrs &attrs);

template <class F> KILN_REF_FN(refReduceSum);
template <class F> KILN_REF_FN(refReduceMean);
template <class F> KILN_REF_FN(refReduceMax);
template <class F> KILN_REF_FN(refSoftmax);
template <class F> KILN_REF_FN(refLogSoftmax);
template <class F> KILN_REF_FN(refCrossEntropy);

// The reduced axes of an operand of rank `rank` as a mask, from verified reduce attributes
// (empty `axes` = every axis).
std::vector<bool> reducedAxes(const Attrs &attrs, int64_t rank);

// reduce_mean(x) = reduce_sum(x) / n
Expected<std::vector<int32_t>> decomposeReduceMean(Graph &g, const Node &n);
// softmax(x) = e / max(reduce_sum(e), 1),  e = exp(x - softmaxShift(reduce_max(x)))
// (keepdims on the axis)
Expected<std::vector<int32_t>> decomposeSoftmax(Graph &g, const Node &n);
// The shift a softmax subtracts from a row, from the row's max m: select(m == -inf, 0, m), so
// that an all -inf row (fully masked) gives exp(-inf - 0) = 0 instead of NaN (see refSoftmax).
// Decompositions and rewrites that spell softmax out use it, to mean exactly what the op means.
int32_t softmaxShift(Builder &b, int32_t m);
// log_softmax(x) = s - log(reduce_sum(exp(s))),  s = x - reduce_max(x)
Expected<std::vector<int32_t>> decomposeLogSoftmax(Graph &g, const Node &n);

// Gradient rules (reduce_grad.cc).
Status gradReduceSum(GradContext &c);
Status gradReduceMean(GradContext &c);
Status gradReduceMax(GradContext &c);
Status gradSoftmax(GradContext &c);
Status gradLogSoftmax(GradContext &c);
Status gradCrossEntropy(GradContext &c);

inline constexpr OpInfo kReduceSumOp{.kind = OpKind::ReduceSum,
                                     .mnemonic = "reduce_sum",
                                     .summary = "sum over `axes`",
                                     .operands = kReduceOperands,
                                     .attrs = kReduceAttrs,
                                     .infer = &inferReduceNumeric,
                                     .ref32 = &refReduceSum<float>,
                                     .ref64 = &refReduceSum<double>,
                                     .grad = &gradReduceSum,
                                     .regionRole = RegionRole::Reduction};
inline constexpr OpInfo kReduceMeanOp{.kind = OpKind::ReduceMean,
                                      .mnemonic = "reduce_mean",
                                      .summary = "arithmetic mean over `axes`",
                                      .operands = kReduceOperands,
                                      .attrs = kReduceAttrs,
                                      .infer = &inferReduceFloat,
                                      .ref32 = &refReduceMean<float>,
                                      .ref64 = &refReduceMean<double>,
                                      .grad = &gradReduceMean,
                                      .decompose = &decomposeReduceMean,
                                      .regionRole = RegionRole::Reduction};
inline constexpr OpInfo kReduceMaxOp{.kind = OpKind::ReduceMax,
                                     .mnemonic = "reduce_max",
                                     .summary = "maximum over `axes` (NaN propagating)",
                                     .operands = kReduceOperands,
                                     .attrs = kReduceAttrs,
                                     .infer = &inferReduceNumeric,
                                     .ref32 = &refReduceMax<float>,
                                     .ref64 = &refReduceMax<double>,
                                     .grad = &gradReduceMax,
                                     .regionRole = RegionRole::Reduction};
inline constexpr OpInfo kSoftmaxOp{.kind = OpKind::Softmax,
                                   .mnemonic = "softmax",
                                   .summary = "exp(x) / sum(exp(x)) along `axis`",
                                   .operands = kReduceOperands,
                                   .attrs = kSoftmaxAttrs,
                                   .infer = &inferSoftmax,
                                   .ref32 = &refSoftmax<float>,
                                   .ref64 = &refSoftmax<double>,
                                   .grad = &gradSoftmax,
                                   .decompose = &decomposeSoftmax};
inline constexpr OpInfo kLogSoftmaxOp{.kind = OpKind::LogSoftmax,
                                      .mnemonic = "log_softmax",
                                      .summary = "x - log(sum(exp(x))) along `axis`",
                                      .operands = kReduceOperands,
                                      .attrs = kSoftmaxAttrs,
                                      .infer = &inferSoftmax,
                                      .ref32 = &refLogSoftmax<float>,
                                      .ref64 = &refLogSoftmax<double>,
                                      .grad = &gradLogSoftmax,
                                      .decompose = &decomposeLogSoftmax};
inline constexpr OpInfo kCrossEntropyOp{
    .kind = OpKind::CrossEntropy,
    .mnemonic = "cross_entropy",
    .summary = "-sum(q log_softmax(logits)) over the last axis, q the targets' (smoothed) one-hot",
    .operands = kCrossEntropyOperands,
    .numResults = 2,
    .attrs = kCrossEntropyAttrs,
    .infer = &inferCrossEntropy,
    .ref32 = &refCrossEntropy<float>,
    .ref64 = &refCrossEntropy<double>,
    .grad = &gradCrossEntropy};

} // namespace kiln::ir
