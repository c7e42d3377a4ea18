// The LLVM backend: the Highway backend's program of kernel calls (GEMM, attention, norms and
// the rest), with every fusion region compiled by LLVM into a loop nest of its own
// (tile_codegen.h), JIT-compiled in-process from a few modules built and compiled in parallel.
// (Next: the whole step as one module calling the kernels through an extern "C" ABI, for
// ahead-of-time bundles.)
#pragma once

#include <memory>
#include <string>

#include "ir/graph.h"
#include "runtime/executor.h"
#include "support/status.h"

namespace kiln::llvmgen {

struct Options {
  int threads = 0; // 0: every core
  std::string cpu; // LLVM's CPU name to compile for; "" or "native": this machine's
};

// `g` must carry a memory plan that verifies.
Expected<std::unique_ptr<runtime::Executor>> compile(const ir::Graph &g, const Options &options);

// The module of g's compiled regions after the O2 pipeline, as LLVM IR text or (asm) as the
// target's assembly: what `kiln dump --stage=llvm|asm` prints.
Expected<std::string> moduleText(const ir::Graph &g, const Options &options, bool asm_);

} // namespace kiln::llvmgen
