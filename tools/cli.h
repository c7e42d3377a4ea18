// The kiln command line as a library. `kiln` itself is cliMain with no models of its own; a
// program built against the installed package (find_package(kiln), kiln::kiln) gets every
// command -- dump, opt, run, train, bench, compile, generate, ... -- for its own models by
// handing its table over, as LLVM tools take extra passes:
//
//   const kiln::models::ModelEntry kMine[] = {{"my_gpt", "one line", &buildMyGpt, &describeMyGpt}};
//   int main(int argc, char **argv) { return kiln::tools::cliMain(argc, argv, kMine); }
//
// Each entry's builder takes the `--set key=value` settings (models/config.h has the helpers
// the built-in models use); a name that is taken or malformed is an error before any command runs.
#pragma once

#include <span>
#include <string_view>

#include "models/zoo.h"

namespace kiln::tools {

// Parses argv, runs the command, returns the process's exit code: 0, or 1 after printing
// "PROGRAM: error: ..." (never throws). `installPrefix`, if not empty, is where kiln is installed:
// `compile --exe` links that runtime.
int runCli(int argc, char **argv, std::span<const models::ModelEntry> models,
           std::string_view installPrefix);

// runCli with the prefix that find_package(kiln) defines for the programs it builds
// (KILN_INSTALL_PREFIX), so theirs link the installed runtime wherever they run from.
inline int cliMain(int argc, char **argv, std::span<const models::ModelEntry> models = {}) {
#ifdef KILN_INSTALL_PREFIX
  return runCli(argc, argv, models, KILN_INSTALL_PREFIX);
#else
  return runCli(argc, argv, models, {});
#endif
}

} // namespace kiln::tools
