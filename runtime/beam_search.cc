// Beam search for one prompt on a model's prefill and decode programs (see generation.h).
#include <algorithm>

#include <fmt/format.h>

#include "runtime/generation.h"
#include "runtime/generation_parts.h"

namespace kiln::runtime {

using namespace gen;

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
    const bool refill = cached != 0;
    cached =
        refill ? nextContext(cached, window) : std::min(window, static_cast<int64_t>(start.size()));
    std::vector<std::span<const int32_t>> contexts(rows);
    std::vector<size_t> fill;
    for (size_t r = 0; r < live.size(); ++r)
      contexts[r] = lastTokens(live[r].seq, cached), fill.push_back(r);
    Expected<HostTensor> out = model->prefill(contexts, fill);
    if (!out)
      return out.error();
    ++g.prefills;
    (refill ? g.refillTokens : g.prefillTokens) += cached * static_cast<int64_t>(live.size());
    g.prefillSeconds += secondsSince(began);
    return NextLogits{std::move(*out), window, cached - 1, 0, vocab};
  };
  // The caches follow their beams (a restarting context is refilled anyway).
  auto follow = [&](std::span<const size_t> from) {
    return cached < window ? model->reorder(from) : Status{};
  };
  auto done = [&](const Hyp &h) {
    if (h.seq.size() > start.size() && tokenizer.endsText(h.seq.back()))
      return true;
    return !o.stop.empty() &&
           holdsStop(tokenizer, start, std::span<const int32_t>(h.seq).subspan(start.size()),
                     o.stop);
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

std::string beamsText(const std::vector<Beam> &beams, const std::string &before) {
  std::string out;
  for (size_t i = 0; i < beams.size(); ++i)
    out += fmt::format("--- beam {}: log p {:.4f}, score {:.4f}{}\n{}{}\n", i + 1, beams[i].logProb,
                       beams[i].score,
                       beams[i].finished ? "" : " (cut off by the length: not finished)", before,
                       beams[i].text);
  return out;
}

} // namespace kiln::runtime
