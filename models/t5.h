// T5 (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
// Transformer"), as Hugging Face's T5 computes it: an encoder-decoder with no absolute
// positions; each stack's self-attention adds a learned bias per head and relative position
// bucket (nn::t5Buckets: bidirectional in the encoder, causal in the decoder), computed once and
// shared by all of the stack's layers; cross-attention has none. Pre-norm RMSNorm without bias
// (T5LayerNorm), no biases anywhere, logits not scaled by 1/sqrt(d), one embedding shared by both
// stacks; the LM head is that embedding with the decoder output scaled by d_model^-0.5 (tied) or
// its own matrix (untied, T5 v1.1). ReLU feed-forward (T5; swiglu/gelu for v1.1-style).
// Inputs and training as the transformer model's: "src" i64[B, S], "tgt" i64[B, T] (BOS y[:-1]),
// "targets" (loss=true) -> "logits" [B, T, vocab] (and "loss"). The encoder and cross-attention
// mask padding keys; the decoder's self-attention is causal (Hugging Face's default without a
// decoder attention mask).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/config.h"

namespace kiln::models {

struct T5Config : EncoderDecoderConfig {
  int64_t numBuckets = 32;   // relative_attention_num_buckets
  int64_t maxDistance = 128; // relative_attention_max_distance
  T5Config() {
    norm = nn::NormPlacement::Pre;
    normKind = nn::NormKind::RMSNorm;
    position = nn::PositionKind::None;
    activation = nn::Activation::Relu;
    bias = false;
    ignoreIndex = std::nullopt; // pad targets unscored, as the transformer's
  }
};

std::vector<ConfigKey<T5Config>> t5Keys();
Expected<T5Config> t5Config(std::span<const Setting> settings);
Expected<ir::Graph> buildT5(const T5Config &config);
Expected<ir::Graph> buildT5(std::span<const Setting> settings);
std::vector<std::string> describeT5();

} // namespace kiln::models
