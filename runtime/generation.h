// Text generation on a decoder's forward program (an Executable with a "tokens" input [B, T] and
// a "logits" output [B, T, V]): each prompt in a batch row continues with tokens chosen by
// runtime/sampling.h until max_new tokens or the stop text. Each step runs the forward pass over
// a window of T tokens: a row holds its context (its last T tokens) from position 0, padded on
// the right, and the next token comes from the logits at the context's last position. Causal
// attention never lets a position see later ones, so the padding changes no result and a prompt
// continues the same alone or in a batch. (Every step recomputes the window: no KV cache yet.)
// What `kiln generate` and a standalone executable's `generate` run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/executable.h"
#include "runtime/tokenizer.h"
#include "support/status.h"

namespace kiln::runtime {

struct GenerateOptions {
  int64_t maxNew = 64;
  bool greedy = false;
  double temperature = 1.0, topP = 1.0;
  int64_t topK = 0;
  uint64_t seed = 0; // row r samples from the stream of (seed, r)
  std::string stop;  // "": none
};

struct Generated {
  std::vector<std::string> continuations; // per prompt, without it
  int64_t tokens = 0;                     // generated in all
  int64_t window = 0;                     // the model's T
  double seconds = 0;
};

// Errors: a program without the tokens input or logits output, more prompts than rows, a
// tokenizer with more tokens than the model's vocabulary, an empty prompt.
Expected<Generated> generate(Executable &exe, const Tokenizer &tokenizer,
                             const std::vector<std::string> &prompts, const GenerateOptions &o);

} // namespace kiln::runtime
