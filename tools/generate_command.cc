// `kiln generate` (see generate_command.h).
#include "tools/generate_command.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "models/gpt.h"
#include "models/zoo.h"
#include "passes/stages.h"
#include "runtime/checkpoint.h"
#include "runtime/generation.h"
#include "runtime/tokenizer.h"

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
  CLI::Option *beam =
      c->add_option("--beam", a.beam,
                    "Beam search with N beams (one --prompt; deterministic: no sampling)")
          ->check(integerIn(1, 256));
  c->add_option("--length-penalty", a.lengthPenalty,
                "Beam search: rank finished beams by log p / tokens^A")
      ->check(finiteIn(-10, 10))
      ->needs(beam);
  c->add_flag("--no-cache", a.noCache,
              "Recompute the whole window at every step instead of keeping a KV cache");
  for (const char *sampling :
       {"--greedy", "--temperature", "--top-k", "--top-p", "--seed", "--no-cache"})
    beam->excludes(sampling);
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
  if (a.beam > 0 && a.prompts.size() != 1)
    throw UserError("--beam: beam search takes one --prompt");
  settings.push_back({"batch", std::to_string(a.beam > 0 ? a.beam : int64_t(a.prompts.size()))});
  const runtime::Tokenizer tokenizer = a.tokenizer.empty()
                                           ? runtime::Tokenizer::bytes()
                                           : orThrow(runtime::Tokenizer::load(a.tokenizer));
  runtime::GenerateOptions o;
  o.maxNew = a.maxNew, o.greedy = a.greedy, o.temperature = a.temperature, o.topK = a.topK;
  o.topP = a.topP, o.seed = a.seed, o.stop = a.stop;
  // A program of the model, compiled, with the checkpoint's weights.
  auto load = [&](ir::Graph graph, std::string_view what) {
    ir::Graph g = orThrow(passes::optimizedForward(std::move(graph)));
    std::unique_ptr<runtime::Executable> exe =
        compileChecked(g, a.backend, false, a.maxMemory, fmt::format("{} of @{}", what, g.name()));
    orThrow(runtime::loadCheckpoint(*exe, a.load));
    return exe;
  };
  runtime::Generated out;
  if (a.noCache) {
    auto exe = load(orThrow(models::buildModel(a.model, settings)), "a forward pass");
    out = orThrow(runtime::generate(*exe, tokenizer, a.prompts, o));
  } else {
    const models::GptConfig c = orThrow(models::gptConfig(settings));
    auto prefill = load(orThrow(models::buildGptCached(c, models::GptGraph::Prefill)), "prefill");
    auto decode = load(orThrow(models::buildGptCached(c, models::GptGraph::Decode)), "decode");
    if (a.beam > 0) {
      runtime::BeamOptions bo;
      bo.maxNew = a.maxNew, bo.lengthPenalty = a.lengthPenalty, bo.stop = a.stop;
      const std::vector<runtime::Beam> beams =
          orThrow(runtime::beamSearch(*prefill, *decode, tokenizer, a.prompts[0], bo, &out));
      for (size_t i = 0; i < beams.size(); ++i)
        fmt::print("--- beam {}: log p {:.4f}, score {:.4f}\n{}{}\n", i + 1, beams[i].logProb,
                   beams[i].score, a.prompts[0], beams[i].text);
      fmt::print("{}\n", runtime::speedSummary(out));
      return;
    }
    out = orThrow(runtime::generateCached(*prefill, *decode, tokenizer, a.prompts, o));
  }
  for (size_t r = 0; r < a.prompts.size(); ++r)
    fmt::print("--- prompt {}\n{}{}\n", r + 1, a.prompts[r], out.continuations[r]);
  fmt::print("{}\n", runtime::speedSummary(out));
}

} // namespace kiln::tools
