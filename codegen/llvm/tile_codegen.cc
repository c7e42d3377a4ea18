// A tile program as an LLVM function (see tile_codegen.h). Each pointwise op emits its formula
// (ir/ops/elementwise.h) through IrMath below, the instance of ir/ops/math.h that mirrors the
// Highway interpreter's VectorMath (codegen/common/pointwise.cc) operation for operation, so the
// two backends agree bit for bit.
#include "codegen/llvm/tile_codegen.h"

#include <cassert>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include "codegen/llvm/vector_math.h"
#include "ir/ops/elementwise.h"

namespace kiln::llvmgen {

using codegen::TileProgram;
using ir::OpKind;
using llvm::Value;

namespace {

constexpr unsigned kLanes = 16; // a zmm register; the backend splits it where vectors are shorter

// ir/ops/math.h's interface on LLVM vectors of kLanes floats (conditions: vectors of i1).
// exp, tanh and erf are vector_math.h's; log, log1p, sin, cos and pow call libm lane by lane, as
// the Highway interpreter does.
struct IrMath {
  using V = Value *;
  using B = Value *;
  llvm::IRBuilder<> &b;
  llvm::Module &m;
  const VectorMath &vm;
  llvm::Type *f32;

  V c(double v) const { return vm.splat(static_cast<float>(v)); }
  V neg(V x) const { return b.CreateFNeg(x); }
  V add(V x, V y) const { return b.CreateFAdd(x, y); }
  V sub(V x, V y) const { return b.CreateFSub(x, y); }
  V mul(V x, V y) const { return b.CreateFMul(x, y); }
  V div(V x, V y) const { return b.CreateFDiv(x, y); }
  B eq(V x, V y) const { return b.CreateFCmpOEQ(x, y); }
  B ne(V x, V y) const { return b.CreateFCmpUNE(x, y); } // true on NaN, as C++'s !=
  B lt(V x, V y) const { return b.CreateFCmpOLT(x, y); }
  B le(V x, V y) const { return b.CreateFCmpOLE(x, y); }
  B gt(V x, V y) const { return b.CreateFCmpOGT(x, y); }
  B ge(V x, V y) const { return b.CreateFCmpOGE(x, y); }
  B isnan(V x) const { return vm.isNaN(x); }
  B both(B x, B y) const { return b.CreateAnd(x, y); }
  B either(B x, B y) const { return b.CreateOr(x, y); }
  V select(B cond, V x, V y) const { return b.CreateSelect(cond, x, y); }
  V sqrt(V x) const { return b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x); }
  V exp(V x) const { return vm.exp(x); }
  V tanh(V x) const { return vm.tanh(x); }
  V erf(V x) const { return vm.erf(x); }
  V log(V x) const { return perLane("logf", {x}); }
  V log1p(V x) const { return perLane("log1pf", {x}); }
  V sin(V x) const { return perLane("sinf", {x}); }
  V cos(V x) const { return perLane("cosf", {x}); }
  V pow(V x, V y) const { return perLane("powf", {x, y}); }
  // support/bf16.h's rounding in lanes, as vmath-inl.h's bf16Bits: x + 0x7fff + (bit 16 of x),
  // a NaN made quiet instead, the low half cleared.
  V roundBf16(V x) const {
    auto *vi = llvm::VectorType::getInteger(llvm::cast<llvm::VectorType>(x->getType()));
    auto k = [&](uint32_t v) { return llvm::ConstantInt::get(vi, v); };
    Value *u = b.CreateBitCast(x, vi);
    Value *bias = b.CreateAdd(k(0x7fffu), b.CreateAnd(b.CreateLShr(u, k(16)), k(1)));
    Value *rounded = b.CreateSelect(isnan(x), b.CreateOr(u, k(0x400000u)), b.CreateAdd(u, bias));
    return b.CreateBitCast(b.CreateAnd(rounded, k(0xffff0000u)), x->getType());
  }

