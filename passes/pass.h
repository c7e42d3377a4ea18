// A pass rewrites a graph in place and says whether it changed anything. Passes and pipelines
// (named lists of passes) are listed once, in passes/registry.cc; the pass manager
// (pass_manager.h) runs them and provides printing, verification, timing and statistics, so a
// pass itself does none of that.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln::passes {

// What a pass rewrote, for --pass-stats: counters in the order first counted.
class PassStats {
public:
  void count(std::string_view what, int64_t n = 1);
  const std::vector<std::pair<std::string, int64_t>> &entries() const { return entries_; }

private:
  std::vector<std::pair<std::string, int64_t>> entries_;
};

// Rewrites `g`; returns true if it changed the graph. Leaves `g` compacted (Graph::compact) and
// valid; an Error means the input was outside what the pass accepts.
using PassFn = Expected<bool> (*)(ir::Graph &g, PassStats &stats);

struct PassInfo {
  std::string_view name;    // as given to --passes: "dce", "fuse-attention"
  std::string_view summary; // the rewrite, one line
  PassFn run;
};

struct Pipeline {
  std::string_view name;
  std::string_view summary;
  std::span<const std::string_view> steps; // pass or pipeline names
};

std::span<const PassInfo> allPasses();
std::span<const Pipeline> allPipelines();
const PassInfo *findPass(std::string_view name);
// Expands a comma-separated list of pass and pipeline names ("cse,dce", "default") into passes;
// Error names an unknown entry and lists the known ones.
Expected<std::vector<const PassInfo *>> resolvePasses(std::string_view spec);

} // namespace kiln::passes
