// Generation on a forward program, or on prefill and decode programs with a KV cache (see
// generation.h); beam search is in beam_search.cc, translation in translation.cc.
#include "runtime/generation.h"

#include <algorithm>
#include <cmath>
#include <span>

#include <fmt/format.h>

#include "runtime/generation_parts.h"
#include "runtime/sampling.h"
#include "support/rng.h"

namespace kiln::runtime {

using namespace gen;

namespace {

// The batch's rows: the tokens so far and the choice of each next one.
class Rows {
public:
  Rows(const Tokenizer &tokenizer, const GenerateOptions &o) : tokenizer_(tokenizer), o_(o) {}

  Status start(const std::vector<std::string> &prompts, const TokenIo &io) {
    if (static_cast<int64_t>(prompts.size()) > io.rows)
      return makeError("{} prompts, but the model runs {} rows at a time", prompts.size(), io.rows);
    if (tokenizer_.vocabSize() > io.vocab)
      return makeError("the tokenizer's {} tokens do not fit the model's vocab of {}",
                       tokenizer_.vocabSize(), io.vocab);
    const auto rows = static_cast<size_t>(io.rows);
    seq_.assign(rows, {}), promptLen_.assign(rows, 0), done_.assign(rows, true);
    for (size_t r = 0; r < prompts.size(); ++r) {
      seq_[r] = promptTokens(tokenizer_, prompts[r]);
      if (seq_[r].empty())
        return makeError("prompt {} is empty", r + 1);
      promptLen_[r] = seq_[r].size(), done_[r] = o_.maxNew <= 0;
    }
    return {};
  }

  size_t size() const { return seq_.size(); }
  bool active(size_t r) const { return !done_[r]; }
  bool anyActive() const { return std::find(done_.begin(), done_.end(), false) != done_.end(); }
  const std::vector<int32_t> &tokens(size_t r) const { return seq_[r]; }
  int64_t generated() const { return generated_; }

  // Row r's next token from logits[at, at + vocab); the row is done after max_new tokens or
  // once its continuation holds the stop text. The k-th token of a row draws the k-th number
  // of the row's stream, however the steps are run. Error: a NaN or +inf logit (the forward
  // pass overflowed: weights too large for f32), which would pick an arbitrary token.
  Status pick(size_t r, const HostTensor &logits, int64_t at, int64_t vocab) {
    row_.resize(static_cast<size_t>(vocab));
    const auto k = static_cast<uint64_t>(seq_[r].size() - promptLen_[r]);
    for (int64_t v = 0; v < vocab; ++v) {
      row_[static_cast<size_t>(v)] = static_cast<float>(logits.get(at + v));
      if (std::isnan(row_[static_cast<size_t>(v)]) ||
          row_[static_cast<size_t>(v)] == std::numeric_limits<float>::infinity())
        return nanLogits(fmt::format("prompt {}, token {}", r + 1, k + 1));
    }
    const double u = rng::uniform(rng::mix64(o_.seed + 0x9e3779b97f4a7c15ull * (r + 1)), k);
    seq_[r].push_back(
        sampleToken(row_, tokenizer_.vocabSize(), o_.greedy, o_.temperature, o_.topK, o_.topP, u));
    ++generated_;
    done_[r] = static_cast<int64_t>(k + 1) >= o_.maxNew || tokenizer_.endsText(seq_[r].back());
    if (!done_[r] && !o_.stop.empty()) {
      const std::span<const int32_t> seq(seq_[r]);
      done_[r] =
          holdsStop(tokenizer_, seq.first(promptLen_[r]), seq.subspan(promptLen_[r]), o_.stop);
    }
    return {};
  }

