// The LLVM side of the LLVM backend: a target machine for the host CPU (or one named), the
// middle end run explicitly (an LLJIT runs no IR passes of its own), and an ORC LLJIT that
// compiles modules in-process and resolves what they call (libm) from the process.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include "support/status.h"

namespace kiln::llvmgen {

// A target machine for `cpu` ("" or "native": the host, with its features) at O2. For an object
// file that a standalone executable links (objectFile): position-independent code, the small
// code model (a PIE needs no text relocations); else what the JIT maps anywhere.
Expected<std::unique_ptr<llvm::TargetMachine>> targetMachine(const std::string &cpu,
                                                             bool objectFile = false);

// Sets m's triple, data layout and every function's target CPU and features to tm's, checks m
// with llvm::verifyModule (Debian's LLVM has no assertions to catch a bad module later) and runs
// PassBuilder's O2 pipeline on it.
Status optimize(llvm::Module &m, llvm::TargetMachine &tm);

// The machine code of m (optimized) as assembly text, or as an ELF object file.
Expected<std::string> machineCode(llvm::Module &m, llvm::TargetMachine &tm, bool assembly);

class Jit {
public:
  static Expected<std::shared_ptr<Jit>> create(const std::string &cpu);
  // Builds `parts` modules, build(k, module k), on a thread each (each with its own context and
  // target machine: compile time is mostly O2 and instruction selection, which parallelize per
  // module), optimizes them, compiles them to object files and links those into the JIT.
  Status addInParallel(int parts, const std::function<void(int, llvm::Module &)> &build);
  // The address of a function of an added module.
  Expected<void *> lookup(const std::string &name);

private:
  std::string cpu_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
};

} // namespace kiln::llvmgen
