// Target machine, middle end and JIT (see jit.h).
#include "codegen/llvm/jit.h"

#include <mutex>
#include <thread>

#include <fmt/format.h>

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Host.h>

#include "runtime/kernel_abi.h"

namespace kiln::llvmgen {

namespace {

void initializeLlvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

std::string message(llvm::Error e) {
  return llvm::toString(std::move(e));
}

Expected<llvm::orc::JITTargetMachineBuilder> machineBuilder(const std::string &cpu) {
  initializeLlvm();
  if (cpu.empty() || cpu == "native") {
    auto host = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!host)
      return makeError("llvm backend: cannot describe this CPU: {}", message(host.takeError()));
    host->setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
    return std::move(*host);
  }
  llvm::orc::JITTargetMachineBuilder b{llvm::Triple(llvm::sys::getProcessTriple())};
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(b.getTargetTriple().str(), error);
  if (!target)
    return makeError("llvm backend: {}", error);
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      target->createMCSubtargetInfo(b.getTargetTriple().str(), "", ""));
  if (!sti || !sti->isCPUStringValid(cpu))
    return makeError("--target-cpu {}: not a CPU that LLVM knows for {} (try `native`, or a name "
                     "such as x86-64-v3, znver4, skylake-avx512)",
                     cpu, b.getTargetTriple().str());
  // A 32-bit CPU (i386, pentium4, ...) is a valid name, but LLVM aborts the process when asked
  // for 64-bit code on it.
  std::unique_ptr<llvm::MCSubtargetInfo> chosen(
      target->createMCSubtargetInfo(b.getTargetTriple().str(), cpu, ""));
  if (b.getTargetTriple().getArch() == llvm::Triple::x86_64 &&
      (!chosen || !chosen->checkFeatures("+64bit")))
    return makeError("--target-cpu {}: a 32-bit CPU; expected one that runs x86-64 code (try "
                     "`native`, or a name such as x86-64-v3, znver4, skylake-avx512)",
                     cpu);
  b.setCPU(cpu);
  b.setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
  return b;
}

} // namespace

Expected<std::unique_ptr<llvm::TargetMachine>> targetMachine(const std::string &cpu,
                                                             bool objectFile) {
  Expected<llvm::orc::JITTargetMachineBuilder> b = machineBuilder(cpu);
  if (!b)
    return b.error();
  if (objectFile) {
    b->setRelocationModel(llvm::Reloc::PIC_);
    b->setCodeModel(llvm::CodeModel::Small);
  }
  auto tm = b->createTargetMachine();
  if (!tm)
    return makeError("llvm backend: no target machine: {}", message(tm.takeError()));
  return std::move(*tm);
}

Status optimize(llvm::Module &m, llvm::TargetMachine &tm) {
  m.setTargetTriple(tm.getTargetTriple().str());
  m.setDataLayout(tm.createDataLayout());
  for (llvm::Function &f : m)
    if (!f.isDeclaration()) {
      f.addFnAttr("target-cpu", tm.getTargetCPU());
      f.addFnAttr("target-features", tm.getTargetFeatureString());
    }
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(m, &os))
    return makeError("llvm backend: the generated module does not verify (a kiln bug): {}",
                     problems);
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(m, mam);
  return {};
}

Expected<std::string> machineCode(llvm::Module &m, llvm::TargetMachine &tm, bool assembly) {
  llvm::SmallString<0> bytes;
  llvm::raw_svector_ostream os(bytes);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr,
                             assembly ? llvm::CodeGenFileType::AssemblyFile
                                      : llvm::CodeGenFileType::ObjectFile))
    return makeError("llvm backend: the target cannot emit {}",
                     assembly ? "assembly" : "object files");
  pm.run(m);
  return std::string(bytes);
}

Expected<std::shared_ptr<Jit>> Jit::create(const std::string &cpu) {
  if (Expected<std::unique_ptr<llvm::TargetMachine>> tm = targetMachine(cpu); !tm)
    return tm.error(); // an unknown CPU, before any thread starts
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(*machineBuilder(cpu)).create();
  if (!jit)
    return makeError("llvm backend: cannot start the JIT: {}", message(jit.takeError()));
  // What generated code calls outside itself (libm's logf, tanhf, ...) comes from this process.
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      (*jit)->getDataLayout().getGlobalPrefix());
  if (!process)
    return makeError("llvm backend: {}", message(process.takeError()));
  (*jit)->getMainJITDylib().addGenerator(std::move(*process));
  // The kernel ABI, which a generated whole program calls: from this binary, by address (its
  // symbols need not be exported dynamically).
  llvm::orc::SymbolMap kernels;
#define KILN_SYMBOL(name)                                                                          \
  kernels[(*jit)->mangleAndIntern(#name)] = {llvm::orc::ExecutorAddr::fromPtr(&name),              \
                                             llvm::JITSymbolFlags::Exported |                      \
                                                 llvm::JITSymbolFlags::Callable};
  KILN_KERNELS(KILN_SYMBOL)
#undef KILN_SYMBOL
  if (llvm::Error e =
          (*jit)->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(kernels))))
    return makeError("llvm backend: {}", message(std::move(e)));
  auto out = std::make_shared<Jit>();
  out->cpu_ = cpu;
  out->jit_ = std::move(*jit);
  return out;
}

Status Jit::addInParallel(int parts, const std::function<void(int, llvm::Module &)> &build) {
  std::vector<Expected<std::string>> objects(static_cast<size_t>(parts), std::string());
  auto work = [&](int k) {
    llvm::LLVMContext ctx;
    llvm::Module m(fmt::format("part{}", k), ctx);
    build(k, m);
    Expected<std::unique_ptr<llvm::TargetMachine>> tm = targetMachine(cpu_);
    if (!tm) {
      objects[k] = tm.error();
      return;
    }
    if (Status st = optimize(m, **tm); !st.ok()) {
      objects[k] = st.error();
      return;
    }
    objects[k] = machineCode(m, **tm, false);
  };
  std::vector<std::thread> threads;
  for (int k = 1; k < parts; ++k)
    threads.emplace_back(work, k);
  work(0);
  for (std::thread &t : threads)
    t.join();
  for (Expected<std::string> &o : objects) {
    if (!o)
      return o.error();
    if (llvm::Error e = jit_->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(*o)))
      return makeError("llvm backend: {}", message(std::move(e)));
  }
  return {};
}

Expected<void *> Jit::lookup(const std::string &name) {
  auto addr = jit_->lookup(name);
  if (!addr)
    return makeError("llvm backend: {}", message(addr.takeError()));
  return addr->toPtr<void *>();
}

} // namespace kiln::llvmgen
