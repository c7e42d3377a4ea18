// The pieces that generation (generation.cc), beam search (beam_search.cc) and translation
// (translation.cc) share: a prompt's tokens and a continuation's text, a program's token input
// and logits, the KV-cached model (the prefill and decode programs of one model), and beam search
// over any model's next-token logits. Internal to the runtime: generation.h is the interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/executable.h"
#include "runtime/generation.h"
#include "runtime/host_tensor.h"
#include "runtime/tokenizer.h"
#include "support/status.h"

namespace kiln::runtime::gen {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A prompt as the model was trained to see text: the BOS its tokenizer's post-processor puts
// before a sequence (Llama's "<s>"; none for GPT-2's), then the prompt's tokens.
std::vector<int32_t> promptTokens(const Tokenizer &tokenizer, std::string_view prompt);

// The text that tokens `ids` add after `prompt` (its BOS and a final end-of-sequence token left
// out): what the whole decodes to past what the prompt decodes to. Not the continuation decoded
// alone: a SentencePiece decoder strips the leading space of what it decodes, which belongs
// between the prompt and the continuation ("Hello" + "▁there" is "Hello there").
Expected<std::string> generatedText(const Tokenizer &tokenizer, std::span<const int32_t> prompt,
                                    std::span<const int32_t> ids);

// Whether the text that `ids` add after `prompt` (generatedText) holds `stop`, given that it did
// not without the last id (generation stops at the first): only the last |stop| + 8 ids are
// decoded where that tells, so a long continuation costs no more per token than a short one.
bool holdsStop(const Tokenizer &tokenizer, std::span<const int32_t> prompt,
               std::span<const int32_t> ids, const std::string &stop);

// A next token's logits that hold a NaN: the forward pass overflowed (weights too large for f32),
// and any token chosen from them would be arbitrary. `where` names the sequence and token.
Error nanLogits(std::string_view where);

// A program's "tokens" input [B, length] and "logits" output [B, length, V].
struct TokenIo {
  const Symbol *tokens, *logits;
  int64_t rows, length, vocab;
};

Expected<TokenIo> tokenIo(const Program &p);

// A row's context after it gained a token: one longer, or if that would be longer than the
// window, its last window/2 tokens (what a full KV cache restarts from).
int64_t nextContext(int64_t context, int64_t window);

// The last n tokens of s.
inline std::span<const int32_t> lastTokens(const std::vector<int32_t> &s, int64_t n) {
  return std::span<const int32_t>(s).last(static_cast<size_t>(n));
}

// Row to[i] of `into` becomes row from[i] of `source` (rows: the leading dimension).
void copyRows(const HostTensor &source, std::span<const size_t> from, std::span<const size_t> to,
              HostTensor &into);

// Row r of the state `s` of `exe` becomes what row from[r] holds (beams following their parents).
Status reorderRows(Executable &exe, const Symbol &s, std::span<const size_t> from);

// A model's prefill and decode programs, checked to fit together, and what generation does with
// them: fill rows of the cache from contexts, step one token per row, reorder rows (beams).
class CachedModel {
public:
  static Expected<CachedModel> make(Executable &prefill, Executable &decode) {
    Expected<TokenIo> pre = tokenIo(prefill.program());
    if (!pre)
      return pre.error();
    Expected<TokenIo> step = tokenIo(decode.program());
    if (!step)
      return step.error();
    const Symbol *pos = decode.program().argument("pos");
    const int64_t rows = pre->rows;
    if (step->rows != rows || step->length != 1 || step->vocab != pre->vocab || !pos ||
        pos->shape != std::vector<int64_t>{rows})
      return makeError("programs @{} and @{} are not the prefill and decode programs of one "
                       "model: expected tokens [{}, 1], pos [{}] and logits [{}, 1, {}] in the "
                       "second",
                       prefill.program().name, decode.program().name, rows, rows, rows, pre->vocab);
    CachedModel m(prefill, decode, *pre, *step, pos);
    // Each cache: the decode state and the prefill output of its name, [B, ...].
    for (const Symbol &s : decode.program().symbols) {
      if (s.kind != Symbol::Kind::State)
        continue;
      const Symbol *out = prefill.program().output(s.name);
      if (!out || out->shape != s.shape || out->dtype != s.dtype || s.shape.empty() ||
          s.shape[0] != rows)
        return makeError("the decode program's cache \"{}\" [{}] has no prefill output of its "
                         "name and shape",
                         s.name, fmt::join(s.shape, ","));
      m.caches_.emplace_back(&s, out);
    }
    // ... and nothing else: the same caches and the same parameters in both.
    for (const Symbol &s : prefill.program().symbols) {
      const Symbol *other = decode.program().argument(s.name);
      const bool cache = s.kind == Symbol::Kind::Output && s.name != "logits";
      if ((cache || s.kind == Symbol::Kind::Param) &&
          (!other || other->kind != (cache ? Symbol::Kind::State : Symbol::Kind::Param) ||
           other->shape != s.shape || other->dtype != s.dtype))
        return makeError("programs @{} and @{} are not the prefill and decode programs of one "
                         "model: \"{}\" differs",
                         prefill.program().name, decode.program().name, s.name);
    }
    return m;
  }

