// Multi-head attention in primitives. Shapes: B batch, T queries, S keys, H query heads,
// Hkv key/value heads (H = G * Hkv), D per head (d_model / H unless AttentionOptions::headDim).
#include "frontend/nn_attention.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace kiln::frontend::nn {

namespace {
AttentionOptions validated(Builder &b, AttentionOptions o, const std::source_location &loc) {
  if (o.nKvHeads == 0)
    o.nKvHeads = o.nHeads;
  if (o.nHeads <= 0 || (o.headDim == 0 && o.dModel % o.nHeads != 0))
    b.fail("attention", loc,
           fmt::format("d_model {} is not divisible by n_heads {}", o.dModel, o.nHeads));
  if (o.headDim < 0)
    b.fail("attention", loc, fmt::format("head_dim {} must be positive, or 0", o.headDim));
  if (o.headDim == 0)
    o.headDim = o.dModel / o.nHeads;
  if (o.nKvHeads <= 0 || o.nHeads % o.nKvHeads != 0)
    b.fail("attention", loc,
           fmt::format("n_heads {} is not divisible by n_kv_heads {}", o.nHeads, o.nKvHeads));
  if (o.position == PositionKind::Relative && o.relativeK <= 0)
    b.fail("attention", loc, fmt::format("relative_k {} must be positive", o.relativeK));
  return o;
}
} // namespace

MultiHeadAttention::MultiHeadAttention(Scope scope, const AttentionOptions &opts,
                                       std::source_location loc)
    : Module(std::move(scope)), opts_(validated(builder(), opts, loc)), kvHeads_(opts_.nKvHeads),
      headDim_(opts_.headDim), qProj(child("q_proj"), opts_.dModel, opts_.nHeads * headDim_,
                                     opts_.bias || opts_.qkvBias, opts_.weightInit, loc),
      kProj(child("k_proj"), opts_.dModel, kvHeads_ * headDim_, opts_.bias || opts_.qkvBias,
            opts_.weightInit, loc),
      vProj(child("v_proj"), opts_.dModel, kvHeads_ * headDim_, opts_.bias || opts_.qkvBias,
            opts_.weightInit, loc),
      oProj(child("o_proj"), opts_.nHeads * headDim_, opts_.dModel, opts_.bias, opts_.weightInit,
            loc) {
  if (opts_.position == PositionKind::Relative) {
    int64_t distances = 2 * opts_.relativeK + 1; // -k .. k
    relativeKey.emplace(child("relative_key"), distances, headDim_, loc);
    relativeValue.emplace(child("relative_value"), distances, headDim_, loc);
  }
}

Tensor MultiHeadAttention::operator()(const Tensor &x, const Mask &mask, KvCache *cache,
                                      std::source_location loc) const {
  auto f = frame(loc);
  if (cache && cache->pos.valid() && x.dim(1) != 1)
    builder().fail("attention", loc,
                   fmt::format("a decoding step takes one token per row, got {}", x.dim(1)));
  return attend(x, x, mask, /*self=*/true, cache);
}

Tensor MultiHeadAttention::operator()(const Tensor &x, const Tensor &memory, const Mask &mask,
                                      std::source_location loc) const {
  auto f = frame(loc);
  return attend(x, memory, mask, /*self=*/false, nullptr);
}

Tensor MultiHeadAttention::operator()(const Tensor &x, const KvCache &memory, const Mask &mask,
                                      std::source_location loc) const {
  auto f = frame(loc);
  KvCache given = memory;
  return attend(x, Tensor(), mask, /*self=*/false, &given);
}

KvCache MultiHeadAttention::memoryKeysValues(const Tensor &memory, std::source_location loc) const {
  auto f = frame(loc);
  Tensor k = splitHeads(kProj(memory), kvHeads_); // [B, Hkv, S, D]
  Tensor v = splitHeads(vProj(memory), kvHeads_);
  return KvCache{.k = k, .v = v, .pos = Tensor()};
}

