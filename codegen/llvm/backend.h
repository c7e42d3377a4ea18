// The LLVM backend: the Highway backend's program of kernel calls (GEMM, attention, norms and
// the rest), with every fusion region compiled by LLVM into a loop nest of its own
// (tile_codegen.h), JIT-compiled in-process from a few modules built and compiled in parallel.
// Or the whole program generated (program_codegen.h): one function calling the kernel ABI with
// constant arguments, and its bundle descriptor -- JIT-compiled (compileProgram) or as an object
// file for a bundle (programObject, `kiln compile`).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

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

// g as one generated program, JIT-compiled and loaded as a bundle (runtime/bundle_loader.h): the
// same code that `kiln compile` writes to an object file. Errors: compile's, and emitProgram's.
Expected<std::unique_ptr<runtime::Executor>> compileProgram(const ir::Graph &g,
                                                            const Options &options);

// What a bundle says of the model it was compiled from (kiln_bundle's model, settings and
// defaults); "" where it says nothing (a bundle of an IR file).
struct BundleModel {
  std::string model, settings, defaults;
};

// One program of an object file: graph g's whole program, with the symbols `<prefix><entry>` and
// `<prefix>bundle` (its bundle descriptor).
struct ObjectPart {
  const ir::Graph *g;
  std::string prefix, entry;
  BundleModel model; // what its descriptor says of the model it was compiled from
};

// The object file of the parts' programs (a bundle may hold several: a forward pass, and the
// prefill and decode programs that generate with), in one module; the prefixes must differ.
// Errors: as compileProgram's, headed by the failing program's entry (`<prefix><entry>: ...`).
Expected<std::string> programObject(std::span<const ObjectPart> parts, const Options &options);

// What code for `cpu` ("" or "native": this machine) may run on: LLVM's name of the CPU and the
// features of runtime/cpu_features.h that it has (the generated code may use any of them).
struct CpuTarget {
  std::string name;
  std::vector<std::string> features;
};
Expected<CpuTarget> cpuTarget(const std::string &cpu);

// The module of g's whole program, as programObject compiles it (the entry point `<g's name>_
// <entry>`, its constants and descriptor, a function per region) after the O2 pipeline, as LLVM
// IR text or (asm) as the target's assembly: what `kiln dump --stage=llvm|asm` prints.
Expected<std::string> moduleText(const ir::Graph &g, const Options &options,
                                 const std::string &entry, bool asm_);

} // namespace kiln::llvmgen
