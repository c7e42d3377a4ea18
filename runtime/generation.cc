// Generation on a forward program, or on prefill and decode programs with a KV cache (see
// generation.h).
#include "runtime/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/sampling.h"
#include "runtime/tasks.h"
#include "support/rng.h"

namespace kiln::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A prompt as the model was trained to see text: the BOS its tokenizer's post-processor puts
// before a sequence (Llama's "<s>"; none for GPT-2's), then the prompt's tokens.
std::vector<int32_t> promptTokens(const Tokenizer &tokenizer, std::string_view prompt) {
  std::vector<int32_t> ids = tokenizer.encode(prompt);
  if (std::optional<int32_t> bos = tokenizer.bosId(); bos && !ids.empty())
    ids.insert(ids.begin(), *bos);
  return ids;
}

// Whether a continuation ends here: the tokenizer's end-of-sequence token (Llama's "</s>",
// GPT-2's "<|endoftext|>"), where Hugging Face's generate stops too.
bool endsSequence(const Tokenizer &tokenizer, int32_t token) {
  return tokenizer.eosId() == token;
}

// The text that tokens `ids` add after `prompt` (its BOS and a final end-of-sequence token left
// out): what the whole decodes to past what the prompt decodes to. Not the continuation decoded
// alone: a SentencePiece decoder strips the leading space of what it decodes, which belongs
// between the prompt and the continuation ("Hello" + "▁there" is "Hello there").
Expected<std::string> generatedText(const Tokenizer &tokenizer, std::span<const int32_t> prompt,
                                    std::span<const int32_t> ids) {
  if (!ids.empty() && endsSequence(tokenizer, ids.back()))
    ids = ids.first(ids.size() - 1);
  if (!prompt.empty() && tokenizer.bosId() == prompt.front())
    prompt = prompt.subspan(1);
  if (prompt.empty())
    return tokenizer.decode(ids);
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  all.insert(all.end(), ids.begin(), ids.end());
  Expected<std::string> head = tokenizer.decode(prompt), whole = tokenizer.decode(all);
  if (!head || !whole)
    return !head ? head : whole;
  if (whole->starts_with(*head))
    return whole->substr(head->size());
  return tokenizer.decode(ids); // (a prompt whose last bytes the continuation completes)
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
    done_[r] = static_cast<int64_t>(k + 1) >= o_.maxNew || endsSequence(tokenizer_, seq_[r].back());
    if (!done_[r] && !o_.stop.empty()) {
      Expected<std::string> text = continuation(r);
      done_[r] = text && text->find(o_.stop) != std::string::npos;
    }
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
    if (o.onProgress)
      o.onProgress(rows.generated());
  }
  g.decodeSeconds = secondsSince(start);
  g.decodeTokens = rows.generated();
  if (Status s = finish(rows, prompts.size(), g); !s)
    return s.error();
  return g;
}

