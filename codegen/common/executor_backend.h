// What the highway and llvm backends share: a planned graph compiled into a runtime::Executor
// whose steps call the runtime's SIMD kernels (runtime/kernels) with every place resolved
// (lowering.h), on a thread pool of its own; inference and the whole training step, every model
// family. Fusion regions run in the Highway interpreter (fusion.cc, pointwise.h) unless a backend
// compiles them (ExecutorOptions::compileRegions: codegen/llvm). The highway backend is this with
// no region compiler (codegen/backends.cc).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "ir/graph.h"
#include "runtime/executor.h"
#include "support/status.h"

namespace kiln::codegen {

struct TileProgram;

struct ExecutorOptions {
  int threads = 0;                 // 0: every core (at most workspace::kThreads)
  std::string backend = "highway"; // the executor's name for itself
  // A backend that compiles fusion regions to machine code (codegen/llvm) gets every region's
  // program here, after lowering and before the first run, and sets `native` on those it
  // compiles; the rest stay interpreted.
  std::function<Status(std::span<const std::shared_ptr<TileProgram>>)> compileRegions;
};

// The steps that run g (regions handed to options.compileRegions). Errors: as compile's.
Expected<runtime::ExecutorProgram> lower(const ir::Graph &g, const ExecutorOptions &options);

// Error naming the first step of `p` that is no call of the kernel ABI: one that runs by
// reference, which a program compiled ahead of time (codegen/llvm's bundles) cannot hold.
Status checkKernelCalls(const runtime::ExecutorProgram &p);

// `g` must carry a memory plan that verifies. Errors: a plan that does not verify, a load-time
// constant that fails.
Expected<std::unique_ptr<runtime::Executor>> compileExecutor(const ir::Graph &g,
                                                             ExecutorOptions options = {});

// The bytes compileExecutor() and a run allocate: the plan's regions (every GEMM block included: a
// matmul region whose results cannot take it has it in its scratch), plus the largest value (an op
// without a kernel runs its reference semantics on copies of its operands and results).
int64_t executorBytes(const ir::Graph &g);

} // namespace kiln::codegen
