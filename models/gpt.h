// GPT (Radford et al. 2018/2019): a decoder-only Transformer language model. Input "tokens"
// i64[B, T] -> output "logits" [B, T, vocab], causal.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/config.h"

namespace kiln::models {

struct GptConfig : CommonConfig {
  int64_t seqLen = 16;
  int64_t nLayers = 2;
  // GPT-2's choices: pre-LN, learned positions, tanh-GELU, tied input/output embeddings.
  GptConfig() { activation = nn::Activation::GeluTanh; }
};

std::vector<ConfigKey<GptConfig>> gptKeys();
Expected<GptConfig> gptConfig(std::span<const Setting> settings); // defaults + settings, checked
Expected<ir::Graph> buildGpt(const GptConfig &config);
Expected<ir::Graph> buildGpt(std::span<const Setting> settings);
std::vector<std::string> describeGpt();

} // namespace kiln::models