  // libm's float function `name` on each lane.
  V perLane(const char *name, std::initializer_list<Value *> args) const {
    std::vector<llvm::Type *> params(args.size(), f32);
    llvm::FunctionCallee callee =
        m.getOrInsertFunction(name, llvm::FunctionType::get(f32, params, false));
    Value *out = llvm::PoisonValue::get((*args.begin())->getType());
    for (unsigned l = 0; l < kLanes; ++l) {
      std::vector<Value *> lane;
      for (Value *a : args)
        lane.push_back(b.CreateExtractElement(a, l));
      out = b.CreateInsertElement(out, b.CreateCall(callee, lane), l);
    }
    return out;
  }
  // A comparison's condition as the floats 1 and 0 (the interpreter's bools).
  V value(Value *v) const {
    return v->getType()->isIntOrIntVectorTy(1) ? select(v, c(1), c(0)) : v;
  }
};

// An instruction's formula on its operands (as many as the formula takes).
template <class F> Value *emitFormula(const IrMath &m, Value *a, Value *y, Value *z) {
  if constexpr (requires { F::f(m, a, a, a); })
    return m.value(F::f(m, a, y, z));
  else if constexpr (requires { F::f(m, a, a); })
    return m.value(F::f(m, a, y));
  else
    return m.value(F::f(m, a));
}

using EmitFn = Value *(*)(const IrMath &, Value *, Value *, Value *);
// Every op with a formula, by kind (the op table checks that every pointwise op has one).
constexpr ir::RegionFormulas<EmitFn> kFormulas =
    ir::regionFormulas<EmitFn>([]<class F>() -> EmitFn { return &emitFormula<F>; });

struct TileEmitter {
  const TileProgram &p;
  llvm::Module &m;
  llvm::IRBuilder<> b;
  llvm::Type *f32, *i8, *i64, *ptr;
  llvm::VectorType *vf, *vi32;
  VectorMath vm;
  llvm::Function *fn = nullptr;
  std::vector<Value *> regionBase; // per memory region, loaded once
  // Per row: the address of column c0 of each input, each output and the matmul's block; and
  // of each reduction's accumulator: its 16 lanes (rows mode) or its result's row (columns mode).
  std::vector<Value *> inRow, outRow, sumRow;
  Value *mmRow = nullptr;
  bool streams = false; // a non-temporal store was emitted (storeVector)

  TileEmitter(const TileProgram &prog, llvm::Module &mod)
      : p(prog), m(mod), b(mod.getContext()), f32(b.getFloatTy()), i8(b.getInt8Ty()),
        i64(b.getInt64Ty()), ptr(b.getPtrTy()), vf(llvm::FixedVectorType::get(f32, kLanes)),
        vi32(llvm::FixedVectorType::get(b.getInt32Ty(), kLanes)), vm(b, vf) {}

  Value *c64(int64_t v) { return b.getInt64(static_cast<uint64_t>(v)); }
  Value *boolToFloat(Value *bits) { return b.CreateUIToFP(bits, vf); }
  Value *base(MemRegion r) { return regionBase[static_cast<size_t>(r)]; }
  Value *at(Value *base, Value *elements, llvm::Type *t) { return b.CreateGEP(t, base, elements); }

  // One instruction on whole vectors: its formula (ir::RegionFormulas; bools are 0.0 / 1.0 as in
  // the interpreter).
  Value *op(const codegen::Instr &in, Value *a, Value *y, Value *z) {
    const IrMath math{b, m, vm, f32};
    const EmitFn emit = kFormulas(in.op, in.cast);
    assert(emit && "compileBody admits only ops with a formula");
    return emit(math, a, y, z);
  }

