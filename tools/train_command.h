// `kiln train`: builds a model with its loss, compiles the whole training step (fusion, autodiff,
// the optimizer update, lowering, the memory plan) for a backend and trains it on a synthetic
// task or a text file (held-out validation windows, the validation loss every N steps), printing
// the loss per step, with checkpoints that resume a run exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "passes/pass_manager.h"

#include "tools/cli_util.h"

#include "ir/graph.h"
#include "passes/optimizer.h"
#include "runtime/tasks.h"

namespace kiln::tools {

struct TrainArgs {
  std::string model; // a model of the table, or an IR file (ir, or a name ending in .kir)
  bool ir = false;   // --ir
  std::vector<std::string> sets;
  std::string task; // empty: the model's natural task
  std::string data; // lm/mlm: a text file whose tokens the windows are drawn from ("": the corpus)
  std::string tokenizer; // lm/mlm: a tokenizer.json ("": byte tokens)
  int64_t steps = 100;
  int64_t logEvery = 0; // 0: every step, or none beside a progress bar
  std::string log;      // --log: a JSON-lines file of the logged steps ("": none)
  std::string plot;     // --plot: a .png or .svg of the losses ("": none)
  uint64_t seed = 0;
  std::string precision = "f32";
  std::string optimizer = "adamw";
  std::string schedule = "constant";
  passes::OptimizerConfig opt;
  std::string load;           // checkpoint to start from ("" = fresh weights)
  std::string save;           // checkpoint to write after the last step ("" = none)
  int64_t maxMemory = 0;      // bytes; --max-memory, the machine's RAM by default
  BackendChoice backend;      // --backend, --threads, --target-cpu
  std::string onNan = "stop"; // --on-nan: stop | skip
  double valFraction = 0.1;   // lm/mlm: the text's last bytes held out for validation
  bool valFractionGiven =
      false;               // --val-fraction on the command line (a task without text refuses it)
  int64_t evalEvery = 0;   // print the validation loss every N steps (0: never)
  int64_t evalBatches = 8; // validation batches per evaluation (the same ones each time)
  int64_t saveEvery = 0;   // also save STEM.stepK.safetensors every N steps (0: only --save)
  // The data-parallel ranks the step is compiled for: mpirun's (kiln train), --ranks (dump).
  int64_t ranks = 1;
  std::string overlap = "auto"; // --overlap: the gradients' reductions beside the backward
  DataParallelFlags dp;         // --bucket-mb, --shard-optimizer
  bool oneMachine = true;       // the ranks all share this machine (mpirun's placement)
  // Set by adoptCheckpoint: --load's description (its tokenizer and end tokens; nullopt: none),
  // and that it ran.
  std::optional<runtime::ModelDescription> loaded;
  bool adopted = false;
};

// The model's IR file, or "" for a model of kiln's table.
std::string irFileOf(const TrainArgs &args);
// Takes what --load's checkpoint says about itself (cli_util.h: adoptDescription) into `args`:
// the model, the settings (the training ones where `training`: a run that continues it), the
// tokenizer. Once; later calls do nothing.
void adoptCheckpoint(TrainArgs &args, bool training = true);
// What the run writes into its checkpoints: the model, the settings, the tokenizer's text; none
// for a model from an IR file (no name of the table builds it).
std::optional<runtime::ModelDescription> runDescription(const TrainArgs &args);

// Declares the subcommand's options, bound to `args`.
CLI::App *addTrainCommand(CLI::App &app, TrainArgs &args);
// Runs it; throws std::runtime_error with a user-facing message on bad input.
void runTrain(TrainArgs &args);

// The optimizer's options (--optimizer, --lr, --schedule, ...), bound to `args`: kiln train's and
// kiln compile --train's.
void addOptimizerOptions(CLI::App &c, TrainArgs &args);
// The options of the optimizer `optimizer` names (set by the caller's own --optimizer; "": none,
// and then each is refused): --lr, --momentum, --beta1, ...; with `schedule`, also --schedule,
// --warmup, --min-lr and --clip-norm. kiln parity-dump's one step takes them without.
void addOptimizerOptions(CLI::App &c, const std::string &optimizer, passes::OptimizerConfig &opt,
                         std::string *schedule);
// The whole training step that `kiln train` compiles for `args` (its optimizer settled from the
// options, the task from --task or the model), and that task. `report`: passes::trainingStep's.
ir::Graph trainingStepFor(TrainArgs &args, runtime::TaskKind &task,
                          passes::PipelineReport *report = nullptr);
// The program of its validation loss: the model with its loss for `task`, without dropout (as
// PyTorch's eval()), with the step's numerics (passes::validationForward).
ir::Graph evaluationGraph(const TrainArgs &args, runtime::TaskKind task,
                          passes::PipelineReport *report = nullptr);

} // namespace kiln::tools
