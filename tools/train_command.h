// `kiln train`: builds a model with its loss, compiles the whole training step (fusion, autodiff,
// the optimizer update, lowering, the memory plan) for a backend and trains it on a synthetic
// task, printing the loss per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/cli_util.h"

#include "ir/graph.h"
#include "passes/optimizer.h"
#include "runtime/tasks.h"

namespace kiln::tools {

struct TrainArgs {
  std::string model;
  std::vector<std::string> sets;
  std::string task; // empty: the model's natural task
  std::string data; // lm/mlm: a text file whose bytes the windows are drawn from ("": the corpus)
  int64_t steps = 100;
  int64_t logEvery = 1;
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
};

// Declares the subcommand's options, bound to `args`.
CLI::App *addTrainCommand(CLI::App &app, TrainArgs &args);
// Runs it; throws std::runtime_error with a user-facing message on bad input.
void runTrain(TrainArgs &args);

// The optimizer's options (--optimizer, --lr, --schedule, ...), bound to `args`: kiln train's and
// kiln compile --train's.
void addOptimizerOptions(CLI::App &c, TrainArgs &args);
// The whole training step that `kiln train` compiles for `args` (its optimizer settled from the
// options, the task from --task or the model), and that task.
ir::Graph trainingStepFor(TrainArgs &args, runtime::TaskKind &task);

} // namespace kiln::tools
