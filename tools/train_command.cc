// `kiln train` (see train_command.h).
#include "tools/train_command.h"

#include <stdexcept>

#include <fmt/format.h>

#include "ir/printer.h"
#include "models/transformer.h"
#include "models/zoo.h"
#include "passes/stages.h"
#include "runtime/checkpoint.h"
#include "runtime/output_file.h"
#include "runtime/safetensors.h"
#include "runtime/tasks.h"
#include "runtime/tokenizer.h"
#include "runtime/trainer.h"
#include "runtime/training_session.h"
#include "runtime/weights.h"
#include "support/param_init.h"
#include "tools/cli_util.h"
#include "tools/ir_file.h"
#include "tools/plot.h"

namespace kiln::tools {

namespace {

using runtime::TaskKind;

const ir::Arg &inputNamed(const ir::Graph &g, std::string_view name, TaskKind task) {
  const ir::Arg *a = g.findArg(name);
  auto isInput = [&g](std::string_view n) {
    const ir::Arg *arg = g.findArg(n);
    return arg && arg->kind == ir::Arg::Kind::Input;
  };
  if (!a || a->kind != ir::Arg::Kind::Input)
    throw UserError(fmt::format(
        "task {} needs a model input \"{}\"; model @{} has none{}", runtime::taskName(task), name,
        g.name(),
        isInput("src") ? " (its input \"src\" is an encoder-decoder's: --task copy, reverse or "
                         "pairs)"
        : isInput("tokens") ? " (its input \"tokens\" is a decoder's or an encoder's: --task lm or "
                              "mlm)"
                            : ""));
  return *a;
}

// The task's batch shape, read off the model's inputs, for a text of `textVocab` token ids; the
// targets' ignore index from the graph's loss (ignoreIdOf).
runtime::TaskShape shapeFor(const TrainArgs &a, const ir::Graph &g, TaskKind task,
                            int64_t textVocab) {
  const std::vector<models::Setting> settings = parseSettings(a.sets);
  const bool seq2seq = runtime::isEncoderDecoderTask(task);
  const ir::Arg &in = inputNamed(g, seq2seq ? "src" : "tokens", task);
  const ir::Shape &s = g.type(in.value).shape;
  if (in.range <= 0) // (an IR file's: the DSL's models state theirs)
    throw UserError(fmt::format("task {}: the input \"{}\" states no range(N), its vocabulary of "
                                "ids 0..N-1 (write it as `input \"{}\" range(N) : ...`)",
                                runtime::taskName(task), in.name, in.name));
  runtime::TaskShape shape{.batch = s[0], .vocab = in.range, .textVocab = textVocab};
  (seq2seq ? shape.srcLen : shape.seqLen) = s[1];
  if (const ir::Arg *tgt = g.findArg("tgt");
      seq2seq && tgt && tgt->kind == ir::Arg::Kind::Input && g.type(tgt->value).shape.size() == 2)
    shape.tgtLen = g.type(tgt->value).shape[1];
  // (An IR file's: none; its graph's padding mask says its pad id.)
  const bool irFile = isIrFile(a.model, a.ir);
  const auto config = resolvedConfig(irFile ? "" : a.model, settings);
  const std::optional<ir::Graph> irGraph =
      irFile ? std::optional<ir::Graph>(loadIrFile(a.model)) : std::nullopt;
  const std::optional<int64_t> padId = padIdOf(config, irGraph ? &*irGraph : nullptr);
  // Padding: sources with id 0, which the model must mask (pairs' targets with its ignore index;
  // mlm's unmasked targets hold it too). An mlm text must not hold the id the model masks.
  if (seq2seq && padId)
    orThrow(runtime::checkPadId(*padId, fmt::format("task {}", runtime::taskName(task))));
  if (task == TaskKind::Mlm && padId)
    shape.pad = *padId;
  if (const std::optional<int64_t> ignore = ignoreIdOf(g, config))
    shape.ignore = *ignore;
  else if (task == TaskKind::Pairs)
    shape.ignore = runtime::kPad; // (ignore_index defaults to pad_id)
  return shape;
}

// The model with its loss, for the task: the forward graph of the training step.
// An IR file's graph is the training step's forward graph as it is: it must have its loss.
ir::Graph lossModel(const TrainArgs &a, TaskKind task, std::vector<models::Setting> settings) {
  if (isIrFile(a.model, a.ir)) {
    ir::Graph g = loadIrFile(a.model);
    requireLoss(g, a.model);
    return g;
  }
  addLoss(settings, "training");
  if (runtime::isEncoderDecoderTask(task))
    addDefaultTargetLength(a.model, settings);
  return orThrow(models::buildModel(a.model, settings));
}

ir::Graph buildStep(TrainArgs &a, TaskKind task, passes::PipelineReport *report) {
  // What is wrong is the IR file's (a training step already, a node autodiff cannot take).
  return builtFrom(a.model, a.ir,
                   passes::trainingStep(lossModel(a, task, parseSettings(a.sets)), a.opt, report,
                                        productsOf(a.precision),
                                        dataParallel(a.ranks, a.dp, a.oneMachine)));
}

// The files a run reads that none it writes may replace (--load aside: --save may resume over it).
std::vector<runtime::RunInput> runInputs(const TrainArgs &a) {
  return {{"--data", a.data},
          {"--tokenizer", a.tokenizer},
          {"the IR file it trains", irFileOf(a)},
          {"kiln itself", "/proc/self/exe"}};
}

// The flags' checks that need the task, and every output checked before the run (a bad path
// must not cost it).
void checkTrainFlags(const TrainArgs &a, TaskKind task, bool fromText) {
  if (a.valFractionGiven)
    orThrow(runtime::checkHeldOut(task));
  if (!a.data.empty() && !fromText)
    throw UserError(fmt::format("--data: task {} makes its own sequences; a text file feeds lm "
                                "(gpt), mlm (bert) and pairs (transformer)",
                                runtime::taskName(task)));
  if (task == TaskKind::Pairs && a.data.empty())
    throw UserError(a.task.empty() && !a.load.empty()
                        ? runtime::pairsNeedData("--load", a.load).message
                        : "task pairs: needs --data FILE, lines of source<TAB>target");
  if (!a.plot.empty() && !a.plot.ends_with(".png") && !a.plot.ends_with(".svg"))
    throw UserError(fmt::format("--plot {}: a picture is written as .png or .svg", a.plot));
  orThrow(runtime::checkSaveEvery(a.saveEvery, a.save));
  // What is written at the end is checked now: a bad path must not cost the run.
  const std::vector<runtime::RunInput> inputs = runInputs(a);
  const std::pair<const char *, const std::string *> outputs[] = {
      {"--save", &a.save}, {"--plot", &a.plot}, {"--log", &a.log}};
  for (auto [flag, path] : outputs)
    if (!path->empty())
      if (Status s = runtime::checkOutputFile(*path); !s)
        throw UserError(fmt::format("{} {}", flag, s.error().message));
  // (The log is cut and appended to by name: runTraining refuses a descriptor, which every rank
  // learns here, before the work.)
  if (!a.log.empty())
    if (Expected<std::string> real = runtime::followedPath(a.log); !real)
      throw UserError(fmt::format("--log {}", real.error().message));
  for (size_t i = 0; i < std::size(outputs); ++i) {
    const auto [flag, path] = outputs[i];
    if (path->empty())
      continue;
    orThrow(runtime::checkNotAnInput(flag, *path, inputs));
    // --save may replace the checkpoint it resumes (--load ck --save ck); the plot and the log
    // would destroy it. Nor may two outputs be one file, where the last written would win.
    if (i > 0) {
      const runtime::RunInput loaded[] = {{"--load", a.load}};
      orThrow(runtime::checkNotAnInput(flag, *path, loaded));
    }
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].second->empty())
        orThrow(runtime::checkDistinctOutputs(flag, *path, outputs[j].first, *outputs[j].second));
  }
  if (!a.tokenizer.empty() && !fromText)
    throw UserError(fmt::format("--tokenizer: task {} makes its own token ids; a tokenizer "
                                "feeds lm (gpt), mlm (bert) and pairs (transformer)",
                                runtime::taskName(task)));
}

