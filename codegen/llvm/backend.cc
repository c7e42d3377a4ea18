// The LLVM backend (see backend.h): the Highway lowering, whose region programs are compiled
// here into one module before the executor is created.
#include "codegen/llvm/backend.h"

#include <llvm/Support/raw_ostream.h>

#include "codegen/highway/backend.h"
#include "codegen/highway/tile_program.h"
#include "codegen/llvm/jit.h"
#include "codegen/llvm/tile_codegen.h"

namespace kiln::llvmgen {

namespace {

using Programs = std::span<const std::shared_ptr<highway::TileProgram>>;

// One function per region program that the codegen compiles, named after it.
std::unique_ptr<llvm::Module> buildModule(Programs programs, const std::string &graph,
                                          llvm::LLVMContext &ctx) {
  auto m = std::make_unique<llvm::Module>(graph, ctx);
  for (const auto &p : programs)
    if (canEmit(*p))
      emitTileProgram(*p, *m, p->name);
  return m;
}

} // namespace

Expected<std::unique_ptr<runtime::Executor>> compile(const ir::Graph &g, const Options &options) {
  Expected<std::shared_ptr<Jit>> jit = Jit::create(options.cpu);
  if (!jit)
    return jit.error();
  highway::Options h;
  h.threads = options.threads, h.backend = "llvm";
  h.compileRegions = [&](Programs programs) -> Status {
    auto ctx = std::make_unique<llvm::LLVMContext>();
    std::unique_ptr<llvm::Module> m = buildModule(programs, g.name(), *ctx);
    if (Status st = (*jit)->add(std::move(m), std::move(ctx)); !st.ok())
      return st;
    for (const auto &p : programs) {
      if (!canEmit(*p))
        continue;
      Expected<void *> fn = (*jit)->lookup(p->name);
      if (!fn)
        return fn.error();
      p->native = reinterpret_cast<highway::TileProgram::Native>(*fn);
      p->owner = *jit;
    }
    return {};
  };
  return highway::compile(g, std::move(h));
}

Expected<std::string> moduleText(const ir::Graph &g, const Options &options, bool asm_) {
  Expected<std::unique_ptr<llvm::TargetMachine>> tm = targetMachine(options.cpu);
  if (!tm)
    return tm.error();
  std::string text;
  highway::Options h;
  h.backend = "llvm";
  h.compileRegions = [&](Programs programs) -> Status {
    llvm::LLVMContext ctx;
    std::unique_ptr<llvm::Module> m = buildModule(programs, g.name(), ctx);
    if (Status st = optimize(*m, **tm); !st.ok())
      return st;
    if (asm_) {
      Expected<std::string> a = assembly(*m, **tm);
      if (!a)
        return a.error();
      text = std::move(*a);
      return {};
    }
    llvm::raw_string_ostream os(text);
    m->print(os, nullptr);
    return {};
  };
  if (Expected<runtime::ExecutorProgram> p = highway::lower(g, h); !p)
    return p.error();
  return text;
}

} // namespace kiln::llvmgen
