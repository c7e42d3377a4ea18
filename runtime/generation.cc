// Generation on a forward program, or on prefill and decode programs with a KV cache (see
// generation.h).
#include "runtime/generation.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <span>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/sampling.h"
#include "support/rng.h"

namespace kiln::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A program's "tokens" input [B, length] and "logits" output [B, length, V].
struct TokenIo {
  const Symbol *tokens, *logits;
  int64_t rows, length, vocab;
};

Expected<TokenIo> tokenIo(const Program &p) {
  const Symbol *tokens = p.argument("tokens");
  const Symbol *logits = p.output("logits");
  if (!tokens || tokens->shape.size() != 2 || !logits || logits->shape.size() != 3 ||
      logits->shape[0] != tokens->shape[0] || logits->shape[1] != tokens->shape[1])
    return makeError("generation needs a \"tokens\" input [batch, length] and a \"logits\" "
                     "output [batch, length, vocab]; program @{} has not both",
                     p.name);
  return TokenIo{tokens, logits, tokens->shape[0], tokens->shape[1], logits->shape[2]};
}

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
      seq_[r] = tokenizer_.encode(prompts[r]);
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
  // of the row's stream, however the steps are run.
  void pick(size_t r, const HostTensor &logits, int64_t at, int64_t vocab) {
    row_.resize(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v)
      row_[static_cast<size_t>(v)] = static_cast<float>(logits.get(at + v));
    const auto k = static_cast<uint64_t>(seq_[r].size() - promptLen_[r]);
    const double u = rng::uniform(rng::mix64(o_.seed + 0x9e3779b97f4a7c15ull * (r + 1)), k);
    seq_[r].push_back(
        sampleToken(row_, tokenizer_.vocabSize(), o_.greedy, o_.temperature, o_.topK, o_.topP, u));
    ++generated_;
    done_[r] = static_cast<int64_t>(k + 1) >= o_.maxNew;
    if (!done_[r] && !o_.stop.empty()) {
      Expected<std::string> text = continuation(r);
      done_[r] = text && text->find(o_.stop) != std::string::npos;
    }
  }

  Expected<std::string> continuation(size_t r) const {
    return tokenizer_.decode(std::span<const int32_t>(seq_[r]).subspan(promptLen_[r]));
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

// A row's context after it gained a token: one longer, or if that would be longer than the
// window, its last window/2 tokens (what a full KV cache restarts from).
int64_t nextContext(int64_t context, int64_t window) {
  return context < window ? context + 1 : std::max<int64_t>(window / 2, 1);
}

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
        rows.pick(r, out, (static_cast<int64_t>(r) * window + context[r] - 1) * io->vocab,
                  io->vocab);
        context[r] = nextContext(context[r], window);
      }
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
  Expected<TokenIo> pre = tokenIo(prefill.program());
  if (!pre)
    return pre.error();
  Expected<TokenIo> step = tokenIo(decode.program());
  if (!step)
    return step.error();
  const Symbol *pos = decode.program().argument("pos");
  const int64_t rows = pre->rows, window = pre->length;
  if (step->rows != rows || step->length != 1 || step->vocab != pre->vocab || !pos ||
      pos->shape != std::vector<int64_t>{rows})
    return makeError("programs @{} and @{} are not the prefill and decode programs of one model: "
                     "expected tokens [{}, 1], pos [{}] and logits [{}, 1, {}] in the second",
                     prefill.program().name, decode.program().name, rows, rows, rows, pre->vocab);
  // Each cache: the decode state and the prefill output of its name, [B, ..., T, ...].
  std::vector<std::pair<const Symbol *, const Symbol *>> caches;
  for (const Symbol &s : decode.program().symbols) {
    if (s.kind != Symbol::Kind::State)
      continue;
    const Symbol *out = prefill.program().output(s.name);
    if (!out || out->shape != s.shape || out->dtype != s.dtype || s.shape.empty() ||
        s.shape[0] != rows)
      return makeError("the decode program's cache \"{}\" [{}] has no prefill output of its "
                       "name and shape",
                       s.name, fmt::join(s.shape, ","));
    caches.emplace_back(&s, out);
  }
  Rows batch(tokenizer, o);
  if (Status s = batch.start(prompts, *pre); !s)
    return s.error();
  Generated g;
  g.window = window, g.cached = true;
  // cached[r]: how many of row r's last tokens the cache holds, at positions 0..cached-1; the
  // row's newest token is not among them yet.
  std::vector<int64_t> cached(batch.size(), 0);
  HostTensor tokens(pre->tokens->dtype, pre->tokens->shape);
  HostTensor one(step->tokens->dtype, step->tokens->shape), at(pos->dtype, pos->shape);
  while (batch.anyActive()) {
    // Rows without a cache, or with a full one, run their last tokens through prefill.
    std::vector<size_t> fresh;
    std::vector<int64_t> len(batch.size(), 0);
    for (size_t r = 0; r < batch.size(); ++r)
      if (batch.active(r) && (cached[r] == 0 || cached[r] == window)) {
        fresh.push_back(r);
        len[r] = cached[r] == 0 ? std::min(window, static_cast<int64_t>(batch.tokens(r).size()))
                                : nextContext(cached[r], window);
      }
    if (!fresh.empty()) {
      const auto start = Clock::now();
      for (size_t r = 0; r < batch.size(); ++r) {
        const std::vector<int32_t> &s = batch.tokens(r);
        for (int64_t t = 0; t < window; ++t)
          tokens.setInt(static_cast<int64_t>(r) * window + t,
                        t < len[r] ? s[s.size() - static_cast<size_t>(len[r] - t)] : 0);
      }
      if (Status st = prefill.write(*pre->tokens, tokens); !st)
        return st.error();
      if (Status st = prefill.run(); !st)
        return st.error();
      for (const auto &[state, out] : caches) {
        const HostTensor from = prefill.read(*out);
        HostTensor into = decode.read(*state);
        const size_t rowBytes = static_cast<size_t>(from.bytes() / rows);
        for (size_t r : fresh)
          std::memcpy(into.raw().data() + r * rowBytes, from.raw().data() + r * rowBytes, rowBytes);
        if (Status st = decode.write(*state, into); !st)
          return st.error();
      }
      const HostTensor out = prefill.read(*pre->logits);
      for (size_t r : fresh) {
        cached[r] = len[r];
        g.prefillTokens += len[r];
        batch.pick(r, out, (static_cast<int64_t>(r) * window + len[r] - 1) * pre->vocab,
                   pre->vocab);
      }
      ++g.prefills;
      g.prefillSeconds += secondsSince(start);
    }
    // The other active rows decode their newest token at the next position.
    std::vector<size_t> stepping;
    for (size_t r = 0; r < batch.size(); ++r) {
      const bool run = batch.active(r) && std::find(fresh.begin(), fresh.end(), r) == fresh.end();
      one.setInt(static_cast<int64_t>(r), run ? batch.tokens(r).back() : 0);
      // A row that does not step writes at its next free position, which holds nothing yet
      // (a step writes its position before attending to it), or into a full cache that is
      // refilled before it is read again.
      at.setInt(static_cast<int64_t>(r), std::min(cached[r], window - 1));
      if (run)
        stepping.push_back(r);
    }
    if (stepping.empty())
      continue;
    const auto start = Clock::now();
    if (Status st = decode.write(*step->tokens, one); !st)
      return st.error();
    if (Status st = decode.write(*pos, at); !st)
      return st.error();
    if (Status st = decode.run(); !st)
      return st.error();
    const HostTensor out = decode.read(*step->logits);
    g.decodeTokens += static_cast<int64_t>(stepping.size());
    for (size_t r : stepping) {
      ++cached[r];
      batch.pick(r, out, static_cast<int64_t>(r) * pre->vocab, pre->vocab);
    }
    ++g.decodeSteps;
    g.decodeSeconds += secondsSince(start);
  }
  if (Status s = finish(batch, prompts.size(), g); !s)
    return s.error();
  return g;
}

std::string speedSummary(const Generated &g) {
  auto rate = [](double n, double s) { return n / std::max(s, 1e-9); };
  if (!g.cached)
    return fmt::format("generated {} tokens in {:.2f} s ({:.1f} tokens/s; no cache: every step "
                       "recomputes the window of {})",
                       g.tokens, g.decodeSeconds, rate(g.tokens, g.decodeSeconds), g.window);
  return fmt::format("prefill: {} prompt tokens in {:.3f} s ({:.0f} tokens/s, {} run{}); decode: "
                     "{} tokens in {:.2f} s ({:.1f} tokens/s, {} steps)",
                     g.prefillTokens, g.prefillSeconds, rate(g.prefillTokens, g.prefillSeconds),
                     g.prefills, g.prefills == 1 ? "" : "s", g.decodeTokens, g.decodeSeconds,
                     rate(g.decodeTokens, g.decodeSeconds), g.decodeSteps);
}

} // namespace kiln::runtime
