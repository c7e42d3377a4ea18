// `kiln generate gpt --load CKPT --prompt TEXT [--prompt TEXT ...] --max-new N`: continues each
// prompt with tokens drawn from the model's next-token distribution -- greedy, or sampled with a
// temperature, top-k and top-p (nucleus) truncation from a seeded stream -- until --max-new tokens
// or the --stop text. Several prompts run as one batch.
//
// Each step runs the model's forward pass over a window of its sequence length: a row holds its
// context (the last seq_len tokens) from position 0, padded on the right, and the next token comes
// from the logits at the context's last position. Causal attention never lets a position see the
// ones after it, so the padding changes no result and a prompt gives the same continuation alone
// or in a batch. (Every step recomputes the whole window: a KV cache is to come.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/cli_util.h"

namespace kiln::tools {

struct GenerateArgs {
  std::string model, load, tokenizer, stop;
  std::vector<std::string> sets, prompts;
  int64_t maxNew = 64, topK = 0, maxMemory = 0;
  double temperature = 1.0, topP = 1.0;
  bool greedy = false;
  uint64_t seed = 0;
  BackendChoice backend;
};

CLI::App *addGenerateCommand(CLI::App &app, GenerateArgs &args);
void runGenerate(GenerateArgs &args);

} // namespace kiln::tools