// --plot: the losses (and the validation losses, where there are any) drawn to `path`.
void plotLosses(Chart &chart, const std::string &path) {
  if (chart.series[1].x.empty())
    chart.series.pop_back();
  orThrow(drawChart(chart, path));
  fmt::print("plotted the losses to {}\n", path);
}

// The session's options from the flags (evalEvery only where a validation program exists).
runtime::TrainingOptions trainingOptions(const TrainArgs &a, TaskKind task, bool validates) {
  runtime::TrainingOptions options;
  options.steps = a.steps, options.logEvery = a.logEvery;
  // (The checkpoint's batches drawn, skipped ones included: the uninterrupted run's next batch.)
  options.firstBatch =
      a.load.empty() ? 0 : static_cast<uint64_t>(orThrow(runtime::batchesIn(a.load)));
  options.evalEvery = validates ? a.evalEvery : 0, options.evalBatches = a.evalBatches;
  options.save = a.save, options.saveEvery = a.saveEvery, options.log = a.log,
  options.plot = a.plot;
  options.skipNonFinite = a.onNan == "skip";
  options.what = fmt::format("{} on task {}", shownIrFile(a.model), runtime::taskName(task));
  options.description = runDescription(a);
  if (options.description)
    options.description->task = runtime::taskName(task);
  // With --load: a rolling checkpoint (of a later step) must not replace the one it resumes.
  std::vector<runtime::RunInput> inputs = runInputs(a);
  inputs.push_back({"--load", a.load});
  const runtime::RunInput outputs[] = {{"--log", a.log}, {"--plot", a.plot}};
  orThrow(runtime::checkRollingCheckpoints(options, inputs, outputs));
  return options;
}

