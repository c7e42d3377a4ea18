// `kiln generate` (see generate_command.h).
#include "tools/generate_command.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "models/zoo.h"
#include "passes/stages.h"
#include "runtime/checkpoint.h"
#include "runtime/sampling.h"
#include "runtime/tokenizer.h"
#include "support/rng.h"

namespace kiln::tools {

CLI::App *addGenerateCommand(CLI::App &app, GenerateArgs &a) {
  CLI::App *c = app.add_subcommand("generate", "Continue text prompts with a trained decoder "
                                               "(gpt): greedy or sampled");
  c->add_option("model", a.model, "Model name (gpt)")->required();
  c->add_option("--set", a.sets, "Config override key=value (repeatable): the trained model's");
  c->add_option("--load", a.load, "The trained checkpoint (kiln train --save)")
      ->required()
      ->check(nonEmpty());
  c->add_option("--tokenizer", a.tokenizer,
                "The tokenizer.json the model was trained with (default: byte tokens)")
      ->check(nonEmpty());
  c->add_option("--prompt", a.prompts, "A prompt (repeatable: one batch row each)")
      ->required()
      ->check(nonEmpty());
  c->add_option("--max-new", a.maxNew, "Tokens to generate per prompt")
      ->check(integerIn(1, 1'000'000));
  c->add_flag("--greedy", a.greedy, "Take the most likely token (no sampling)");
  c->add_option("--temperature", a.temperature, "Divide the logits by T before sampling")
      ->check(finiteIn(0, 1e6, true));
  c->add_option("--top-k", a.topK, "Sample among the K most likely tokens (0: all)")
      ->check(integerIn(0, 1'000'000'000));
  c->add_option("--top-p", a.topP,
                "Sample among the fewest most likely tokens whose probabilities reach P")
      ->check(finiteIn(0, 1, true));
  c->add_option("--seed", a.seed, "Seed of the sampling stream")->check(seedValue());
  c->add_option("--stop", a.stop, "End a prompt's continuation once it contains this text")
      ->check(nonEmpty());
  addMaxMemory(*c, a.maxMemory);
  addBackend(*c, a.backend);
  return c;
}

void runGenerate(GenerateArgs &a) {
  if (a.model != "gpt")
    throw UserError(
        fmt::format("generate: model {} is not a decoder-only language model (gpt)", a.model));
  std::vector<models::Setting> settings = parseSettings(a.sets);
  for (const models::Setting &s : settings)
    if (s.key == "batch" || s.key == "loss")
      throw UserError(
          fmt::format("--set {}: generate sets it (a batch row per --prompt, no loss)", s.key));
  settings.push_back({"batch", std::to_string(a.prompts.size())});
  ir::Graph g = orThrow(passes::optimizedForward(orThrow(models::buildModel(a.model, settings))));
  std::unique_ptr<runtime::Executable> exe = compileChecked(
      g, a.backend, false, a.maxMemory, fmt::format("a forward pass of @{}", g.name()));
  orThrow(runtime::loadCheckpoint(*exe, a.load));
  const runtime::Tokenizer tokenizer = a.tokenizer.empty()
                                           ? runtime::Tokenizer::bytes()
                                           : orThrow(runtime::Tokenizer::load(a.tokenizer));
  const runtime::Symbol *tokens = exe->program().argument("tokens");
  const runtime::Symbol *logits = exe->program().output("logits");
  const int64_t rows = tokens->shape[0], window = tokens->shape[1], vocab = logits->shape.back();
  if (tokenizer.vocabSize() > vocab)
    throw UserError(fmt::format("--tokenizer: its {} tokens do not fit the model's vocab of {}",
                                tokenizer.vocabSize(), vocab));
  std::vector<std::vector<int32_t>> seq;
  std::vector<size_t> promptLen;
  for (const std::string &p : a.prompts) {
    seq.push_back(tokenizer.encode(p));
    promptLen.push_back(seq.back().size());
  }
  std::vector<bool> done(static_cast<size_t>(rows), false);
  runtime::HostTensor in(tokens->dtype, tokens->shape);
  const auto start = std::chrono::steady_clock::now();
  int64_t generated = 0;
  for (int64_t step = 0; step < a.maxNew; ++step) {
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
    orThrow(exe->write(*tokens, in));
    orThrow(exe->run());
    const runtime::HostTensor out = exe->read(*logits);
    for (int64_t r = 0; r < rows; ++r) {
      if (done[static_cast<size_t>(r)] || last[static_cast<size_t>(r)] < 0)
        continue;
      std::vector<float> row(static_cast<size_t>(vocab));
      const int64_t at = (r * window + last[static_cast<size_t>(r)]) * vocab;
      for (int64_t v = 0; v < vocab; ++v)
        row[static_cast<size_t>(v)] = static_cast<float>(out.get(at + v));
      const double u = rng::uniform(rng::mix64(a.seed + 0x9e3779b97f4a7c15ull * (r + 1)),
                                    static_cast<uint64_t>(step));
      seq[static_cast<size_t>(r)].push_back(runtime::sampleToken(
          row, tokenizer.vocabSize(), a.greedy, a.temperature, a.topK, a.topP, u));
      ++generated;
      if (!a.stop.empty()) {
        const std::vector<int32_t> &s = seq[static_cast<size_t>(r)];
        const std::string text = orThrow(tokenizer.decode(
            std::span<const int32_t>(s).subspan(promptLen[static_cast<size_t>(r)])));
        done[static_cast<size_t>(r)] = text.find(a.stop) != std::string::npos;
      }
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t r = 0; r < seq.size(); ++r) {
    const std::string continuation =
        orThrow(tokenizer.decode(std::span<const int32_t>(seq[r]).subspan(promptLen[r])));
    fmt::print("--- prompt {}\n{}{}\n", r + 1, a.prompts[r], continuation);
  }
  fmt::print("generated {} tokens in {:.2f} s ({:.1f} tokens/s; every step recomputes the "
             "window of {})\n",
             generated, s, static_cast<double>(generated) / std::max(s, 1e-9), window);
}

} // namespace kiln::tools
