// The LLVM side of the LLVM backend: a target machine for the host CPU (or one named), the
// middle end run explicitly (an LLJIT runs no IR passes of its own), and an ORC LLJIT that
// compiles modules in-process and resolves what they call (libm) from the process.
#pragma once

#include <memory>
#include <string>

#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include "support/status.h"

namespace kiln::llvmgen {

// A target machine for `cpu` ("" or "native": the host, with its features) at O2.
Expected<std::unique_ptr<llvm::TargetMachine>> targetMachine(const std::string &cpu);

// Sets m's triple, data layout and every function's target CPU and features to tm's, checks m
// with llvm::verifyModule (Debian's LLVM has no assertions to catch a bad module later) and runs
// PassBuilder's O2 pipeline on it.
Status optimize(llvm::Module &m, llvm::TargetMachine &tm);

// The machine code of m (optimized) as assembly text.
Expected<std::string> assembly(llvm::Module &m, llvm::TargetMachine &tm);

class Jit {
public:
  static Expected<std::shared_ptr<Jit>> create(const std::string &cpu);
  // Optimizes m (optimize above) and hands it to the JIT with its context.
  Status add(std::unique_ptr<llvm::Module> m, std::unique_ptr<llvm::LLVMContext> ctx);
  // The address of a function of an added module.
  Expected<void *> lookup(const std::string &name);
  llvm::TargetMachine &target() { return *tm_; }

private:
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unique_ptr<llvm::TargetMachine> tm_;
};

} // namespace kiln::llvmgen
