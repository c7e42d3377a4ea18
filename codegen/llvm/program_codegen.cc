// The whole program as generated code (see program_codegen.h). The entry function is straight
// line: per call, `s = kernel(run, @args_i)`, on s != 0 to a block that stores the step's index
// and returns s. Arguments are constant arrays of 8-byte words, a linked rows function's word
// the function's address (a relocation in an object file) and the next word, its ctx, 0.
#include "codegen/llvm/program_codegen.h"

#include <fmt/format.h>

#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>

#include "codegen/common/executor_backend.h"
#include "runtime/bundle.h"
#include "support/memory_region.h"

namespace kiln::llvmgen {

namespace {

struct Call {
  int64_t step;
  const runtime::KernelCall *call;
};

class Emitter {
public:
  Emitter(const std::string &prefix, llvm::Module &m)
      : prefix_(prefix), m_(m), c_(m.getContext()), i64_(llvm::Type::getInt64Ty(c_)),
        i32_(llvm::Type::getInt32Ty(c_)), ptr_(llvm::PointerType::get(c_, 0)) {}

  Status emit(const runtime::ExecutorProgram &p, std::span<const uint8_t> constants,
              const std::string &entryName, const BundleModel &model) {
    if (Status s = codegen::checkKernelCalls(p); !s)
      return s;
    std::vector<Call> calls;
    std::vector<std::string> kinds;
    for (const runtime::Step &s : p.steps) {
      for (const runtime::KernelCall &call : s.calls)
        calls.push_back({static_cast<int64_t>(kinds.size()), &call});
      kinds.push_back(s.kind);
    }
    // Updates not written in place: copied over their arguments after the last step.
    std::vector<runtime::KernelCall> copies;
    for (const runtime::PlacedCopy &c : p.copies)
      copies.push_back(
          runtime::KernelCall::of(&kiln_copy, "kiln_copy",
                                  kiln_copy_args{c.bytes,
                                                 {static_cast<int64_t>(c.fromRegion), c.from},
                                                 {static_cast<int64_t>(c.toRegion), c.to}}));
    if (!copies.empty()) {
      for (const runtime::KernelCall &call : copies)
        calls.push_back({static_cast<int64_t>(kinds.size()), &call});
      kinds.push_back("update copies");
    }
    llvm::Function *entry = emitEntry(calls, entryName);
    return emitBundle(p, constants, kinds, entry, model);
  }

private:
  llvm::Constant *word(uint64_t w) { return llvm::ConstantInt::get(i64_, w); }

  llvm::GlobalVariable *global(llvm::Constant *init, const std::string &name, uint64_t align,
                               bool exported = false) {
    auto *g = new llvm::GlobalVariable(m_, init->getType(), true,
                                       exported ? llvm::GlobalValue::ExternalLinkage
                                                : llvm::GlobalValue::PrivateLinkage,
                                       init, prefix_ + name);
    g->setAlignment(llvm::Align(align));
    return g;
  }
  llvm::Constant *string(const std::string &s) {
    return global(llvm::ConstantDataArray::getString(c_, s), "str", 1);
  }

  // The call's args as a constant array of words, its links resolved by name.
  llvm::Constant *args(const runtime::KernelCall &call) {
    std::vector<llvm::Constant *> words;
    for (uint64_t w : call.args)
      words.push_back(word(w));
    llvm::FunctionType *rows = llvm::FunctionType::get(
        llvm::Type::getVoidTy(c_), {ptr_, ptr_, i64_, i64_, i64_, i64_, ptr_, i64_, ptr_}, false);
    for (const runtime::KernelCall::Link &link : call.links) {
      llvm::FunctionCallee f = m_.getOrInsertFunction(prefix_ + link.symbol, rows);
      words[link.word] =
          llvm::ConstantExpr::getPtrToInt(llvm::cast<llvm::Constant>(f.getCallee()), i64_);
      words[link.word + 1] = word(0);
    }
    return global(llvm::ConstantArray::get(llvm::ArrayType::get(i64_, words.size()), words), "args",
                  8);
  }

