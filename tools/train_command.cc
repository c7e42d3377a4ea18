// `kiln train` (see train_command.h).
#include "tools/train_command.h"

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

#include "models/zoo.h"
#include "passes/stages.h"
#include "runtime/checkpoint.h"
#include "runtime/tasks.h"
#include "runtime/trainer.h"
#include "runtime/weights.h"
#include "tools/cli_util.h"

namespace kiln::tools {

namespace {

using runtime::TaskKind;

const ir::Arg &inputNamed(const ir::Graph &g, std::string_view name, TaskKind task) {
  const ir::Arg *a = g.findArg(name);
  if (!a || a->kind != ir::Arg::Kind::Input)
    throw UserError(fmt::format("task {} needs a model input \"{}\"; model @{} has none",
                                runtime::taskName(task), name, g.name()));
  return *a;
}

// The task's batch shape, read off the model's inputs.
runtime::TaskShape shapeFor(const ir::Graph &g, TaskKind task, std::string_view text) {
  bool seq2seq = task == TaskKind::Copy || task == TaskKind::Reverse;
  const ir::Arg &in = inputNamed(g, seq2seq ? "src" : "tokens", task);
  const ir::Shape &s = g.type(in.value).shape;
  runtime::TaskShape shape{.batch = s[0], .vocab = in.range};
  (seq2seq ? shape.srcLen : shape.seqLen) = s[1];
  orThrow(runtime::checkTask(task, shape, text));
  return shape;
}

ir::Graph buildStep(TrainArgs &a, TaskKind task) {
  std::vector<models::Setting> settings = parseSettings(a.sets);
  addDefaultSetting(settings, "loss", "true");
  // Seq2seq targets are the source (or its reverse) plus EOS: the decoder length is S + 1.
  if (task == TaskKind::Copy || task == TaskKind::Reverse) {
    ir::Graph probe = orThrow(models::buildModel(a.model, settings));
    int64_t srcLen = probe.type(inputNamed(probe, "src", task).value).shape[1];
    addDefaultSetting(settings, "tgt_len", std::to_string(srcLen + 1));
  }
  ir::Graph forward = orThrow(models::buildModel(a.model, settings));
  return orThrow(passes::trainingStep(std::move(forward), a.opt));
}

void trainLoop(TrainArgs &a, const ir::Graph &step, TaskKind task) {
  if (!a.data.empty() && task != TaskKind::Lm && task != TaskKind::Mlm)
    throw UserError(fmt::format("--data: task {} makes its own sequences; a text file feeds lm "
                                "(gpt) and mlm (bert)",
                                runtime::taskName(task)));
  const std::string text = a.data.empty() ? std::string() : readInputFile(a.data);
  const std::string_view corpus = a.data.empty() ? runtime::corpus() : std::string_view(text);
  runtime::TaskShape shape = shapeFor(step, task, corpus);
  std::unique_ptr<runtime::Executable> exe =
      compileChecked(step, a.backend, a.precision == "f64", a.maxMemory,
                     fmt::format("a training step of @{}", step.name()));
  orThrow(runtime::initWeights(*exe, a.seed));
  runtime::Trainer trainer = orThrow(runtime::Trainer::create(*exe));
  if (!a.load.empty())
    fmt::print("loaded {} tensors from {}\n", orThrow(runtime::loadCheckpoint(*exe, a.load)),
               a.load);
  auto start = std::chrono::steady_clock::now();
  double first = 0, last = 0;
  // Batch numbers continue from a loaded checkpoint, so a resumed run sees new data.
  uint64_t firstBatch = static_cast<uint64_t>(trainer.stepsDone());
  int64_t skipped = 0;
  InterruptGuard interrupt;
  for (int64_t k = 0; k < a.steps; ++k) {
    if (int signal = InterruptGuard::received()) {
      std::string what = fmt::format("interrupted by {} after {} of {} steps",
                                     InterruptGuard::name(signal), k, a.steps);
      if (!a.save.empty()) {
        orThrow(runtime::saveCheckpoint(*exe, a.save));
        what +=
            fmt::format("; saved parameters and optimizer state to {} (--load resumes)", a.save);
      }
      throw UserError(what);
    }
    runtime::Batch batch = runtime::makeBatch(task, shape, a.seed, firstBatch + k, corpus);
    double loss = orThrow(trainer.step(batch));
    if (!trainer.lastUpdateApplied()) {
      // The guarded update left every weight as it was before this step.
      std::string what =
          fmt::format("step {}: the loss ({}) or the gradient norm is not finite", k + 1, loss);
      if (a.onNan == "skip") {
        ++skipped;
        fmt::print("{}; update skipped (--on-nan skip)\n", what);
        continue;
      }
      if (!a.save.empty()) {
        orThrow(runtime::saveCheckpoint(*exe, a.save));
        what += fmt::format("; saved the weights from before it to {}", a.save);
      }
      throw UserError(
          fmt::format("{}; stopped (--on-nan stop; --on-nan skip skips such steps)", what));
    }
    if (k == skipped) // the first step applied
      first = loss;
    last = loss;
    if ((k + 1) % a.logEvery == 0 || k == 0 || k + 1 == a.steps)
      fmt::print("step {:>5}  loss {:.6f}\n", k + 1, loss);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!a.save.empty()) {
    orThrow(runtime::saveCheckpoint(*exe, a.save));
    fmt::print("saved parameters and optimizer state to {}\n", a.save);
  }
  std::string losses = skipped == a.steps ? std::string("no update applied")
                                          : fmt::format("loss {:.4f} -> {:.4f}", first, last);
  fmt::print("trained {} steps of {} on task {} in {:.2f} s ({:.1f} ms/step): {}\n", a.steps,
             a.model, runtime::taskName(task), s, 1000 * s / double(std::max<int64_t>(a.steps, 1)),
             losses);
  if (skipped > 0)
    fmt::print("skipped {} of {} updates whose loss or gradient norm was not finite\n", skipped,
               a.steps);
}

} // namespace

// Flag limits: a run of more than a billion steps is a typo, and numbers past kHuge are not
// hyperparameters.
constexpr int64_t kMaxSteps = 1'000'000'000;
constexpr double kHuge = 1e30;

void addOptimizerOptions(CLI::App &c, TrainArgs &a) {
  c.add_option("--optimizer", a.optimizer, "sgd | adam | adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  c.add_option("--lr", a.opt.schedule.lr, "Learning rate (inverse_sqrt: its factor)")
      ->check(finiteIn(0, kHuge, /*openLow=*/true));
  c.add_option("--schedule", a.schedule, "constant | inverse_sqrt | warmup_cosine")
      ->check(CLI::IsMember({"constant", "inverse_sqrt", "warmup_cosine"}));
  c.add_option("--warmup", a.opt.schedule.warmup, "Warmup steps")->check(integerIn(0, kMaxSteps));
  c.add_option("--min-lr", a.opt.schedule.minLr, "warmup_cosine: final learning rate")
      ->check(finiteIn(0, kHuge));
  c.add_option("--momentum", a.opt.momentum, "SGD momentum")->check(finiteIn(0, kHuge));
  c.add_flag("--nesterov", a.opt.nesterov, "SGD: Nesterov momentum");
  c.add_option("--beta1", a.opt.beta1, "Adam beta1")->check(finiteIn(0, 1));
  c.add_option("--beta2", a.opt.beta2, "Adam beta2")->check(finiteIn(0, 1));
  c.add_option("--eps", a.opt.eps, "Adam epsilon")->check(finiteIn(0, kHuge, true));
  c.add_option("--weight-decay", a.opt.weightDecay, "L2 (sgd, adam) or decoupled (adamw)")
      ->check(finiteIn(0, kHuge));
  c.add_option("--clip-norm", a.opt.clipNorm, "Clip gradients to this global norm (0 = off)")
      ->check(finiteIn(0, kHuge));
}

CLI::App *addTrainCommand(CLI::App &app, TrainArgs &a) {
  CLI::App *c = app.add_subcommand("train", "Train a model on a synthetic task on a backend "
                                            "(--backend), printing the loss per step");
  c->add_option("model", a.model, "Model name")->required();
  c->add_option("--set", a.sets, "Config override key=value (repeatable)");
  c->add_option("--task", a.task, "copy | reverse (transformer), lm (gpt), mlm (bert)")
      ->check(CLI::IsMember({"copy", "reverse", "lm", "mlm"}));
  c->add_option("--data", a.data,
                "lm, mlm: draw the windows from this text file's bytes (default: the embedded "
                "corpus)")
      ->check(nonEmpty());
  c->add_option("--steps", a.steps, "Training steps")->check(integerIn(1, kMaxSteps));
  c->add_option("--log-every", a.logEvery, "Print the loss every N steps")
      ->check(integerIn(1, kMaxSteps));
  c->add_option("--seed", a.seed, "Seed for weights and batches")->check(seedValue());
  c->add_option("--precision", a.precision, "f32 | f64")->check(CLI::IsMember({"f32", "f64"}));
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
  addMaxMemory(*c, a.maxMemory);
  addBackend(*c, a.backend);
  return c;
}

ir::Graph trainingStepFor(TrainArgs &a, TaskKind &task) {
  using Sched = passes::LrSchedule::Kind;
  using Opt = passes::OptimizerConfig::Kind;
  a.opt.kind = a.optimizer == "sgd" ? Opt::Sgd : a.optimizer == "adam" ? Opt::Adam : Opt::AdamW;
  a.opt.schedule.kind = a.schedule == "inverse_sqrt"    ? Sched::InverseSqrt
                        : a.schedule == "warmup_cosine" ? Sched::WarmupCosine
                                                        : Sched::Constant;
  a.opt.schedule.total = a.steps;
  a.opt.guardNonFinite = true;
  std::string taskName = a.task;
  if (taskName.empty())
    taskName = a.model == "transformer" ? "copy" : a.model == "bert" ? "mlm" : "lm";
  task = orThrow(runtime::parseTask(taskName));
  if (a.opt.schedule.kind == Sched::InverseSqrt) {
    // d_model from the first parameter that has it: the token embedding's width.
    ir::Graph probe = orThrow(models::buildModel(a.model, parseSettings(a.sets)));
    for (const ir::Arg &arg : probe.args())
      if (arg.kind == ir::Arg::Kind::Param) {
        a.opt.schedule.dModel = probe.type(arg.value).shape.back();
        break;
      }
  }
  return buildStep(a, task);
}

void runTrain(TrainArgs &a) {
  TaskKind task = TaskKind::Lm;
  ir::Graph step = trainingStepFor(a, task);
  trainLoop(a, step, task);
}

} // namespace kiln::tools
