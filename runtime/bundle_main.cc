// The standalone executable's commands (see bundle_main.h).
#include "runtime/bundle_main.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/bundle_args.h"
#include "runtime/bundle_loader.h"
#include "runtime/checkpoint.h"
#include "runtime/cpu_features.h"
#include "runtime/environment.h"
#include "runtime/generation.h"
#include "runtime/input_file.h"
#include "runtime/interrupt.h"
#include "runtime/kernels/gemm.h"
#include "runtime/model_description.h"
#include "runtime/output_file.h"
#include "runtime/safetensors.h"
#include "runtime/tasks.h"
#include "runtime/thread_pool.h"
#include "runtime/tokenizer.h"
#include "runtime/trainer.h"
#include "runtime/training_session.h"
#include "runtime/weights.h"

namespace kiln::runtime {

namespace {

struct Failure {
  std::string message;
};

template <class T> T orFail(Expected<T> e) {
  if (!e)
    throw Failure{e.error().message};
  return std::move(*e);
}
void orFail(const Status &s) {
  if (!s)
    throw Failure{s.error().message};
}

std::string required(const BundleArgs &o, const std::string &name) {
  std::optional<std::string> v = o.text(name);
  if (!v)
    throw Failure{fmt::format("{} FILE is required", name)};
  return *v;
}

// generate and forward run a forward program: a training step's run would update the weights in
// place (AdamW) once per token and print other text.
void refuseTrainingStep(const Program &main, const std::string &command) {
  if (main.trains())
    throw Failure{fmt::format("{}: this bundle is a training step: it was compiled with --train "
                              "(compile it without --train to {})",
                              command, command == "forward" ? "run it forward" : command)};
}

// kiln's reader: a directory named as one, the 2 GiB cap (a big sparse file was read until
// bad_alloc), a FIFO or device read to its end.
std::string readText(const std::string &path) {
  return orFail(readInputText(path));
}

// The description of the checkpoint of --weights (else --load), which carries its tokenizer and
// end tokens (kiln compile puts the model's in the bundle's weights, runtime/model_description.h),
// and that checkpoint (nullopt and "" without either flag, or for a checkpoint that says nothing).
std::pair<std::optional<ModelDescription>, std::string> loadedDescription(const BundleArgs &o) {
  for (const char *flag : {"--weights", "--load"})
    if (std::optional<std::string> path = o.text(flag))
      return {orFail(readDescription(*path)), *path};
  return {};
}

// A checkpoint (--weights, --load) that says it is of another model or settings than the
// executable's is refused before anything runs (runtime/model_description.h: checkCheckpointFits).
void checkCheckpointModel(const BundleSet &set, const BundleArgs &o) {
  for (const char *flag : {"--weights", "--load"})
    if (std::optional<std::string> path = o.text(flag))
      orFail(checkCheckpointFits(*set.main, *path, "this executable"));
}

// --tokenizer's, else the checkpoint's, else byte tokens (chooseTokenizer, as kiln's commands).
Tokenizer tokenizerOf(const BundleArgs &o) {
  const auto [checkpoint, where] = loadedDescription(o);
  return orFail(chooseTokenizer(o.text("--tokenizer").value_or(""),
                                checkpoint ? &*checkpoint : nullptr, where));
}

// What the program trains on, as `kiln train` would: for an encoder-decoder ("src" input) the
// source<TAB>target lines of --data (task pairs) or the copy or reverse task (--task; else the one
// the checkpoint of the flag `resumes` ("--load", "--weights") was trained on, else copy), else lm
// or mlm (token_types) windows of the --data text; a text's ids are the tokenizer's, of all but
// its last `heldOut` fraction (whole lines for pairs).
struct Task {
  TaskKind kind = TaskKind::Lm;
  TaskShape shape;
  std::vector<int32_t> ids, heldOut; // of the text and of its held-out tail (none: copy, reverse)
};

// An encoder-decoder's target length: its "tgt" input's (0 if it has none of [batch, length]).
int64_t targetLength(const Program &p) {
  const Symbol *tgt = p.argument("tgt");
  return tgt && tgt->shape.size() == 2 ? tgt->shape[1] : 0;
}

Task taskOf(const Program &p, const BundleArgs &o, const BundleSet &set, double heldOut,
            const char *resumes) {
  if (!p.loss())
    throw Failure{"this bundle has no loss: it was compiled for inference (compile it with "
                  "--train)"};
  auto rows = [](const Symbol &s) {
    if (s.shape.size() != 2)
      throw Failure{fmt::format("the \"{}\" input is not [batch, length]", s.name)};
    return s;
  };
  Task t;
  const Symbol *src = p.argument("src");
  std::string seq2seq = "copy";
  if (const std::optional<std::string> checkpoint = o.text(resumes);
      src && !o.has("--task") && checkpoint)
    if (const std::string task = orFail(checkpointTask(*checkpoint, o.has("--data")));
        !task.empty())
      seq2seq = task;
  if (seq2seq == "pairs" && !o.has("--data"))
    throw Failure{pairsNeedData(resumes, *o.text(resumes)).message};
  if (src && set.padId >= 0)
    orFail(checkPadId(
        set.padId,
        fmt::format("task {}", o.has("--data") ? "pairs" : o.text("--task").value_or(seq2seq))));
  if (src && !o.has("--data")) {
    const std::string name = o.text("--task").value_or(seq2seq);
    if (name != "copy" && name != "reverse")
      throw Failure{fmt::format("--task {}: expected copy or reverse (or --data FILE of "
                                "source<TAB>target lines)",
                                name)};
    if (o.has("--tokenizer"))
      throw Failure{fmt::format("--tokenizer: task {} makes its own token ids", name)};
    t.kind = name == "copy" ? TaskKind::Copy : TaskKind::Reverse;
    if (o.has("--val-fraction"))
      orFail(checkHeldOut(t.kind));
    t.shape = {.batch = rows(*src).shape[0],
               .srcLen = src->shape[1],
               .tgtLen = targetLength(p),
               .vocab = src->range};
    orFail(checkTask(t.kind, t.shape));
    return t;
  }
  if (o.has("--task"))
    throw Failure{src ? "--task: give either --task copy|reverse or --data FILE"
                      : "--task: this model trains on the text of --data"};
  const std::string path = required(o, "--data");
  const std::string text = readText(path);
  const Tokenizer tokenizer = tokenizerOf(o);
  if (src) {
    t.kind = TaskKind::Pairs;
    t.shape = {.batch = rows(*src).shape[0],
               .srcLen = src->shape[1],
               .tgtLen = targetLength(p),
               .vocab = src->range,
               .textVocab = tokenizer.vocabSize(),
               .ignore = set.ignoreId};
    const TextSplit split = splitLines(text, heldOut);
    auto encode = [&](std::string_view part, int64_t firstLine) {
      Expected<std::vector<int32_t>> ids = pairTokens(
          part, [&](std::string_view half) { return tokenizer.encode(half); }, firstLine);
      if (!ids)
        throw Failure{fmt::format("--data {}: {}", path, ids.error().message)};
      return std::move(*ids);
    };
    t.ids = encode(split.train, 1);
    t.heldOut =
        encode(split.validation, 1 + std::count(split.train.begin(), split.train.end(), '\n'));
  } else {
    const Symbol *tokens = p.argument("tokens");
    if (!tokens)
      throw Failure{"this program has neither a \"src\" nor a \"tokens\" input to train"};
    t.kind = p.argument("token_types") ? TaskKind::Mlm : TaskKind::Lm;
    t.shape = {.batch = rows(*tokens).shape[0],
               .seqLen = tokens->shape[1],
               .vocab = tokens->range,
               .textVocab = tokenizer.vocabSize(),
               .ignore = set.ignoreId,
               .pad = t.kind == TaskKind::Mlm ? set.padId : -1};
    const TextSplit split = splitText(text, heldOut);
    t.ids = tokenizer.encode(split.train), t.heldOut = tokenizer.encode(split.validation);
  }
  orFail(checkTrainingText(
      t.kind, t.shape, t.ids, heldOut,
      [&] {
        if (t.kind != TaskKind::Pairs)
          return tokenizer.encode(text);
        Expected<std::vector<int32_t>> ids =
            pairTokens(text, [&](std::string_view half) { return tokenizer.encode(half); });
        return ids ? std::move(*ids) : std::vector<int32_t>{};
      },
      "--data " + path));
  return t;
}

// The ranks `train` runs with: MPI's world for a data-parallel executable, as many as it was
// compiled for; else this process alone (under mpirun, refused: each rank would train a model of
// its own).
std::unique_ptr<Communicator> trainingWorld(const BundleSet &set, const std::string &name) {
  const int64_t ranks = set.main->ranks;
  if (ranks == 1) {
    if (launchedByMpi())
      throw Failure{fmt::format("mpirun started this executable, but its training step is for "
                                "one process: each rank would train a model of its own (kiln "
                                "compile --train --ranks N makes one for N ranks)")};
    return aloneCommunicator();
  }
  if (!launchedByMpi() || !set.openWorld)
    throw Failure{fmt::format("this executable trains on {0} data-parallel ranks (kiln compile "
                              "--ranks {0}): start it as mpirun -np {0} {1} train ...",
                              ranks, name)};
  std::unique_ptr<Communicator> world = orFail(set.openWorld());
  if (world->size() != ranks)
    throw Failure{fmt::format("mpirun started {} ranks, but this executable trains on {} (kiln "
                              "compile --ranks {}): start it as mpirun -np {}",
                              world->size(), ranks, ranks, ranks)};
  return world;
}

// The files a training run reads that none it writes may replace (--load aside: --save may
// resume over it).
std::vector<RunInput> runInputs(const BundleArgs &o) {
  return {{"--data", o.text("--data").value_or("")},
          {"--tokenizer", o.text("--tokenizer").value_or("")},
          {"the executable itself", "/proc/self/exe"}};
}

int train(Executor &exe, const BundleArgs &o, const BundleSet &set, Communicator &world,
          const std::string &name) {
  if (exe.program().loss() && !exe.program().trains())
    throw Failure{"train: this bundle computes a loss but updates no weights: it was compiled "
                  "without --train (an IR file's loss alone makes no training step; compile it "
                  "with --train)"};
  // As kiln train: the text's last --val-fraction is held out (never trained on).
  const Task task = taskOf(exe.program(), o, set, o.number("--val-fraction", 0.1), "--load");
  if (const std::optional<std::string> note =
          cutLinesNote(task.kind, task.shape, task.ids, "--data " + o.text("--data").value_or(""));
      note && world.rank() == 0)
    printNote(*note);
  TrainingOptions options;
  options.save = o.text("--save").value_or("");
  if (!options.save.empty()) { // before the work, as kiln train checks
    if (Status st = checkOutputFile(options.save); !st)
      throw Failure{fmt::format("--save {}", st.error().message)};
    orFail(checkNotAnInput("--save", options.save, runInputs(o)));
  }
  options.saveEvery = o.integer("--save-every", 0);
  orFail(checkSaveEvery(options.saveEvery, options.save));
  const std::string onNan = o.text("--on-nan").value_or("stop");
  if (onNan != "stop" && onNan != "skip")
    throw Failure{fmt::format("--on-nan {}: expected stop or skip", onNan)};
  options.skipNonFinite = onNan == "skip";
  // Batches drawn before (kiln train's runs count skipped updates too).
  const std::optional<std::string> load = o.text("--load");
  options.firstBatch = load ? static_cast<uint64_t>(orFail(batchesIn(*load))) : 0;
  // A schedule with an end trains up to it by default, and never past it: its steps there would
  // all run at min_lr, silently (a 40-step schedule run for 80 left the weights of step 40).
  const uint64_t first = options.firstBatch;
  const int64_t horizon = set.scheduleSteps, left = horizon - static_cast<int64_t>(first);
  if (horizon > 0 && left <= 0)
    throw Failure{fmt::format("--load {}: its {} steps reach the end of this bundle's "
                              "learning-rate schedule ({} steps): recompile with kiln compile "
                              "--steps N for a longer one",
                              *load, first, horizon)};
  options.steps = o.integer("--steps", horizon > 0 ? left : 100);
  if (horizon > 0 && options.steps > left)
    throw Failure{fmt::format(
        "--steps {}: this bundle's learning-rate schedule ends at step {} "
        "(kiln compile --steps {}){}; steps past it would all train at its "
        "final rate. Recompile with kiln compile --steps N for a longer run",
        options.steps, horizon, horizon,
        first > 0 ? fmt::format(", {} steps after the checkpoint's {}", left, first) : "")};
  // With --load: a rolling checkpoint (of a later step) must not replace the one it resumes.
  std::vector<RunInput> inputs = runInputs(o);
  inputs.push_back({"--load", load.value_or("")});
  orFail(checkRollingCheckpoints(options, inputs));
  options.logEvery = o.integer("--log-every", 0);
  options.evalEvery = o.integer("--eval-every", 0);
  options.evalBatches = o.integer("--eval-batches", 8);
  if (o.has("--eval-batches") && !o.has("--eval-every")) // (as kiln train says it)
    throw Failure{"--eval-batches requires --eval-every"};
  if (set.resumes && !load)
    throw Failure{fmt::format("this executable was compiled from a checkpoint's weights (kiln "
                              "compile --train --load): train from them with --load {} (the "
                              "bundle's weights file); without it, it would train fresh weights",
                              set.resumes)};
  TrainingData data{task.kind, task.shape, o.has("--seed") ? o.seed("--seed") : set.seed,
                    TaskText(task.ids)};
  std::vector<Batch> validation;
  options.validationDigest = digest(task.heldOut);
  if (options.evalEvery > 0) {
    if (!task.ids.empty())
      if (Status st = checkTask(task.kind, task.shape, task.heldOut); !st)
        throw Failure{fmt::format("--eval-every: the validation text (--val-fraction {} of the "
                                  "text): {}",
                                  o.number("--val-fraction", 0.1), st.error().message)};
    // (joinRanks sets data's rank below.)
    validation =
        validationBatches({task.kind, task.shape, data.seed, {}, world.rank(), world.size()},
                          task.heldOut, options.evalBatches);
  }
  options.what = fmt::format("{} on task {}", exe.program().name, taskName(task.kind));
  // The checkpoints say what they are (--load's description, else the bundle's own), with the
  // tokenizer the run trains with, and the settings it ran with: the bundle's, where they are
  // not the checkpoint's (continuedBy). Said, not refused: a run may go on at another batch;
  // kiln train --load would have continued the checkpoint's.
  const std::optional<ModelDescription> own = orFail(bundleDescription(*set.main));
  if (load)
    options.description = orFail(readDescription(*load));
  if (options.description && own) {
    if (const std::vector<std::string> differ = otherSettings(*options.description, *own);
        !differ.empty() && world.rank() == 0)
      std::fprintf(stderr,
                   "%s: note: the checkpoint was trained with %s; this executable trains with "
                   "its own (kiln compile --train --load %s compiles one with the checkpoint's)\n",
                   exe.program().name.c_str(), fmt::format("{}", fmt::join(differ, ", ")).c_str(),
                   load->c_str());
    options.description = continuedBy(*options.description, *own);
  }
  if (!options.description)
    options.description = own;
  if (options.description && o.has("--tokenizer"))
    options.description->tokenizerJson = readText(*o.text("--tokenizer"));
  if (options.description)
    options.description->task = taskName(task.kind);
  // The ranks' digest of their program: its name, every tensor's name, dtype and shape, its
  // steps, its constants (the learning rate and the schedule's are there), the model and settings
  // it was compiled from (dropout among them) and its optimizer: executables compiled otherwise
  // (a stale one on a rank) are refused, as kiln's ranks with other settings are.
  const kiln_bundle &b = *set.main;
  std::string program = exe.program().name;
  for (const Symbol &s : exe.program().symbols)
    program += fmt::format(" {}:{}[{}]", s.name, dtypeName(s.dtype), fmt::join(s.shape, ","));
  for (int64_t i = 0; i < b.step_count; ++i)
    program += fmt::format(" {}", b.step_kinds[i]);
  program += fmt::format(" {} {} {} {}", b.model ? b.model : "", b.settings ? b.settings : "",
                         set.optimizer ? set.optimizer : "",
                         digest(std::string_view(reinterpret_cast<const char *>(b.constants),
                                                 static_cast<size_t>(b.region_bytes[0]))));
  orFail(
      joinRanks(world, digest(program), backgroundPays(world, exe.threads()), exe, data, options));
  orFail(initWeights(exe, data.seed));
  Trainer trainer = orFail(Trainer::create(exe));
  if (load)
    fmt::print("loaded {} tensors from {}\n", orFail(loadCheckpoint(exe, *load)), *load);
  orFail(checkSameWeights(world, exe, load ? *load : std::string()));
  // Validation on the bundle's own program, without dropout, as kiln train's (an older bundle has
  // none: the step itself, with its weights restored after each batch).
  std::unique_ptr<Executor> evaluates;
  if (set.eval && options.evalEvery > 0)
    evaluates = orFail(loadBundle(*set.eval, exe.threads()));
  const TrainingResult done = orFail(runTraining(trainer, data, options, [&] {
    return meanOverRanks(world, evaluates ? validationLoss(*evaluates, exe, validation)
                                          : meanLoss(exe, validation, true));
  }));
  if (done.stopped.empty())
    return 0;
  // (Every rank stopped after the same step: they end together, this rank's error said.)
  printError(name, done.stopped);
  orFail(world.endTogether());
  return 1;
}

// The mean loss of the checkpoint's weights over --batches windows of the text train
// --eval-every validates on: the tail --val-fraction holds out, drawn as train's validation
// batches (the same --seed and as many batches: the loss train printed for these weights); with
// --val-fraction 0, of the whole text (a held-out file of its own).
int eval(Executor &exe, const BundleArgs &o, const BundleSet &set) {
  const std::string weights = required(o, "--weights");
  const double fraction = o.number("--val-fraction", 0.1);
  const Task task = taskOf(exe.program(), o, set, fraction, "--weights");
  if (fraction > 0 && !task.ids.empty())
    if (Status st = checkTask(task.kind, task.shape, task.heldOut); !st)
      throw Failure{fmt::format("--data: the held-out text (--val-fraction {} of the text; 0 "
                                "scores the whole text): {}",
                                fraction, st.error().message)};
  const int64_t count = o.integer("--batches", 8);
  const uint64_t seed = o.has("--seed") ? o.seed("--seed") : set.seed; // (train's batches)
  // The bundle's validation program (no dropout), else (an older bundle) the step, restored.
  std::unique_ptr<Executor> evaluates;
  if (set.eval)
    evaluates = orFail(loadBundle(*set.eval, exe.threads()));
  Executor &runs = evaluates ? *evaluates : exe;
  orFail(initWeights(runs, 0));
  orFail(loadCheckpoint(runs, weights));
  // A data-parallel bundle's train validates each rank's rows of the global batches and averages
  // the ranks' losses (in f32, as the all-reduce does): each rank's part in turn, here.
  const int ranks = static_cast<int>(std::max<int64_t>(set.main->ranks, 1));
  double loss = 0;
  float sum = 0;
  for (int r = 0; r < ranks; ++r) {
    const std::vector<Batch> batches = validationBatches(
        {task.kind, task.shape, seed, {}, r, ranks}, fraction > 0 ? task.heldOut : task.ids, count);
    loss = orFail(meanLoss(runs, batches, !evaluates));
    sum += static_cast<float>(loss);
  }
  if (ranks > 1)
    loss = sum / static_cast<float>(ranks);
  fmt::print("loss {:.6f} (mean of {} batches)\n", loss, count);
  return 0;
}

// Token rows from the file's bytes, consecutive windows (wrapping around a short file); every
// value output printed (shape, first values) and written to --output as safetensors.
int forward(Executor &exe, const BundleArgs &o) {
  refuseTrainingStep(exe.program(), "forward");
  const std::string weights = required(o, "--weights");
  const std::string text = readText(required(o, "--input"));
  if (std::optional<std::string> path = o.text("--output")) { // before the work
    if (Status st = checkOutputFile(*path); !st)
      throw Failure{fmt::format("--output {}", st.error().message)};
    const RunInput inputs[] = {{"--weights", weights},
                               {"--input", *o.text("--input")},
                               {"the executable itself", "/proc/self/exe"}};
    orFail(checkNotAnInput("--output", *path, inputs));
  }
  const Symbol *tokens = exe.program().argument("tokens");
  if (!tokens || tokens->shape.size() != 2)
    throw Failure{
        "forward feeds text to a \"tokens\" input [batch, length]; this program has none"};
  if (text.empty())
    throw Failure{fmt::format("{}: empty input", *o.text("--input"))};
  orFail(initWeights(exe, 0));
  orFail(loadCheckpoint(exe, weights));
  orFail(randomizeInputs(exe, 0)); // other inputs (token types): seeded
  // Bytes as token ids: each must be one of the model's (else a gather's "index out of range").
  HostTensor t(tokens->dtype, tokens->shape);
  for (int64_t k = 0; k < t.numElements(); ++k) {
    const size_t at = static_cast<size_t>(k) % text.size();
    const auto byte = static_cast<unsigned char>(text[at]);
    if (tokens->range > 0 && byte >= tokens->range)
      throw Failure{fmt::format("{}: byte {} is 0x{:02x}, past the model's vocab of {} (forward "
                                "feeds the file's bytes as token ids)",
                                *o.text("--input"), at, byte, tokens->range)};
    t.setInt(k, byte);
  }
  orFail(exe.write(*tokens, t));
  const auto fed = static_cast<size_t>(t.numElements());
  if (fed != text.size()) // (not silently: the program's input has its own size)
    fmt::print("input: {} of {} bytes, as the tokens [{}]{}\n", std::min(fed, text.size()),
               text.size(), fmt::join(tokens->shape, ","),
               fed > text.size() ? fmt::format(" (the {} bytes repeated)", text.size()) : "");
  orFail(exe.run());
  SafetensorsFile out;
  for (const Symbol &s : exe.program().symbols)
    if (s.kind == Symbol::Kind::Output && s.role == Symbol::Role::Value) {
      HostTensor v = exe.read(s);
      // Six decimals, as printf's %.6f (what examples/embed prints too).
      fmt::print("{} [{}]: {:.6f}{}\n", s.name, fmt::join(s.shape, ","), v.get(0),
                 v.numElements() > 1 ? fmt::format(", {:.6f}, ...", v.get(1)) : "");
      out.tensors.push_back(toSafetensors(s.name, v));
    }
  if (std::optional<std::string> path = o.text("--output")) {
    orFail(writeSafetensors(*path, out));
    fmt::print("wrote {} to {}\n", out.tensors.size() == 1 ? "it" : "them", *path);
  }
  return 0;
}

// A bundle's program with the checkpoint's weights (parameters; not optimizer state or caches).
std::unique_ptr<Executor> loadWith(const kiln_bundle &b, int threads, const std::string &weights) {
  std::unique_ptr<Executor> exe = orFail(loadBundle(b, threads));
  orFail(initWeights(*exe, 0));
  orFail(loadCheckpoint(*exe, weights));
  return exe;
}

// The bundle's two generation programs (prefill or encode, and decode) with the weights.
struct GenerationPair {
  std::unique_ptr<Executor> first, decode;
};
GenerationPair loadGeneration(const BundleSet &set, int threads, const std::string &weights) {
  return {loadWith(*set.prefill, threads, weights), loadWith(*set.decode, threads, weights)};
}

BeamOptions beamOptions(const BundleArgs &o) {
  BeamOptions b;
  b.maxNew = o.integer("--max-new", 64);
  b.lengthPenalty = o.number("--length-penalty", 1.0);
  return b;
}

// The rows of the bundle's decode program, which --beam (if given) must name: beam search runs a
// beam per row.
int64_t beamRows(const Executable &decode, const BundleArgs &o) {
  const Symbol *pos = decode.program().argument("pos");
  if (!pos || pos->shape.size() != 1)
    throw Failure{"--beam: this bundle's decode program has no \"pos\" input [rows]"};
  const int64_t rows = pos->shape[0];
  if (o.integer("--beam", rows) != rows)
    throw Failure{fmt::format("--beam {0}: this bundle decodes {1} row{2} at a time, so its beam "
                              "search runs {1} beam{2} (kiln compile --gen-batch N sets the "
                              "rows)",
                              *o.text("--beam"), rows, rows == 1 ? "" : "s")};
  return rows;
}

// The prompt continued as kiln generate does (runtime/generation.h), with the bundle's prefill
// and decode programs (a KV cache) if it holds them, else by the forward program's whole window
// per token; greedy is --top-k 1. --beam N: beam search over the decode program's N rows.
int generateText(const BundleSet &set, int threads, const BundleArgs &o) {
  const Program main = orFail(programOf(*set.main));
  refuseTrainingStep(main, "generate");
  if (main.argument("token_types")) // (as kiln generate refuses bert)
    throw Failure{"generate: this bundle's model is a masked language model (bert: each token "
                  "sees both sides); it does not continue text"};
  const std::string weights = required(o, "--weights");
  const std::vector<std::string> prompts = o.texts("--prompt");
  if (prompts.empty())
    throw Failure{"--prompt TEXT is required"};
  const std::string &prompt = prompts[0];
  if (orFail(programOf(*set.main)).argument("src"))
    throw Failure{set.prefill && set.decode
                      ? "--prompt: this bundle generates no text from a prompt (a decoder's "
                        "forward bundle does); an encoder-decoder's translates (translate --src "
                        "TEXT)"
                      : "--prompt: this bundle generates no text from a prompt (a decoder's "
                        "forward bundle does), nor translates: its encoder-decoder has no encode "
                        "and decode programs (kiln compile transformer makes them)"};
  const Tokenizer tokenizer = tokenizerOf(o);
  const bool cached = set.prefill && set.decode;
  if (o.has("--length-penalty") && !o.has("--beam"))
    throw Failure{"--length-penalty: needs --beam N"};
  if (o.has("--beam")) {
    for (const char *sampling : {"--temperature", "--top-k", "--top-p", "--seed"})
      if (o.has(sampling))
        throw Failure{fmt::format("{}: beam search does not sample", sampling)};
    if (!cached)
      throw Failure{"--beam: this bundle holds no prefill and decode programs"};
    if (prompts.size() > 1)
      throw Failure{"--beam: beam search continues one --prompt (its beams are the rows)"};
    const GenerationPair p = loadGeneration(set, threads, weights);
    beamRows(*p.decode, o);
    BeamOptions b = beamOptions(o);
    b.stop = o.text("--stop").value_or("");
    Generated stats;
    const std::vector<Beam> beams =
        orFail(beamSearch(*p.first, *p.decode, tokenizer, prompt, b, &stats));
    fmt::print("{}{}\n", beamsText(beams, prompt), speedSummary(stats));
    return 0;
  }
  GenerateOptions g;
  g.maxNew = o.integer("--max-new", 64);
  g.temperature = o.number("--temperature", 1.0); // in (0, 1e6] and (0, 1]: bundle_args.cc
  g.topK = o.integer("--top-k", 0);
  g.topP = o.number("--top-p", 1.0);
  g.seed = o.seed("--seed");
  g.stop = o.text("--stop").value_or("");
  // A prompt a row: the decode program's (its "pos" [rows]), or the forward's.
  const Program rowsFrom = cached ? orFail(programOf(*set.decode)) : main;
  const Symbol *rowsInput = rowsFrom.argument(cached ? "pos" : "tokens");
  if (rowsInput && !rowsInput->shape.empty() &&
      static_cast<int64_t>(prompts.size()) > rowsInput->shape[0])
    throw Failure{fmt::format("--prompt is given {} times, but this bundle generates {} row{} at "
                              "a time (kiln compile --gen-batch N sets the rows)",
                              prompts.size(), rowsInput->shape[0],
                              rowsInput->shape[0] == 1 ? "" : "s")};
  Generated out;
  if (cached) {
    const GenerationPair p = loadGeneration(set, threads, weights);
    out = orFail(generateCached(*p.first, *p.decode, tokenizer, prompts, g));
  } else {
    std::unique_ptr<Executor> exe = loadWith(*set.main, threads, weights);
    out = orFail(generate(*exe, tokenizer, prompts, g));
  }
  fmt::print("{}{}\n", promptsText(prompts, out), speedSummary(out)); // as kiln generate prints
  return 0;
}

// The source translated as kiln translate does: the encode program once, then the decode
// program a token per step, greedily (one row, the others idle) or, --beam, a beam per row.
int translateText(const BundleSet &set, int threads, const BundleArgs &o) {
  const std::string weights = required(o, "--weights");
  const std::optional<std::string> src = o.text("--src");
  if (!src)
    throw Failure{"--src TEXT is required"};
  if (!set.prefill || !set.decode || !orFail(programOf(*set.prefill)).argument("src"))
    throw Failure{"translate needs an encoder-decoder's forward bundle with its encode and decode "
                  "programs (kiln compile transformer, "
                  "without --train)"};
  if (set.padId >= 0)
    orFail(checkPadId(set.padId, "translation"));
  const GenerationPair p = loadGeneration(set, threads, weights);
  BeamOptions b = beamOptions(o);
  b.width = o.has("--beam") ? beamRows(*p.decode, o) : 1; // greedy: one of the rows
  Generated stats;
  const std::vector<Beam> beams =
      orFail(translate(*p.first, *p.decode, tokenizerOf(o), *src, b, &stats));
  fmt::print("{}{}\n", beamsText(beams, ""), speedSummary(stats));
  return 0;
}

void printInfo(const Program &p, const std::string &what) {
  fmt::print("{} ({}): ", p.name, what);
  for (MemRegion r : kAllMemRegions)
    fmt::print("{} {} bytes{}", memRegionName(r), p.bytes(r),
               r == MemRegion::Scratch ? "\n" : ", ");
  for (const Symbol &s : p.symbols)
    fmt::print("  {:<6} {} {}[{}]\n", symbolKindName(s.kind), s.name, dtypeName(s.dtype),
               fmt::join(s.shape, ","));
}

} // namespace

namespace {

// The commands the bundles can run, for --help (each other one refuses with its reason).
std::vector<std::string_view> commandsOf(const BundleSet &set) {
  if (!set.main)
    return {};
  const Program main = orFail(programOf(*set.main));
  const bool encodes = set.prefill && set.decode && orFail(programOf(*set.prefill)).argument("src");
  std::vector<std::string_view> out;
  if (main.trains())
    out.push_back("train");
  if (main.loss())
    out.push_back("eval");
  const Symbol *tokens = main.argument("tokens");
  if (!main.trains() && tokens && tokens->shape.size() == 2)
    out.push_back("forward");
  if (!main.trains() && !main.argument("src") && !main.argument("token_types"))
    out.push_back("generate");
  if (encodes)
    out.push_back("translate");
  out.push_back("info");
  return out;
}

int runCommand(const BundleSet &set, const std::string &name, int argc, char **argv) {
  startProcess(argc, argv); // (first of all)
  try {
    const std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
    const std::vector<std::string_view> offered = commandsOf(set);
    const BundleArgs options = orFail(parseBundleArgs(args, offered));
    if (options.help) {
      fmt::print("{}", bundleHelp(name, options.command, offered));
      return 0;
    }
    const std::string &command = options.command;
    if (!set.main)
      throw Failure{"the executable holds no program"};
    if (Status s = useEnvironment(); !s)
      throw Failure{s.error().message};
    if (set.bf16Products)
      if (std::optional<std::string> note =
              bf16FallbackNote(name, "a bundle compiled without --precision bf16"))
        printNote(*note);
    checkCheckpointModel(set, options);
    // Only train joins ranks: N copies of another command would each print the same.
    if (command != "train" && !launchedRank().empty())
      throw Failure{
          fmt::format("{} runs as one process, not on ranks: start it without mpirun", command)};
    // (Opened first: the ranks on one machine share its cores.)
    const std::unique_ptr<Communicator> world =
        command == "train" ? trainingWorld(set, name) : aloneCommunicator();
    // --threads 0 is the default, as kiln's --threads 0 is.
    const int64_t fallback =
        world->size() > 1 ? threadsPerRank(*world) : ThreadPool::defaultThreads();
    const int64_t given = options.integer("--threads", fallback);
    const int threads = static_cast<int>(given == 0 ? fallback : given);
    if (command == "generate")
      return generateText(set, threads, options);
    if (command == "translate")
      return translateText(set, threads, options);
    std::unique_ptr<Executor> exe = orFail(loadBundle(*set.main, threads));
    if (command == "train")
      return train(*exe, options, set, *world, name);
    if (command == "eval")
      return eval(*exe, options, set);
    if (command == "forward")
      return forward(*exe, options);
    printInfo(exe->program(), exe->program().trains() ? "training step"
                              : exe->program().loss() ? "forward, with a loss"
                                                      : "forward");
    if (set.optimizer)
      fmt::print("  optimizer: {}\n", set.optimizer);
    if (set.bf16Products) // (kiln compile --precision bf16)
      fmt::print("  products: bf16 operands, f32 sums, on {} here\n", kernels::gemmBf16Engine());
    if (set.eval)
      printInfo(orFail(programOf(*set.eval)), "the validation loss, without dropout (eval)");
    if (set.prefill && set.decode) {
      const Program prefill = orFail(programOf(*set.prefill));
      printInfo(prefill, prefill.argument("src") ? "encode, to translate" : "prefill, to generate");
      printInfo(orFail(programOf(*set.decode)),
                prefill.argument("src") ? "decode, to translate" : "decode, to generate");
    }
    return 0;
  } catch (const Failure &f) {
    printError(name, f.message);
    return 1;
  } catch (const std::exception &e) {
    printError(name, e.what());
    return 1;
  }
}

} // namespace

namespace {
// The generated code's features, each of which this machine must have: else the first call into
// it could die on an illegal instruction.
Status checkCpu(const BundleSet &set) {
  if (!set.cpuFeatures || !*set.cpuFeatures)
    return {};
  std::vector<std::string> required;
  for (std::string_view rest = set.cpuFeatures; !rest.empty();) {
    const size_t comma = std::min(rest.find(','), rest.size());
    required.emplace_back(rest.substr(0, comma));
    rest.remove_prefix(std::min(comma + 1, rest.size()));
  }
  const std::vector<std::string> missing = missingCpuFeatures(required);
  if (missing.empty())
    return {};
  return makeError("this executable's code was compiled for the CPU {}, and this machine lacks "
                   "{} of its features: {}. Compile it for this machine (kiln compile on it, or "
                   "--target-cpu with its name), or for any x86-64 CPU with --target-cpu x86-64 "
                   "(x86-64-v3: any with AVX2)",
                   set.cpu ? set.cpu : "?", missing.size(), fmt::join(missing, ", "));
}
} // namespace

int bundleMain(const BundleSet &set, int argc, char **argv) {
  const std::string name = set.main && set.main->name ? set.main->name : "model";
  if (Status s = checkCpu(set); !s) {
    printError(name, s.error().message);
    return 1;
  }
  const int status = runCommand(set, name, argc, argv);
  if (Status s = flushStandardOutput(); !s) {
    printError(name, s.error().message);
    return 1;
  }
  return status;
}

} // namespace kiln::runtime
