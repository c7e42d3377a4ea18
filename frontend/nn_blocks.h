// Transformer layers: a residual sublayer with the norm before (pre-LN, GPT-2/LLaMA) or after
// (post-LN, Vaswani/BERT) it, and the two layer shapes built from it: the encoder layer
// (self-attention + feed-forward; a GPT block is one with a causal mask) and the decoder layer
// (self-attention + cross-attention + feed-forward).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <source_location>
#include <vector>

#include "frontend/nn_attention.h"
#include "frontend/nn_layers.h"

namespace kiln::frontend::nn {

enum class NormPlacement : uint8_t { Pre, Post };

struct BlockOptions {
  int64_t dModel = 64, nHeads = 4, nKvHeads = 0, dFF = 256;
  int64_t headDim = 0; // AttentionOptions::headDim
  NormPlacement norm = NormPlacement::Pre;
  NormKind normKind = NormKind::LayerNorm;
  std::optional<double> normEps = std::nullopt; // nullopt: defaultNormEps(normKind)
  Activation activation = Activation::Gelu;
  bool bias = true;
  bool qkvBias = false;                    // AttentionOptions::qkvBias
  ir::ParamInit weightInit = normalInit(); // every projection matrix (attention and FFN)
  double dropout = 0; // residual, attention-probability and feed-forward dropout
  // Position scheme acting inside self-attention (Relative, Rope, Alibi).
  PositionKind position = PositionKind::None;
  int64_t relativeK = 16;
  Rope rope = {};                                      // AttentionOptions::rope
  bool causal = false;                                 // selects ALiBi's causal form
  std::optional<double> attentionScale = std::nullopt; // AttentionOptions::scale

  AttentionOptions attention(bool self) const;
};

// One residual sublayer around f:  pre: x + dropout(f(norm(x)));  post: norm(x + dropout(f(x))).
Tensor residual(const Tensor &x, const Norm &norm, NormPlacement placement, double dropout,
                const std::function<Tensor(const Tensor &)> &f);

class EncoderLayer : public Module {
public:
  EncoderLayer(Scope scope, const BlockOptions &opts,
               std::source_location loc = std::source_location::current());
  // x [B, T, d] -> [B, T, d]; with a cache, a prompt's pass or a decoding step (KvCache).
  Tensor operator()(const Tensor &x, const Mask &mask = {}, KvCache *cache = nullptr,
                    std::source_location loc = std::source_location::current()) const;

  Norm ln1;
  MultiHeadAttention attn;
  Norm ln2;
  FeedForward mlp;

private:
  NormPlacement placement_;
  double dropout_;
};

class DecoderLayer : public Module {
public:
  DecoderLayer(Scope scope, const BlockOptions &opts,
               std::source_location loc = std::source_location::current());
  // x [B, T, d], memory [B, S, d] -> [B, T, d]
  Tensor operator()(const Tensor &x, const Tensor &memory, const Mask &selfMask,
                    const Mask &crossMask,
                    std::source_location loc = std::source_location::current()) const;
  // A decoding step (x [B, 1, d]): self-attention with `cache` (KvCache), cross-attention to the
  // memory's keys and values computed once (MultiHeadAttention::memoryKeysValues).
  Tensor operator()(const Tensor &x, const KvCache &memory, const Mask &selfMask,
                    const Mask &crossMask, KvCache &cache,
                    std::source_location loc = std::source_location::current()) const;

  Norm ln1;
  MultiHeadAttention selfAttn;
  Norm ln2;
  MultiHeadAttention crossAttn;
  Norm ln3;
  FeedForward mlp;

private:
  NormPlacement placement_;
  double dropout_;
};

// n layers named <scope>.0 ... <scope>.(n-1), as in a PyTorch ModuleList.
template <class Layer>
std::vector<Layer> makeLayers(Scope scope, int64_t n, const BlockOptions &opts,
                              std::source_location loc = std::source_location::current()) {
  std::vector<Layer> layers;
  for (int64_t i = 0; i < n; ++i)
    layers.emplace_back(scope.child(i), opts, loc);
  return layers;
}

// A norm only when the layers are pre-LN: their output has not been normalised yet.
inline std::optional<Norm> finalNorm(Scope scope, NormPlacement placement, NormKind kind,
                                     int64_t dim, std::optional<double> eps = std::nullopt,
                                     std::source_location loc = std::source_location::current()) {
  if (placement == NormPlacement::Post)
    return std::nullopt;
  return Norm(std::move(scope), kind, dim, eps, loc);
}

} // namespace kiln::frontend::nn
