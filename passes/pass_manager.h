// The pass manager: runs a resolved list of passes on a graph and provides, for every pass alike,
// IR printing before/after, verification after each pass, wall-time and statistics reports. A pass
// only rewrites; everything a user sees about a pipeline run comes from here.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "passes/pass.h"

namespace kiln::passes {

struct PassManagerOptions {
  // A pass name, "all", or empty (none): print the IR before / after that pass, each dump headed
  // by a line `// ----- IR after cse (2 of 7) -----`.
  std::string printBefore;
  std::string printAfter;
  // ir::verify the input and the graph after every pass; the Error names the pass that broke it
  // and lists every problem.
  bool verifyEach = false;
  bool timing = false; // report each pass's wall time at the end
  bool stats = false;  // report each pass's PassStats counters at the end
  // Where IR dumps and the reports go, as they are produced. Unset: nowhere.
  std::function<void(std::string_view)> sink;
  // Called as each pass starts (a progress display): its name, index and the number of passes.
  std::function<void(std::string_view pass, size_t index, size_t count)> onPass;
};

// One pass run: which pass, whether it changed the graph, how long it took, what it counted.
struct PassRun {
  std::string name;
  bool changed = false;
  double seconds = 0;
  PassStats stats;
};

struct PipelineReport {
  std::vector<PassRun> runs;
  // Set by the caller of a stage (passes/stages.h): called as each pass of each pipeline starts,
  // and as differentiation and the optimizer update start (as a pass of one).
  std::function<void(std::string_view pass, size_t index, size_t count)> onPass;
  bool changed() const;
};

// Checks that the names given to printBefore/printAfter are known passes (or "all"); the Error
// names the option.
Status checkOptions(const PassManagerOptions &options);

// Runs `passes` in order on `g`. After each pass the graph is compacted and checked for the
// structural invariants a pass must keep (asserted: breaking them is a compiler bug). Errors: the
// options are bad, a pass failed ("pass 'cse' (2 of 7): ..."), or with verifyEach the input or a
// pass's result does not verify. On error `g` is left as the failing step made it.
Expected<PipelineReport> runPasses(ir::Graph &g, std::span<const PassInfo *const> passes,
                                   const PassManagerOptions &options = {});

// The reports the options ask for, as text (each line starts with "// ", so that a dump with
// reports interleaved still reads as IR). A counter named with "{}" in it has the count put
// there ("merged {} nodes" -> "cse: merged 12 nodes"); otherwise it reads "cse: what: 12".
std::string formatStats(const PipelineReport &report);
std::string formatTiming(const PipelineReport &report);

} // namespace kiln::passes