  // Lanes [j, j + 16) of a row: `mask` null for a whole vector, else the lanes that exist.
  Value *loadVector(llvm::Type *elem, Value *rowPtr, Value *j, Value *mask) {
    auto *vt = llvm::FixedVectorType::get(elem, kLanes);
    Value *addr = at(rowPtr, j, elem);
    if (!mask)
      return b.CreateAlignedLoad(vt, addr, llvm::Align(elem->getPrimitiveSizeInBits() / 8));
    return b.CreateMaskedLoad(vt, addr, llvm::Align(elem->getPrimitiveSizeInBits() / 8), mask,
                              llvm::Constant::getNullValue(vt));
  }
  // streaming: a non-temporal store where the address is 32-byte aligned and no lane is
  // masked, for an output that nothing reads before the next step: a weight's bf16 copy
  // (passes/bf16_weight_copies.cc), which an ordinary store would read into the caches first
  // (GPT-2: 248 MB a step). The function then ends with a fence, so that the stores are
  // visible to the thread that waits for it.
  void storeVector(Value *v, Value *rowPtr, Value *j, Value *mask, bool streaming) {
    llvm::Type *elem = llvm::cast<llvm::VectorType>(v->getType())->getElementType();
    const llvm::Align align(elem->getPrimitiveSizeInBits() / 8);
    Value *addr = at(rowPtr, j, elem);
    if (mask) {
      b.CreateMaskedStore(v, addr, align, mask);
      return;
    }
    if (!streaming) {
      b.CreateAlignedStore(v, addr, align);
      return;
    }
    llvm::LLVMContext &ctx = m.getContext();
    auto *nt = llvm::BasicBlock::Create(ctx, "stream", fn);
    auto *plain = llvm::BasicBlock::Create(ctx, "store", fn);
    auto *join = llvm::BasicBlock::Create(ctx, "stored", fn);
    b.CreateCondBr(b.CreateICmpEQ(b.CreateAnd(b.CreatePtrToInt(addr, i64), c64(31)), c64(0)), nt,
                   plain);
    b.SetInsertPoint(nt);
    b.CreateAlignedStore(v, addr, llvm::Align(32))
        ->setMetadata(llvm::LLVMContext::MD_nontemporal,
                      llvm::MDNode::get(ctx, llvm::ConstantAsMetadata::get(b.getInt32(1))));
    b.CreateBr(join);
    b.SetInsertPoint(plain);
    b.CreateAlignedStore(v, addr, align);
    b.CreateBr(join);
    b.SetInsertPoint(join);
    streams = true;
  }

