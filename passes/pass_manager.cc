// The pass manager (see pass_manager.h): one loop over the passes, with the printing,
// verification, timing and statistics hooks around each step.
#include "passes/pass_manager.h"

#include <cassert>
#include <chrono>

#include <fmt/format.h>

#include "ir/printer.h"
#include "passes/passes.h"

namespace kiln::passes {
namespace {

bool selects(const std::string &option, std::string_view pass) {
  return option == "all" || option == pass;
}

void emit(const PassManagerOptions &o, std::string_view text) {
  if (o.sink)
    o.sink(text);
}

void dump(const PassManagerOptions &o, const ir::Graph &g, std::string_view when,
          std::string_view pass, size_t index, size_t count) {
  emit(o, fmt::format("// ----- IR {} {} ({} of {}) -----\n{}", when, pass, index + 1, count,
                      ir::print(g)));
}

// What a pass must leave behind whatever it did (a broken one is a compiler bug, not a user
// error): no erased nodes, every operand and output a value that exists, defined before its use.
[[maybe_unused]] bool structurallySound(const ir::Graph &g) {
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    const ir::Node &n = g.node(id);
    if (n.erased)
      return false;
    for (ir::ValueId v : n.operands)
      if (v < 0 || v >= g.numValues() || g.value(v).def >= id)
        return false;
  }
  for (const ir::Output &o : g.outputs())
    if (o.value < 0 || o.value >= g.numValues())
      return false;
  return true;
}

// "what" with the count put at "{}", or "what: n".
std::string counterText(std::string_view what, int64_t n) {
  size_t at = what.find("{}");
  if (at == std::string_view::npos)
    return fmt::format("{}: {}", what, n);
  return fmt::format("{}{}{}", what.substr(0, at), n, what.substr(at + 2));
}

Status verifyAfter(const ir::Graph &g, std::string_view step) {
  std::vector<Error> problems = ir::verify(g);
  if (problems.empty())
    return {};
  std::string msg = fmt::format("{}: the graph does not verify ({} problem{}):", step,
                                problems.size(), problems.size() == 1 ? "" : "s");
  for (const Error &e : problems)
    msg += "\n  " + e.message;
  return Error{std::move(msg)};
}

} // namespace

bool PipelineReport::changed() const {
  for (const PassRun &r : runs)
    if (r.changed)
      return true;
  return false;
}

Status checkOptions(const PassManagerOptions &options) {
  for (auto [flag, value] : {std::pair{"--print-ir-before", &options.printBefore},
                             std::pair{"--print-ir-after", &options.printAfter}})
    if (!value->empty() && *value != "all" && !findPass(*value)) {
      std::string known;
      for (const PassInfo &p : allPasses())
        known += fmt::format("{}{}", known.empty() ? "" : ", ", p.name);
      return makeError("{}={}: unknown pass (expected 'all' or one of: {})", flag, *value, known);
    }
  return {};
}

Expected<PipelineReport> runPasses(ir::Graph &g, std::span<const PassInfo *const> passes,
                                   const PassManagerOptions &options) {
  if (Status s = checkOptions(options); !s)
    return s.error();
  if (options.verifyEach)
    if (Status s = verifyAfter(g, "the input graph"); !s)
      return s.error();
  PipelineReport report;
  size_t count = passes.size();
  for (size_t i = 0; i < count; ++i) {
    const PassInfo &pass = *passes[i];
    std::string step = fmt::format("pass '{}' ({} of {})", pass.name, i + 1, count);
    if (options.onPass)
      options.onPass(pass.name, i, count);
    if (selects(options.printBefore, pass.name))
      dump(options, g, "before", pass.name, i, count);

    PassRun run;
    run.name = pass.name;
    auto start = std::chrono::steady_clock::now();
    Expected<bool> changed = pass.run(g, run.stats);
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!changed)
      return makeError("{}: {}", step, changed.error().message);
    run.changed = *changed;
    // A memory plan describes the graph it was made for: any pass but the planner that changed
    // the graph (even by editing a node in place) makes it stale.
    if (run.changed && pass.run != &runPlanMemory)
      g.dropMemoryPlan();
    // Passes leave the graph compacted; doing it again is cheap and makes that a non-issue.
    g.compact();
    assert(structurallySound(g) && "a pass left a dangling operand or an out-of-order node");

    if (selects(options.printAfter, pass.name))
      dump(options, g, "after", pass.name, i, count);
    report.runs.push_back(std::move(run));
    if (options.verifyEach)
      if (Status s = verifyAfter(g, step); !s)
        return s.error();
  }
  if (options.stats)
    emit(options, formatStats(report));
  if (options.timing)
    emit(options, formatTiming(report));
  return report;
}

std::string formatStats(const PipelineReport &report) {
  std::string out = "// ----- pass statistics -----\n";
  for (const PassRun &r : report.runs) {
    if (r.stats.entries().empty()) {
      out += fmt::format("// {}: {}\n", r.name, r.changed ? "changed" : "no change");
      continue;
    }
    for (const auto &[what, n] : r.stats.entries())
      out += fmt::format("// {}: {}\n", r.name, counterText(what, n));
  }
  return out;
}

std::string formatTiming(const PipelineReport &report) {
  double total = 0;
  for (const PassRun &r : report.runs)
    total += r.seconds;
  std::string out = fmt::format("// ----- pass timing (wall clock) -----\n// {:>8} {:>7}  {}\n",
                                "ms", "share", "pass");
  auto row = [&](double seconds, std::string_view name) {
    double share = total > 0 ? 100 * seconds / total : 0;
    out += fmt::format("// {:8.3f} {:6.1f}%  {}\n", seconds * 1e3, share, name);
  };
  for (const PassRun &r : report.runs)
    row(r.seconds, r.name);
  row(total, "total");
  return out;
}

} // namespace kiln::passes
