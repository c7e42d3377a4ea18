// `kiln generate gpt --load CKPT --prompt TEXT [--prompt TEXT ...] --max-new N`: continues each
// prompt with tokens drawn from the model's next-token distribution -- greedy, or sampled with a
// temperature, top-k and top-p (nucleus) truncation from a seeded stream -- until --max-new tokens
// or the --stop text. Several prompts run as one batch.
//
// --beam N searches N beams for the most likely continuation of one prompt instead.
// The prompts run through a prefill pass that fills a KV cache (again when a context outgrows
// the window and restarts), then each step runs one token per row (runtime/generation.h);
// --no-cache recomputes the whole window at every step instead (the reference the cache is tested
// against). Rows are right-padded with positions of their own, so a prompt gives the same
// continuation alone or in a batch.
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
  int64_t maxNew = 64, topK = 0, maxMemory = 0, beam = 0;
  double temperature = 1.0, topP = 1.0, lengthPenalty = 1.0;
  bool greedy = false, noCache = false;
  uint64_t seed = 0;
  BackendChoice backend;
  std::string precision = "f32";
};

CLI::App *addGenerateCommand(CLI::App &app, GenerateArgs &args);
void runGenerate(GenerateArgs &args);

// `kiln translate transformer --load CKPT --src TEXT [--beam N]`: the source through the
// encoder once, then the decoder a token per step with a self-attention cache and the memory's
// keys and values computed once (runtime::translate); greedy, or the beams best first.
struct TranslateArgs {
  std::string model, load, tokenizer, src;
  std::vector<std::string> sets;
  int64_t maxNew = 64, beam = 1, maxMemory = 0;
  double lengthPenalty = 1.0;
  BackendChoice backend;
  std::string precision = "f32";
};

CLI::App *addTranslateCommand(CLI::App &app, TranslateArgs &args);
void runTranslate(TranslateArgs &args);

} // namespace kiln::tools
