// The backends, in one explicit table by name (as passes/registry.h lists the passes): what
// `--backend` chooses from and lists. Each compiles a graph that carries a memory plan into a
// runtime::Executable.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ir/graph.h"
#include "runtime/executable.h"
#include "support/status.h"

namespace kiln::codegen {

struct BackendOptions {
  bool f64 = false; // compute in double where the backend can (the reference)
  int threads = 0;  // threads where the backend uses them (highway, llvm); 0: every core
  std::string cpu;  // the CPU that llvm compiles for, by LLVM's name; "": this machine's
};

// Where g first holds an f64 value (an argument's name, or the op and place of the node that makes
// it), or nothing. At f32 precision every backend holds and computes values in f32 (the reference
// in RefTensor<float>, the kernels in f32), so that an f64 output would carry f32's digits under
// its f64 type: such a graph runs only at f64 precision, on the reference (each backend's
// compile refuses it otherwise), and compiles into no bundle.
std::optional<std::string> f64Value(const ir::Graph &g);

struct BackendInfo {
  std::string_view name;
  std::string_view summary;
  // `g` carries a memory plan (withMemoryPlan).
  Expected<std::unique_ptr<runtime::Executable>> (*compile)(const ir::Graph &g,
                                                            const BackendOptions &options);
  // The bytes compile() and a run will need, for the memory budget checked before compiling.
  int64_t (*estimateBytes)(const ir::Graph &g, const BackendOptions &options);
};

std::span<const BackendInfo> allBackends();
const BackendInfo *findBackend(std::string_view name); // nullptr if unknown
// "reference" ... for help texts and errors.
std::string backendNames();

} // namespace kiln::codegen
