// Text generation with a decoder: each prompt in a batch row continues with tokens chosen by
// runtime/sampling.h until max_new tokens or the stop text. A row's next token comes from the
// logits at the last position of its context: at first its last T tokens (T the model's
// length); each step appends the new token, and a context that would outgrow T restarts from
// its last T/2 tokens. Two ways to compute it, equal token for token up to rounding (the cached
// step sums in other orders: attention over the cache, products of few rows; two candidates
// within rounding of each other could swap):
//  - `generate` on a forward program (a "tokens" input [B, T], a "logits" output [B, T, V])
//    runs every step over each row's whole context, from position 0;
//  - `generateCached` on a prefill and a decode program (models::buildGptCached) keeps each
//    layer's keys and values: a context runs once through prefill, whose caches go into the
//    decode program's state, then each step runs one token per row at the row's next position
//    (and a context that restarts runs through prefill again).
// Rows are right-padded and every row has its own positions, so under causal attention padding
// never reaches a real token: a prompt continues the same alone or in a batch (bit for bit while
// the batch has at most 4 rows, see kernels::gemm; else up to rounding). Rows without a
// prompt stay idle. What `kiln generate` and a standalone executable's `generate` run.
#pragma once

#include <cstdint>
#include <functional>
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
  // Called after each step with the tokens generated so far (a progress bar), if set.
  std::function<void(int64_t tokens)> onProgress;
};

struct Generated {
  std::vector<std::string> continuations; // per prompt, without it
  int64_t tokens = 0;                     // generated in all
  int64_t window = 0;                     // the model's T
  // Cached: the prefill runs (the prompt tokens they took, the tokens of windows they refilled
  // past the model's T, time) and the decode steps (the tokens they chose, time); uncached: every
  // step is a decode step.
  bool cached = false;
  int64_t prefills = 0, prefillTokens = 0, refillTokens = 0, decodeSteps = 0, decodeTokens = 0;
  double prefillSeconds = 0, decodeSeconds = 0;
};

// Beam search for one prompt on a model's prefill and decode programs: a beam per row keeps
// the most likely continuations so far (the sum of their tokens' log-probabilities), each step
// extends every beam by every token of the tokenizer and keeps the best `rows` of them (ties:
// the earlier beam, then the lower token), for max_new tokens; a beam whose text holds the stop
// text is finished early. Beams rank by logp / tokens^length_penalty, finished ones first.
// Log-probabilities are of the softmax over the tokenizer's tokens (the model's vocabulary may have
// more). Beam 1 is greedy decoding.
struct BeamOptions {
  int64_t width = 0; // beams (translate: at most the decode program's rows; 0: one a row)
  int64_t maxNew = 64;
  double lengthPenalty = 1.0;
  std::string stop; // "": none
  // Called after each step with the steps done (a progress bar), if set.
  std::function<void(int64_t steps)> onProgress;
};

struct Beam {
  std::string text; // the continuation
  std::vector<int32_t> tokens;
  double logProb = 0, score = 0; // score: the length-penalized log-probability
  bool finished = false;         // ended (EOS, the stop text) rather than cut off by the length
};

// The beams best first, and the timing in `stats`. Errors as generateCached's.
Expected<std::vector<Beam>> beamSearch(Executable &prefill, Executable &decode,
                                       const Tokenizer &tokenizer, const std::string &prompt,
                                       const BeamOptions &o, Generated *stats = nullptr);

// Translation with an encoder-decoder's encode and decode programs
// (models::buildTransformerCached): the source runs through the encoder once, into the memory
// keys and values of every decoder layer; then the decoder runs a token per step from BOS with
// its self-attention cache, `width` beams (beam search as above; at most the programs' rows, a
// beam per row, the rest idle; one: greedy), until EOS, max_new tokens or the cache's tgt_len (a
// beam that reached either is not finished: after max_new tokens only EOS may follow). Ids: the
// tokenizer's + 3 (0 pad, 1 BOS, 2 EOS: runtime/tasks.h, as task pairs trains them); the
// log-probabilities are of the softmax over EOS and the tokenizer's ids. The beams best first,
// their text without BOS and EOS. Errors: programs that do not fit, a source that is empty or
// longer than src_len, a tokenizer larger than the vocabulary.
Expected<std::vector<Beam>> translate(Executable &encode, Executable &decode,
                                      const Tokenizer &tokenizer, const std::string &source,
                                      const BeamOptions &o, Generated *stats = nullptr);

// One line on the speed: prompt tokens/s of prefill and generated tokens/s of decoding.
std::string speedSummary(const Generated &g);

// The beams as kiln generate, kiln translate and a standalone executable print them: per beam a
// line "--- beam i: log p L, score S", then `before` and its text.
std::string beamsText(const std::vector<Beam> &beams, const std::string &before);
// The prompts continued as kiln generate and a standalone executable print them: per prompt a
// line "--- prompt i", then the prompt and its continuation (g.continuations).
std::string promptsText(const std::vector<std::string> &prompts, const Generated &g);

// Errors: a program without the tokens input or logits output, more prompts than rows, a
// tokenizer with more tokens than the model's vocabulary, an empty prompt.
Expected<Generated> generate(Executable &exe, const Tokenizer &tokenizer,
                             const std::vector<std::string> &prompts, const GenerateOptions &o);

// The same with a KV cache. Errors as above, and programs that do not fit together (shapes of
// tokens, pos, logits; a decode state without a prefill output of its name and shape).
Expected<Generated> generateCached(Executable &prefill, Executable &decode,
                                   const Tokenizer &tokenizer,
                                   const std::vector<std::string> &prompts,
                                   const GenerateOptions &o);

} // namespace kiln::runtime
