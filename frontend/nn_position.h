// Position information and attention masks, built from ops (iota, tri, exp, sin, cos, gather)
// so the graph stays self-contained: absolute encodings added to the embeddings (sinusoidal,
// learned), and the ones that act inside attention (relative, RoPE, ALiBi).
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "frontend/nn_layers.h"

namespace kiln::frontend::nn {

enum class PositionKind : uint8_t { None, Sinusoidal, Learned, Relative, Rope, Alibi };

// ---- Masks: true where a query may attend to a key ----

// Causal: query i sees keys j <= i.  bool [T, T]
Tensor causalMask(Builder &b, int64_t t,
                  std::source_location loc = std::source_location::current());
// Key padding: tokens [B, S] -> bool [B, 1, 1, S], false at pad_id, broadcasting over heads
// and queries.
Tensor paddingMask(const Tensor &tokens, int64_t padId,
                   std::source_location loc = std::source_location::current());

// Sliding window (local attention): query i sees keys j with |i - j| < window -- causal, j in
// (i - window, i] (Mistral's sliding_window: the last `window` positions, itself included); else
// window - 1 keys on each side (Longformer's band). bool [T, T]; the attention pass reads it as
// attention's window attribute (passes/fuse_attention.cc), so no T x T mask is built.
Tensor windowMask(Builder &b, int64_t t, int64_t window, bool causal,
                  std::source_location loc = std::source_location::current());

// Incremental decoding: the cache's keys a step may attend, key j of row b when j <= pos[b]
// (and, with a sliding window, pos[b] - j < window). pos i64 [B] -> bool [B, 1, 1, L]
Tensor cacheMask(const Tensor &pos, int64_t length, int64_t window = 0,
                 std::source_location loc = std::source_location::current());

// T5's relative position buckets (Raffel et al. 2020; Hugging Face's _relative_position_bucket):
// key j of query i falls in bucket b(j - i) of `buckets`. Bidirectional (the encoder), half the
// buckets are for keys after the query; causal (the decoder), all are for keys at or before it.
// Of a side's n buckets the first n/2 hold distances 0 .. n/2 - 1 exactly, the rest grow
// logarithmically up to `maxDistance`, beyond which all share the last. i64 [T, S]. The log
// bucket boundaries are integers computed here, in double precision (t5BucketEdges), so the
// graph compares integers only: no rounding of a log inside the graph can move a bucket.
Tensor t5Buckets(Builder &b, int64_t t, int64_t s, bool bidirectional, int64_t buckets,
                 int64_t maxDistance, std::source_location loc = std::source_location::current());
// The distances at which a side's log buckets start: edges[k] is the least distance of bucket
// n/2 + 1 + k, for the n/2 - 1 buckets after the first log one (n a side's buckets).
std::vector<int64_t> t5BucketEdges(int64_t sideBuckets, int64_t maxDistance);

// ---- Absolute encodings, [T, d], added to the token embeddings ----

// Vaswani et al. 2017: PE[t, 2i] = sin(t / 10000^(2i/d)), PE[t, 2i+1] = cos(t / 10000^(2i/d)).
Tensor sinusoidalTable(Builder &b, int64_t t, int64_t d, ir::DType dtype,
                       std::source_location loc = std::source_location::current());

// The same at given positions: pos i64 [B, T] -> [B, T, d], row b's PE[pos[b, t]].
Tensor sinusoidalAt(const Tensor &pos, int64_t d, ir::DType dtype,
                    std::source_location loc = std::source_location::current());

// x [B, T, d] -> x + PE[:T] for Sinusoidal and Learned (a `weight` [max_len, d] parameter);
// the identity for the other kinds, which act inside attention instead. `at` adds PE at the
// positions pos i64 [B, T] instead (a decoding step's).
class AbsolutePosition : public Module {
public:
  AbsolutePosition(Scope scope, PositionKind kind, int64_t maxLen, int64_t d,
                   std::source_location loc = std::source_location::current());
  Tensor operator()(const Tensor &x,
                    std::source_location loc = std::source_location::current()) const;
  Tensor at(const Tensor &x, const Tensor &pos,
            std::source_location loc = std::source_location::current()) const;