  const TokenIo &io() const { return pre_; }
  int64_t window() const { return pre_.length; }

  // Runs each row's context (its tokens at positions 0.., at most the window; empty: idle)
  // through prefill and copies the caches of rows `fill` into the decode state. The logits
  // [B, T, V].
  Expected<HostTensor> prefill(const std::vector<std::span<const int32_t>> &contexts,
                               std::span<const size_t> fill) {
    for (size_t r = 0; r < contexts.size(); ++r)
      for (int64_t t = 0; t < window(); ++t)
        tokens_.setInt(static_cast<int64_t>(r) * window() + t,
                       t < static_cast<int64_t>(contexts[r].size()) ? contexts[r][t] : 0);
    if (Status st = prefill_.write(*pre_.tokens, tokens_); !st)
      return st.error();
    if (Status st = prefill_.run(); !st)
      return st.error();
    for (const auto &[state, out] : caches_) {
      HostTensor into = decode_.read(*state);
      copyRows(prefill_.read(*out), fill, fill, into);
      if (Status st = decode_.write(*state, into); !st)
        return st.error();
    }
    return prefill_.read(*pre_.logits);
  }

  // Runs token[r] at position pos[r] in every row; the logits [B, 1, V].
  Expected<HostTensor> step(std::span<const int64_t> token, std::span<const int64_t> pos) {
    for (size_t r = 0; r < token.size(); ++r)
      one_.setInt(static_cast<int64_t>(r), token[r]), at_.setInt(static_cast<int64_t>(r), pos[r]);
    if (Status st = decode_.write(*step_.tokens, one_); !st)
      return st.error();
    if (Status st = decode_.write(*pos_, at_); !st)
      return st.error();
    if (Status st = decode_.run(); !st)
      return st.error();
    return decode_.read(*step_.logits);
  }

  // Row r of every cache becomes what row from[r] holds.
  Status reorder(std::span<const size_t> from) {
    for (const auto &[state, out] : caches_)
      if (Status st = reorderRows(decode_, *state, from); !st)
        return st;
    return {};
  }

private:
  CachedModel(Executable &prefill, Executable &decode, const TokenIo &pre, const TokenIo &step,
              const Symbol *pos)
      : prefill_(prefill), decode_(decode), pre_(pre), step_(step), pos_(pos),
        tokens_(pre.tokens->dtype, pre.tokens->shape), one_(step.tokens->dtype, step.tokens->shape),
        at_(pos->dtype, pos->shape) {}

  Executable &prefill_, &decode_;
  TokenIo pre_, step_;
  const Symbol *pos_;
  std::vector<std::pair<const Symbol *, const Symbol *>> caches_;
  HostTensor tokens_, one_, at_;
};

// The next-token logits of the live beams: row r's at position `at` of logits [rows, length, V],
// over the ids [lo, hi) that may come next.
struct NextLogits {
  HostTensor logits;
  int64_t length = 1, at = 0;
  int64_t lo = 0, hi = 0;
  int64_t only = -1; // >= 0: the one token that may follow, its log p still over [lo, hi)
};

// A sequence in the search (its first tokens given) and its log-probability.
struct Hyp {
  std::vector<int32_t> seq;
  double logProb = 0;
  bool finished = false; // ended (EOS, the stop text), not cut off by the length
};

// Beam search, whatever the model: from `start`, up to `steps` times, next(live) runs the model
// for the live beams, each is extended by every allowed token and the best `width` are kept
// (follow(from) makes the model's state follow them: beam i is the old beam from[i], extended);
// a beam that done(beam) says is finished leaves the search; onProgress (if set) hears of each
// step. The finished and the live ones.
Expected<std::vector<Hyp>>
searchBeams(size_t width, int64_t steps, std::vector<int32_t> start,
            const std::function<Expected<NextLogits>(const std::vector<Hyp> &)> &next,
            const std::function<Status(std::span<const size_t>)> &follow,
            const std::function<bool(const Hyp &)> &done,
            const std::function<void(int64_t)> &onProgress);

// The beams of `hyps` (the tokens after the first `skip`, as `ids` makes them the tokenizer's; the
// text they add to `prompt`), best first: the finished ones before those the length cut off, each
// by the length-penalized score; at most `width`.
Expected<std::vector<Beam>>
rankBeams(const std::vector<Hyp> &hyps, size_t skip, double lengthPenalty, size_t width,
          const Tokenizer &tokenizer, std::span<const int32_t> prompt,
          const std::function<std::vector<int32_t>(std::span<const int32_t>)> &ids);

} // namespace kiln::runtime::gen
