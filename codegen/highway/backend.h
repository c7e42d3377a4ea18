// The Highway backend: compiles a planned graph into a runtime::Executor whose steps call the
// runtime's SIMD kernels (runtime/kernels) with every place resolved (lowering.h), on a thread
// pool of its own. Inference and the whole training step, every model family.
#pragma once

#include <memory>

#include "ir/graph.h"
#include "runtime/executor.h"
#include "support/status.h"

namespace kiln::highway {

struct Options {
  int threads = 0; // 0: every core (at most workspace::kThreads)
};

// `g` must carry a memory plan that verifies. Errors: a plan that does not verify, a load-time
// constant that fails.
Expected<std::unique_ptr<runtime::Executor>> compile(const ir::Graph &g, Options options = {});

// The bytes compile() allocates: the plan's regions (plus any GEMM block a region cannot write in
// place, which is at most its result's size).
int64_t estimateBytes(const ir::Graph &g);

} // namespace kiln::highway
