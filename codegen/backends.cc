// The backend table (see backends.h).
#include "codegen/backends.h"

#include <functional>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "codegen/common/executor_backend.h"
#include "codegen/llvm/backend.h"
#include "codegen/reference/executable.h"

namespace kiln::codegen {
namespace {

Status checkF64(const ir::Graph &g, const BackendOptions &o, std::string_view backend) {
  if (o.f64)
    return {};
  if (const std::optional<std::string> where = f64Value(g))
    return makeError("graph @{} holds f64 values ({}), which compute in double only at f64 "
                     "precision (--precision f64) on the reference backend; the {} backend "
                     "computes in f32{}",
                     g.name(), *where, backend, backend == "reference" ? " at f32 precision" : "");
  return {};
}

Expected<std::unique_ptr<runtime::Executable>> compileReference(const ir::Graph &g,
                                                                const BackendOptions &o) {
  if (Status s = checkF64(g, o, "reference"); !s)
    return s.error();
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
executorOf(const ir::Graph &g, const BackendOptions &o, std::string_view backend,
           const std::function<Expected<std::unique_ptr<runtime::Executor>>()> &compile) {
  if (o.f64)
    return makeError("the {} backend computes in f32; f64 precision needs the reference backend",
                     backend);
  if (Status s = checkF64(g, o, backend); !s)
    return s.error();
  Expected<std::unique_ptr<runtime::Executor>> exe = compile();
  if (!exe)
    return exe.error();
  return std::unique_ptr<runtime::Executable>(std::move(*exe));
}

Expected<std::unique_ptr<runtime::Executable>> compileHighway(const ir::Graph &g,
                                                              const BackendOptions &o) {
  codegen::ExecutorOptions options;
  options.threads = o.threads;
  return executorOf(g, o, "highway", [&] { return codegen::compileExecutor(g, options); });
}

int64_t estimateHighway(const ir::Graph &g, const BackendOptions &) {
  return codegen::executorBytes(g);
}

Expected<std::unique_ptr<runtime::Executable>> compileLlvm(const ir::Graph &g,
                                                           const BackendOptions &o) {
  llvmgen::Options options;
  options.threads = o.threads, options.cpu = o.cpu;
  return executorOf(g, o, "llvm", [&] { return llvmgen::compile(g, options); });
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

std::optional<std::string> f64Value(const ir::Graph &g) {
  for (const ir::Arg &a : g.args())
    if (g.type(a.value).dtype == DType::F64)
      return fmt::format("\"{}\"", a.name);
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    const ir::Node &n = g.node(id);
    if (!n.erased)
      for (ir::ValueId r : n.results)
        if (g.type(r).dtype == DType::F64)
          return fmt::format("{} at {}", ir::mnemonic(n.op), ir::placeOf(n, id));
  }
  return std::nullopt;
}

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