  Value *input(size_t i, Value *j, Value *mask) {
    const codegen::InputMap &in = p.inputs[i];
    llvm::Type *elem = in.isBool ? i8 : in.isI64 ? i64 : f32;
    // colStride is 1 (the input has S's last axis) or 0 (broadcast along it).
    Value *v = in.colStride == 0 ? b.CreateVectorSplat(kLanes, b.CreateLoad(elem, inRow[i]))
                                 : loadVector(elem, inRow[i], j, mask);
    if (in.isBool)
      return boolToFloat(b.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType())));
    if (in.isI64) // exact in float (fusion.cc: exactIntegers; the step checks before each run)
      return b.CreateSIToFP(v, vf);
    return v;
  }

  // Every value of the body at lanes [j, j + 16) of the row, then the outputs stored.
  void chunk(Value *j, Value *mask) {
    std::vector<Value *> v(p.sources.size(), nullptr);
    for (size_t k = 0; k < p.sources.size(); ++k) {
      const codegen::Source &s = p.sources[k];
      if (s.kind == codegen::Source::Fill)
        v[k] = vm.splat(s.fill);
      else if (s.kind == codegen::Source::Input)
        v[k] = input(static_cast<size_t>(s.input), j, mask);
      else if (s.kind == codegen::Source::Matmul)
        v[k] = loadVector(f32, mmRow, j, mask);
    }
    for (const codegen::Instr &in : p.instrs)
      v[in.dst] = op(in, v[in.a], in.b >= 0 ? v[in.b] : nullptr, in.c >= 0 ? v[in.c] : nullptr);
    // Reductions: the interpreter's order (kernels::reduceCombine; lane l of a row takes the
    // columns j = l mod 16 in rows mode, a result element its rows in order in columns mode).
    for (size_t k = 0; k < p.reductions.size(); ++k) {
      const codegen::ReductionMap &rm = p.reductions[k];
      const bool rows = p.mode == TileProgram::Mode::Rows;
      Value *at = rows ? sumRow[k] : this->at(sumRow[k], j, f32);
      // Columns mode: the masked vector's totals end where the results (or partials) end.
      Value *acc = mask && !rows
                       ? static_cast<Value *>(b.CreateMaskedLoad(vf, at, llvm::Align(4), mask,
                                                                 llvm::Constant::getNullValue(vf)))
                       : b.CreateAlignedLoad(vf, at, llvm::Align(4));
      Value *x = v[rm.value];
      Value *next = rm.kind == kernels::Reduce::Max
                        ? b.CreateSelect(b.CreateOr(vm.isNaN(x), b.CreateFCmpOGT(x, acc)), x, acc)
                        : b.CreateFAdd(acc, x);
      if (mask && rows)
        b.CreateAlignedStore(b.CreateSelect(mask, next, acc), at, llvm::Align(4));
      else if (mask)
        b.CreateMaskedStore(next, at, llvm::Align(4), mask);
      else
        b.CreateAlignedStore(next, at, llvm::Align(4));
    }
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      using As = codegen::OutputMap::As;
      const As as = p.outputs[o].as;
      Value *x = v[p.outputs[o].value];
      if (as == As::Bool)
        x = b.CreateZExt(b.CreateFCmpUNE(x, vm.splat(0.0f)),
                         llvm::FixedVectorType::get(i8, kLanes));
      if (as == As::I64) // an exact integer (fusion.cc: exactIntegers)
        x = b.CreateFPToSI(x, llvm::FixedVectorType::get(i64, kLanes));
      if (as == As::Bf16) // rounded by its cast: the high half is the bf16
        x = b.CreateTrunc(b.CreateLShr(b.CreateBitCast(x, vi32), 16),
                          llvm::FixedVectorType::get(b.getInt16Ty(), kLanes));
      storeVector(x, outRow[o], j, mask,
                  as == As::Bf16 && p.outputs[o].place.region == MemRegion::Weights);
    }
  }

  // Element offset of row `row` in a tensor mapped by rm (RowMap::rowOffset, unrolled).
  Value *rowOffset(const codegen::RowMap &rm, Value *row) {
    Value *off = c64(0);
    for (int64_t d = static_cast<int64_t>(rm.outerDims.size()) - 1; d >= 0; --d) {
      const int64_t dim = rm.outerDims[d], stride = rm.outerStrides[d];
      if (stride != 0)
        off = b.CreateAdd(
            off, b.CreateMul(dim == 1 ? c64(0) : b.CreateURem(row, c64(dim)), c64(stride)));
      if (dim != 1)
        row = b.CreateUDiv(row, c64(dim));
    }
    return off;
  }

  // The addresses of row `row`, column c0 of every input, output, the matmul's block and each
  // reduction's accumulator (inRow, outRow, mmRow, sumRow).
  void rowPointers(Value *row, Value *r0, Value *c0, Value *mm, Value *ldc, Value *lanes) {
    inRow.clear(), outRow.clear();
    for (const codegen::InputMap &in : p.inputs) {
      llvm::Type *elem = in.isBool ? i8 : in.isI64 ? i64 : f32;
      Value *first = b.CreateAdd(rowOffset(in, row), b.CreateMul(c0, c64(in.colStride)));
      inRow.push_back(at(at(base(in.place.region), c64(in.place.offset), i8), first, elem));
    }
    for (const codegen::OutputMap &o : p.outputs) {
      Value *first = b.CreateAdd(b.CreateMul(row, c64(p.cols)), c0);
      using As = codegen::OutputMap::As;
      llvm::Type *elem = o.as == As::Bool   ? i8
                         : o.as == As::Bf16 ? b.getInt16Ty()
                         : o.as == As::I64  ? i64
                                            : f32;
      outRow.push_back(at(at(base(o.place.region), c64(o.place.offset), i8), first, elem));
    }
    mmRow = at(mm, b.CreateMul(b.CreateSub(row, r0), ldc), f32);
    sumRow.clear();
    int64_t partialAt = 0;
    for (size_t k = 0; k < p.reductions.size(); ++k) {
      const codegen::ReductionMap &rm = p.reductions[k];
      if (p.mode == TileProgram::Mode::Rows) {
        Value *slot = b.CreateAdd(b.CreateMul(b.CreateSub(row, r0), c64(p.reductions.size())),
                                  c64(static_cast<int64_t>(k)));
        sumRow.push_back(at(lanes, b.CreateMul(slot, c64(kLanes)), f32));
      } else { // the results, or the partial results at lanes (kernel_abi.h)
        Value *results = at(base(rm.place.region), c64(rm.place.offset), i8);
        Value *partial = at(lanes, c64(partialAt), f32);
        partialAt += rm.outSize;
        Value *to = b.CreateSelect(b.CreateIsNull(lanes), results, partial);
        sumRow.push_back(at(to, b.CreateAdd(rowOffset(rm, row), c0), f32));
      }
    }
  }

  // Lanes [j, j + 16) that are below n.
  Value *laneMask(Value *j, Value *n) {
    std::vector<llvm::Constant *> iota;
    for (unsigned l = 0; l < kLanes; ++l)
      iota.push_back(b.getInt64(l));
    Value *column = b.CreateAdd(b.CreateVectorSplat(kLanes, j), llvm::ConstantVector::get(iota));
    return b.CreateICmpSLT(column, b.CreateVectorSplat(kLanes, n));
  }

  struct Args {
    Value *r0, *r1, *c0, *n, *mm, *ldc, *lanes;
  };

  // for r in [r0, r1): for j in [0, n) by 16 (the last vector masked): the body at (r, j).
  void rowsOuter(const Args &a, llvm::BasicBlock *exit) {
    llvm::LLVMContext &ctx = m.getContext();
    llvm::BasicBlock *entry = b.GetInsertBlock();
    auto *rowHead = llvm::BasicBlock::Create(ctx, "row", fn);
    auto *rowBody = llvm::BasicBlock::Create(ctx, "row.body", fn);
    auto *colHead = llvm::BasicBlock::Create(ctx, "col", fn);
    auto *colBody = llvm::BasicBlock::Create(ctx, "col.body", fn);
    auto *tail = llvm::BasicBlock::Create(ctx, "tail", fn);
    auto *tailBody = llvm::BasicBlock::Create(ctx, "tail.body", fn);
    auto *rowNext = llvm::BasicBlock::Create(ctx, "row.next", fn);
    b.CreateBr(rowHead);

    b.SetInsertPoint(rowHead);
    llvm::PHINode *row = b.CreatePHI(i64, 2, "r");
    row->addIncoming(a.r0, entry);
    b.CreateCondBr(b.CreateICmpSLT(row, a.r1), rowBody, exit);

    b.SetInsertPoint(rowBody);
    rowPointers(row, a.r0, a.c0, a.mm, a.ldc, a.lanes);
    b.CreateBr(colHead);

    b.SetInsertPoint(colHead);
    llvm::PHINode *j = b.CreatePHI(i64, 2, "j");
    j->addIncoming(c64(0), rowBody);
    b.CreateCondBr(b.CreateICmpSLE(b.CreateAdd(j, c64(kLanes)), a.n), colBody, tail);

    b.SetInsertPoint(colBody);
    chunk(j, nullptr);
    j->addIncoming(b.CreateAdd(j, c64(kLanes)), b.GetInsertBlock()); // (streaming adds blocks)
    b.CreateBr(colHead);

    b.SetInsertPoint(tail);
    b.CreateCondBr(b.CreateICmpSLT(j, a.n), tailBody, rowNext);

    b.SetInsertPoint(tailBody);
    chunk(j, laneMask(j, a.n));
    b.CreateBr(rowNext);

    b.SetInsertPoint(rowNext);
    row->addIncoming(b.CreateAdd(row, c64(1)), rowNext);
    b.CreateBr(rowHead);
  }

  llvm::Function *emit(const std::string &name) {
    llvm::LLVMContext &ctx = m.getContext();
    auto *type = llvm::FunctionType::get(b.getVoidTy(),
                                         {ptr, ptr, i64, i64, i64, i64, ptr, i64, ptr}, false);
    fn = llvm::Function::Create(type, llvm::Function::ExternalLinkage, name, m);
    fn->addFnAttr(llvm::Attribute::NoUnwind);
    auto arg = [&](unsigned k, const char *n) {
      Value *a = fn->getArg(k);
      a->setName(n);
      return a;
    };
    arg(0, "ctx"); // unused: the kernel ABI's kiln_rows_fn passes it for the interpreter
    Value *bases = arg(1, "bases");
    const Args a{arg(2, "r0"), arg(3, "r1"),  arg(4, "c0"),   arg(5, "n"),
                 arg(6, "mm"), arg(7, "ldc"), arg(8, "lanes")};
    fn->addParamAttr(8, llvm::Attribute::NoAlias);
    b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
    for (int r = 0; r < kNumMemRegions; ++r)
      regionBase.push_back(b.CreateLoad(ptr, b.CreateGEP(ptr, bases, c64(r))));
    auto *exit = llvm::BasicBlock::Create(ctx, "exit", fn);
    rowsOuter(a, exit);
    b.SetInsertPoint(exit);
    if (streams)
      b.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
    b.CreateRetVoid();
    return fn;
  }
};

} // namespace

llvm::Function *emitTileProgram(const TileProgram &p, llvm::Module &m, const std::string &name) {
  return TileEmitter(p, m).emit(name);
}

} // namespace kiln::llvmgen