void trainLoop(TrainArgs &a, const ir::Graph &step, TaskKind task, CompileStatus &status,
               runtime::Communicator &world) {
  const bool fromText = task == TaskKind::Lm || task == TaskKind::Mlm || task == TaskKind::Pairs;
  checkTrainFlags(a, task, fromText);
  const std::string text = a.data.empty() ? std::string() : readInputFile(a.data);
  const std::string_view whole = a.data.empty() ? runtime::corpus() : std::string_view(text);
  const double fraction = fromText ? a.valFraction : 0;
  const runtime::TextSplit split = task == TaskKind::Pairs ? runtime::splitLines(whole, fraction)
                                                           : runtime::splitText(whole, fraction);
  // Tokenized once: the training part and the held-out part each on their own (pairs: each
  // line's halves, in one stream).
  const runtime::Tokenizer tokenizer = tokenizerFor(a.tokenizer, a.loaded, a.load);
  auto encode = [&](std::string_view part, int64_t firstLine) {
    if (task != TaskKind::Pairs)
      return tokenizer.encode(part);
    Expected<std::vector<int32_t>> ids = runtime::pairTokens(
        part, [&](std::string_view half) { return tokenizer.encode(half); }, firstLine);
    if (!ids)
      throw UserError(fmt::format("--data {}: {}", a.data, ids.error().message));
    return *ids;
  };
  std::vector<int32_t> trainIds = encode(split.train, 1);
  const std::vector<int32_t> validationIds =
      encode(split.validation, 1 + std::count(split.train.begin(), split.train.end(), '\n'));
  const runtime::TaskShape shape = shapeFor(a, step, task, tokenizer.vocabSize());
  orThrow(runtime::checkTrainingText(
      task, shape, trainIds, fromText ? a.valFraction : 0, [&] { return encode(whole, 1); },
      a.data.empty() ? "" : "--data " + a.data));
  if (const std::optional<std::string> note =
          runtime::cutLinesNote(task, shape, trainIds, "--data " + a.data);
      note && world.rank() == 0)
    runtime::printNote(*note);
  // Validation: the same batches at every evaluation (windows of the held-out text; for the
  // synthetic tasks, batches of their own seed), so that the losses compare.
  std::unique_ptr<runtime::Executable> evalExe;
  std::vector<runtime::Batch> validation;
  if (a.evalEvery > 0) {
    if (fromText)
      if (Status st = runtime::checkTask(task, shape, validationIds); !st)
        throw UserError(fmt::format("--eval-every: the validation text (--val-fraction {} of the "
                                    "text: {} bytes): {}",
                                    a.valFraction, split.validation.size(), st.error().message));
    validation = runtime::validationBatches({task, shape, a.seed, {}, world.rank(), world.size()},
                                            validationIds, a.evalBatches);
    ir::Graph eval = evaluationGraph(a, task, status.report());
    evalExe = compileChecked(eval, a.backend, a.precision == "f64", a.maxMemory,
                             fmt::format("the validation loss of @{}", eval.name()), &status);
  }
  std::unique_ptr<runtime::Executable> exe =
      compileChecked(step, a.backend, a.precision == "f64", a.maxMemory,
                     fmt::format("a training step of @{}", step.name()), &status,
                     {.checkpoint = !a.load.empty() || !a.save.empty(),
                      .others = evalExe ? evalExe->memoryBytes() : 0});
  status.phase(fmt::format("initializing the weights (seed {})", a.seed));
  orThrow(runtime::initWeights(*exe, a.seed));
  runtime::Trainer trainer = orThrow(runtime::Trainer::create(*exe));
  runtime::TrainingData data{task, shape, a.seed, runtime::TaskText(std::move(trainIds))};
  runtime::TrainingOptions options = trainingOptions(a, task, evalExe != nullptr);
  options.validationDigest = runtime::digest(validationIds);
  // (On several ranks runTrain has set the threads.) The ranks join before --load, which takes
  // each rank's part of a sharded optimizer's state.
  orThrow(runtime::joinRanks(world, runtime::digest(ir::print(step)),
                             overlapOn(a.overlap, world, a.backend.threads), *exe, data, options));
  int loaded = 0;
  if (!a.load.empty()) {
    status.phase("loading " + a.load);
    loaded = orThrow(runtime::loadCheckpoint(*exe, a.load));
  }
  orThrow(runtime::checkSameWeights(world, *exe, a.load));
  status.done();
  if (!a.load.empty())
    fmt::print("loaded {} tensors from {}\n", loaded, a.load);
  if (world.rank() != 0)
    a.plot.clear();
  Chart chart{fmt::format("{} on {}", a.model, a.data.empty() ? "the embedded corpus" : a.data),
              "step",
              "loss",
              "tokens",
              runtime::tokensPerStep(shape) * world.size(), // (the global batch's, as --log's)
              {{"train", {}, {}, false}, {"validation", {}, {}, true}},
              /*wholeX=*/true};
  Expected<runtime::TrainingResult> result = runtime::runTraining(
      trainer, data, options,
      [&]() {
        return runtime::meanOverRanks(world, runtime::validationLoss(*evalExe, *exe, validation));
      },
      [&](int64_t step, double loss, bool validation) {
        if (a.plot.empty())
          return;
        auto &series = chart.series[validation ? 1 : 0];
        series.x.push_back(static_cast<double>(step));
        series.y.push_back(loss);
      });
  // A run stopped early (--on-nan stop, a signal) or failed plots the steps it made, as its log
  // has them; its own error is the one reported (the plot's, if that fails too, is said after it).
  std::string stopped = result ? result->stopped : result.error().message;
  if (!a.plot.empty() && (stopped.empty() || !chart.series[0].x.empty()))
    try {
      plotLosses(chart, a.plot);
    } catch (const UserError &e) {
      if (stopped.empty())
        throw;
      stopped = fmt::format("{} (and --plot: {})", stopped, e.what());
    }
  if (!result)
    throw UserError(stopped);
  if (!stopped.empty()) { // (every rank stopped after the same step: they end together)
    printError(stopped);
    orThrow(world.endTogether());
    throw ReportedError();
  }
}

} // namespace

