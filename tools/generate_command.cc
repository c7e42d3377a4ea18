// `kiln generate` (see generate_command.h).
#include "tools/generate_command.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "models/gpt.h"
#include "models/transformer.h"
#include "models/zoo.h"
#include "runtime/generation.h"
#include "runtime/progress.h"
#include "runtime/tasks.h"
#include "runtime/tokenizer.h"
#include "tools/ir_file.h"

namespace kiln::tools {

CLI::App *addGenerateCommand(CLI::App &app, GenerateArgs &a) {
  CLI::App *c = app.add_subcommand(
      "generate", "Continue text prompts with a trained decoder-only language model (gpt, or a "
                  "model of one's own that trains on task lm): greedy, sampled or beam search");
  addSettings(*c, a.sets,
              "Config override key=value (repeatable): the trained model's (default: the "
              "checkpoint's)");
  addTrainedModel(*c, a.model, a.load, a.tokenizer);
  c->add_option("--prompt", a.prompts, "A prompt (repeatable: one batch row each)")
      ->required()
      ->check(nonEmptyText());
  c->add_option("--max-new", a.maxNew, "Tokens to generate per prompt")
      ->check(integerIn(1, 1'000'000));
  CLI::Option *greedy =
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
      ->check(nonEmptyText());
  CLI::Option *beam =
      c->add_option("--beam", a.beam,
                    "Beam search with N beams (one --prompt; deterministic: no sampling; gpt)")
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
  for (const char *sampling : {"--temperature", "--top-k", "--top-p", "--seed"})
    greedy->excludes(sampling); // (sampling's: greedy draws nothing)
  addMaxMemory(*c, a.maxMemory);
  addBackend(*c, a.backend);
  addPrecision(*c, a.precision, false);
  return c;
}

namespace {

// A progress bar of `total` units on a terminal (nothing elsewhere), and the callback that
// runtime/generation.h calls with the units done.
struct GenerationProgress {
  runtime::Progress bar;
  explicit GenerationProgress(int64_t total, std::string unit) : bar(total, std::move(unit)) {}
  std::function<void(int64_t)> callback(double tokensPerUnit) {
    return [this, tokensPerUnit](int64_t done) {
      bar.update(done, static_cast<double>(done) * tokensPerUnit, "");
    };
  }
  // Ends the bar (before the results are printed).
  void finish() {
    if (bar.drawing() && !finished)
      bar.finish();
    finished = true;
  }
  ~GenerationProgress() { finish(); }
  bool finished = false;
};

// generate and translate build a model's generation programs from its name and settings.
void refuseIrFile(const std::string &model, std::string_view command) {
  if (isIrFile(model, false))
    throw UserError(fmt::format("{}: {} is an IR file; {} builds a model's programs from its name "
                                "and settings (kiln models lists them), and an IR file's graph has "
                                "no generation form",
                                command, model, command));
}

} // namespace

void runGenerate(GenerateArgs &a) {
  refuseIrFile(a.model, "generate");
  refuseInferenceSettings(a.sets, "generate", "a batch row per --prompt, no loss");
  const auto checkpoint = adoptDescription(a.load, a.model, a.sets);
  const models::ModelEntry *model = models::findModel(a.model);
  if (!model) // buildModel's error lists the known names
    orThrow(models::buildModel(a.model, {}));
  if (model->task != "lm")
    throw UserError(
        fmt::format("generate: model {} is not a decoder-only language model ({})", a.model,
                    model->task != "copy" ? fmt::format("its task is {}, not lm", model->task)
                    : a.model == "transformer"
                        ? "an encoder-decoder: kiln translate --src TEXT translates with it"
                        : "an encoder-decoder, which kiln translate does not run yet: "
                          "it decodes transformer's cached encode and decode graphs"));
  // gpt has a KV-cached form (prefill and decode graphs); any other language model generates by
  // running its forward graph over the whole window at every step.
  const bool cached = a.model == "gpt" && !a.noCache;
  if (a.beam > 0 && !cached)
    throw UserError(fmt::format(
        "--beam: beam search runs on a KV cache, and model {} has no cached form (gpt has)",
        a.model));
  if (a.beam > 0 && a.prompts.size() != 1)
    throw UserError("--beam: beam search takes one --prompt");
  const std::vector<models::Setting> settings = inferenceSettings(
      parseSettings(a.sets), a.beam > 0 ? a.beam : static_cast<int64_t>(a.prompts.size()));
  const runtime::Tokenizer tokenizer = tokenizerFor(a.tokenizer, checkpoint, a.load);
  runtime::GenerateOptions o;
  o.maxNew = a.maxNew, o.greedy = a.greedy, o.temperature = a.temperature, o.topK = a.topK;
  o.topP = a.topP, o.seed = a.seed, o.stop = a.stop;
  // The programs first, so that the bar's rate counts generation only.
  std::vector<std::pair<ir::Graph, std::string_view>> graphs;
  if (!cached) {
    graphs.emplace_back(orThrow(models::buildModel(a.model, settings)), "a forward pass");
  } else {
    const models::GptConfig c = orThrow(models::gptConfig(settings));
    graphs.emplace_back(orThrow(models::buildGptCached(c, models::GptGraph::Prefill)), "prefill");
    graphs.emplace_back(orThrow(models::buildGptCached(c, models::GptGraph::Decode)), "decode");
  }
  std::vector<std::unique_ptr<runtime::Executable>> programs = compileWithCheckpoint(
      std::move(graphs), a.backend, a.maxMemory, a.load, productsOf(a.precision));
  std::unique_ptr<runtime::Executable> forward, prefill, decode;
  if (!cached) {
    forward = std::move(programs[0]);
  } else {
    prefill = std::move(programs[0]);
    decode = std::move(programs[1]);
  }
  runtime::Generated out;
  if (a.beam > 0) {
    GenerationProgress progress(a.maxNew, "step");
    runtime::BeamOptions bo;
    bo.maxNew = a.maxNew, bo.lengthPenalty = a.lengthPenalty, bo.stop = a.stop;
    bo.onProgress = progress.callback(static_cast<double>(a.beam));
    const std::vector<runtime::Beam> beams =
        orThrow(runtime::beamSearch(*prefill, *decode, tokenizer, a.prompts[0], bo, &out));
    progress.finish();
    fmt::print("{}", runtime::beamsText(beams, a.prompts[0]));
    fmt::print("{}\n", runtime::speedSummary(out));
    return;
  }
  GenerationProgress progress(a.maxNew * static_cast<int64_t>(a.prompts.size()), "tok");
  o.onProgress = progress.callback(1);
  out = orThrow(!cached ? runtime::generate(*forward, tokenizer, a.prompts, o)
                        : runtime::generateCached(*prefill, *decode, tokenizer, a.prompts, o));
  progress.finish();
  fmt::print("{}{}\n", runtime::promptsText(a.prompts, out), runtime::speedSummary(out));
}

} // namespace kiln::tools

