// Fused ops: what the fusion passes (passes/fuse_*.cc) turn primitive chains into, and the units
// the fast backends compile. Their reference semantics are written directly (not as a call to
// the decomposition), so that "fused == unfused" is a real test; their gradient rules emit the
// fused backward ops, which recompute what they need from saved statistics.
//
// Layouts: attention operands are [B, H, T, D] (batch, heads, positions, head dim), or [B, T, H, D]
// with bthd = true (see attention below). Statistics (lse, mean, rstd) are kept in f64 for f64
// inputs and in f32 otherwise ("stat dtype").
// Optional operands and results: the has_* attributes say which are there; those present follow
// the required ones in the order listed, absent ones are skipped (attention with has_bias alone
// takes q, k, v, bias).
// Statistics are saved for the backward ops, which treat them as constants: the gradient rules
// return an Error if a (non-zero) gradient flows into lse, mean or rstd; such a graph must be
// differentiated unfused.
#pragma once

#include "ir/op.h"
#include "ir/ops/ref_util.h"

namespace kiln::ir {

// ---- attention(q, k, v [, mask] [, bias] [, step]) -> out, lse ----
// q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv]; Hq = g * Hkv and query head h reads
// kv head h / g (GQA; MQA is Hkv = 1; as torch's repeat_interleave). With s = scale:
//   logits[b,h,i,j] = s * <q[b,h,i], k[b,h/g,j]> + bias[b,h,i,j]         (bias if has_bias)
//   allowed(i,j)    = mask[b,h,i,j] (if has_mask)  and  j <= i (if causal; top-left aligned)
//                     and  |i - j| < window (if window > 0: sliding-window attention; causal, a
//                     query sees itself and the window - 1 keys before it, as Mistral's
//                     sliding_window; else window - 1 keys on each side, as Longformer's band)
//   p = softmax_j(logits where allowed, else -inf);   out[b,h,i] = sum_j d(p)[i,j] v[b,h/g,j]
//   lse[b,h,i] = log sum_j exp(logits[i,j]) over allowed j   (the softmax's normaliser)
// d is attention dropout: with dropout = r > 0, d(p) = dropout(p){p = r, seed} over the
// [B, Hq, Tq, Tk] probabilities, exactly the dropout op's bits (element (b,h,i,j) is kept iff
// uniform(seed, ((b Hq + h) Tq + i) Tk + j) >= r, then scaled by 1 / (1 - r)), so a model's
// dropout(softmax(..)) v fuses with the same mask; r = 0 (the default) is no dropout.
// mask (bool) and bias (float, q's dtype) broadcast to [B, Hq, Tq, Tk]. A row with no allowed key
// (a sequence that is all padding; or Tk = 0) gives out = 0 and lse = -inf, as softmax's guard
// does (reduce.h), not NaN. out has q's dtype, shape [B, Hq, Tq, Dv]; lse is [B, Hq, Tq] in the
// stat dtype. q_heads/kv_heads restate Hq/Hkv (checked) so dumps show them; scale must be finite.
// bthd = true: q, k, v and out are [B, T, H, D] instead (positions before heads: the layout a
// [B, T, H*D] projection reshapes to, so splitting and merging the heads needs no transpose;
// passes/fold_head_transpose.cc sets it). Only where the operands live changes: mask, bias,
// dropout's element numbering and lse stay indexed [b, h, i, j] and [B, Hq, Tq].
// bf16_products: mixed precision (passes/bf16_products.cc), as matmul's: the operands of both
// products are rounded to bf16 where they are multiplied, r(x) below (to nearest, ties to even),
// and the probabilities are rounded before the division by their sum, as flash kernels do:
//   logits = s <r(q), r(k)> + bias;   e_j = exp(logits_j - m), m the row's max (allowed j)
//   out = (sum_j r(d(e)_j) r(v_j)) / max(sum_j e_j, 1)
// with the products exact in f32 and every sum, the softmax and lse in q's dtype. (The kernels,
// runtime/kernels/attention.h, round e of the running max: the same where a row's max lies in its
// first tile of keys; else it is rescaled after rounding, and differs in bf16's last bits.)
// step (has_step): the dropout's training step, as the dropout op's step operand (a scalar
// count): element (b,h,i,j) is kept iff uniform(rng::stepSeed(seed, step), ...) >= r. On rank
// r of a data-parallel run, b counts from r B, as the dropout op's elements do.
inline constexpr std::string_view kAttentionOperands[] = {"q", "k", "v", "mask", "bias", "step"};
inline constexpr AttrSpec kAttentionAttrs[] = {{"scale", AttrKind::Float, true},
                                               {"causal", AttrKind::Bool, false, 0},
                                               {"q_heads", AttrKind::Int, true},
                                               {"kv_heads", AttrKind::Int, true},
                                               {"has_mask", AttrKind::Bool, false, 0},
                                               {"has_bias", AttrKind::Bool, false, 0},
                                               {"dropout", AttrKind::Float, false, 0},
                                               {"seed", AttrKind::Int, false, 0},
                                               {"window", AttrKind::Int, false, 0},
                                               {"bthd", AttrKind::Bool, false, 0},
                                               {"bf16_products", AttrKind::Bool, false, 0},
                                               {"has_step", AttrKind::Bool, false, 0}};

// ---- attention_backward(q, k, v, out, lse, dout [, mask] [, bias] [, step])
//      -> dq, dk, dv [, dbias] ----
// The gradient of attention's `out`, flash-style: each row's probabilities are recomputed from
// q, k (and mask, bias) and the saved lse, p = exp(logits - lse), never stored as a whole:
//   dv[j] += p[i,j] dout[i];  dp[i,j] = <dout[i], v[j]>;  delta[i] = <dout[i], out[i]>
//   dlogits[i,j] = p[i,j] (dp[i,j] - delta[i])
//   dq[i] += s dlogits[i,j] k[j];  dk[j] += s dlogits[i,j] q[i]
//   dbias = dlogits summed to bias's shape (only if has_bias: the one T x T result, because the
//   bias operand is itself T x T).
// GQA: dk, dv of kv head c sum over the query heads that read it. Same attributes as attention.
// With bf16_products the operands of the four products above are rounded (r as above; p is
// recomputed normalised, delta stays in full):
//   dv[j] += r(m p[i,j]) r(dout[i]);  dp[i,j] = <r(dout[i]), r(v[j])>;
//   dq[i] += r(s dlogits[i,j]) r(k[j]);  dk[j] += r(s dlogits[i,j]) r(q[i])
// -- the f32 gradient's products in bf16, as flash kernels compute it; not the exact gradient of
// the rounded forward (whose rounding has none), nor the decomposition's autodiff, which rounds
// dout / sum instead of dout and p's numerator instead of p.
// Keys that are not allowed have p = 0; a row with no allowed key (NaN out) adds no gradient.
// With dropout, the same mask m (kept / (1 - r), else 0) is redrawn from the seed: dv[j] +=
// m p[i,j] dout[i] and dp[i,j] = m <dout[i], v[j]>; delta[i] = <dout[i], out[i]> still holds.
// dq, dk, dv, dbias have the types of q, k, v, bias (dout, out and the gradients in bthd's layout).
inline constexpr std::string_view kAttentionBackwardOperands[] = {
    "q", "k", "v", "out", "lse", "dout", "mask", "bias", "step"};

// ---- layer_norm(x [, weight] [, bias]) -> y, mean, rstd ----  (over the last axis, size N)
//   mean = sum(x)/N;  var = sum((x - mean)^2)/N (biased, as PyTorch);  rstd = 1/sqrt(var + eps)
//   y = (x - mean) * rstd * weight + bias         weight, bias: [N] (if has_weight / has_bias)
// y has x's dtype and shape (rank >= 1); mean and rstd are x.shape[:-1] in the stat dtype.
// weight and bias have x's dtype; eps is finite and >= 0.
// bf16_y (every norm's forward, f32 x only): y is stored in bf16, rounded to nearest even from
// the f32 y above. Mixed precision sets it where only bf16 products read y
// (passes/bf16_activations.cc), which round their operands so anyway; the statistics stay f32.
// A graph with it is past differentiation: its gradient is refused.
inline constexpr std::string_view kLayerNormOperands[] = {"x", "weight", "bias"};
inline constexpr AttrSpec kLayerNormAttrs[] = {{"eps", AttrKind::Float, false, 1e-5},
                                               {"has_weight", AttrKind::Bool, false, 1},
                                               {"has_bias", AttrKind::Bool, false, 1},
                                               {"bf16_y", AttrKind::Bool, false, 0}};
// ---- layer_norm_backward(x, mean, rstd, dy [, weight]) -> dx [, dweight] ----
// With xhat = (x - mean) rstd and g = dy * weight (or dy):
//   dx = rstd * (g - mean_N(g) - xhat * mean_N(g * xhat));   dweight = sum over rows of dy * xhat
// (dbias = sum over rows of dy needs no fused op.) Attributes: has_weight (eps unused: rstd saved).
// dx has x's type, dweight weight's; mean, rstd are x.shape[:-1] in the stat dtype, dy is x's type.
inline constexpr std::string_view kLayerNormBackwardOperands[] = {"x", "mean", "rstd", "dy",
                                                                  "weight"};
inline constexpr AttrSpec kNormBackwardAttrs[] = {{"has_weight", AttrKind::Bool, false, 1}};

// ---- rms_norm(x [, weight]) -> y, rstd ----  (Zhang & Sennrich 2019, over the last axis)
//   rstd = 1/sqrt(sum(x^2)/N + eps);  y = x * rstd * weight
inline constexpr std::string_view kRmsNormOperands[] = {"x", "weight"};
inline constexpr AttrSpec kRmsNormAttrs[] = {{"eps", AttrKind::Float, false, 1e-6},
                                             {"has_weight", AttrKind::Bool, false, 1},
                                             {"bf16_y", AttrKind::Bool, false, 0}};
// ---- rms_norm_backward(x, rstd, dy [, weight]) -> dx [, dweight] ----
//   xhat = x rstd, g = dy * weight:  dx = rstd * (g - xhat * mean_N(g * xhat));
//   dweight = sum dy * xhat
inline constexpr std::string_view kRmsNormBackwardOperands[] = {"x", "rstd", "dy", "weight"};

// ---- add_layer_norm(a, b [, weight] [, bias]) -> sum, y, mean, rstd ----
// The residual add feeding a norm, fused: sum = a + b (broadcasting, one float dtype; sum has the
// full shape), then layer_norm(sum). Both results are used: sum by the next residual, y by the
// sublayer. Gradient: dsum = d(sum) + layer_norm_backward(...).dx, summed to a's and b's shapes.
inline constexpr std::string_view kAddLayerNormOperands[] = {"a", "b", "weight", "bias"};
// ---- add_rms_norm(a, b [, weight]) -> sum, y, rstd ----
inline constexpr std::string_view kAddRmsNormOperands[] = {"a", "b", "weight"};

Expected<std::vector<Type>> inferAttention(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferAttentionBackward(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferLayerNorm(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferLayerNormBackward(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferRmsNorm(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferRmsNormBackward(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferAddLayerNorm(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferAddRmsNorm(std::span<const Type> in, const Attrs &attrs);

// The dimensions of an attention (either op) read from q, k, v in the layout `bthd` names:
// q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] (or [B, T, H, D] each).
struct AttentionDims {
  int64_t b, hq, hkv, tq, tk, d, dv;
  bool bthd;
  // The offset of row [b, h, t] of a tensor with `heads` heads, `len` positions and rows of
  // `width` elements, in this layout.
  int64_t row(int64_t heads, int64_t len, int64_t width, int64_t bi, int64_t h, int64_t t) const {
    return (bthd ? (bi * len + t) * heads + h : (bi * heads + h) * len + t) * width;
  }
};
AttentionDims attentionDims(const Type &q, const Type &k, const Type &v, bool bthd);
AttentionDims attentionDims(const Graph &g, const Node &n);

template <class F> KILN_REF_FN(refAttention);
template <class F> KILN_REF_FN(refAttentionBackward);
// The flash-attention kernels' tiles (support/workspace.h): O(T) per head, never O(T^2).
int64_t scratchAttention(const Graph &g, const Node &n);
int64_t scratchAttentionBackward(const Graph &g, const Node &n);
template <class F> KILN_REF_FN(refLayerNorm);
template <class F> KILN_REF_FN(refLayerNormBackward);
template <class F> KILN_REF_FN(refRmsNorm);
template <class F> KILN_REF_FN(refRmsNormBackward);
template <class F> KILN_REF_FN(refAddLayerNorm);
template <class F> KILN_REF_FN(refAddRmsNorm);

// Gradient rules: attention -> attention_backward; norms -> their _backward op (+ reduce_sum for
// dbias); the fused add-norms -> the norm's backward plus the residual path. The backward ops'
// own rules return an Error naming the op (double backward through a fused backward op is not
// supported: differentiate the unfused graph twice instead) — never a silent zero.
Status gradAttention(GradContext &c);
Status gradLayerNorm(GradContext &c);
Status gradRmsNorm(GradContext &c);
Status gradAddLayerNorm(GradContext &c);
Status gradAddRmsNorm(GradContext &c);
Status gradAttentionBackward(GradContext &c);
Status gradLayerNormBackward(GradContext &c);
Status gradRmsNormBackward(GradContext &c);

// Decompositions into primitives (also what the unfused graphs compute).
Expected<std::vector<int32_t>> decomposeAttention(Graph &g, const Node &n);
Expected<std::vector<int32_t>> decomposeLayerNorm(Graph &g, const Node &n);
Expected<std::vector<int32_t>> decomposeRmsNorm(Graph &g, const Node &n);

inline constexpr OpInfo kAttentionOp{
    .kind = OpKind::Attention,
    .mnemonic = "attention",
    .summary = "softmax(scale * q k^T + bias, masked) v, with the row log-sum-exp",
    .operands = kAttentionOperands,
    .optionalOperands = 3,
    .numResults = 2,
    .attrs = kAttentionAttrs,
    .infer = &inferAttention,
    .ref32 = &refAttention<float>,
    .ref64 = &refAttention<double>,
    .grad = &gradAttention,
    .decompose = &decomposeAttention,
    .scratchBytes = &scratchAttention};
inline constexpr OpInfo kAttentionBackwardOp{
    .kind = OpKind::AttentionBackward,
    .mnemonic = "attention_backward",
    .summary = "gradients of attention, recomputing probabilities from the saved lse",
    .operands = kAttentionBackwardOperands,
    .optionalOperands = 3,
    .numResults = 4,
    .optionalResults = 1,
    .attrs = kAttentionAttrs,
    .infer = &inferAttentionBackward,
    .ref32 = &refAttentionBackward<float>,
    .ref64 = &refAttentionBackward<double>,
    .grad = &gradAttentionBackward,
    .scratchBytes = &scratchAttentionBackward};
inline constexpr OpInfo kLayerNormOp{
    .kind = OpKind::LayerNorm,
    .mnemonic = "layer_norm",
    .summary = "(x - mean) / sqrt(var + eps) * weight + bias over the last axis",
    .operands = kLayerNormOperands,
    .optionalOperands = 2,
    .numResults = 3,
    .attrs = kLayerNormAttrs,
    .infer = &inferLayerNorm,
    .ref32 = &refLayerNorm<float>,
    .ref64 = &refLayerNorm<double>,
    .grad = &gradLayerNorm,
    .decompose = &decomposeLayerNorm,
    .bf16YResult = 0};
inline constexpr OpInfo kLayerNormBackwardOp{
    .kind = OpKind::LayerNormBackward,
    .mnemonic = "layer_norm_backward",
    .summary = "dx (and dweight) of layer_norm from the saved mean and rstd",
    .operands = kLayerNormBackwardOperands,
    .optionalOperands = 1,
    .numResults = 2,
    .optionalResults = 1,
    .attrs = kNormBackwardAttrs,
    .infer = &inferLayerNormBackward,
    .ref32 = &refLayerNormBackward<float>,
    .ref64 = &refLayerNormBackward<double>,
    .grad = &gradLayerNormBackward};
inline constexpr OpInfo kRmsNormOp{.kind = OpKind::RmsNorm,
                                   .mnemonic = "rms_norm",
                                   .summary =
                                       "x / sqrt(mean(x^2) + eps) * weight over the last axis",
                                   .operands = kRmsNormOperands,
                                   .optionalOperands = 1,
                                   .numResults = 2,
                                   .attrs = kRmsNormAttrs,
                                   .infer = &inferRmsNorm,
                                   .ref32 = &refRmsNorm<float>,
                                   .ref64 = &refRmsNorm<double>,
                                   .grad = &gradRmsNorm,
                                   .decompose = &decomposeRmsNorm,
                                   .bf16YResult = 0};
inline constexpr OpInfo kRmsNormBackwardOp{.kind = OpKind::RmsNormBackward,
                                           .mnemonic = "rms_norm_backward",
                                           .summary =
                                               "dx (and dweight) of rms_norm from the saved rstd",
                                           .operands = kRmsNormBackwardOperands,
                                           .optionalOperands = 1,
                                           .numResults = 2,
                                           .optionalResults = 1,
                                           .attrs = kNormBackwardAttrs,
                                           .infer = &inferRmsNormBackward,
                                           .ref32 = &refRmsNormBackward<float>,
                                           .ref64 = &refRmsNormBackward<double>,
                                           .grad = &gradRmsNormBackward};
inline constexpr OpInfo kAddLayerNormOp{.kind = OpKind::AddLayerNorm,
                                        .mnemonic = "add_layer_norm",
                                        .summary = "sum = a + b, then layer_norm(sum); yields both",
                                        .operands = kAddLayerNormOperands,
                                        .optionalOperands = 2,
                                        .numResults = 4,
                                        .attrs = kLayerNormAttrs,
                                        .infer = &inferAddLayerNorm,
                                        .ref32 = &refAddLayerNorm<float>,
                                        .ref64 = &refAddLayerNorm<double>,
                                        .grad = &gradAddLayerNorm,
                                        .bf16YResult = 1};
inline constexpr OpInfo kAddRmsNormOp{.kind = OpKind::AddRmsNorm,
                                      .mnemonic = "add_rms_norm",
                                      .summary = "sum = a + b, then rms_norm(sum); yields both",
                                      .operands = kAddRmsNormOperands,
                                      .optionalOperands = 1,
                                      .numResults = 3,
                                      .attrs = kRmsNormAttrs,
                                      .infer = &inferAddRmsNorm,
                                      .ref32 = &refAddRmsNorm<float>,
                                      .ref64 = &refAddRmsNorm<double>,
                                      .grad = &gradAddRmsNorm,
                                      .bf16YResult = 1};

} // namespace kiln::ir
