// `kiln compile MODEL [--set ...] [--train] [--gen-batch N] -o DIR [--exe PATH]`: a model compiled
// ahead of time into a bundle -- DIR/NAME.o (the generated whole program: its entry point
// NAME_forward or NAME_train_step and the bundle descriptor NAME_bundle; a forward bundle of gpt
// or transformer also holds the programs that generate, NAME_prefill_/NAME_encode_ and
// NAME_decode_ bundle and run, at N rows), DIR/NAME.h (a C header: regions, every tensor's place,
// the entry points) and DIR/NAME.safetensors (initial weights, or --load's) --
// and with --exe a standalone executable linked from it, the runtime library and a generated
// main (made in a temporary directory, handing over to runtime/bundle_main.h), which needs neither
// LLVM nor kiln to run.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "tools/train_command.h"

namespace kiln::tools {

struct CompileArgs {
  TrainArgs t; // model, --set, --seed, --load, the optimizer's options, --target-cpu
  bool train = false;
  std::string out, exe;
  int64_t genBatch = 1; // rows of a forward bundle's generation programs
};

CLI::App *addCompileCommand(CLI::App &app, CompileArgs &args);
void runCompile(CompileArgs &args);
// Executables link the runtime installed under `prefix` (if it is there) rather than one found
// beside this binary or in the build tree: what a program built on an installed kiln is told.
void useInstalledRuntime(std::string prefix);

} // namespace kiln::tools
