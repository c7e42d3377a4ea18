// The Transformer of "Attention Is All You Need" (Vaswani et al. 2017): an encoder-decoder with
// cross-attention. Inputs "src" i64[B, S] and "tgt" i64[B, T] -> output "logits" [B, T, vocab];
// source keys equal to pad_id are masked, the target is causal (and key-padding masked).
// Training mode (loss=true): "tgt" is the decoder input (BOS y[:-1]) and the input "targets"
// i64[B, T] the output it should predict (y, i.e. tgt shifted left by one); output "loss",
// the mean cross-entropy, skipping targets equal to pad_id (ignore_index defaults to pad_id,
// as in the Annotated Transformer). label_smoothing defaults to 0; the paper used 0.1.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/config.h"

namespace kiln::models {

struct TransformerConfig : EncoderDecoderConfig {
  // The paper's choices: post-LN, sinusoidal positions, ReLU, one embedding matrix shared by
  // source, target and the pre-softmax projection; the Annotated Transformer's Xavier-uniform
  // weight matrices and pad targets left unscored.
  TransformerConfig() {
    norm = nn::NormPlacement::Post;
    position = nn::PositionKind::Sinusoidal;
    activation = nn::Activation::Relu;
    init = WeightInit::Xavier;
    ignoreIndex = std::nullopt;
  }
};

std::vector<ConfigKey<TransformerConfig>> transformerKeys();
Expected<TransformerConfig> transformerConfig(std::span<const Setting> settings);
Expected<ir::Graph> buildTransformer(const TransformerConfig &config);
Expected<ir::Graph> buildTransformer(std::span<const Setting> settings);
std::vector<std::string> describeTransformer();

// Translation (runtime::translate in runtime/generation.h), two graphs of the same parameters:
//  - Encode: input "src" [B, S] -> every decoder layer's cross-attention keys and values of the
//    source's memory, "memory.N.k", "memory.N.v" [B, kv_heads, S, head_dim];
//  - Decode, one target token per row: inputs "tgt" [B, 1], "pos" [B] (its position, < tgt_len),
//    "src" (for its padding mask) and the memory's keys and values; state "cache.N.k",
//    "cache.N.v" [B, kv_heads, tgt_len, head_dim], the decoder's self-attention cache, written at
//    pos[b] (nn::KvCache); output "logits" [B, 1, vocab].
enum class TransformerGraph : uint8_t { Encode, Decode };
Expected<ir::Graph> buildTransformerCached(TransformerConfig config, TransformerGraph which);

} // namespace kiln::models
