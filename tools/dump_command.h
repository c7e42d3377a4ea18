// `kiln dump` (a model's IR at a stage, its memory report, or the LLVM module or machine code of
// its whole program) and `kiln verify` (an IR file, parsed, verified and printed canonically).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/cli_util.h"

namespace kiln::tools {

struct DumpArgs {
  std::string model, format = "text", output = "-", stage = "raw", targetCpu, precision = "f32";
  std::vector<std::string> sets;
  int64_t ranks = 1;    // --ranks: the training step of one of that many data-parallel ranks
  DataParallelFlags dp; // --bucket-mb, --shard-optimizer
  bool memory = false, fromIr = false, noLoc = false, train = false;
  // Options whose use is checked against the others (each flag where it means something).
  CLI::Option *format_ = nullptr, *memory_ = nullptr, *noLoc_ = nullptr, *train_ = nullptr,
              *targetCpu_ = nullptr, *ranks_ = nullptr;
};

struct VerifyArgs {
  std::string file, format = "text";
};

// Declare the subcommands' options, bound to the args.
CLI::App *addDumpCommand(CLI::App &app, DumpArgs &args);
CLI::App *addVerifyCommand(CLI::App &app, VerifyArgs &args);
// Run them (errors as tools::UserError or Expected's).
void runDump(DumpArgs &args);
void runVerify(const VerifyArgs &args);

} // namespace kiln::tools
