// A few lines that describe a graph at a glance (arguments, parameter count and bytes, outputs,
// op histogram): what `kiln demo` and `kiln dump --format summary` print.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace kiln::ir {

struct GraphStats {
  int64_t nodes = 0;
  int64_t params = 0;        // parameter tensors
  int64_t paramElements = 0; // scalars in all parameters
  int64_t paramBytes = 0;
  std::vector<int64_t> opCounts = std::vector<int64_t>(kNumOps, 0); // by OpKind
};

GraphStats statsOf(const Graph &g);
std::string summary(const Graph &g);

} // namespace kiln::ir
