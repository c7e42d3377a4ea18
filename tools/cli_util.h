// What every `kiln` subcommand shares: user errors as exceptions (main prints them as
// `kiln: error: ...` and exits 1), the files a user names ("-" = stdin/stdout), strict numeric
// flags, and the memory budget a run is checked against before anything is allocated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "ir/graph.h"
#include "models/zoo.h"
#include "passes/pass_manager.h"
#include "passes/stages.h"
#include "runtime/communicator.h"
#include "runtime/executable.h"
#include "runtime/model_description.h"
#include "runtime/progress.h"
#include "runtime/tokenizer.h"
#include "support/status.h"

namespace kiln::tools {

// A user-facing failure: reported as `kiln: error: MESSAGE`, exit status 1.
struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Diagnostics already printed in compiler form (PATH:LINE:COL: error: ...): exit 1, say no more.
struct ReportedError : std::runtime_error {
  ReportedError() : std::runtime_error("") {}
};

// The name errors start with (argv[0]'s file name; runCli sets it), and how a UserError is
// reported: stdout flushed, then `NAME: error: MESSAGE` on stderr.
void setProgramName(std::string name);
void printError(std::string_view message);

template <class T> T orThrow(Expected<T> e) {
  if (!e)
    throw UserError(e.error().message);
  return std::move(e).value();
}
inline void orThrow(const Status &s) {
  if (!s)
    throw UserError(s.error().message);
}

// The --set arguments as settings (each "key=value"); throws UserError on a malformed one or on a
// key given twice: "the last one wins" would drop the earlier value of a long command line or of
// a script that appends settings without a word.
std::vector<models::Setting> parseSettings(const std::vector<std::string> &raw);
// The settings of an inference program (generate, translate, attention, a bundle's generation
// programs): `settings` with batch = rows, whatever batch they held (a checkpoint's settings
// bring its training batch), and without the training settings (models::kTrainingSettings), so
// without dropout.
std::vector<models::Setting> inferenceSettings(std::vector<models::Setting> settings, int64_t rows);
// Refuses a user's --set of what an inference command sets itself (given before a checkpoint's
// settings are adopted, which bring its training batch): batch or loss ("--set KEY: COMMAND sets
// it (WHY)"), and the training settings.
void refuseInferenceSettings(const std::vector<std::string> &sets, std::string_view command,
                             std::string_view why);
// Appends key=value unless the user gave `key` (each key may be given once: models/config.h).
void addDefaultSetting(std::vector<models::Setting> &settings, std::string key, std::string value);
// Adds loss=true for `command`, which needs the model's loss (train, parity-dump); a --set of
// loss to anything else is an error naming it.
void addLoss(std::vector<models::Setting> &settings, std::string_view command);
// An encoder-decoder's (a model with a "src" input) target is a source, its reverse or a pairs
// target cut to the source length, and EOS: tgt_len defaults to src_len + 1, as kiln train sets
// it for seq2seq tasks and kiln translate and kiln compile read it. Other models: unchanged.
void addDefaultTargetLength(const std::string &model, std::vector<models::Setting> &settings);

// The whole of `path` ("-" = stdin). Throws UserError naming the path.
std::string readInputFile(const std::string &path);
// Writes `text` to `path` ("-" = stdout) with runtime::writeOutputFile: a regular file is
// replaced atomically, a link followed, a device or FIFO written through.
Status writeOutput(const std::string &path, std::string_view text);

// The directories that creating `dir` makes, removed again (deepest first, where still empty)
// unless `keep` is set when the command finishes: a failed command leaves the file system as it
// found it.
struct MadeDirs {
  std::vector<std::filesystem::path> made;
  bool keep = false;
  explicit MadeDirs(const std::filesystem::path &dir);
  ~MadeDirs();
  MadeDirs(const MadeDirs &) = delete;
  MadeDirs &operator=(const MadeDirs &) = delete;
};

// Validators for numeric flags, run on the flag's text before CLI11 converts it (CLI11 clamps an
// integer out of range to the type's limit and wraps a negative unsigned one, silently). A
// failure reads `--steps: ...`.
// An integer in [lo, hi].
CLI::Validator integerIn(int64_t lo, int64_t hi);
// A seed: an integer in [0, 2^64).
CLI::Validator seedValue();
// A finite number in [lo, hi], the low end open with `openLow`, the high one with `openHigh`.
CLI::Validator finiteIn(double lo, double hi, bool openLow = false, bool openHigh = false);

// A non-empty text (a file name).
CLI::Validator nonEmpty();
// A non-empty text that is not a file name (a prompt).
CLI::Validator nonEmptyText();

// Declares `--set key=value`, repeatable, one setting each: the word after it is the command's
// own (`kiln run --set n_layers=1 gpt` took gpt as a second setting and asked for a model).
CLI::Option *addSettings(CLI::App &cmd, std::vector<std::string> &sets,
                         const std::string &help = "Config override key=value (repeatable)");

// The machine's RAM in bytes: the default memory budget.
int64_t machineMemoryBytes();
// Declares `--max-memory SIZE` (bytes, or with K/M/G/T, binary) bound to `budget`, which starts
// as the machine's RAM.
CLI::Option *addMaxMemory(CLI::App &cmd, int64_t &budget);
// The backend a command compiles for, and its options.
struct BackendChoice {
  std::string name;          // "": highway, or reference with --precision f64 (see compileChecked)
  int threads = 0;           // 0: every core
  bool threadsGiven = false; // --threads was on the command line (not a rank's share of cores)
  std::string cpu;           // the llvm backend's target CPU; "": this machine's
};
// On a terminal, while a command prepares a model, one status line says what runs and for how
// long: "compiling a training step of @gpt: pass 12 of 17 (fuse-elementwise)", then code
// generation on the backend, then the weights; cleared before the command's own output (done(),
// or the destructor). Nothing is drawn elsewhere.
class CompileStatus {
public:
  explicit CompileStatus(std::string what);
  // For passes/stages.h: its onPass shows each pass.
  passes::PipelineReport *report() { return &report_; }
  void phase(std::string_view text);
  void done() { line_.clear(); }

private:
  std::string what_;
  runtime::StatusLine line_;
  passes::PipelineReport report_;
};

// `--precision NAME`, bound to `precision` (which starts as "f32"): f32 or bf16 (mixed precision:
// bf16 products, f32 sums, passes::Precision), and with `f64` also f64 (the reference backend in
// f64).
CLI::Option *addPrecision(CLI::App &cmd, std::string &precision, bool f64);
// The products a --precision asks for.
passes::Precision productsOf(const std::string &precision);

// The ranks this process trains with: MPI's world when mpirun started it (KILN_MPI builds; a build
// without MPI refuses to run under mpirun rather than train N separate models), else it alone.
std::unique_ptr<runtime::Communicator> openWorld();
// `--overlap auto|on|off` (train, bench): whether a data-parallel step's gradient reductions run in
// the background, beside the backward; and what it asks of `world` at `threads` per rank.
CLI::Option *addOverlap(CLI::App &cmd, std::string &overlap);
bool overlapOn(const std::string &overlap, const runtime::Communicator &world, int threads);
// A data-parallel step's flags (train, bench, compile, dump):
// - `--bucket-mb auto|X`: the size at which a bucket of gradients closes, in MiB (0: each gradient
//   reduced on its own). auto: 0 where the ranks all share one machine (`oneMachine`: its shared
//   memory answers in microseconds, so a bucket's copies cost more than the latency they save),
//   else 25 MiB (passes::DataParallel's default, for ranks across a network);
// - `--shard-optimizer`: ZeRO stage 1, each rank keeping and updating 1/N of the optimizer state
//   (its gradients reduced in one reduce-scatter: no buckets, so not with --bucket-mb).
struct DataParallelFlags {
  std::string bucketMiB = "auto";
  bool shardOptimizer = false;
  CLI::Option *bucket = nullptr, *shard = nullptr; // (whether given)
};
void addDataParallel(CLI::App &cmd, DataParallelFlags &flags);
// The pass's setting for `ranks` ranks.
passes::DataParallel dataParallel(int64_t ranks, const DataParallelFlags &flags, bool oneMachine);
// On one rank (train and bench not under mpirun) the flags change nothing: says so on stderr, once
// for each that was given.
void noteIfAlone(const DataParallelFlags &flags, int64_t ranks);

// `--backend NAME` (checked against the backend table), `--threads N` and `--target-cpu NAME`.
void addBackend(CLI::App &cmd, BackendChoice &choice);
// `--target-cpu NAME` alone (kiln dump's llvm and asm stages).
CLI::Option *addTargetCpu(CLI::App &cmd, std::string &cpu);
// What a command holds in host memory beside a compiled program: `checkpoint`, a whole
// checkpoint's copy (--load reads the file in, --save gathers every tensor before it writes), else
// the largest weight (initWeights fills each in host memory first); and `others`, the bytes of
// programs compiled before it and still alive (kiln train's validation program).
struct HostNeeds {
  bool checkpoint = false;
  int64_t others = 0; // bytes of programs loaded beside it, which `othersAre` names
  std::string_view othersAre = "the validation program";
};
// Compiles `g` (planned here if it carries no memory plan) on the chosen backend, after checking
// what it needs, with `host`, against `budget` bytes (UserError naming `what` runs, e.g. "a
// training step of @gpt", and the budget). `status`, if given, shows the code generation.
std::unique_ptr<runtime::Executable> compileChecked(const ir::Graph &g, const BackendChoice &choice,
                                                    bool f64, int64_t budget, std::string_view what,
                                                    CompileStatus *status = nullptr,
                                                    HostNeeds host = {});

// What the commands that use a trained model (generate, translate, attention) take alike:
// the model's name (optional: a checkpoint names its own), `--load CKPT` (required) and
// `--tokenizer FILE`.
void addTrainedModel(CLI::App &cmd, std::string &model, std::string &load, std::string &tokenizer);
// The tokenizer of `path` (a tokenizer.json, ...), or byte tokens if it is empty.
runtime::Tokenizer tokenizerOrBytes(const std::string &path);

// Every config key of the model with its effective value: the defaults from the model's
// describe() lines ("key = default  (help)"), then `settings` in order.
std::vector<std::pair<std::string, std::string>>
resolvedConfig(const models::ModelEntry &m, const std::vector<models::Setting> &settings);
// A key's value in a resolved config (resolvedConfig's), or nullopt.
std::optional<std::string>
configValue(const std::vector<std::pair<std::string, std::string>> &config, std::string_view key);
// A description's settings as --set settings, in order.
std::vector<models::Setting> settingsOf(const runtime::ModelDescription &d);
// The targets' ignore index of a model of kiln's table, from its resolved config (of a model
// that builds, so its values parse): ignore_index, or pad_id's value where it says pad_id;
// nullopt for a config without one.
std::optional<int64_t> ignoreIdIn(const std::vector<std::pair<std::string, std::string>> &config);
// The ignore index a training task pads targets with: g's cross_entropy's (an IR file's own, which
// no --set changes: its config, which is the default model's, said -100), else ignoreIdIn(config).
std::optional<int64_t> ignoreIdOf(const ir::Graph &g,
                                  const std::vector<std::pair<std::string, std::string>> &config);
// The id a model masks as padding: of a model of kiln's table, its config's pad_id; of an IR file
// (its graph as read, `irGraph`), the id its padding mask compares a token input with
// (`ne(%tokens, c)`, as the models build it; "tokens", "src" or "tgt"); nullopt for none.
std::optional<int64_t> padIdOf(const std::vector<std::pair<std::string, std::string>> &config,
                               const ir::Graph *irGraph);
// resolvedConfig of the model named `model` (none for a model without describe() lines).
std::vector<std::pair<std::string, std::string>>
resolvedConfig(const std::string &model, const std::vector<models::Setting> &settings);

// The max_len a model of `m` with `settings` has (models/config.h fitMaxLen: where they leave it
// unset, the default grown to their longest sequence length); nullopt for a model without
// max_len, or where a value is no integer (building the model names it).
std::optional<int64_t> fittedMaxLen(const models::ModelEntry &m,
                                    const std::vector<models::Setting> &settings);

// A command that loads the checkpoint `load` takes what it says about itself
// (runtime/model_description.h):
// - its model, when `model` is empty; a model the user names must be the checkpoint's;
// - its settings, placed in `sets` before the user's: a user setting of a key the checkpoint
//   fixes must agree with it; of the run's keys (models::kRunSettings) it replaces the
//   checkpoint's; the training settings (models::kTrainingSettings: dropout, ...) only where
//   `training` (a run that continues the checkpoint's), else left at their defaults;
// - its tokenizer and the ids its texts end at (it returns the description, nullopt for none),
//   which tokenizerFor uses (and where a --tokenizer that differs is an error).
// A checkpoint without a description (an older kiln's) changes nothing, but then the model must
// be named. A description whose model and settings do not build (an edited or foreign file) is an
// error naming the file. Throws UserError naming the flag and the checkpoint.
std::optional<runtime::ModelDescription> adoptDescription(const std::string &load,
                                                          std::string &model,
                                                          std::vector<std::string> &sets,
                                                          bool training = false);
// The tokenizer a command uses (runtime::chooseTokenizer): --tokenizer's `path`, else the one the
// checkpoint `load` carries (`checkpoint`: adoptDescription's), else byte tokens.
runtime::Tokenizer tokenizerFor(const std::string &path,
                                const std::optional<runtime::ModelDescription> &checkpoint,
                                const std::string &load);
// The programs of one model (`graphs`, each with what names it, e.g. "prefill") optimized for
// inference together (passes::optimizedForwards, with `precision`), each compiled by
// compileChecked with the parameters of the checkpoint at `path`.
std::vector<std::unique_ptr<runtime::Executable>>
compileWithCheckpoint(std::vector<std::pair<ir::Graph, std::string_view>> graphs,
                      const BackendChoice &choice, int64_t budget, const std::string &path,
                      passes::Precision precision);

} // namespace kiln::tools
