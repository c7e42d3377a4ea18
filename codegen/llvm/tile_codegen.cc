// A tile program as an LLVM function (see tile_codegen.h). Each pointwise op computes what the
// interpreter's loop computes (pointwise.cc: the reference's scalar function per element, or the
// Highway vector math for exp, erf, tanh and the activations made of them), so the two agree
// bit for bit except where libm and Highway differ: log, sin, cos and pow call libm lane by lane
// here, as the reference does.
#include "codegen/llvm/tile_codegen.h"

#include <cassert>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include "codegen/llvm/vector_math.h"

namespace kiln::llvmgen {

using highway::TileProgram;
using ir::OpKind;
using llvm::Value;

namespace {

constexpr unsigned kLanes = 16; // a zmm register; the backend splits it where vectors are shorter

struct Emitter {
  const TileProgram &p;
  llvm::Module &m;
  llvm::IRBuilder<> b;
  llvm::Type *f32, *i8, *i64, *ptr;
  llvm::VectorType *vf;
  VectorMath vm;
  llvm::Function *fn = nullptr;
  std::vector<Value *> regionBase; // per memory region, loaded once
  // Per row: the address of column c0 of each input, each output and the matmul's block; and
  // of each reduction's accumulator: its 16 lanes (rows mode) or its result's row (columns mode).
  std::vector<Value *> inRow, outRow, sumRow;
  Value *mmRow = nullptr;

  Emitter(const TileProgram &prog, llvm::Module &mod)
      : p(prog), m(mod), b(mod.getContext()), f32(b.getFloatTy()), i8(b.getInt8Ty()),
        i64(b.getInt64Ty()), ptr(b.getPtrTy()), vf(llvm::FixedVectorType::get(f32, kLanes)),
        vm(b, vf) {}

  Value *c64(int64_t v) { return b.getInt64(static_cast<uint64_t>(v)); }
  Value *boolToFloat(Value *bits) { return b.CreateUIToFP(bits, vf); }
  Value *base(MemRegion r) { return regionBase[static_cast<size_t>(r)]; }
  Value *at(Value *base, Value *elements, llvm::Type *t) { return b.CreateGEP(t, base, elements); }

  // libm's float function `name` on each lane (what the reference calls for these ops).
  Value *perLane(const char *name, std::initializer_list<Value *> args) {
    std::vector<llvm::Type *> params(args.size(), f32);
    llvm::FunctionCallee callee =
        m.getOrInsertFunction(name, llvm::FunctionType::get(f32, params, false));
    Value *out = llvm::PoisonValue::get(vf);
    for (unsigned l = 0; l < kLanes; ++l) {
      std::vector<Value *> lane;
      for (Value *a : args)
        lane.push_back(b.CreateExtractElement(a, l));
      out = b.CreateInsertElement(out, b.CreateCall(callee, lane), l);
    }
    return out;
  }

  Value *sigmoid(Value *x) {
    return b.CreateFDiv(vm.splat(1.0f), b.CreateFAdd(vm.splat(1.0f), vm.exp(b.CreateFNeg(x))));
  }

