// GPT (Radford et al. 2018/2019): a decoder-only Transformer language model. Input "tokens"
// i64[B, T] -> output "logits" [B, T, vocab], causal.
// Training mode (loss=true): input "targets" i64[B, T], the next tokens (targets[b, t] =
// the token after tokens[b, t]; the data supplies them already shifted), and output "loss",
// the mean next-token cross-entropy. ignore_index defaults to -100 (PyTorch's default and
// Hugging Face's label convention): mark padding and unscored positions with -100, or set
// ignore_index=pad_id to skip pad targets instead.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/config.h"

namespace kiln::models {

struct GptConfig : CommonConfig {
  int64_t seqLen = 16;
  int64_t nLayers = 2;
  // The token embeddings times sqrt(d_model) on the way in (Gemma; the tied head reads the table
  // as it is).
  bool scaleEmbeddings = false;
  // GPT-2's choices: pre-LN, learned positions, tanh-GELU, tied input/output embeddings.
  GptConfig() { activation = nn::Activation::GeluTanh; }
};

std::vector<ConfigKey<GptConfig>> gptKeys();
Expected<GptConfig> gptConfig(std::span<const Setting> settings); // defaults + settings, checked
Expected<ir::Graph> buildGpt(const GptConfig &config);
Expected<ir::Graph> buildGpt(std::span<const Setting> settings);
std::vector<std::string> describeGpt();

// Generation with a KV cache (runtime/generation.h), two graphs of the same parameters:
//  - Prefill, a prompt's pass: the forward graph without loss, which also outputs every layer's
//    keys (after RoPE) and values "cache.N.k", "cache.N.v" [B, kv_heads, seq_len, head_dim];
//  - Decode, one token per row: inputs "tokens" i64 [B, 1] and "pos" i64 [B] (the token's
//    position, < seq_len), state "cache.N.k", "cache.N.v" of the same shape, which the step
//    writes at pos[b] (see nn::KvCache), and output "logits" [B, 1, vocab]. Every position
//    scheme computes at pos[b] what the forward graph computes at that position.
enum class GptGraph : uint8_t { Prefill, Decode };
Expected<ir::Graph> buildGptCached(GptConfig config, GptGraph which);

} // namespace kiln::models