  Expected<std::string> continuation(size_t r) const {
    const std::span<const int32_t> seq(seq_[r]);
    return generatedText(tokenizer_, seq.first(promptLen_[r]), seq.subspan(promptLen_[r]));
  }

private:
  const Tokenizer &tokenizer_;
  const GenerateOptions &o_;
  std::vector<std::vector<int32_t>> seq_;
  std::vector<size_t> promptLen_;
  std::vector<bool> done_; // rows without a prompt stay done
  std::vector<float> row_;
  int64_t generated_ = 0;
};

Status finish(const Rows &rows, size_t prompts, Generated &g) {
  for (size_t r = 0; r < prompts; ++r) {
    Expected<std::string> text = rows.continuation(r);
    if (!text)
      return text.error();
    g.continuations.push_back(std::move(*text));
  }
  g.tokens = rows.generated();
  return {};
}

} // namespace

Expected<Generated> generate(Executable &exe, const Tokenizer &tokenizer,
                             const std::vector<std::string> &prompts, const GenerateOptions &o) {
  Expected<TokenIo> io = tokenIo(exe.program());
  if (!io)
    return io.error();
  Rows rows(tokenizer, o);
  if (Status s = rows.start(prompts, *io); !s)
    return s.error();
  const int64_t window = io->length;
  HostTensor in(io->tokens->dtype, io->tokens->shape);
  Generated g;
  g.window = window;
  std::vector<int64_t> context(rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    context[r] = std::min(window, static_cast<int64_t>(rows.tokens(r).size()));
  const auto start = Clock::now();
  while (rows.anyActive()) {
    // Each row: its context from position 0, zeros after it.
    for (size_t r = 0; r < rows.size(); ++r) {
      const std::vector<int32_t> &s = rows.tokens(r);
      for (int64_t t = 0; t < window; ++t)
        in.setInt(static_cast<int64_t>(r) * window + t,
                  t < context[r] ? s[s.size() - static_cast<size_t>(context[r] - t)] : 0);
    }
    if (Status st = exe.write(*io->tokens, in); !st)
      return st.error();
    if (Status st = exe.run(); !st)
      return st.error();
    ++g.decodeSteps;
    const HostTensor out = exe.read(*io->logits);
    for (size_t r = 0; r < rows.size(); ++r)
      if (rows.active(r)) {
        if (Status st = rows.pick(
                r, out, (static_cast<int64_t>(r) * window + context[r] - 1) * io->vocab, io->vocab);
            !st)
          return st.error();
        context[r] = nextContext(context[r], window);
      }
    if (o.onProgress)
      o.onProgress(rows.generated());
  }
  g.decodeSeconds = secondsSince(start);
  g.decodeTokens = rows.generated();
  if (Status s = finish(rows, prompts.size(), g); !s)
    return s.error();
  return g;
}

Expected<Generated> generateCached(Executable &prefill, Executable &decode,
                                   const Tokenizer &tokenizer,
                                   const std::vector<std::string> &prompts,
                                   const GenerateOptions &o) {
  Expected<CachedModel> model = CachedModel::make(prefill, decode);
  if (!model)
    return model.error();
  const int64_t window = model->window(), vocab = model->io().vocab;
  Rows batch(tokenizer, o);
  if (Status s = batch.start(prompts, model->io()); !s)
    return s.error();
  Generated g;
  g.window = window, g.cached = true;
  // cached[r]: how many of row r's last tokens the cache holds, at positions 0..cached-1; the
  // row's newest token is not among them yet.
  std::vector<int64_t> cached(batch.size(), 0);
  while (batch.anyActive()) {
    // Rows without a cache, or with a full one, run their last tokens through prefill.
    std::vector<size_t> fresh;
    std::vector<std::span<const int32_t>> contexts(batch.size());
    for (size_t r = 0; r < batch.size(); ++r)
      if (batch.active(r) && (cached[r] == 0 || cached[r] == window)) {
        fresh.push_back(r);
        const int64_t n = cached[r] == 0
                              ? std::min(window, static_cast<int64_t>(batch.tokens(r).size()))
                              : nextContext(cached[r], window);
        contexts[r] = lastTokens(batch.tokens(r), n);
      }
    if (!fresh.empty()) {
      const auto start = Clock::now();
      Expected<HostTensor> out = model->prefill(contexts, fresh);
      if (!out)
        return out.error();
      for (size_t r : fresh) {
        (cached[r] == 0 ? g.prefillTokens : g.refillTokens) +=
            static_cast<int64_t>(contexts[r].size());
        cached[r] = static_cast<int64_t>(contexts[r].size());
        if (Status st = batch.pick(
                r, *out, (static_cast<int64_t>(r) * window + cached[r] - 1) * vocab, vocab);
            !st)
          return st.error();
      }
      ++g.prefills;
      g.prefillSeconds += secondsSince(start);
    }
    // The other active rows decode their newest token at the next position. A row that does
    // not step writes at its next free position, which holds nothing yet (a step writes its
    // position before attending to it), or into a full cache that is refilled before it is
    // read again.
    std::vector<size_t> stepping;
    std::vector<int64_t> token(batch.size(), 0), pos(batch.size());
    for (size_t r = 0; r < batch.size(); ++r) {
      pos[r] = std::min(cached[r], window - 1);
      if (batch.active(r) && std::find(fresh.begin(), fresh.end(), r) == fresh.end())
        stepping.push_back(r), token[r] = batch.tokens(r).back();
    }
    if (stepping.empty())
      continue;
    const auto start = Clock::now();
    Expected<HostTensor> out = model->step(token, pos);
    if (!out)
      return out.error();
    g.decodeTokens += static_cast<int64_t>(stepping.size());
    for (size_t r : stepping) {
      ++cached[r];
      if (Status st = batch.pick(r, *out, static_cast<int64_t>(r) * vocab, vocab); !st)
        return st.error();
    }
    ++g.decodeSteps;
    g.decodeSeconds += secondsSince(start);
    if (o.onProgress)
      o.onProgress(batch.generated());
  }
  if (Status s = finish(batch, prompts.size(), g); !s)
    return s.error();
  return g;
}

std::string promptsText(const std::vector<std::string> &prompts, const Generated &g) {
  std::string out;
  for (size_t r = 0; r < prompts.size(); ++r)
    out += fmt::format("--- prompt {}\n{}{}\n", r + 1, prompts[r], g.continuations[r]);
  return out;
}

std::string speedSummary(const Generated &g) {
  auto rate = [](double n, double s) { return n / std::max(s, 1e-9); };
  if (!g.cached)
    return fmt::format("generated {} tokens in {:.2f} s ({:.1f} tokens/s; no cache: every step "
                       "recomputes the window of {})",
                       g.tokens, g.decodeSeconds, rate(g.tokens, g.decodeSeconds), g.window);
  const std::string refilled =
      g.refillTokens ? fmt::format(" and {} of contexts restarted past the window of {}",
                                   g.refillTokens, g.window)
                     : "";
  const int64_t prefilled = g.prefillTokens + g.refillTokens;
  return fmt::format("prefill: {} prompt tokens{} in {:.3f} s ({:.0f} tokens/s, {} run{}); "
                     "decode: {} tokens in {:.2f} s ({:.1f} tokens/s, {} steps)",
                     g.prefillTokens, refilled, g.prefillSeconds, rate(prefilled, g.prefillSeconds),
                     g.prefills, g.prefills == 1 ? "" : "s", g.decodeTokens, g.decodeSeconds,
                     rate(g.decodeTokens, g.decodeSeconds), g.decodeSteps);
}

} // namespace kiln::runtime
