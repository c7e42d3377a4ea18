// exp and erf in IR (see vector_math.h).
#include "codegen/llvm/vector_math.h"

#include <llvm/IR/Intrinsics.h>

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

// |x| < 0.5: x P(x^2) (Taylor); else sign(x) (1 - t exp(-x^2 - 1.26551223 + t Q(t))),
// t = 1 / (1 + |x|/2) (Numerical Recipes' erfcc).
Value *VectorMath::erf(Value *x) const {
  Value *z = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x), *one = splat(1.0f);
  Value *x2 = b_.CreateFMul(x, x);
  const float c = 1.1283791670955126f;
  Value *p = splat(c / 9360.0f);
  for (float k : {-c / 1320.0f, c / 216.0f, -c / 42.0f, c / 10.0f, -c / 3.0f, c})
    p = fma(p, x2, splat(k));
  Value *small = b_.CreateFMul(x, p);
  Value *t = b_.CreateFDiv(one, fma(splat(0.5f), z, one));
  Value *q = splat(0.17087277f);
  for (float k : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f,
                  0.37409196f, 1.00002368f, -1.26551223f})
    q = fma(q, t, splat(k));
  // 1 - t e and q - z^2 each in one fused operation, as vErf spells them.
  Value *e = exp(fma(b_.CreateFNeg(z), z, q));
  Value *large =
      b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, fma(b_.CreateFNeg(t), e, one), x);
  return b_.CreateSelect(b_.CreateFCmpOLT(z, splat(0.5f)), small, large);
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
