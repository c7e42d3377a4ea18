// `kiln attention gpt|bert --load CKPT --text TEXT [--layer L] [--head H] -o att.png`: draws
// the attention probabilities a trained model computes on a text -- one heatmap per head of a
// layer, the text's tokens along both axes (rows: queries, columns: keys). The maps are outputs
// of the model's own forward graph (its attentions' probes, Builder::setProbing), run as batch
// 1 on any backend, so the picture shows what the compiled model computes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/cli_util.h"

namespace kiln::tools {

struct AttentionArgs {
  std::string model, load, tokenizer, text, out;
  std::vector<std::string> sets;
  int64_t layer = -1, head = -1; // -1: the last layer, every head
  int64_t maxMemory = 0;
  BackendChoice backend;
};

CLI::App *addAttentionCommand(CLI::App &app, AttentionArgs &args);
void runAttention(AttentionArgs &args);

} // namespace kiln::tools
