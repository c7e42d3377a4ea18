// BERT (Devlin et al. 2019): a bidirectional Transformer encoder with the masked-LM head.
// Inputs "tokens" i64[B, T] (range vocab) and "token_types" i64[B, T] (range type_vocab) ->
// output "logits" [B, T, vocab]; attention ignores keys equal to pad_id.
// Training mode (loss=true): the masked-LM objective. Input "targets" i64[B, T] holds the
// original token at each masked (or randomly replaced / kept) position and -100 elsewhere;
// output "loss" is the mean cross-entropy over the positions whose target is not -100
// (ignore_index, default -100).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/config.h"

namespace kiln::models {

struct BertConfig : CommonConfig {
  int64_t seqLen = 16;
  int64_t nLayers = 2;
  int64_t typeVocab = 2;
  // BERT's choices: post-LN, learned positions, exact GELU (in the MLM head too), LayerNorm
  // eps 1e-12, MLM decoder tied to the embedding.
  BertConfig() {
    norm = nn::NormPlacement::Post;
    autoLayerNormEps = 1e-12;
  }
};

std::vector<ConfigKey<BertConfig>> bertKeys();
Expected<BertConfig> bertConfig(std::span<const Setting> settings);
Expected<ir::Graph> buildBert(const BertConfig &config);
Expected<ir::Graph> buildBert(std::span<const Setting> settings);
std::vector<std::string> describeBert();

} // namespace kiln::models