  // One instruction on whole vectors; bools are 0.0 / 1.0 as in the interpreter.
  Value *op(const highway::Instr &in, Value *a, Value *y, Value *z) {
    Value *zero = vm.splat(0.0f), *one = vm.splat(1.0f), *half = vm.splat(0.5f);
    switch (in.op) {
    case OpKind::Neg:
      return b.CreateFNeg(a);
    case OpKind::Abs: // x < 0 ? -x : x (so -0 stays -0, as the reference's)
      return b.CreateSelect(b.CreateFCmpOLT(a, zero), b.CreateFNeg(a), a);
    case OpKind::Exp:
      return vm.exp(a);
    case OpKind::Log:
      return perLane("logf", {a});
    case OpKind::Sqrt:
      return b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a);
    case OpKind::Rsqrt:
      return b.CreateFDiv(one, b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, a));
    case OpKind::Tanh:
      return vm.tanh(a);
    case OpKind::Sigmoid:
      return sigmoid(a);
    case OpKind::Relu: // NaN stays NaN
      return b.CreateSelect(vm.isNaN(a), a, b.CreateSelect(b.CreateFCmpOGT(a, zero), a, zero));
    case OpKind::Gelu:
      return b.CreateFMul(
          b.CreateFMul(half, a),
          b.CreateFAdd(one, vm.erf(b.CreateFMul(a, vm.splat(0.70710678118654752440f)))));
    case OpKind::GeluGrad: { // elementwise.h's operations in its order
      Value *cdf = b.CreateFMul(
          half, b.CreateFAdd(one, vm.erf(b.CreateFMul(a, vm.splat(0.70710678118654752440f)))));
      Value *pdf = b.CreateFMul(vm.splat(0.39894228040143267794f),
                                vm.exp(b.CreateFMul(vm.splat(-0.5f), b.CreateFMul(a, a))));
      return b.CreateFAdd(cdf, b.CreateFMul(a, pdf));
    }
    case OpKind::GeluTanhGrad: { // as GeluGrad
      Value *s = vm.splat(0.79788456080286535588f), *x2 = b.CreateFMul(a, a);
      Value *t = vm.tanh(
          b.CreateFMul(s, b.CreateFAdd(a, b.CreateFMul(vm.splat(0.044715f), b.CreateFMul(x2, a)))));
      Value *du = b.CreateFMul(
          s, b.CreateFAdd(one, b.CreateFMul(vm.splat(static_cast<float>(3 * 0.044715)), x2)));
      return b.CreateFAdd(b.CreateFMul(half, b.CreateFAdd(one, t)),
                          b.CreateFMul(b.CreateFMul(half, a),
                                       b.CreateFMul(b.CreateFSub(one, b.CreateFMul(t, t)), du)));
    }
    case OpKind::GeluTanh: {
      Value *cube = b.CreateFMul(b.CreateFMul(a, a), a);
      Value *inner = b.CreateFMul(vm.splat(0.79788456080286535588f),
                                  b.CreateFAdd(a, b.CreateFMul(vm.splat(0.044715f), cube)));
      return b.CreateFMul(b.CreateFMul(half, a), b.CreateFAdd(one, vm.tanh(inner)));
    }
    case OpKind::Silu:
      return b.CreateFMul(a, sigmoid(a));
    case OpKind::SiluGrad: { // as GeluGrad
      Value *s = sigmoid(a);
      return b.CreateFMul(s, b.CreateFAdd(one, b.CreateFMul(a, b.CreateFSub(one, s))));
    }
    case OpKind::Sin:
      return perLane("sinf", {a});
    case OpKind::Cos:
      return perLane("cosf", {a});
    case OpKind::Erf:
      return vm.erf(a);
    case OpKind::LogicalNot:
      return boolToFloat(b.CreateFCmpOEQ(a, zero));
    case OpKind::StopGradient:
    case OpKind::Broadcast:
      return a;
    case OpKind::Cast:
      return in.toBool ? boolToFloat(b.CreateFCmpUNE(a, zero)) : a;
    case OpKind::Add:
      return b.CreateFAdd(a, y);
    case OpKind::Sub:
      return b.CreateFSub(a, y);
    case OpKind::Mul:
      return b.CreateFMul(a, y);
    case OpKind::Div:
      return b.CreateFDiv(a, y);
    case OpKind::Max: // a NaN operand gives NaN (a + b), as the reference's
      return b.CreateSelect(b.CreateFCmpUNO(a, y), b.CreateFAdd(a, y),
                            b.CreateSelect(b.CreateFCmpOGT(a, y), a, y));
    case OpKind::Min:
      return b.CreateSelect(b.CreateFCmpUNO(a, y), b.CreateFAdd(a, y),
                            b.CreateSelect(b.CreateFCmpOLT(a, y), a, y));
    case OpKind::Pow:
      return perLane("powf", {a, y});
    case OpKind::LogicalAnd:
      return boolToFloat(b.CreateAnd(b.CreateFCmpUNE(a, zero), b.CreateFCmpUNE(y, zero)));
    case OpKind::LogicalOr:
      return boolToFloat(b.CreateOr(b.CreateFCmpUNE(a, zero), b.CreateFCmpUNE(y, zero)));
    case OpKind::Eq:
      return boolToFloat(b.CreateFCmpOEQ(a, y));
    case OpKind::Ne:
      return boolToFloat(b.CreateFCmpUNE(a, y));
    case OpKind::Lt:
      return boolToFloat(b.CreateFCmpOLT(a, y));
    case OpKind::Le:
      return boolToFloat(b.CreateFCmpOLE(a, y));
    case OpKind::Gt:
      return boolToFloat(b.CreateFCmpOGT(a, y));
    case OpKind::Ge:
      return boolToFloat(b.CreateFCmpOGE(a, y));
    case OpKind::Select:
      return b.CreateSelect(b.CreateFCmpUNE(a, zero), y, z);
    default: // compileBody admits only the pointwise ops above
      assert(false && "a pointwise op without a case in the tile codegen");
      return a;
    }
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
  void storeVector(Value *v, Value *rowPtr, Value *j, Value *mask) {
    llvm::Type *elem = llvm::cast<llvm::VectorType>(v->getType())->getElementType();
    const llvm::Align align(elem->getPrimitiveSizeInBits() / 8);
    Value *addr = at(rowPtr, j, elem);
    if (mask)
      b.CreateMaskedStore(v, addr, align, mask);
    else
      b.CreateAlignedStore(v, addr, align);
  }