ir::Graph evaluationGraph(const TrainArgs &a, TaskKind task, passes::PipelineReport *report) {
  // (validationForward takes out the dropout nodes: an IR file's too.)
  return orThrow(passes::validationForward(lossModel(a, task, parseSettings(a.sets)), report,
                                           productsOf(a.precision)));
}

// Flag limits: a run of more than a billion steps is a typo, and numbers past kHuge are not
// hyperparameters.
constexpr int64_t kMaxSteps = 1'000'000'000;
constexpr double kHuge = 1e30;

void addOptimizerOptions(CLI::App &c, const std::string &optimizer, passes::OptimizerConfig &opt,
                         std::string *schedule) {
  c.add_option("--lr", opt.schedule.lr,
               schedule ? "Learning rate (inverse_sqrt: its factor)" : "Learning rate")
      ->check(finiteIn(0, kHuge, /*openLow=*/true));
  if (schedule) {
    c.add_option("--schedule", *schedule, "constant | inverse_sqrt | warmup_cosine")
        ->check(CLI::IsMember({"constant", "inverse_sqrt", "warmup_cosine"}));
    c.add_option("--warmup", opt.schedule.warmup, "Warmup steps")->check(integerIn(0, kMaxSteps));
    c.add_option("--min-lr", opt.schedule.minLr, "warmup_cosine: final learning rate")
        ->check(finiteIn(0, kHuge));
  }
  c.add_option("--momentum", opt.momentum, "SGD momentum")->check(finiteIn(0, kHuge));
  c.add_flag("--nesterov", opt.nesterov, "SGD: Nesterov momentum");
  c.add_option("--beta1", opt.beta1, "Adam beta1")
      ->check(finiteIn(0, 1, /*openLow=*/false, /*openHigh=*/true));
  c.add_option("--beta2", opt.beta2, "Adam beta2")
      ->check(finiteIn(0, 1, /*openLow=*/false, /*openHigh=*/true));
  c.add_option("--eps", opt.eps, "Adam epsilon")->check(finiteIn(0, kHuge, true));
  c.add_option("--weight-decay", opt.weightDecay, "L2 (sgd, adam) or decoupled (adamw)")
      ->check(finiteIn(0, kHuge));
  if (schedule)
    c.add_option("--clip-norm", opt.clipNorm, "Clip gradients to this global norm (0 = off)")
        ->check(finiteIn(0, kHuge));
  // A setting that the chosen optimizer or schedule has no use for is an error, not ignored; so
  // is one that makes no schedule (checked here, where the error can name the flags).
  c.final_callback([&c, &optimizer, &opt, schedule] {
    auto given = [&](std::string_view flag) { return c.count(std::string(flag)) > 0; };
    auto unused = [&](std::string_view flag, std::string_view user, bool used) {
      if (given(flag) && !used)
        throw CLI::ValidationError(std::string(flag), fmt::format("only {} uses it", user));
    };
    const bool sgd = optimizer == "sgd", any = !optimizer.empty();
    for (std::string_view flag :
         {"--lr", "--momentum", "--nesterov", "--beta1", "--beta2", "--eps", "--weight-decay"})
      if (given(flag) && !any)
        throw CLI::ValidationError(std::string(flag), "needs --optimizer");
    unused("--momentum", "--optimizer sgd", sgd);
    unused("--nesterov", "--optimizer sgd", sgd);
    for (std::string_view flag : {"--beta1", "--beta2", "--eps"})
      unused(flag, "--optimizer adam or adamw", !sgd);
    if (opt.nesterov && !(opt.momentum > 0))
      throw CLI::ValidationError("--nesterov", "needs --momentum > 0");
    if (!schedule)
      return;
    unused("--min-lr", "--schedule warmup_cosine", *schedule == "warmup_cosine");
    unused("--warmup", "--schedule inverse_sqrt or warmup_cosine", *schedule != "constant");
    if (*schedule == "inverse_sqrt" && opt.schedule.warmup <= 0)
      throw CLI::ValidationError("--warmup", "--schedule inverse_sqrt needs --warmup > 0, the "
                                             "step its rate peaks at");
    if (*schedule == "warmup_cosine" && opt.schedule.minLr > opt.schedule.lr)
      throw CLI::ValidationError(
          "--min-lr", fmt::format("{} is above --lr {}: the rate would rise as it decays",
                                  opt.schedule.minLr, opt.schedule.lr));
  });
}

