// exp, erf and tanh in IR (see vector_math.h).
#include "codegen/llvm/vector_math.h"

#include <llvm/IR/Intrinsics.h>

#include "runtime/kernels/erf_table.h"

namespace kiln::llvmgen {

using llvm::Value;

Value *VectorMath::splat(float c) const {
  return llvm::ConstantFP::get(vt_, c);
}

Value *VectorMath::fma(Value *x, Value *y, Value *z) const {
  return b_.CreateIntrinsic(llvm::Intrinsic::fma, {vt_}, {x, y, z});
}

Value *VectorMath::isNaN(Value *x) const {
  return b_.CreateFCmpUNO(x, x);
}

// Highway's ExpPoly: expm1(r) for |r| <= ln 2 / 2, Estrin's scheme.
Value *VectorMath::expPoly(Value *r) const {
  Value *r2 = b_.CreateFMul(r, r), *r4 = b_.CreateFMul(r2, r2);
  Value *p =
      fma(r4, fma(splat(0.000198527617612853646278381f), r, splat(0.00139304355252534151077271f)),
          fma(r2, fma(splat(0.00833336077630519866943359f), r, splat(0.0416664853692054748535156f)),
              fma(splat(0.166666671633720397949219f), r, splat(0.5f))));
  return fma(p, r2, r);
}

// exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts), exp(r) by
// Highway's polynomial (Estrin's scheme); 2^n applied as 2^(n/2) 2^(n - n/2), two powers built
// from their exponent bits: each is a normal float over the clamped range, the first product is
// exact, so the result rounds once (as AVX-512's scalef does), overflows to inf past the top and
// underflows through the subnormals to 0 at the bottom. NaN comes back as it went in.
Value *VectorMath::exp(Value *x) const {
  Value *xc = b_.CreateSelect(b_.CreateFCmpOGT(x, splat(-104.0f)), x, splat(-104.0f));
  xc = b_.CreateSelect(b_.CreateFCmpOLT(xc, splat(89.0f)), xc, splat(89.0f));
  Value *n = b_.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven,
                                     b_.CreateFMul(xc, splat(1.442695040888963407359924681f)));
  Value *r = fma(n, splat(-0.693145751953125f), xc);
  r = fma(n, splat(-1.428606765330187045e-6f), r);
  Value *y = b_.CreateFAdd(expPoly(r), splat(1.0f));
  auto *it = llvm::VectorType::get(b_.getInt32Ty(), llvm::cast<llvm::VectorType>(vt_));
  Value *ni = b_.CreateFPToSI(n, it);
  Value *n1 = b_.CreateAShr(ni, 1), *n2 = b_.CreateSub(ni, n1);
  auto pow2 = [&](Value *k) {
    return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(k, llvm::ConstantInt::get(it, 127)), 23),
                            vt_);
  };
  Value *e = b_.CreateFMul(b_.CreateFMul(y, pow2(n1)), pow2(n2));
  return b_.CreateSelect(isNaN(x), x, e);
}

// Lane k: table[i[k]] for i in [0, 8), spelled as 16 extracts of an 8-float constant at each
// lane's index: x86's instruction selection turns exactly this into one vpermps per register
// (AVX2 and AVX-512; checked by the tests on the assembly), and any target computes it right.
Value *VectorMath::lookup8(Value *i, const float *table) const {
  Value *entries = llvm::ConstantDataVector::get(b_.getContext(), llvm::ArrayRef(table, 8));
  auto *vt = llvm::cast<llvm::FixedVectorType>(vt_);
  Value *r = llvm::PoisonValue::get(vt);
  for (unsigned l = 0; l < vt->getNumElements(); ++l)
    r = b_.CreateInsertElement(r, b_.CreateExtractElement(entries, b_.CreateExtractElement(i, l)),
                               l);
  return r;
}

// The piecewise polynomial of runtime/kernels/erf_table.h, as vErf spells it.
Value *VectorMath::erf(Value *x) const {
  Value *z = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  Value *inside = b_.CreateFCmpOLT(z, splat(4.0f));
  Value *zc = b_.CreateSelect(inside, z, splat(0.0f));
  auto *it = llvm::VectorType::get(b_.getInt32Ty(), llvm::cast<llvm::VectorType>(vt_));
  Value *i = b_.CreateFPToSI(b_.CreateFAdd(zc, zc), it);
  Value *first = b_.CreateFCmpOLT(zc, splat(0.5f));
  Value *centre = fma(b_.CreateSIToFP(i, vt_), splat(0.5f), splat(0.25f));
  Value *s = b_.CreateSelect(first, b_.CreateFMul(zc, zc), b_.CreateFSub(zc, centre));
  Value *p = lookup8(i, kernels::kErfPoly[kernels::kErfDegree]);
  for (int k = kernels::kErfDegree - 1; k >= 0; --k)
    p = fma(p, s, lookup8(i, kernels::kErfPoly[k]));
  Value *y = b_.CreateSelect(inside, b_.CreateSelect(first, b_.CreateFMul(zc, p), p), splat(1.0f));
  return b_.CreateSelect(isNaN(x), x, b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, y, x));
}

// sign(x) e / (e + 2), e = expm1(2|x|) (vTanh's method and operations).
Value *VectorMath::tanh(Value *x) const {
  Value *one = splat(1.0f), *nan = isNaN(x);
  Value *a = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, b_.CreateSelect(nan, splat(0.0f), x));
  Value *t = b_.CreateFAdd(a, a);
  t = b_.CreateSelect(b_.CreateFCmpOLT(t, splat(40.0f)), t, splat(40.0f));
  auto *it = llvm::VectorType::get(b_.getInt32Ty(), llvm::cast<llvm::VectorType>(vt_));
  Value *q = b_.CreateFPToSI(fma(t, splat(1.442695040888963407359924681f), splat(0.5f)), it);
  Value *qf = b_.CreateSIToFP(q, vt_);
  Value *r = fma(qf, splat(-0.693145751953125f), t);
  r = fma(qf, splat(-1.428606765330187045e-6f), r);
  Value *y = expPoly(r);
  auto pow2 = [&](Value *k) {
    return b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(k, llvm::ConstantInt::get(it, 127)), 23),
                            vt_);
  };
  Value *h = b_.CreateAShr(q, 1);
  Value *big = fma(b_.CreateFMul(b_.CreateFAdd(y, one), pow2(h)), pow2(b_.CreateSub(q, h)),
                   b_.CreateFNeg(one));
  Value *e = b_.CreateSelect(b_.CreateFCmpOLT(t, splat(0.346573590279972654708616f)), y, big);
  Value *z = b_.CreateSelect(b_.CreateFCmpOGT(a, splat(18.714973875f)), one,
                             b_.CreateFDiv(e, b_.CreateFAdd(e, splat(2.0f))));
  return b_.CreateSelect(nan, x, b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, z, x));
}

} // namespace kiln::llvmgen