  Value *input(size_t i, Value *j, Value *mask) {
    const highway::InputMap &in = p.inputs[i];
    llvm::Type *elem = in.isBool ? i8 : in.isI64 ? i64 : f32;
    // colStride is 1 (the input has S's last axis) or 0 (broadcast along it).
    Value *v = in.colStride == 0 ? b.CreateVectorSplat(kLanes, b.CreateLoad(elem, inRow[i]))
                                 : loadVector(elem, inRow[i], j, mask);
    if (in.isBool)
      return boolToFloat(b.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType())));
    if (in.isI64) // only compared or cast, and exact in float (the step checks before each run)
      return b.CreateSIToFP(v, vf);
    return v;
  }

  // Every value of the body at lanes [j, j + 16) of the row, then the outputs stored.
  void chunk(Value *j, Value *mask) {
    std::vector<Value *> v(p.sources.size(), nullptr);
    for (size_t k = 0; k < p.sources.size(); ++k) {
      const highway::Source &s = p.sources[k];
      if (s.kind == highway::Source::Fill)
        v[k] = vm.splat(s.fill);
      else if (s.kind == highway::Source::Input)
        v[k] = input(static_cast<size_t>(s.input), j, mask);
      else if (s.kind == highway::Source::Matmul)
        v[k] = loadVector(f32, mmRow, j, mask);
    }
    for (const highway::Instr &in : p.instrs)
      v[in.dst] = op(in, v[in.a], in.b >= 0 ? v[in.b] : nullptr, in.c >= 0 ? v[in.c] : nullptr);
    // Reductions: the interpreter's order (kernels::reduceCombine; lane l of a row takes the
    // columns j = l mod 16 in rows mode, a result element its rows in order in columns mode).
    for (size_t k = 0; k < p.reductions.size(); ++k) {
      const highway::ReductionMap &rm = p.reductions[k];
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
      Value *x = v[p.outputs[o].value];
      if (p.outputs[o].isBool)
        x = b.CreateZExt(b.CreateFCmpUNE(x, vm.splat(0.0f)),
                         llvm::FixedVectorType::get(i8, kLanes));
      storeVector(x, outRow[o], j, mask);
    }
  }

  // Element offset of row `row` in a tensor mapped by rm (RowMap::rowOffset, unrolled).
  Value *rowOffset(const highway::RowMap &rm, Value *row) {
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
    for (const highway::InputMap &in : p.inputs) {
      llvm::Type *elem = in.isBool ? i8 : in.isI64 ? i64 : f32;
      Value *first = b.CreateAdd(rowOffset(in, row), b.CreateMul(c0, c64(in.colStride)));
      inRow.push_back(at(at(base(in.place.region), c64(in.place.offset), i8), first, elem));
    }
    for (const highway::OutputMap &o : p.outputs) {
      Value *first = b.CreateAdd(b.CreateMul(row, c64(p.cols)), c0);
      outRow.push_back(
          at(at(base(o.place.region), c64(o.place.offset), i8), first, o.isBool ? i8 : f32));
    }
    mmRow = at(mm, b.CreateMul(b.CreateSub(row, r0), ldc), f32);
    sumRow.clear();
    int64_t partialAt = 0;
    for (size_t k = 0; k < p.reductions.size(); ++k) {
      const highway::ReductionMap &rm = p.reductions[k];
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
    j->addIncoming(b.CreateAdd(j, c64(kLanes)), colBody);
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
    b.CreateRetVoid();
    return fn;
  }
};

} // namespace

llvm::Function *emitTileProgram(const TileProgram &p, llvm::Module &m, const std::string &name) {
  return Emitter(p, m).emit(name);
}

} // namespace kiln::llvmgen