  llvm::Function *emitEntry(const std::vector<Call> &calls, const std::string &name) {
    auto *type = llvm::FunctionType::get(i32_, {ptr_, ptr_}, false);
    llvm::Function *f =
        llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, prefix_ + name, m_);
    llvm::Value *run = f->getArg(0), *failed = f->getArg(1);
    run->setName("run"), failed->setName("failed_step");
    auto *kernel = llvm::FunctionType::get(i32_, {ptr_, ptr_}, false);
    llvm::BasicBlock *fail = llvm::BasicBlock::Create(c_, "fail", f);
    llvm::IRBuilder<> fb(fail);
    llvm::PHINode *status = fb.CreatePHI(i32_, static_cast<unsigned>(calls.size()));
    llvm::PHINode *step = fb.CreatePHI(i64_, static_cast<unsigned>(calls.size()));
    fb.CreateStore(step, failed);
    fb.CreateRet(status);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f, fail));
    for (const Call &c : calls) {
      llvm::FunctionCallee k = m_.getOrInsertFunction(c.call->symbol, kernel);
      llvm::Value *s = b.CreateCall(k, {run, args(*c.call)});
      llvm::BasicBlock *next = llvm::BasicBlock::Create(c_, "", f, fail);
      b.CreateCondBr(b.CreateICmpEQ(s, llvm::ConstantInt::get(i32_, KILN_OK)), next, fail);
      status->addIncoming(s, b.GetInsertBlock());
      step->addIncoming(word(static_cast<uint64_t>(c.step)), b.GetInsertBlock());
      b.SetInsertPoint(next);
    }
    b.CreateRet(llvm::ConstantInt::get(i32_, KILN_OK));
    return f;
  }

  Status emitBundle(const runtime::ExecutorProgram &p, std::span<const uint8_t> constants,
                    const std::vector<std::string> &kinds, llvm::Function *entry,
                    const BundleModel &model) {
    auto *shape = llvm::ArrayType::get(i64_, KILN_MAX_RANK);
    auto *f64 = llvm::Type::getDoubleTy(c_);
    auto *symbolType = llvm::StructType::get(
        c_, {ptr_, i64_, i64_, i64_, i64_, i64_, shape, i64_, i64_, i64_, i64_, f64, i64_, i64_});
    std::vector<llvm::Constant *> symbols;
    for (const runtime::Symbol &s : p.program.symbols) {
      if (s.shape.size() > KILN_MAX_RANK)
        return makeError("tensor '{}' has rank {}: a bundle holds ranks up to {}", s.name,
                         s.shape.size(), KILN_MAX_RANK);
      std::vector<llvm::Constant *> dims(KILN_MAX_RANK, word(0));
      for (size_t d = 0; d < s.shape.size(); ++d)
        dims[d] = word(static_cast<uint64_t>(s.shape[d]));
      auto w = [&](int64_t v) { return word(static_cast<uint64_t>(v)); };
      symbols.push_back(llvm::ConstantStruct::get(
          symbolType,
          {string(s.name), w(static_cast<int64_t>(s.kind)), w(static_cast<int64_t>(s.role)),
           w(s.of), w(static_cast<int64_t>(s.dtype)), w(static_cast<int64_t>(s.shape.size())),
           llvm::ConstantArray::get(shape, dims), w(static_cast<int64_t>(s.region)), w(s.offset),
           w(s.bytes), w(static_cast<int64_t>(s.init.kind)),
           llvm::ConstantFP::get(f64, s.init.scale), w(static_cast<int64_t>(s.domain)),
           w(s.range)}));
    }
    std::vector<llvm::Constant *> kindNames;
    for (const std::string &k : kinds)
      kindNames.push_back(string(k));
    std::vector<llvm::Constant *> regions;
    for (MemRegion r : kAllMemRegions)
      regions.push_back(word(static_cast<uint64_t>(p.program.bytes(r))));
    llvm::Constant *image = llvm::ConstantPointerNull::get(ptr_);
    if (!constants.empty())
      image = global(llvm::ConstantDataArray::get(
                         c_, llvm::ArrayRef<uint8_t>(constants.data(), constants.size())),
                     "constants", 64);
    auto array = [&](llvm::Type *t, const std::vector<llvm::Constant *> &xs,
                     const std::string &name) -> llvm::Constant * {
      if (xs.empty())
        return llvm::ConstantPointerNull::get(ptr_);
      return global(llvm::ConstantArray::get(llvm::ArrayType::get(t, xs.size()), xs), name, 8);
    };
    auto *bundleType =
        llvm::StructType::get(c_, {i64_, ptr_, llvm::ArrayType::get(i64_, KILN_REGIONS), ptr_, i64_,
                                   ptr_, i64_, ptr_, ptr_, ptr_, ptr_, ptr_, i64_});
    auto text = [&](const std::string &s) -> llvm::Constant * {
      return s.empty() ? llvm::ConstantPointerNull::get(ptr_) : string(s);
    };
    llvm::Constant *bundle = llvm::ConstantStruct::get(
        bundleType,
        {word(KILN_BUNDLE_VERSION), string(p.program.name),
         llvm::ConstantArray::get(llvm::ArrayType::get(i64_, KILN_REGIONS), regions), image,
         word(symbols.size()), array(symbolType, symbols, "symbols"), word(kinds.size()),
         array(ptr_, kindNames, "step_kinds"), entry, text(model.model), text(model.settings),
         text(model.defaults), word(static_cast<uint64_t>(p.program.ranks))});
    global(bundle, "bundle", 8, true);
    return {};
  }

  std::string prefix_;
  llvm::Module &m_;
  llvm::LLVMContext &c_;
  llvm::IntegerType *i64_, *i32_;
  llvm::PointerType *ptr_;
};

} // namespace

Status emitProgram(const runtime::ExecutorProgram &p, std::span<const uint8_t> constants,
                   const std::string &prefix, const std::string &entry, llvm::Module &m,
                   const BundleModel &model) {
  return Emitter(prefix, m).emit(p, constants, entry, model);
}

Expected<std::vector<uint8_t>> constantsOf(const runtime::ExecutorProgram &p) {
  // Load steps make constants from attributes alone: they touch the constants region only.
  runtime::AlignedBytes region(p.program.bytes(MemRegion::Constants));
  runtime::StepContext ctx;
  ctx.base[static_cast<int>(MemRegion::Constants)] = region.data();
  for (const runtime::Step &s : p.atLoad)
    if (Status st = s(ctx); !st)
      return st.error();
  return std::vector<uint8_t>(region.data(), region.data() + region.size);
}

std::string cIdentifier(const std::string &name) {
  std::string out;
  for (char ch : name)
    out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0])))
    out.insert(out.begin(), '_');
  return out;
}

} // namespace kiln::llvmgen