void addOptimizerOptions(CLI::App &c, TrainArgs &a) {
  c.add_option("--optimizer", a.optimizer, "sgd | adam | adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  addOptimizerOptions(c, a.optimizer, a.opt, &a.schedule);
}

CLI::App *addTrainCommand(CLI::App &app, TrainArgs &a) {
  CLI::App *c = app.add_subcommand("train", "Train a model on a synthetic task or a text file "
                                            "on a backend (--backend), showing the loss per step");
  c->add_option("model", a.model,
                "Model name (default with --load: the checkpoint's), or an IR file (.kir, or "
                "--ir) whose graph has a loss output");
  c->add_flag("--ir", a.ir, "Treat MODEL as an IR file");
  addSettings(*c, a.sets);
  c->add_option("--task", a.task,
                "copy | reverse | pairs (transformer; pairs: lines of source<TAB>target from "
                "--data, the default with --data), lm (gpt), mlm (bert)")
      ->check(CLI::IsMember({"copy", "reverse", "lm", "mlm", "pairs"}));
  c->add_option("--data", a.data,
                "lm, mlm: draw the windows from this text file's tokens (bytes, or --tokenizer's; "
                "default: the embedded corpus); pairs: its source<TAB>target lines")
      ->check(nonEmpty());
  c->add_option("--tokenizer", a.tokenizer,
                "lm, mlm, pairs: tokens of this BPE tokenizer.json (kiln tokenizer train, or "
                "Hugging Face's) instead of bytes; the model's vocab must hold its ids")
      ->check(nonEmpty());
  c->add_option("--steps", a.steps,
                "Training steps to run (more, after --load: a schedule then spans the "
                "checkpoint's steps and these, so a resumed run repeats an uninterrupted one)")
      ->check(integerIn(1, kMaxSteps));
  c->add_option("--val-fraction", a.valFraction,
                "lm, mlm, pairs: the last fraction of the text (pairs: whole lines) held out for "
                "the validation loss (never trained on)")
      ->check(finiteIn(0, 0.5))
      ->each([&a](const std::string &) { a.valFractionGiven = true; });
  CLI::Option *evalEvery =
      c->add_option("--eval-every", a.evalEvery,
                    "Print the validation loss every N steps and after the last (0: never)")
          ->check(integerIn(0, kMaxSteps));
  c->add_option("--eval-batches", a.evalBatches, "Validation batches per evaluation")
      ->check(integerIn(1, 10000))
      ->needs(evalEvery);
  c->add_option("--log", a.log,
                "Write a JSON record per logged step to this file (JSON lines: step, loss, "
                "tokens, seconds, val_loss when evaluated); with --load, an existing one keeps "
                "its records up to the checkpoint's step and goes on after them")
      ->check(nonEmpty());
  c->add_option("--plot", a.plot,
                "Draw the training (and validation) loss against steps and tokens to this "
                ".png or .svg at the end")
      ->check(nonEmpty());
  c->add_option(
       "--save-every", a.saveEvery,
       "Also save a checkpoint every N steps, after step K to STEM.stepK.safetensors "
       "beside --save's STEM.safetensors (another --save NAME: NAME.stepK), keeping the two "
       "latest (--load resumes from one)")
      ->check(integerIn(0, kMaxSteps));
  c->add_option("--log-every", a.logEvery,
                "Print the loss every N steps (default: every step, or none on a terminal, "
                "where a progress bar shows it)")
      ->check(integerIn(1, kMaxSteps));
  c->add_option("--seed", a.seed, "Seed for weights and batches")->check(seedValue());
  addPrecision(*c, a.precision, true);
  addOptimizerOptions(*c, a);
  c->add_option("--load", a.load,
                "Start from this safetensors checkpoint (parameters, and "
                "optimizer state when present)")
      ->check(nonEmpty());
  c->add_option("--save", a.save,
                "Write parameters and optimizer state here after training "
                "(atomically)")
      ->check(nonEmpty());
  c->add_option("--on-nan", a.onNan,
                "When a step's loss or gradient norm is not finite (its update is never "
                "applied): stop (saving the weights from before it with --save, exit 1) or skip "
                "the step")
      ->check(CLI::IsMember({"stop", "skip"}));
  addOverlap(*c, a.overlap);
  addDataParallel(*c, a.dp);
  addMaxMemory(*c, a.maxMemory);
  addBackend(*c, a.backend);
  return c;
}

std::string irFileOf(const TrainArgs &a) {
  return isIrFile(a.model, a.ir) ? a.model : "";
}

void adoptCheckpoint(TrainArgs &a, bool training) {
  if (a.adopted)
    return;
  if (isIrFile(a.model, a.ir)) { // (the file is the model; a checkpoint may carry a tokenizer)
    refuseSetsForIr(a.model, a.ir, a.sets);
    a.loaded = a.load.empty() ? std::nullopt : orThrow(runtime::readDescription(a.load));
  } else {
    a.loaded = adoptDescription(a.load, a.model, a.sets, training);
  }
  a.adopted = true;
}

std::optional<runtime::ModelDescription> runDescription(const TrainArgs &a) {
  if (isIrFile(a.model, a.ir))
    return std::nullopt;
  std::string tokenizer = a.loaded ? a.loaded->tokenizerJson : "";
  if (tokenizer.empty() && !a.tokenizer.empty())
    tokenizer = readInputFile(a.tokenizer);
  // The settings but loss (models::isDefaultRunSetting: the other run settings stay, as
  // defaults) and those the weights make moot (models::mootWithWeights: init, ...), which would
  // only hold a bundle to a value that changes nothing.
  runtime::ModelDescription d{.model = a.model,
                              .settings = {},
                              .tokenizerJson = std::move(tokenizer),
                              .endTokens = a.loaded ? a.loaded->endTokens : std::vector<int32_t>{},
                              .task = {},
                              .hfArchitecture = a.loaded ? a.loaded->hfArchitecture : ""};
  const std::vector<models::Setting> settings = parseSettings(a.sets);
  const auto config = resolvedConfig(a.model, settings);
  for (const models::Setting &s : settings)
    if ((!models::isRunSetting(s.key) || models::isDefaultRunSetting(s.key)) &&
        !models::mootWithWeights(s.key, config))
      d.settings.emplace_back(s.key, s.value);
  // A max_len fitted to the lengths (seq_len=600 makes a table of 600 positions) is said, as the
  // weights fix it: an executable, which compares the settings as text, read it as the default
  // 512 and named the wrong one.
  const models::ModelEntry *entry = models::findModel(a.model);
  const bool given = std::any_of(settings.begin(), settings.end(),
                                 [](const models::Setting &s) { return s.key == "max_len"; });
  if (const std::optional<int64_t> maxLen =
          entry && !given ? fittedMaxLen(*entry, settings) : std::nullopt;
      maxLen && std::to_string(*maxLen) != configValue(config, "max_len"))
    d.settings.emplace_back("max_len", std::to_string(*maxLen));
  return d;
}

ir::Graph trainingStepFor(TrainArgs &a, TaskKind &task, passes::PipelineReport *report) {
  adoptCheckpoint(a);
  using Sched = passes::LrSchedule::Kind;
  using Opt = passes::OptimizerConfig::Kind;
  a.opt.kind = a.optimizer == "sgd" ? Opt::Sgd : a.optimizer == "adam" ? Opt::Adam : Opt::AdamW;
  a.opt.schedule.kind = a.schedule == "inverse_sqrt"    ? Sched::InverseSqrt
                        : a.schedule == "warmup_cosine" ? Sched::WarmupCosine
                                                        : Sched::Constant;
  // A resumed schedule spans the checkpoint's steps and these (--steps more).
  a.opt.schedule.total = a.steps + (a.load.empty() || a.opt.schedule.kind == Sched::Constant
                                        ? 0
                                        : orThrow(runtime::batchesIn(a.load)));
  if (a.opt.schedule.kind == Sched::WarmupCosine && a.opt.schedule.warmup >= a.opt.schedule.total)
    throw UserError(fmt::format("--warmup {}: --schedule warmup_cosine needs fewer warmup steps "
                                "than the run has ({}: {})",
                                a.opt.schedule.warmup, a.opt.schedule.total,
                                a.load.empty() ? "--steps" : "the checkpoint's and --steps"));
  a.opt.guardNonFinite = true;
  std::string taskName = a.task;
  if (taskName.empty() && !a.load.empty()) // the checkpoint's, which the run continues
    taskName = orThrow(runtime::checkpointTask(a.load, !a.data.empty()));
  if (taskName.empty()) { // the model's own; an encoder-decoder's with text data: its pairs
    const models::ModelEntry *m = models::findModel(a.model);
    taskName = !m ? "lm" : m->task == "copy" && !a.data.empty() ? "pairs" : std::string(m->task);
  }
  task = orThrow(runtime::parseTask(taskName));
  if (a.opt.schedule.kind == Sched::InverseSqrt) {
    // d_model from the first parameter that has it: the token embedding's width.
    ir::Graph probe = modelGraph(a.model, a.ir, parseSettings(a.sets));
    for (const ir::Arg &arg : probe.args())
      if (arg.kind == ir::Arg::Kind::Param) {
        a.opt.schedule.dModel = probe.type(arg.value).shape.back();
        break;
      }
  }
  ir::Graph step = buildStep(a, task, report);
  // Refused here, before any data is read: kiln compile --train would otherwise write a bundle
  // whose executable cannot train.
  if (runtime::isEncoderDecoderTask(task))
    if (Status s = runtime::checkTaskShape(task, shapeFor(a, step, task, 256)); !s)
      // An IR file's lengths are its graph's: no --set changes them (refuseSetsForIr).
      throw UserError(isIrFile(a.model, a.ir)
                          ? fmt::format("{}: {} (an IR file's lengths are those of the model it "
                                        "was dumped from: dump it again with that tgt_len)",
                                        shownIrFile(a.model), s.error().message)
                          : s.error().message);
  return step;
}

void runTrain(TrainArgs &a) {
  std::unique_ptr<runtime::Communicator> world = openWorld();
  a.ranks = world->size();
  noteIfAlone(a.dp, a.ranks);
  a.oneMachine = world->localSize() == world->size();
  if (a.backend.threads == 0 && world->size() > 1) // the machine's cores, shared by its ranks
    a.backend.threads = runtime::threadsPerRank(*world);
  // (Said before the reference's collective says it, by its node.)
  if (world->size() > 1 && (a.precision == "f64" || a.backend.name == "reference"))
    throw UserError(fmt::format("{}: it runs on the reference backend, which is one process; "
                                "under mpirun, the {} ranks train at f32 or bf16 on the highway "
                                "or llvm backend",
                                a.precision == "f64" ? "--precision f64" : "--backend reference",
                                world->size()));
  orThrow(runtime::quietUnlessRankZero(*world));
  adoptCheckpoint(a);
  TaskKind task = TaskKind::Lm;
  CompileStatus status(fmt::format("@{} for training{}", a.model,
                                   a.ranks > 1 ? fmt::format(" on {} ranks", a.ranks) : ""));
  ir::Graph step = trainingStepFor(a, task, status.report());
  trainLoop(a, step, task, status, *world);
}

} // namespace kiln::tools
