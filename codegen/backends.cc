// The backend table (see backends.h).
#include "codegen/backends.h"

#include <functional>
#include <string>

#include "codegen/common/executor_backend.h"
#include "codegen/llvm/backend.h"
#include "codegen/reference/executable.h"

namespace kiln::codegen {
namespace {

Expected<std::unique_ptr<runtime::Executable>> compileReference(const ir::Graph &g,
                                                                const BackendOptions &o) {
  Expected<std::unique_ptr<reference::ReferenceExecutable>> exe =
      reference::ReferenceExecutable::create(g, {.f64 = o.f64});
  if (!exe)
    return exe.error();
  return std::unique_ptr<runtime::Executable>(std::move(*exe));
}

int64_t estimateReference(const ir::Graph &g, const BackendOptions &o) {
  return reference::ReferenceExecutable::estimateBytes(g, {.f64 = o.f64});
}

// The kernel backends compute in f32 only.
Expected<std::unique_ptr<runtime::Executable>>
executorOf(const BackendOptions &o, std::string_view backend,
           const std::function<Expected<std::unique_ptr<runtime::Executor>>()> &compile) {
  if (o.f64)
    return makeError("the {} backend computes in f32; f64 precision needs the reference backend",
                     backend);
  Expected<std::unique_ptr<runtime::Executor>> exe = compile();
  if (!exe)
    return exe.error();
  return std::unique_ptr<runtime::Executable>(std::move(*exe));
}

Expected<std::unique_ptr<runtime::Executable>> compileHighway(const ir::Graph &g,
                                                              const BackendOptions &o) {
  codegen::ExecutorOptions options;
  options.threads = o.threads;
  return executorOf(o, "highway", [&] { return codegen::compileExecutor(g, options); });
}

int64_t estimateHighway(const ir::Graph &g, const BackendOptions &) {
  return codegen::executorBytes(g);
}

Expected<std::unique_ptr<runtime::Executable>> compileLlvm(const ir::Graph &g,
                                                           const BackendOptions &o) {
  llvmgen::Options options;
  options.threads = o.threads, options.cpu = o.cpu;
  return executorOf(o, "llvm", [&] { return llvmgen::compile(g, options); });
}

constexpr BackendInfo kBackends[] = {
    {"reference",
     "each op's reference semantics inside the memory plan, poisoning dead bytes (the oracle; "
     "slow)",
     &compileReference, &estimateReference},
    {"highway",
     "SIMD kernels (Highway, dispatched to the CPU's best target) on a thread pool, inside the "
     "memory plan",
     &compileHighway, &estimateHighway},
    {"llvm",
     "the highway backend's kernels, with every fusion region compiled by LLVM (JIT) into a "
     "loop nest of its own",
     &compileLlvm, &estimateHighway},
};

} // namespace

std::span<const BackendInfo> allBackends() {
  return kBackends;
}

const BackendInfo *findBackend(std::string_view name) {
  for (const BackendInfo &b : kBackends)
    if (b.name == name)
      return &b;
  return nullptr;
}

std::string backendNames() {
  std::string out;
  for (const BackendInfo &b : kBackends)
    out += (out.empty() ? "" : " | ") + std::string(b.name);
  return out;
}

} // namespace kiln::codegen
