// The LLVM backend (see backend.h): the Highway lowering, whose region programs are compiled
// here (a module part per thread, in parallel) before the executor is created.
#include "codegen/llvm/backend.h"

#include <algorithm>

#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Support/raw_ostream.h>

#include "codegen/common/executor_backend.h"
#include "codegen/common/tile_program.h"
#include "codegen/llvm/jit.h"
#include "codegen/llvm/program_codegen.h"
#include "codegen/llvm/tile_codegen.h"
#include "runtime/bundle_loader.h"
#include "runtime/cpu_features.h"

namespace kiln::llvmgen {

namespace {

using Programs = std::span<const std::shared_ptr<codegen::TileProgram>>;

// A function per region program, named after it (with `prefix`): every parts-th one from the
// k-th (so that part k of `parts` modules compiled in parallel gets an even share).
void buildModule(Programs programs, llvm::Module &m, int k = 0, int parts = 1,
                 const std::string &prefix = "") {
  for (size_t i = static_cast<size_t>(k); i < programs.size(); i += static_cast<size_t>(parts))
    emitTileProgram(*programs[i], m, prefix + programs[i]->name);
}

// g lowered for a whole generated program: its steps (the regions left to the interpreter there:
// the generated code links them by name), their region programs and the constants' bytes.
struct Whole {
  runtime::ExecutorProgram p;
  std::vector<std::shared_ptr<codegen::TileProgram>> programs;
  std::vector<uint8_t> constants;
};
Expected<Whole> lowerWhole(const ir::Graph &g) {
  Whole w;
  codegen::ExecutorOptions h;
  h.compileRegions = [&](Programs programs) -> Status {
    w.programs.assign(programs.begin(), programs.end());
    return {};
  };
  Expected<runtime::ExecutorProgram> p = codegen::lower(g, h);
  if (!p)
    return p.error();
  w.p = std::move(*p);
  Expected<std::vector<uint8_t>> constants = constantsOf(w.p);
  if (!constants)
    return constants.error();
  w.constants = std::move(*constants);
  return w;
}

int threadsOf(const Options &options) {
  return options.threads > 0 ? options.threads : runtime::ThreadPool::defaultThreads();
}

} // namespace

Expected<std::unique_ptr<runtime::Executor>> compile(const ir::Graph &g, const Options &options) {
  Expected<std::shared_ptr<Jit>> jit = Jit::create(options.cpu);
  if (!jit)
    return jit.error();
  codegen::ExecutorOptions h;
  h.threads = options.threads, h.backend = "llvm";
  h.compileRegions = [&](Programs programs) -> Status {
    const int parts =
        std::max(1, std::min<int>(threadsOf(options), static_cast<int>(programs.size())));
    Status st = (*jit)->addInParallel(
        parts, [&](int k, llvm::Module &m) { buildModule(programs, m, k, parts); });
    if (!st.ok())
      return st;
    for (const auto &p : programs) {
      Expected<void *> fn = (*jit)->lookup(p->name);
      if (!fn)
        return fn.error();
      p->native = reinterpret_cast<kiln_rows_fn>(*fn);
      p->owner = *jit;
    }
    return {};
  };
  return codegen::compileExecutor(g, std::move(h));
}

Expected<std::unique_ptr<runtime::Executor>> compileProgram(const ir::Graph &g,
                                                            const Options &options) {
  Expected<std::shared_ptr<Jit>> jit = Jit::create(options.cpu);
  if (!jit)
    return jit.error();
  Expected<Whole> w = lowerWhole(g);
  if (!w)
    return w.error();
  const std::string prefix = cIdentifier(g.name()) + "_";
  const int parts =
      std::max(1, std::min<int>(threadsOf(options), static_cast<int>(w->programs.size()) + 1));
  Status emitted;
  Status st = (*jit)->addInParallel(parts, [&](int k, llvm::Module &m) {
    buildModule(w->programs, m, k, parts, prefix);
    if (k == 0)
      emitted = emitProgram(w->p, w->constants, prefix, "run", m);
  });
  if (!emitted.ok())
    return emitted.error();
  if (!st.ok())
    return st.error();
  Expected<void *> bundle = (*jit)->lookup(prefix + "bundle");
  if (!bundle)
    return bundle.error();
  return runtime::loadBundle(*static_cast<const kiln_bundle *>(*bundle), threadsOf(options), *jit);
}

namespace {

// g's whole program in m: its regions' functions and the entry `<prefix><entry>` with the bundle
// descriptor, as programObject and moduleText compile them.
Status buildWhole(const ir::Graph &g, const std::string &prefix, const std::string &entry,
                  llvm::Module &m, const BundleModel &model = {}) {
  Expected<Whole> w = lowerWhole(g);
  if (!w)
    return w.error();
  buildModule(w->programs, m, 0, 1, prefix);
  return emitProgram(w->p, w->constants, prefix, entry, m, model);
}

} // namespace

Expected<std::string> programObject(std::span<const ObjectPart> parts, const Options &options) {
  Expected<std::unique_ptr<llvm::TargetMachine>> tm = targetMachine(options.cpu, true);
  if (!tm)
    return tm.error();
  llvm::LLVMContext ctx;
  llvm::Module m(parts.empty() ? "empty" : parts[0].g->name(), ctx);
  for (const ObjectPart &part : parts)
    if (Status st = buildWhole(*part.g, part.prefix, part.entry, m, part.model); !st.ok())
      return makeError("{}{}: {}", part.prefix, part.entry, st.error().message);
  if (Status st = optimize(m, **tm); !st.ok())
    return st.error();
  return machineCode(m, **tm, false);
}

Expected<CpuTarget> cpuTarget(const std::string &cpu) {
  Expected<std::unique_ptr<llvm::TargetMachine>> tm = targetMachine(cpu, true);
  if (!tm)
    return tm.error();
  CpuTarget t{.name = std::string((*tm)->getTargetCPU()), .features = {}};
  const llvm::MCSubtargetInfo *sti = (*tm)->getMCSubtargetInfo();
  for (std::string_view f : runtime::knownCpuFeatures())
    if (sti->checkFeatures("+" + std::string(f)))
      t.features.emplace_back(f);
  return t;
}

Expected<std::string> moduleText(const ir::Graph &g, const Options &options,
                                 const std::string &entry, bool asm_) {
  Expected<std::unique_ptr<llvm::TargetMachine>> tm = targetMachine(options.cpu, true);
  if (!tm)
    return tm.error();
  llvm::LLVMContext ctx;
  llvm::Module m(g.name(), ctx);
  if (Status st = buildWhole(g, cIdentifier(g.name()) + "_", entry, m); !st.ok())
    return st.error();
  if (Status st = optimize(m, **tm); !st.ok())
    return st.error();
  if (asm_)
    return machineCode(m, **tm, true);
  std::string text;
  llvm::raw_string_ostream os(text);
  m.print(os, nullptr);
  return text;
}

} // namespace kiln::llvmgen