namespace {

// Row to[i] of `into` becomes row from[i] of `source` (rows: the leading dimension).
void copyRows(const HostTensor &source, std::span<const size_t> from, std::span<const size_t> to,
              HostTensor &into) {
  const auto rowBytes = static_cast<size_t>(source.bytes() / source.shape().front());
  for (size_t i = 0; i < from.size(); ++i)
    std::memcpy(into.raw().data() + to[i] * rowBytes, source.raw().data() + from[i] * rowBytes,
                rowBytes);
}

// Row r of the state `s` of `exe` becomes what row from[r] holds (beams following their parents).
Status reorderRows(Executable &exe, const Symbol &s, std::span<const size_t> from) {
  std::vector<size_t> to(from.size());
  std::iota(to.begin(), to.end(), size_t{0});
  const HostTensor before = exe.read(s);
  HostTensor after = before;
  copyRows(before, from, to, after);
  return exe.write(s, after);
}

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

// The last n tokens of s.
std::span<const int32_t> lastTokens(const std::vector<int32_t> &s, int64_t n) {
  return std::span<const int32_t>(s).last(static_cast<size_t>(n));
}

// A beam extended by a token, with the log-probability of the whole.
struct Extension {
  double logProb;
  size_t beam;
  int32_t token;
};

// Better first: more likely, then from the earlier beam, then the lower token.
bool better(const Extension &a, const Extension &b) {
  if (a.logProb != b.logProb)
    return a.logProb > b.logProb;
  return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
}

// The next-token logits of the live beams: row r's at position `at` of logits [rows, length, V],
// over the ids [lo, hi) that may come next.
struct NextLogits {
  HostTensor logits;
  int64_t length = 1, at = 0;
  int64_t lo = 0, hi = 0;
};

// The best `keep` extensions, best first, of the beams of log-probabilities logProbs[r]: log p =
// the beam's + log softmax(logits)[v] over the ids [lo, hi). A beam's best `keep` are chosen
// first, so that the sort sees at most keep^2 of them however large V is.
std::vector<Extension> bestExtensions(const NextLogits &next, std::span<const double> logProbs,
                                      size_t keep) {
  const HostTensor &logits = next.logits;
  const int64_t stride = logits.shape().back();
  std::vector<Extension> all, beam;
  for (size_t r = 0; r < logProbs.size(); ++r) {
    const int64_t base = (static_cast<int64_t>(r) * next.length + next.at) * stride;
    double top = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t v = next.lo; v < next.hi; ++v)
      top = std::max(top, logits.get(base + v));
    for (int64_t v = next.lo; v < next.hi; ++v)
      sum += std::exp(logits.get(base + v) - top);
    const double logZ = top + std::log(sum);
    beam.clear();
    for (int64_t v = next.lo; v < next.hi; ++v) {
      const double lp = logits.get(base + v) - logZ;
      if (!std::isnan(lp))
        beam.push_back({logProbs[r] + lp, r, static_cast<int32_t>(v)});
    }
    const size_t n = std::min(keep, beam.size());
    std::nth_element(beam.begin(), beam.begin() + static_cast<std::ptrdiff_t>(n), beam.end(),
                     better);
    all.insert(all.end(), beam.begin(), beam.begin() + static_cast<std::ptrdiff_t>(n));
  }
  const size_t n = std::min(keep, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), better);
  all.resize(n);
  return all;
}

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
            const std::function<void(int64_t)> &onProgress) {
  std::vector<Hyp> live(1, Hyp{std::move(start), 0}), finished;
  for (int64_t t = 0; t < steps && !live.empty(); ++t) {
    Expected<NextLogits> out = next(live);
    if (!out)
      return out.error();
    std::vector<double> logProbs;
    for (const Hyp &h : live)
      logProbs.push_back(h.logProb);
    std::vector<Hyp> kept;
    std::vector<size_t> from;
    for (const Extension &c : bestExtensions(*out, logProbs, width)) {
      Hyp h{live[c.beam].seq, c.logProb};
      h.seq.push_back(c.token);
      if (done(h))
        h.finished = true, finished.push_back(std::move(h));
      else
        kept.push_back(std::move(h)), from.push_back(c.beam);
    }
    if (!kept.empty())
      if (Status st = follow(from); !st)
        return st.error();
    live = std::move(kept);
    if (onProgress)
      onProgress(t + 1);
  }
  for (Hyp &h : live)
    finished.push_back(std::move(h));
  return finished;
}

// The beams of `hyps` (the tokens after the first `skip`, as `ids` makes them the tokenizer's; the
// text they add to `prompt`), best first: the finished ones before those the length cut off, each
// by the length-penalized score; at most `width`.
Expected<std::vector<Beam>>
rankBeams(const std::vector<Hyp> &hyps, size_t skip, double lengthPenalty, size_t width,
          const Tokenizer &tokenizer, std::span<const int32_t> prompt,
          const std::function<std::vector<int32_t>(std::span<const int32_t>)> &ids) {
  std::vector<Beam> beams;
  for (const Hyp &h : hyps) {
    Beam b;
    b.tokens.assign(h.seq.begin() + static_cast<std::ptrdiff_t>(skip), h.seq.end());
    Expected<std::string> text = generatedText(tokenizer, prompt, ids(b.tokens));
    if (!text)
      return text.error();
    b.text = std::move(*text), b.logProb = h.logProb;
    b.score = h.logProb /
              std::pow(static_cast<double>(std::max<size_t>(b.tokens.size(), 1)), lengthPenalty);
    b.finished = h.finished;
    beams.push_back(std::move(b));
  }
  std::stable_sort(beams.begin(), beams.end(), [](const Beam &a, const Beam &b) {
    return a.finished != b.finished ? a.finished : a.score > b.score;
  });
  beams.resize(std::min(beams.size(), width));
  return beams;
}

} // namespace

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
        cached[r] = static_cast<int64_t>(contexts[r].size());
        g.prefillTokens += cached[r];
        batch.pick(r, *out, (static_cast<int64_t>(r) * window + cached[r] - 1) * vocab, vocab);
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
      batch.pick(r, *out, static_cast<int64_t>(r) * vocab, vocab);
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