Tensor MultiHeadAttention::attend(const Tensor &x, const Tensor &memory, const Mask &mask,
                                  bool self, KvCache *cache) const {
  const bool given = !self && cache;
  int64_t b = x.dim(0), t = x.dim(1), s = given ? cache->k.dim(2) : memory.dim(1), h = opts_.nHeads;
  PositionKind position = self ? opts_.position : PositionKind::None;
  const bool decoding = cache && cache->pos.valid();
  Tensor pos = decoding ? cache->pos.reshape({b, 1}) : Tensor(); // [B, T = 1]
  const bool rope = position == PositionKind::Rope; // on q and k (self-attention: not given)
  Tensor q = splitHeads(qProj(x), h, rope, pos);    // [B, H, T, D]
  Tensor k = given ? cache->k : splitHeads(kProj(memory), kvHeads_, rope, pos); // [B, Hkv, S, D]
  Tensor v = given ? cache->v : splitHeads(vProj(memory), kvHeads_);            // [B, Hkv, S, D]
  if (decoding) {
    // The step's key and value go into the cache at pos[b], in place: only those slices are
    // written (a select over the cache's length read and wrote all of it every step).
    s = cache->k.dim(2);
    k = updateSlice(cache->k, k, cache->pos, 2); // [B, Hkv, L, D]
    v = updateSlice(cache->v, v, cache->pos, 2);
  }
  if (cache && self)
    cache->k = k, cache->v = v;
  k = expandKvHeads(k); // [B, H, S, D]
  v = expandKvHeads(v); // [B, H, S, D]

  // Scaled dot products, then the position biases and the masks.
  double scale = opts_.scale.value_or(1.0 / std::sqrt(double(headDim_)));
  Tensor logits = q.matmul(k, {.transposeB = true}) * scale; // [B, H, T, S]
  std::optional<Tensor> index;
  if (position == PositionKind::Relative) {
    index = decoding ? relativeIndexAt(pos, s, opts_.relativeK)         // [B, T, S]
                     : relativeIndex(builder(), t, s, opts_.relativeK); // [T, S]
    logits = logits + relativeLogits(q, *index) * scale;                // + q_i . a^K_ij / sqrt(D)
  }
  if (position == PositionKind::Alibi) {
    // One call per line and statement: see expandKvHeads.
    Tensor bias = decoding ? alibiBiasAt(pos, h, s, opts_.alibiCausal, x.dtype())
                           : alibiBias(builder(), h, t, s, opts_.alibiCausal, x.dtype());
    logits = logits + bias; // [.., H, T, S]
  }
  if (mask.additive)
    logits = logits + *mask.additive;
  if (mask.keep)
    logits = where(*mask.keep, logits, -std::numeric_limits<double>::infinity());

  Tensor p = logits.softmax(-1); // [B, H, T, S]
  builder().probe(name() + ".probs", p);
  p = p.dropout(opts_.dropout);
  Tensor out = p.matmul(v); // [B, H, T, D]
  if (index)
    out = out + relativeValues(p, *index);                 // + sum_j p_ij a^V_ij
  out = out.transpose(1, 2).reshape({b, t, h * headDim_}); // [B, T, d]
  return oProj(out);
}

Tensor MultiHeadAttention::splitHeads(const Tensor &x, int64_t heads, bool rope,
                                      const Tensor &pos) const {
  Tensor s = x.reshape({x.dim(0), x.dim(1), heads, headDim_}); // [B, T, h, D]
  if (rope)
    s = pos.valid() ? applyRopeAt(s, pos, opts_.rope, 1) : applyRope(s, opts_.rope, 1);
  return s.transpose(1, 2);
}

// Query head i reads kv head i / G (LLaMA's repeat_kv): [B, Hkv, 1, S, D] broadcast along G.
Tensor MultiHeadAttention::expandKvHeads(const Tensor &x) const {
  if (kvHeads_ == opts_.nHeads)
    return x;
  int64_t b = x.dim(0), s = x.dim(2), g = opts_.nHeads / kvHeads_;
  // One call per statement: a chain split over lines records a different line per compiler in
  // each call's std::source_location (GCC: the line of the `.call`, clang: the chain's first).
  Tensor grouped = x.reshape({b, kvHeads_, 1, s, headDim_});            // [B, Hkv, 1, S, D]
  Tensor repeated = grouped.broadcastTo({b, kvHeads_, g, s, headDim_}); // [B, Hkv, G, S, D]
  return repeated.reshape({b, opts_.nHeads, s, headDim_});              // [B, H, S, D]
}

// Shaw et al. eq. (4): e_ij += q_i . a^K_ij, batched per query position i:
// [T, B*H, D] x [T, S, D]^T -> [T, B*H, S]. A decoding step's index [B, T, S] differs per row:
// batched per (row, position) instead, [B, T, H, D] x [B, T, S, D]^T -> [B, T, H, S].
Tensor MultiHeadAttention::relativeLogits(const Tensor &q, const Tensor &index) const {
  int64_t b = q.dim(0), h = q.dim(1), t = q.dim(2);
  Tensor a = (*relativeKey)(index); // [T, S, D] or [B, T, S, D]
  if (index.rank() == 3) {
    Tensor l = q.transpose(1, 2).matmul(a, {.transposeB = true}); // [B, T, H, S]
    return l.transpose(1, 2);                                     // [B, H, T, S]
  }
  Tensor qt = q.permute({2, 0, 1, 3}).reshape({t, b * h, headDim_}); // [T, B*H, D]
  Tensor l = qt.matmul(a, {.transposeB = true});                     // [T, B*H, S]
  return l.reshape({t, b, h, -1}).permute({1, 2, 0, 3});             // [B, H, T, S]
}

// Shaw et al. eq. (3): z_i += sum_j p_ij a^V_ij:  [T, B*H, S] x [T, S, D] -> [T, B*H, D]
// (a decoding step's: [B, T, H, S] x [B, T, S, D] -> [B, T, H, D]).
Tensor MultiHeadAttention::relativeValues(const Tensor &p, const Tensor &index) const {
  int64_t b = p.dim(0), h = p.dim(1), t = p.dim(2);
  Tensor a = (*relativeValue)(index); // [T, S, D] or [B, T, S, D]
  if (index.rank() == 3)
    return p.transpose(1, 2).matmul(a).transpose(1, 2);        // [B, H, T, D]
  Tensor pt = p.permute({2, 0, 1, 3}).reshape({t, b * h, -1}); // [T, B*H, S]
  Tensor z = pt.matmul(a);                                     // [T, B*H, D]
  return z.reshape({t, b, h, headDim_}).permute({1, 2, 0, 3}); // [B, H, T, D]
}

} // namespace kiln::frontend::nn
