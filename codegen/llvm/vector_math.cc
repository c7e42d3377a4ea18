// exp, erf and tanh in IR: runtime/kernels/vector_math.inc on an instruction set that emits IR.
#include "codegen/llvm/vector_math.h"

#include <llvm/IR/Intrinsics.h>

#include "runtime/kernels/erf_table.h"

namespace kiln::llvmgen {

using llvm::Value;

Value *VectorMath::splat(float c) const {
  return llvm::ConstantFP::get(vt_, c);
}

Value *VectorMath::isNaN(Value *x) const {
  return b_.CreateFCmpUNO(x, x);
}

namespace {

// runtime/kernels/vector_math.inc's instruction set on LLVM IR: V and I are vectors of the
// region's lanes (f32, i32), B their i1 masks.
struct IrOps {
  using V = Value *;
  llvm::IRBuilder<> &b;
  llvm::Type *vt;
  llvm::Type *it;

  V c(float v) const { return llvm::ConstantFP::get(vt, v); }
  V neg(V x) const { return b.CreateFNeg(x); }
  V add(V x, V y) const { return b.CreateFAdd(x, y); }
  V sub(V x, V y) const { return b.CreateFSub(x, y); }
  V mul(V x, V y) const { return b.CreateFMul(x, y); }
  V div(V x, V y) const { return b.CreateFDiv(x, y); }
  V fma(V x, V y, V z) const { return b.CreateIntrinsic(llvm::Intrinsic::fma, {vt}, {x, y, z}); }
  V abs(V x) const { return b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); }
  V max(V x, V y) const { return select(gt(x, y), x, y); }
  V min(V x, V y) const { return select(lt(x, y), x, y); }
  V lt(V x, V y) const { return b.CreateFCmpOLT(x, y); }
  V gt(V x, V y) const { return b.CreateFCmpOGT(x, y); }
  V isnan(V x) const { return b.CreateFCmpUNO(x, x); }
  V select(V m, V x, V y) const { return b.CreateSelect(m, x, y); }
  V copysign(V mag, V sign) const {
    return b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, mag, sign);
  }
  V roundEven(V x) const { return b.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, x); }
  V truncToInt(V x) const { return b.CreateFPToSI(x, it); }
  V toFloat(V i) const { return b.CreateSIToFP(i, vt); }
  V halve(V i) const { return b.CreateAShr(i, 1); }
  V isub(V x, V y) const { return b.CreateSub(x, y); }
  V pow2(V k) const {
    return b.CreateBitCast(b.CreateShl(b.CreateAdd(k, llvm::ConstantInt::get(it, 127)), 23), vt);
  }
  V scale2(V y, V n) const {
    V k = truncToInt(n), h = halve(k);
    return mul(mul(y, pow2(h)), pow2(isub(k, h)));
  }
  // Spelled as 16 extracts of an 8-float constant at each lane's index: x86's instruction
  // selection turns exactly this into one vpermps per register (AVX2 and AVX-512; checked by the
  // tests on the assembly), and any target computes it right.
  V lookup8(V i, const float *table) const {
    Value *entries = llvm::ConstantDataVector::get(b.getContext(), llvm::ArrayRef(table, 8));
    auto *ft = llvm::cast<llvm::FixedVectorType>(vt);
    Value *r = llvm::PoisonValue::get(ft);
    for (unsigned l = 0; l < ft->getNumElements(); ++l)
      r = b.CreateInsertElement(r, b.CreateExtractElement(entries, b.CreateExtractElement(i, l)),
                                l);
    return r;
  }
};

#include "runtime/kernels/vector_math.inc" // NOLINT(bugprone-suspicious-include): the IR instance

IrOps opsOf(llvm::IRBuilder<> &b, llvm::Type *vt) {
  return {b, vt, llvm::VectorType::get(b.getInt32Ty(), llvm::cast<llvm::VectorType>(vt))};
}

} // namespace

Value *VectorMath::exp(Value *x) const {
  return kiln::llvmgen::exp(opsOf(b_, vt_), x);
}
Value *VectorMath::erf(Value *x) const {
  return kiln::llvmgen::erf(opsOf(b_, vt_), x);
}
Value *VectorMath::tanh(Value *x) const {
  return kiln::llvmgen::tanh(opsOf(b_, vt_), x);
}

} // namespace kiln::llvmgen