Expected<std::vector<Beam>> beamSearch(Executable &prefill, Executable &decode,
                                       const Tokenizer &tokenizer, const std::string &prompt,
                                       const BeamOptions &o, Generated *stats) {
  Expected<CachedModel> model = CachedModel::make(prefill, decode);
  if (!model)
    return model.error();
  const TokenIo &io = model->io();
  const int64_t window = io.length, vocab = tokenizer.vocabSize();
  if (vocab > io.vocab)
    return makeError("the tokenizer's {} tokens do not fit the model's vocab of {}", vocab,
                     io.vocab);
  const std::vector<int32_t> start = promptTokens(tokenizer, prompt);
  if (start.empty())
    return makeError("the prompt is empty");
  Generated g;
  g.window = window, g.cached = true;
  int64_t cached = 0; // every live beam's cache holds its last `cached` tokens but the newest
  // The next-token logits of every live beam: from prefill when its context starts (or
  // restarts), else from a decoding step.
  auto next = [&](const std::vector<Hyp> &live) -> Expected<NextLogits> {
    const auto began = Clock::now();
    const auto rows = static_cast<size_t>(io.rows);
    if (cached != 0 && cached != window) {
      std::vector<int64_t> token(rows, 0), pos(rows, cached);
      for (size_t r = 0; r < live.size(); ++r)
        token[r] = live[r].seq.back();
      Expected<HostTensor> out = model->step(token, pos);
      if (!out)
        return out.error();
      ++cached; // the newest tokens are in the caches now
      ++g.decodeSteps, g.decodeTokens += static_cast<int64_t>(live.size());
      g.decodeSeconds += secondsSince(began);
      return NextLogits{std::move(*out), 1, 0, 0, vocab};
    }
    cached = cached == 0 ? std::min(window, static_cast<int64_t>(start.size()))
                         : nextContext(cached, window);
    std::vector<std::span<const int32_t>> contexts(rows);
    std::vector<size_t> fill;
    for (size_t r = 0; r < live.size(); ++r)
      contexts[r] = lastTokens(live[r].seq, cached), fill.push_back(r);
    Expected<HostTensor> out = model->prefill(contexts, fill);
    if (!out)
      return out.error();
    ++g.prefills, g.prefillTokens += cached * static_cast<int64_t>(live.size());
    g.prefillSeconds += secondsSince(began);
    return NextLogits{std::move(*out), window, cached - 1, 0, vocab};
  };
  // The caches follow their beams (a restarting context is refilled anyway).
  auto follow = [&](std::span<const size_t> from) {
    return cached < window ? model->reorder(from) : Status{};
  };
  auto done = [&](const Hyp &h) {
    if (h.seq.size() > start.size() && endsSequence(tokenizer, h.seq.back()))
      return true;
    if (o.stop.empty())
      return false;
    Expected<std::string> text =
        generatedText(tokenizer, start, std::span<const int32_t>(h.seq).subspan(start.size()));
    return text && text->find(o.stop) != std::string::npos;
  };
  Expected<std::vector<Hyp>> hyps =
      searchBeams(static_cast<size_t>(io.rows), o.maxNew, start, next, follow, done, o.onProgress);
  if (!hyps)
    return hyps.error();
  g.tokens = g.decodeTokens;
  if (stats)
    *stats = std::move(g);
  return rankBeams(
      *hyps, start.size(), o.lengthPenalty, static_cast<size_t>(io.rows), tokenizer, start,
      [](std::span<const int32_t> t) { return std::vector<int32_t>(t.begin(), t.end()); });
}

