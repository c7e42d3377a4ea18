// A whole program as generated code: the Highway lowering's steps, every one a call of the kernel
// ABI (runtime/kernel_abi.h), become one function that makes those calls in order with their
// arguments as constants (the compiled regions' rows functions linked by name), and the bundle
// descriptor (runtime/bundle.h) that a runtime loads it by: regions, constants, symbol table.
// The same module is JIT-compiled in-process or written to an object file (`kiln compile`).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <llvm/IR/Module.h>

#include "codegen/llvm/backend.h"
#include "runtime/executor.h"
#include "support/status.h"

namespace kiln::llvmgen {

// Adds to m `i32 <prefix><entry>(ptr run, ptr failed_step)` (a kiln_entry) and the constant
// `<prefix>bundle` (a kiln_bundle) for p, whose constants region holds `constants`. Each call's
// linked rows function is `<prefix><link symbol>`, defined in m or in a module linked with it.
// A call that fails returns its status from the entry: the executor's fallbacks to the reference
// (an index out of range, reported at the node; a region's integer input beyond 2^24, computed
// exactly) are not in generated code, where both are errors naming the step. Errors: a step that
// is no kernel call (an op that runs by reference: bf16 values), a tensor of rank above
// KILN_MAX_RANK.
Status emitProgram(const runtime::ExecutorProgram &p, std::span<const uint8_t> constants,
                   const std::string &prefix, const std::string &entry, llvm::Module &m,
                   const BundleModel &model = {});

// The bytes of p's constants region, made by running its load steps.
Expected<std::vector<uint8_t>> constantsOf(const runtime::ExecutorProgram &p);

// A C identifier made of `name` (other characters become '_'; a leading digit gets one before).
std::string cIdentifier(const std::string &name);

} // namespace kiln::llvmgen
