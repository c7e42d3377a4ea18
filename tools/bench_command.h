// `kiln bench MODEL [--set k=v ...] [--train]`: times a forward pass or a whole training step of a
// model on a backend and prints the step time, tokens/s, achieved GFLOP/s against this machine's
// peak, peak RSS, a table of time per op kind (where the time goes) and the slowest steps one by
// one with their shapes. With --compile it times the compiler instead: building the graph, each
// stage (`kiln dump --stage=optimized|train`) and printing it, per node of the graph, and each
// pass of each stage.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/cli_util.h"

namespace kiln::tools {

struct BenchArgs {
  std::string model; // a model of the table, or an IR file (ir, or a name ending in .kir)
  std::vector<std::string> sets;
  bool ir = false;
  bool train = false;
  bool compile = false;
  std::string overlap = "auto"; // --overlap: a data-parallel step's reductions in the background
  DataParallelFlags dp;         // --bucket-mb, --shard-optimizer
  std::string precision = "f32";
  int64_t steps = 10, warmup = 2;
  int64_t top = 10; // the slowest steps listed one by one
  BackendChoice backend;
  int64_t maxMemory = 0;
};

CLI::App *addBenchCommand(CLI::App &app, BenchArgs &args);
void runBench(BenchArgs &args);

} // namespace kiln::tools