  std::optional<Tensor> weight; // Learned only

private:
  PositionKind kind_;
  int64_t d_;
};

// ---- Inside attention ----

// Shaw et al. 2018: for query i and key j, clip(j - i, -k, k) + k in [0, 2k].  i64 [T, S]
Tensor relativeIndex(Builder &b, int64_t t, int64_t s, int64_t k,
                     std::source_location loc = std::source_location::current());
// The same for queries at positions pos i64 [B, T] and keys 0..S-1.  i64 [B, T, S]
Tensor relativeIndexAt(const Tensor &pos, int64_t s, int64_t k,
                       std::source_location loc = std::source_location::current());

// A scaling of RoPE's frequencies, which stretches a model pretrained on originalMaxLen positions
// (L) to more. Four kinds, as transformers names them:
//
// "linear" (position interpolation, Chen et al. 2023; LongChat, Vicuna-16k): every frequency slowed
// by factor, as if positions were divided by it (L unused):  θ'_i = θ_i / factor.
//
// "llama3" (Llama 3.1): with θ_i's wavelength λ_i = 2π/θ_i, a wave that fits more than
// highFreqFactor times into L (λ_i < L/high) keeps its frequency, one that fits fewer than
// lowFreqFactor times (λ_i > L/low) is slowed by factor, and between the two the frequencies are
// blended linearly in L/λ_i:
//   θ'_i = θ_i ((1 - s_i) / factor + s_i),  s_i = clamp((L/λ_i - low) / (high - low), 0, 1)
// (s_i = 1 and 0 at the clamps are the two outer cases).
//
// "longrope" (Phi-3 at 128k, Phi-3.5): each frequency is divided by a factor of its own, from
// shortFactor for a model whose context fits in L, from longFactor for one whose context is
// longer (transformers picks by the longest position of a call: for a training batch, the
// same), and cos and sin are scaled by
//   a = sqrt(1 + ln(factor) / ln(L)) for factor > 1, else 1,
// which scales each attention logit by a² (factor: max_position_embeddings / L):
//   θ'_i = θ_i / f_i,  f = context > L ? longFactor : shortFactor  (D/2 factors each).
//
// "yarn" (Peng et al. 2023, YaRN; Qwen2.5's long-context setting, DeepSeek-V3): by dimension
// index, not wavelength. Frequency i turns L θ_i / 2π times over L; the index at which that count
// is n is  c(n) = D ln(L / (2π n)) / (2 ln base).  Frequencies below index c(betaFast) (more than
// betaFast turns) keep theirs, those past c(betaSlow) (fewer than betaSlow) are slowed by factor,
// and between the two a linear ramp in i blends them:
//   θ'_i = θ_i ((1 - r_i) + r_i / factor),  r_i = clamp((i - lo) / (hi - lo), 0, 1),
//   lo = max(⌊c(betaFast)⌋, 0),  hi = min(⌈c(betaSlow)⌉, D - 1)  (no ⌊⌋, ⌈⌉ when !truncate;
//   hi = lo + 0.001 where they meet), and cos and sin scaled by attentionFactor, or where that is
//   0 by the paper's  a = 0.1 ln(factor) + 1  (1 for factor <= 1).
enum class RopeScalingKind : uint8_t { Llama3, LongRope, Linear, Yarn };
struct RopeScaling {
  double factor = 8, lowFreqFactor = 1, highFreqFactor = 4; // (low, high: llama3's; linear: factor)
  int64_t originalMaxLen = 8192;
  RopeScalingKind kind = RopeScalingKind::Llama3;
  std::vector<double> shortFactor = {}, longFactor = {}; // longrope's
  // yarn's: the ramp's ends in turns over L, cos and sin's scale (0: the paper's, from factor),
  // and whether the ramp's ends are rounded outwards to whole indices (transformers' truncate).
  double betaFast = 32, betaSlow = 1, attentionFactor = 0;
  bool truncate = true;
  bool operator==(const RopeScaling &) const = default;
};
// What is wrong with s ("" when nothing is): llama3: factor >= 1, 0 < low < high; longrope:
// factor > 0, two lists of as many positive factors; linear: factor >= 1; yarn: factor >= 1,
// betaFast >= betaSlow > 0, attentionFactor 0 or > 0; L >= 1; all finite.
std::string ropeScalingFault(const RopeScaling &s);
// The scale of cos and sin: longrope's and yarn's a (see RopeScaling); 1 for the other kinds.
double ropeMagnitude(const RopeScaling &s);

// RoPE's frequencies: θ_i = base^(-2i/R), scaled or not, for the R = rotatedDims(D, fraction)
// first dimensions of a head of D (all of them at fraction 1). (Implicit from a base:
// applyRope(x, 1e4).) context: the longest sequence the model runs (its seq_len), which picks
// longrope's factors.
struct Rope {
  Rope(double base = 10000, std::optional<RopeScaling> scaling = std::nullopt, int64_t context = 0,
       double fraction = 1)
      : base(base), scaling(std::move(scaling)), context(context), fraction(fraction) {}
  double base;
  std::optional<RopeScaling> scaling;
  int64_t context;
  double fraction; // of each head's dimensions rotated, in (0, 1] (Phi-4-mini: 0.75)
};
// The dimensions of a head of D that RoPE turns: int(D × fraction), truncated as transformers'
// int(head_dim * partial_rotary_factor) is (in double precision too), so that a fraction read
// from a config.json turns the dimensions it turns there. For a fraction in (0, 1] only.
int64_t rotatedDims(int64_t d, double fraction);
// The rule for the part of a head RoPE turns, stated once (ropeFault, the rope_fraction setting
// and config.json's partial_rotary_factor each word its failure for their place): the fraction in
// (0, 1], and the rotatedDims it turns of a head of D even and at least 2.
bool ropeFractionInRange(double fraction);
bool ropeTurnsEvenPart(int64_t d, double fraction);
// What is wrong with RoPE at this fraction on heads of D ("" when nothing is): the fraction in
// (0, 1], the dimensions it turns even and at least 2, and longrope's lists one factor for each
// of their R/2 frequencies.
std::string ropeFault(const Rope &rope, int64_t d);

// RoPE (Su et al. 2021) in the rotate-half form of GPT-NeoX/LLaMA, on x [B, H, T, D]:
//   x * cos(t θ) + rotate_half(x) * sin(t θ),  θ_i = base^(-2i/D) for i < D/2 (then scaled, if
//   rope.scaling), repeated twice,  rotate_half([x1, x2]) = [-x2, x1].
// With a fraction < 1 (partial rotary: GPT-NeoX's rotary_pct, Phi-4-mini's partial_rotary_factor)
// the same turns x's first R dimensions, D replaced by R, and the other D - R pass unchanged.
// positionAxis 1 takes x as [B, T, H, D] instead: the heads before they are split off, where
// attention reads them in place (passes/fold_head_transpose.cc).
Tensor applyRope(const Tensor &x, const Rope &rope = {}, int64_t positionAxis = 2,
                 std::source_location loc = std::source_location::current());
// The same with row b's token t at position pos[b, t] (pos i64 [B, T]) instead of t.
Tensor applyRopeAt(const Tensor &x, const Tensor &pos, const Rope &rope = {},
                   int64_t positionAxis = 2,
                   std::source_location loc = std::source_location::current());

// ALiBi (Press et al. 2022): head h has the slope m_h of the paper's reference get_slopes(H):
// 2^(-8h/H), h = 1..H, when H is a power of two; otherwise those of the largest power of two
// below H followed by every other slope of the next power of two (see alibiBias). The bias
// added to the logits is -m_h |i - j|, or in the causal form m_h (j - i) (equal where j <= i).
// [H, T, S]
Tensor alibiBias(Builder &b, int64_t heads, int64_t t, int64_t s, bool causal, ir::DType dtype,
                 std::source_location loc = std::source_location::current());
// The same for queries at positions pos i64 [B, T] and keys 0..S-1.  [B, H, T, S]
Tensor alibiBiasAt(const Tensor &pos, int64_t heads, int64_t s, bool causal, ir::DType dtype,
                   std::source_location loc = std::source_location::current());

} // namespace kiln::frontend::nn