namespace kiln::tools {

CLI::App *addTranslateCommand(CLI::App &app, TranslateArgs &a) {
  CLI::App *c = app.add_subcommand(
      "translate", "Translate a source text with a trained encoder-decoder (transformer, as "
                   "kiln train --data FILE of source<TAB>target lines trains it): greedy, or "
                   "beam search");
  addSettings(*c, a.sets,
              "Config override key=value (repeatable): the trained model's (tgt_len: "
              "src_len + 1 unless set, as kiln train sets it)");
  addTrainedModel(*c, a.model, a.load, a.tokenizer);
  c->add_option("--src", a.src, "The source text")->required()->check(nonEmptyText());
  c->add_option("--max-new", a.maxNew, "Tokens to generate at most (and EOS; tgt_len bounds it)")
      ->check(integerIn(1, 1'000'000));
  c->add_option("--beam", a.beam, "Beam search with N beams (1: greedy)")->check(integerIn(1, 256));
  c->add_option("--length-penalty", a.lengthPenalty, "Rank finished beams by log p / tokens^A")
      ->check(finiteIn(-10, 10));
  addMaxMemory(*c, a.maxMemory);
  addBackend(*c, a.backend);
  addPrecision(*c, a.precision, false);
  return c;
}

void runTranslate(TranslateArgs &a) {
  refuseIrFile(a.model, "translate");
  refuseInferenceSettings(a.sets, "translate", "a batch row per beam, no loss");
  const auto checkpoint = adoptDescription(a.load, a.model, a.sets);
  if (a.model != "transformer") {
    const models::ModelEntry *m = models::findModel(a.model);
    throw UserError(fmt::format(
        "translate: model {} {} (transformer has)", a.model,
        m && m->task == "copy" ? "has no cached encode and decode graphs"
                               : "is not an encoder-decoder with cached encode and decode graphs"));
  }
  std::vector<models::Setting> settings = inferenceSettings(parseSettings(a.sets), a.beam);
  addDefaultTargetLength(a.model, settings);
  const models::TransformerConfig c = orThrow(models::transformerConfig(settings));
  orThrow(runtime::checkPadId(c.padId, "translation"));
  const runtime::Tokenizer tokenizer = tokenizerFor(a.tokenizer, checkpoint, a.load);
  std::vector<std::pair<ir::Graph, std::string_view>> graphs;
  graphs.emplace_back(orThrow(models::buildTransformerCached(c, models::TransformerGraph::Encode)),
                      "the encoder");
  graphs.emplace_back(orThrow(models::buildTransformerCached(c, models::TransformerGraph::Decode)),
                      "a decoding step");
  std::vector<std::unique_ptr<runtime::Executable>> programs = compileWithCheckpoint(
      std::move(graphs), a.backend, a.maxMemory, a.load, productsOf(a.precision));
  const std::unique_ptr<runtime::Executable> &encode = programs[0], &decode = programs[1];
  runtime::BeamOptions o;
  o.maxNew = a.maxNew, o.lengthPenalty = a.lengthPenalty;
  GenerationProgress progress(std::min(a.maxNew + 1, c.tgtLen), "step");
  o.onProgress = progress.callback(static_cast<double>(a.beam));
  runtime::Generated stats;
  const std::vector<runtime::Beam> beams =
      orThrow(runtime::translate(*encode, *decode, tokenizer, a.src, o, &stats));
  progress.finish();
  fmt::print("{}", runtime::beamsText(beams, ""));
  fmt::print("{}\n", runtime::speedSummary(stats));
}

} // namespace kiln::tools
