// `kiln opt` (run passes on textual IR, as mlir-opt does: how passes are tested) and the stages of
// `kiln dump --stage`: the model as built, after the default pipeline, or the whole optimized
// training step.
#pragma once

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "ir/graph.h"
#include "passes/stages.h"
#include "support/status.h"

namespace kiln::tools {

struct OptArgs {
  std::string file;   // .kir file, "-" = stdin
  std::string passes; // comma-separated pass and pipeline names; empty = none
  std::string printBefore, printAfter;
  bool verifyEach = false, timing = false, stats = false;
  std::string output = "-";
};

// Declares the subcommand's options, bound to `args`.
CLI::App *addOptCommand(CLI::App &app, OptArgs &args);
// Runs it: the resulting IR goes to args.output; IR dumps, statistics and timing to stderr;
// problems are printed as `FILE:LINE:COL: error: ...` (or `kiln: error: ...` for a flag).
// Returns the exit status (0 or 1).
int runOpt(const OptArgs &args);

// Every pass and pipeline with its summary, for `kiln passes`.
std::string passesHelp();

// `kiln dump --stage`: "raw" returns `g` as it is; "optimized" is passes::optimizedForward
// (`default,lower`); "train" expects a model built with loss=true and returns
// passes::trainingStep with the default AdamW (the `train` pipeline) for one of `dp.ranks`
// data-parallel ranks; both with `precision`.
Expected<ir::Graph> toStage(ir::Graph g, std::string_view stage,
                            passes::Precision precision = passes::Precision::F32,
                            const passes::DataParallel &dp = {});

} // namespace kiln::tools
