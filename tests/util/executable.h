// Compiling graphs for tests: a graph on the reference backend (planned first if it has no memory
// plan) with weights from a seed, a trainer that owns its executable, and a run inside the plan
// on the plain evaluator's arguments, to compare the two bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include <cstring>

#include "codegen/common/executor_backend.h"
#include "codegen/common/program.h"
#include "codegen/llvm/backend.h"
#include "codegen/reference/executable.h"
#include "codegen/reference/interpreter.h"
#include "runtime/trainer.h"
#include "runtime/weights.h"

namespace kiln::testing_exe {

inline std::unique_ptr<runtime::Executable> reference(const ir::Graph &g, uint64_t seed,
                                                      bool f64 = false) {
  Expected<std::unique_ptr<reference::ReferenceExecutable>> exe =
      reference::ReferenceExecutable::create(codegen::withMemoryPlan(g), {.f64 = f64});
  EXPECT_TRUE(exe.ok()) << exe.error().message;
  if (!exe.ok())
    return nullptr;
  EXPECT_TRUE(runtime::initWeights(**exe, seed).ok());
  return std::move(*exe);
}

// `g` (planned here if it has none) on the Highway backend at `threads` threads.
inline std::unique_ptr<runtime::Executor> highway(const ir::Graph &g, int threads = 2) {
  codegen::ExecutorOptions options;
  options.threads = threads;
  Expected<std::unique_ptr<runtime::Executor>> exe =
      codegen::compileExecutor(codegen::withMemoryPlan(g), options);
  EXPECT_TRUE(exe.ok()) << exe.error().message;
  return exe.ok() ? std::move(*exe) : nullptr;
}

// `g` (planned here if it has none) on a backend that runs the kernels: "highway" or "llvm".
inline std::unique_ptr<runtime::Executor> fast(const ir::Graph &g, const std::string &backend,
                                               int threads = 2) {
  if (backend == "highway")
    return highway(g, threads);
  llvmgen::Options options;
  options.threads = threads;
  Expected<std::unique_ptr<runtime::Executor>> exe =
      llvmgen::compile(codegen::withMemoryPlan(g), options);
  EXPECT_TRUE(exe.ok()) << exe.error().message;
  return exe.ok() ? std::move(*exe) : nullptr;
}

// `step` on `backend` at `threads` threads after `runs` runs from weights of seed 7 and inputs of
// seed 8: what the thread tests compare.
inline std::unique_ptr<runtime::Executor> ranAt(const ir::Graph &step, const std::string &backend,
                                                int threads, int runs) {
  std::unique_ptr<runtime::Executor> e = testing_exe::fast(step, backend, threads);
  EXPECT_TRUE(e && runtime::initWeights(*e, 7).ok() && runtime::randomizeInputs(*e, 8).ok());
  for (int k = 0; e && k < runs; ++k)
    EXPECT_TRUE(e->run().ok());
  return e;
}

// Every tensor of `a`'s program has one of its name and kind in `b`'s, with the same bits (`b`
// may hold more: a pass's bf16 copies of weights).
inline void expectSameBits(runtime::Executor &a, runtime::Executor &b) {
  for (const runtime::Symbol &sym : a.program().symbols) {
    const runtime::Symbol *other =
        sym.isArgument() ? b.program().argument(sym.name) : b.program().output(sym.name);
    EXPECT_TRUE(other && a.read(sym) == b.read(*other)) << sym.name;
  }
}

// A training step on the reference backend with its trainer.
struct Training {
  std::unique_ptr<runtime::Executable> exe;
  std::optional<runtime::Trainer> trainer;

  // On the reference backend, or on "highway" / "llvm" (fresh weights from seed as well) on one
  // thread: ctest runs tests side by side, and a pool's waiting threads on a tiny step would
  // spin against the other test's.
  Training(const ir::Graph &step, uint64_t seed, const std::string &backend = "reference")
      : exe(backend == "reference" ? reference(step, seed) : fast(step, backend, 1)) {
    if (!exe)
      return;
    if (backend != "reference") {
      EXPECT_TRUE(runtime::initWeights(*exe, seed).ok());
    }
    Expected<runtime::Trainer> t = runtime::Trainer::create(*exe);
    EXPECT_TRUE(t.ok()) << t.error().message;
    if (t.ok())
      trainer.emplace(std::move(*t));
  }
  double step(const runtime::Batch &batch) {
    Expected<double> loss = trainer->step(batch);
    EXPECT_TRUE(loss.ok()) << loss.error().message;
    return loss.ok() ? *loss : 0;
  }
};

// Runs `g` (planned here if it has none) inside its memory plan on the reference backend, F =
// double in f64 mode, with poisoning, on `args` (one per g.args(), as the plain evaluator takes
// them); returns the outputs as the plain evaluator holds them. `verify` off runs a broken plan.
template <class F>
std::vector<ir::RefTensor<F>>
runInPlan(const ir::Graph &g, const std::vector<ir::RefTensor<F>> &args, bool verify = true) {
  Expected<std::unique_ptr<reference::ReferenceExecutable>> exe =
      reference::ReferenceExecutable::create(codegen::withMemoryPlan(g),
                                             {.f64 = std::is_same_v<F, double>, .verify = verify});
  EXPECT_TRUE(exe.ok()) << exe.error().message;
  if (!exe.ok())
    return {};
  const runtime::Program &p = (*exe)->program();
  for (size_t a = 0; a < args.size(); ++a)
    EXPECT_TRUE((*exe)->write(p.symbols[a], reference::toHost(args[a])).ok());
  Status s = (*exe)->run();
  EXPECT_TRUE(s.ok()) << s.error().message;
  std::vector<ir::RefTensor<F>> out;
  for (const runtime::Symbol &sym : p.symbols)
    if (sym.kind == runtime::Symbol::Kind::Output)
      out.push_back(reference::fromHost<F>((*exe)->read(sym)));
  return out;
}

// The same bits, element for element (NaN matches NaN of any payload).
template <class F>
::testing::AssertionResult sameBits(const std::vector<ir::RefTensor<F>> &a,
                                    const std::vector<ir::RefTensor<F>> &b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << a.size() << " vs " << b.size() << " tensors";
  for (size_t t = 0; t < a.size(); ++t) {
    if (a[t].type != b[t].type || a[t].i != b[t].i)
      return ::testing::AssertionFailure() << "tensor " << t << ": types or integers differ";
    for (size_t k = 0; k < a[t].f.size(); ++k) {
      F x = a[t].f[k], y = b[t].f[k];
      if (!(std::isnan(x) && std::isnan(y)) && std::memcmp(&x, &y, sizeof x) != 0)
        return ::testing::AssertionFailure()
               << "tensor " << t << " element " << k << ": " << x << " vs " << y;
    }
  }
  return ::testing::AssertionSuccess();
}

} // namespace kiln::testing_exe
