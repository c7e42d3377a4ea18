// `kiln opt` and the stages of `kiln dump` (see opt_command.h).
#include "tools/opt_command.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/autodiff.h"
#include "passes/optimizer.h"
#include "passes/pass_manager.h"
#include "passes/stages.h"
#include "runtime/input_file.h"
#include "runtime/output_file.h"
#include "tools/cli_util.h"
#include "tools/ir_file.h"

namespace kiln::tools {
namespace {

// Prints each line of `message` as a diagnostic about `file`: "FILE:L:C: error: what" when the
// line starts with an IR position "L:C: ", else "FILE: error: line".
void report(std::string_view file, std::string_view message) {
  size_t start = 0;
  while (start <= message.size()) {
    size_t end = message.find('\n', start);
    std::string_view line =
        message.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    while (!line.empty() && line.front() == ' ')
      line.remove_prefix(1);
    size_t colon = line.find(": ");
    std::string_view where = line.substr(0, colon);
    bool positioned = colon != std::string_view::npos && !where.empty() &&
                      std::isdigit(static_cast<unsigned char>(where[0])) &&
                      where.find_first_not_of("0123456789:") == std::string_view::npos;
    if (positioned)
      fmt::print(stderr, "{}:{}: error: {}\n", file, where, line.substr(colon + 2));
    else if (!line.empty())
      fmt::print(stderr, "{}: error: {}\n", file, line);
    if (end == std::string_view::npos)
      break;
    start = end + 1;
  }
}

} // namespace

CLI::App *addOptCommand(CLI::App &app, OptArgs &a) {
  CLI::App *cmd = app.add_subcommand("opt", "Run passes on an IR file and print the result");
  cmd->add_option("file", a.file, "IR file ('-' = stdin)")->required();
  cmd->add_option("--passes", a.passes,
                  "Comma-separated passes and pipelines, e.g. cse,dce or "
                  "cleanup");
  cmd->add_option("--print-ir-before", a.printBefore, "Print the IR before this pass (or all)");
  cmd->add_option("--print-ir-after", a.printAfter, "Print the IR after this pass (or all)");
  cmd->add_flag("--verify-each", a.verifyEach, "Verify the graph after every pass");
  cmd->add_flag("--pass-timing", a.timing, "Report each pass's wall time");
  cmd->add_flag("--pass-stats", a.stats, "Report what each pass rewrote");
  cmd->add_option("-o,--output", a.output, "Output file ('-' = stdout)");
  return cmd;
}

int runOpt(const OptArgs &a) {
  const std::string shown = shownIrFile(a.file);
  // Flags first: a bad flag is reported without reading anything.
  std::vector<const passes::PassInfo *> list;
  // CLI11 reads `--passes= --verify-each` as the list "--verify-each".
  if (a.passes.starts_with("-")) {
    fmt::print(stderr,
               "kiln: error: --passes: expected passes or pipelines, got the flag '{}' (no "
               "passes: --passes '')\n",
               a.passes);
    return 1;
  }
  if (!a.passes.empty()) {
    Expected<std::vector<const passes::PassInfo *>> r = passes::resolvePasses(a.passes);
    if (!r) {
      fmt::print(stderr, "kiln: error: {}\n", r.error().message);
      return 1;
    }
    list = std::move(*r);
  }
  passes::PassManagerOptions options{
      .printBefore = a.printBefore,
      .printAfter = a.printAfter,
      .verifyEach = a.verifyEach,
      .timing = a.timing,
      .stats = a.stats,
      .sink = [](std::string_view text) { std::fwrite(text.data(), 1, text.size(), stderr); },
      .onPass = nullptr};
  if (Status s = passes::checkOptions(options); !s) {
    fmt::print(stderr, "kiln: error: {}\n", s.error().message);
    return 1;
  }
  // A pass to print around that --passes does not run would print nothing.
  for (auto [flag, name] : {std::pair{"--print-ir-before", &a.printBefore},
                            std::pair{"--print-ir-after", &a.printAfter}})
    if (!name->empty() && *name != "all" &&
        std::none_of(list.begin(), list.end(),
                     [&](const passes::PassInfo *p) { return p->name == *name; })) {
      std::vector<std::string_view> runs;
      for (const passes::PassInfo *p : list)
        runs.push_back(p->name);
      fmt::print(stderr, "kiln: error: {}={}: --passes runs no pass {} ({})\n", flag, *name, *name,
                 runs.empty() ? std::string("it runs none")
                              : fmt::format("it runs {}", fmt::join(runs, ", ")));
      return 1;
    }

  const runtime::RunInput inputs[] = {{"the IR file it reads", a.file == "-" ? "" : a.file}};
  if (Status s = runtime::checkNotAnInput("-o", a.output, inputs); a.output != "-" && !s) {
    fmt::print(stderr, "kiln: error: {}\n", s.error().message);
    return 1;
  }
  Expected<std::string> read = runtime::readInputText(a.file);
  if (!read) { // "PATH: what" (standard input's name for "-"), a path that may hold ": " itself
    const std::string &m = read.error().message;
    fmt::print(stderr, "{}: error: {}\n", shown,
               m.substr(m.find(": ", a.file == "-" ? 0 : a.file.size()) + 2));
    return 1;
  }
  const std::string &text = *read;
  ir::ParseResult parsed = ir::parseGraph(text);
  if (!parsed.errors.empty()) {
    for (const Error &e : parsed.errors)
      report(shown, e.message);
    return 1;
  }
  ir::Graph g = std::move(*parsed.graph);
  Expected<passes::PipelineReport> r = passes::runPasses(g, list, options);
  if (!r) {
    report(shown, r.error().message);
    return 1;
  }
  // What it writes is IR that kiln reads back: a graph the passes left ill-formed is an error
  // (as --verify-each says it, after the pass that did it), not a file verify refuses.
  if (const std::vector<Error> problems = ir::verify(g); !problems.empty() && !list.empty()) {
    report(shown, fmt::format("the graph the passes made does not verify (--verify-each names the "
                              "pass): {}",
                              problems.front().message));
    return 1;
  }
  if (Status s = writeOutput(a.output, ir::print(g)); !s) {
    fmt::print(stderr, "kiln: error: {}\n", s.error().message);
    return 1;
  }
  return 0;
}

std::string passesHelp() {
  std::string out = "passes (kiln opt FILE --passes=a,b,...):\n";
  for (const passes::PassInfo &p : passes::allPasses())
    out += fmt::format("  {:<18} {}\n", p.name, p.summary);
  out += "pipelines (usable wherever a pass is):\n";
  for (const passes::Pipeline &p : passes::allPipelines()) {
    out += fmt::format("  {:<18} {}\n", p.name, fmt::join(p.steps, ", "));
    out += fmt::format("  {:<18} {}\n", "", p.summary);
  }
  return out;
}

Expected<ir::Graph> toStage(ir::Graph g, std::string_view stage, passes::Precision precision,
                            const passes::DataParallel &dp) {
  if (stage != "raw" && stage != "optimized" && stage != "train")
    return makeError("--stage={}: expected raw, optimized or train", stage);
  if (stage == "raw")
    return g;
  if (stage == "optimized")
    return passes::optimizedForward(std::move(g), nullptr, precision);
  return passes::trainingStep(std::move(g), passes::OptimizerConfig{}, nullptr, precision, dp);
}

} // namespace kiln::tools
