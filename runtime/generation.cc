// Generation on a forward program (see generation.h).
#include "runtime/generation.h"

#include <algorithm>
#include <chrono>
#include <span>

#include "runtime/sampling.h"
#include "support/rng.h"

namespace kiln::runtime {

Expected<Generated> generate(Executable &exe, const Tokenizer &tokenizer,
                             const std::vector<std::string> &prompts, const GenerateOptions &o) {
  const Symbol *tokens = exe.program().argument("tokens");
  const Symbol *logits = exe.program().output("logits");
  if (!tokens || tokens->shape.size() != 2 || !logits || logits->shape.size() != 3)
    return makeError("generation needs a \"tokens\" input [batch, length] and a \"logits\" "
                     "output [batch, length, vocab]; program @{} has not both",
                     exe.program().name);
  const int64_t rows = tokens->shape[0], window = tokens->shape[1], vocab = logits->shape[2];
  if (static_cast<int64_t>(prompts.size()) > rows)
    return makeError("{} prompts, but the model runs {} rows at a time", prompts.size(), rows);
  if (tokenizer.vocabSize() > vocab)
    return makeError("the tokenizer's {} tokens do not fit the model's vocab of {}",
                     tokenizer.vocabSize(), vocab);
  std::vector<std::vector<int32_t>> seq(static_cast<size_t>(rows));
  std::vector<size_t> promptLen(static_cast<size_t>(rows), 0);
  std::vector<bool> done(static_cast<size_t>(rows), true); // rows without a prompt stay done
  for (size_t r = 0; r < prompts.size(); ++r) {
    seq[r] = tokenizer.encode(prompts[r]);
    if (seq[r].empty())
      return makeError("prompt {} is empty", r + 1);
    promptLen[r] = seq[r].size(), done[r] = false;
  }
  HostTensor in(tokens->dtype, tokens->shape);
  Generated g;
  g.window = window;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < o.maxNew; ++step) {
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; }))
      break;
    // Each row: its last `window` tokens from position 0, zeros after them.
    std::vector<int64_t> last(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<int32_t> &s = seq[static_cast<size_t>(r)];
      const int64_t n = std::min<int64_t>(window, static_cast<int64_t>(s.size()));
      for (int64_t t = 0; t < window; ++t)
        in.setInt(r * window + t, t < n ? s[s.size() - static_cast<size_t>(n - t)] : 0);
      last[static_cast<size_t>(r)] = n - 1;
    }
    if (Status st = exe.write(*tokens, in); !st)
      return st.error();
    if (Status st = exe.run(); !st)
      return st.error();
    const HostTensor out = exe.read(*logits);
    std::vector<float> row(static_cast<size_t>(vocab));
    for (int64_t r = 0; r < rows; ++r) {
      const auto ri = static_cast<size_t>(r);
      if (done[ri])
        continue;
      const int64_t at = (r * window + last[ri]) * vocab;
      for (int64_t v = 0; v < vocab; ++v)
        row[static_cast<size_t>(v)] = static_cast<float>(out.get(at + v));
      const double u = rng::uniform(rng::mix64(o.seed + 0x9e3779b97f4a7c15ull * (ri + 1)),
                                    static_cast<uint64_t>(step));
      seq[ri].push_back(
          sampleToken(row, tokenizer.vocabSize(), o.greedy, o.temperature, o.topK, o.topP, u));
      ++g.tokens;
      if (!o.stop.empty()) {
        Expected<std::string> text =
            tokenizer.decode(std::span<const int32_t>(seq[ri]).subspan(promptLen[ri]));
        done[ri] = text && text->find(o.stop) != std::string::npos;
      }
    }
  }
  g.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t r = 0; r < prompts.size(); ++r) {
    Expected<std::string> text =
        tokenizer.decode(std::span<const int32_t>(seq[r]).subspan(promptLen[r]));
    if (!text)
      return text.error();
    g.continuations.push_back(std::move(*text));
  }
  return g;
}

} // namespace kiln::runtime
