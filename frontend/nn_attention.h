// Multi-head scaled dot-product attention (Vaswani et al. 2017), written in primitives so a
// later pass can fuse it: softmax(Q K^T / sqrt(D) + bias, masked) V. Self and cross attention;
// MHA, GQA and MQA (n_kv_heads < n_heads, kv heads shared by groups of query heads); and the
// positions that act inside attention: relative (Shaw et al.), RoPE and ALiBi.
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>

#include "frontend/nn_layers.h"
#include "frontend/nn_position.h"

namespace kiln::frontend::nn {

// Which (query, key) pairs take part. Both broadcast to the logits [B, H, T, S].
struct Mask {
  std::optional<Tensor> keep =
      std::nullopt; // bool: true where the query may attend the key (else -inf)
  std::optional<Tensor> additive = std::nullopt; // float: added to the scaled logits
};

// Incremental decoding with a KV cache. For a prompt's pass (pos not valid) self-attention
// records its keys (after RoPE) and values, [B, Hkv, T, D], in k and v. For a decoding step
// (pos: i64 [B], the position of each row's one query) k and v come in as the cache
// [B, Hkv, L, D]; the step writes its key and value at pos[b], attends to the cache (the mask
// says which positions), and leaves the written cache in k and v.
struct KvCache {
  Tensor k, v;
  Tensor pos;
};

struct AttentionOptions {
  int64_t dModel = 0;
  int64_t nHeads = 1;
  int64_t nKvHeads = 0; // 0 = nHeads (MHA); 1 = MQA; otherwise GQA, dividing nHeads
  // Each head's width D; 0: dModel / nHeads, which must divide. Another D projects the model's
  // width to H x D for the queries and back (Gemma-7B: 16 heads of 256 over a width of 3072).
  int64_t headDim = 0;
  bool bias = true;     // on the four projections
  bool qkvBias = false; // on q, k and v even without `bias` (Qwen2: o_proj has none)
  ir::ParamInit weightInit = normalInit(); // the four projection matrices
  double dropout = 0;                      // on the attention probabilities
  // Self-attention only: Relative, Rope and Alibi act here; other kinds are ignored.
  PositionKind position = PositionKind::None;
  int64_t relativeK = 16;   // Relative: distances clipped to [-k, k]
  bool alibiCausal = false; // Alibi: the causal form m (j - i) instead of -m |i - j|
  Rope rope = {};           // Rope: its frequencies
  // The logits' scale; nullopt: 1 / sqrt(head_dim). T5 scales by 1 (folded into its init).
  std::optional<double> scale = std::nullopt;
};

// While the builder probes (Builder::setProbing), every attention offers its probabilities
// softmax(...) [B, H, T, S], before dropout, as the probe "<module name>.probs".
class MultiHeadAttention : public Module {
  AttentionOptions opts_; // first: the projections' sizes depend on it
  int64_t kvHeads_, headDim_;

public:
  MultiHeadAttention(Scope scope, const AttentionOptions &opts,
                     std::source_location loc = std::source_location::current());
  // Self-attention: x [B, T, d] -> [B, T, d]; with a cache, a prompt's pass or (T = 1) a
  // decoding step (see KvCache).
  Tensor operator()(const Tensor &x, const Mask &mask = {}, KvCache *cache = nullptr,
                    std::source_location loc = std::source_location::current()) const;
  // Cross-attention: queries from x [B, T, d], keys and values from memory [B, S, d].
  Tensor operator()(const Tensor &x, const Tensor &memory, const Mask &mask = {},
                    std::source_location loc = std::source_location::current()) const;
  // Cross-attention to keys and values of the memory computed once (memoryKeysValues): what
  // every decoding step of an encoder-decoder attends to.
  Tensor operator()(const Tensor &x, const KvCache &memory, const Mask &mask = {},
                    std::source_location loc = std::source_location::current()) const;
  // The memory [B, S, d] as cross-attention's keys and values [B, Hkv, S, D].
  KvCache memoryKeysValues(const Tensor &memory,
                           std::source_location loc = std::source_location::current()) const;

  Linear qProj, kProj, vProj, oProj;                   // q_proj, k_proj, v_proj, o_proj
  std::optional<Embedding> relativeKey, relativeValue; // [2k+1, D], Relative only

private:
  // Self-attention with a cache records or decodes (KvCache); cross-attention with a cache
  // takes its keys and values instead of projecting `memory`.
  Tensor attend(const Tensor &x, const Tensor &memory, const Mask &mask, bool self,
                KvCache *cache) const;
  // [B, T, h*D] -> [B, h, T, D]; with rope, RoPE applied before the split (at positions pos if
  // given), so that attention still reads a head split (passes/fold_head_transpose.cc).
  Tensor splitHeads(const Tensor &x, int64_t heads, bool rope = false,
                    const Tensor &pos = Tensor()) const;
  Tensor expandKvHeads(const Tensor &x) const; // [B, Hkv, S, D] -> [B, H, S, D]
  Tensor relativeLogits(const Tensor &q, const Tensor &index) const;
  Tensor relativeValues(const Tensor &p, const Tensor &index) const;
};

} // namespace kiln::frontend::nn