Expected<std::vector<Beam>> translate(Executable &encode, Executable &decode,
                                      const Tokenizer &tokenizer, const std::string &source,
                                      const BeamOptions &o, Generated *stats) {
  const Program &enc = encode.program(), &dec = decode.program();
  const Symbol *src = enc.argument("src"), *decSrc = dec.argument("src");
  const Symbol *tgt = dec.argument("tgt"), *pos = dec.argument("pos");
  const Symbol *logits = dec.output("logits");
  if (!src || src->shape.size() != 2 || !decSrc || decSrc->shape != src->shape || !tgt ||
      tgt->shape != std::vector<int64_t>{src->shape[0], 1} || !pos ||
      pos->shape != std::vector<int64_t>{src->shape[0]} || !logits || logits->shape.size() != 3)
    return makeError("programs @{} and @{} are not the encode and decode programs of one "
                     "encoder-decoder (models::buildTransformerCached)",
                     enc.name, dec.name);
  const int64_t rows = src->shape[0], srcLen = src->shape[1], vocab = logits->shape[2];
  const int64_t length = pos->range > 0 ? pos->range : 1; // the decoder's cache: tgt_len
  const int64_t textVocab = tokenizer.vocabSize();
  if (textVocab + kFirstContent > vocab)
    return makeError("the tokenizer's {} tokens and 3 special ids do not fit the model's vocab "
                     "of {}",
                     textVocab, vocab);
  std::vector<int32_t> ids = tokenizer.encode(source);
  if (ids.empty())
    return makeError("the source is empty");
  if (static_cast<int64_t>(ids.size()) > srcLen)
    return makeError("the source has {} tokens, but the model reads at most {} (src_len)",
                     ids.size(), srcLen);
  // The source in every row (the beams share it), shifted past the special ids, padded.
  Generated g;
  g.window = length, g.cached = true;
  const auto began = Clock::now();
  HostTensor in(src->dtype, src->shape);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t t = 0; t < ids.size(); ++t)
      in.setInt(r * srcLen + static_cast<int64_t>(t), ids[t] + kFirstContent);
  if (Status st = encode.write(*src, in); !st)
    return st.error();
  if (Status st = encode.run(); !st)
    return st.error();
  if (Status st = decode.write(*decSrc, in); !st)
    return st.error();
  for (const Symbol &s : enc.symbols)
    if (s.kind == Symbol::Kind::Output)
      if (Status st = decode.write(s.name, encode.read(s)); !st)
        return makeError("the decode program does not take the encoder's \"{}\": {}", s.name,
                         st.error().message);
  g.prefills = 1, g.prefillTokens = static_cast<int64_t>(ids.size());
  g.prefillSeconds = secondsSince(began);
  // Decoding from BOS at position 0, a token per step, until EOS or the cache is full.
  std::vector<const Symbol *> caches;
  for (const Symbol &s : dec.symbols)
    if (s.kind == Symbol::Kind::State)
      caches.push_back(&s);
  HostTensor token(tgt->dtype, tgt->shape), at(pos->dtype, pos->shape);
  int64_t step = 0;
  auto next = [&](const std::vector<Hyp> &live) -> Expected<NextLogits> {
    const auto t0 = Clock::now();
    for (int64_t r = 0; r < rows; ++r) {
      const size_t row = static_cast<size_t>(r);
      token.setInt(r, row < live.size() ? live[row].seq.back() : kPad);
      at.setInt(r, step);
    }
    if (Status st = decode.write(*tgt, token); !st)
      return st.error();
    if (Status st = decode.write(*pos, at); !st)
      return st.error();
    if (Status st = decode.run(); !st)
      return st.error();
    ++step, ++g.decodeSteps, g.decodeTokens += static_cast<int64_t>(live.size());
    g.decodeSeconds += secondsSince(t0);
    return NextLogits{decode.read(*logits), 1, 0, kEos, kFirstContent + textVocab};
  };
  auto follow = [&](std::span<const size_t> from) -> Status {
    for (const Symbol *s : caches)
      if (Status st = reorderRows(decode, *s, from); !st)
        return st;
    return {};
  };
  auto done = [](const Hyp &h) { return h.seq.back() == kEos; };
  const int64_t steps = std::min(o.maxNew + 1, length); // the tokens and EOS
  Expected<std::vector<Hyp>> hyps =
      searchBeams(static_cast<size_t>(rows), steps, {static_cast<int32_t>(kBos)}, next, follow,
                  done, o.onProgress);
  if (!hyps)
    return hyps.error();
  g.tokens = g.decodeTokens;
  if (stats)
    *stats = std::move(g);
  // The text of the tokens between BOS and EOS.
  return rankBeams(*hyps, 1, o.lengthPenalty, static_cast<size_t>(rows), tokenizer, {},
                   [](std::span<const int32_t> t) {
                     std::vector<int32_t> out;
                     for (int32_t id : t)
                       if (id >= kFirstContent)
                         out.push_back(id - static_cast<int32_t>(kFirstContent));
                     return out;
                   });
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

std::string beamsText(const std::vector<Beam> &beams, const std::string &before) {
  std::string out;
  for (size_t i = 0; i < beams.size(); ++i)
    out += fmt::format("--- beam {}: log p {:.4f}, score {:.4f}\n{}{}\n", i + 1, beams[i].logProb,
                       beams[i].score, before, beams[i].text);
  return out;
}

} // namespace kiln::runtime
