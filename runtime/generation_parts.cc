// The shared pieces of generation, beam search and translation (see generation_parts.h).
#include "runtime/generation_parts.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::runtime::gen {

// A prompt as the model was trained to see text: the BOS its tokenizer's post-processor puts
// before a sequence (Llama's "<s>"; none for GPT-2's), then the prompt's tokens.
std::vector<int32_t> promptTokens(const Tokenizer &tokenizer, std::string_view prompt) {
  std::vector<int32_t> ids = tokenizer.encode(prompt);
  if (std::optional<int32_t> bos = tokenizer.bosId(); bos && !ids.empty())
    ids.insert(ids.begin(), *bos);
  return ids;
}

// The text that tokens `ids` add after `prompt` (its BOS and a final end-of-sequence token left
// out): what the whole decodes to past what the prompt decodes to. Not the continuation decoded
// alone: a SentencePiece decoder strips the leading space of what it decodes, which belongs
// between the prompt and the continuation ("Hello" + "▁there" is "Hello there").
Expected<std::string> generatedText(const Tokenizer &tokenizer, std::span<const int32_t> prompt,
                                    std::span<const int32_t> ids) {
  if (!ids.empty() && tokenizer.endsText(ids.back()))
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

bool holdsStop(const Tokenizer &tokenizer, std::span<const int32_t> prompt,
               std::span<const int32_t> ids, const std::string &stop) {
  // A new occurrence ends in the last id's text, or in the at most 3 bytes before it that the id
  // completes as UTF-8 (a SentencePiece run of byte tokens), and spans |stop| bytes, which are at
  // most |stop| ids' (each id's text is a byte or more). The tail's first few ids may decode
  // otherwise than in the whole (a run of byte tokens cut, a leading space stripped), so it
  // reaches 8 ids further. A tail that holds it is checked in the whole (no false find).
  if (const size_t tail = stop.size() + 8; ids.size() > tail)
    if (Expected<std::string> end = tokenizer.decode(ids.last(tail));
        end && end->find(stop) == std::string::npos)
      return false;
  Expected<std::string> text = generatedText(tokenizer, prompt, ids);
  return text && text->find(stop) != std::string::npos;
}

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

// A row's context after it gained a token: one longer, or if that would be longer than the
// window, its last window/2 tokens (what a full KV cache restarts from).
int64_t nextContext(int64_t context, int64_t window) {
  return context < window ? context + 1 : std::max<int64_t>(window / 2, 1);
}

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

Error nanLogits(std::string_view where) {
  return makeError("{}: the model's logits are NaN or infinite (its forward pass overflowed: are "
                   "the weights finite and of a sensible size?)",
                   where);
}

namespace {

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

// The best `keep` extensions, best first, of the beams of log-probabilities logProbs[r]: log p =
// the beam's + log softmax(logits)[v] over the ids [lo, hi). A beam's best `keep` are chosen
// first, so that the sort sees at most keep^2 of them however large V is.
Expected<std::vector<Extension>> bestExtensions(const NextLogits &next,
                                                std::span<const double> logProbs, size_t keep) {
  const HostTensor &logits = next.logits;
  const int64_t stride = logits.shape().back();
  std::vector<Extension> all, beam;
  for (size_t r = 0; r < logProbs.size(); ++r) {
    const int64_t base = (static_cast<int64_t>(r) * next.length + next.at) * stride;
    double top = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t v = next.lo; v < next.hi; ++v) {
      if (std::isnan(logits.get(base + v)))
        return nanLogits(fmt::format("beam {}", r + 1));
      top = std::max(top, logits.get(base + v));
    }
    // (+inf, or every logit -inf: the softmax is NaN, and the beam would vanish from the search.)
    if (std::isinf(top))
      return nanLogits(fmt::format("beam {}", r + 1));
    for (int64_t v = next.lo; v < next.hi; ++v)
      sum += std::exp(logits.get(base + v) - top);
    const double logZ = top + std::log(sum);
    beam.clear();
    for (int64_t v = next.lo; v < next.hi; ++v) {
      if (next.only >= 0 && v != next.only)
        continue;
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

} // namespace

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
    Expected<std::vector<Extension>> best = bestExtensions(*out, logProbs, width);
    if (!best)
      return best.error();
    for (const Extension &c : *best) {
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

} // namespace kiln::runtime::gen
