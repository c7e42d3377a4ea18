// Vectorized exp, tanh and erf over f32 vectors, as inline per-target functions: the
// pointwise ops' math on the Highway backend (codegen/common/pointwise.cc) and the exp of the
// softmax and attention kernels. Include after hwy/foreach_target.h and hwy/highway.h, as
// Highway's -inl.h headers are (once per target, hence the toggled guard).
// The functions are written once, in vector_math.inc (which codegen/llvm/vector_math.cc also
// includes, with an instruction set that emits IR): exp and tanh by Highway's reduction and
// polynomial, with the edges the reference's std:: functions have (NaN in, NaN out; exp
// overflowing to inf and underflowing to 0); erf our own (Highway 1.0.3 has none), a degree-6
// polynomial per interval of 0.5 on |x| < 4, its coefficients picked per lane by one permute
// (erf_table.h states the method), +-1 from 4 on. The measured error bounds are in
// tests/runtime/vmath_test.cc.
#if defined(KILN_RUNTIME_KERNELS_VMATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_RUNTIME_KERNELS_VMATH_INL_H_
#undef KILN_RUNTIME_KERNELS_VMATH_INL_H_
#else
#define KILN_RUNTIME_KERNELS_VMATH_INL_H_
#endif

#include <cmath>

#include "hwy/highway.h"

// After highway.h (clang-format must not sort it above).
#include "runtime/kernels/erf_table.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::HWY_NAMESPACE {
namespace vm {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// The first `count` floats at p (0 <= count < lanes), the other lanes `fill`; and the store of
// a vector's first `count` lanes to p. Nothing past p + count is read or written. AVX2 and
// AVX-512 do it with one masked load or store; the other targets through a buffer, as Highway
// 1.0.3's MaskedLoad and BlendedStore there are full-width accesses. (Buffered, the rows of a
// causal tile, which end anywhere, each paid two memcpy calls and a scalar loop for their tail.)
HWY_INLINE HWY_ATTR V loadFirst(D d, const float *p, size_t count, float fill = 0.0f) {
#if HWY_TARGET <= HWY_AVX2
  const auto m = hn::FirstN(d, count);
  return hn::IfThenElse(m, hn::MaskedLoad(m, d, p), hn::Set(d, fill));
#else
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  for (size_t i = 0; i < hn::Lanes(d); ++i)
    buf[i] = i < count ? p[i] : fill;
  return hn::Load(d, buf);
#endif
}
HWY_INLINE HWY_ATTR void storeFirst(V v, D d, float *p, size_t count) {
#if HWY_TARGET <= HWY_AVX2
  hn::BlendedStore(v, hn::FirstN(d, count), d, p);
#else
  HWY_ALIGN float buf[hn::MaxLanes(D())];
  hn::Store(v, d, buf);
  for (size_t i = 0; i < count; ++i)
    p[i] = buf[i];
#endif
}

// Lane k of the result: table[i[k]], i in [0, 8) (table holds 16 floats, kErfPoly's rows). One
// permute where a vector holds the 8 entries (AVX2, AVX-512); else a chain of selects.
HWY_INLINE HWY_ATTR V lookup8(D d, hn::Vec<hn::RebindToSigned<D>> i, const float *table) {
  if constexpr (hn::MaxLanes(D()) >= 8) {
    return hn::TableLookupLanes(hn::LoadU(d, table), hn::IndicesFromVec(d, i));
  } else {
    const hn::RebindToSigned<D> di;
    V r = hn::Set(d, table[0]);
    for (int k = 1; k < 8; ++k)
      r = hn::IfThenElse(hn::RebindMask(d, hn::Eq(i, hn::Set(di, k))), hn::Set(d, table[k]), r);
    return r;
  }
}

// vector_math.inc's instruction set on Highway vectors of f32.
struct Ops {
  using V = vm::V;
  using DI = hn::RebindToSigned<D>;
  using I = hn::Vec<DI>;
  using B = hn::Mask<D>;
  D d;
  DI di;

  V c(float v) const { return hn::Set(d, v); }
  V neg(V x) const { return hn::Neg(x); }
  V add(V a, V b) const { return hn::Add(a, b); }
  V sub(V a, V b) const { return hn::Sub(a, b); }
  V mul(V a, V b) const { return hn::Mul(a, b); }
  V div(V a, V b) const { return hn::Div(a, b); }
  V fma(V a, V b, V c) const { return hn::MulAdd(a, b, c); }
  V abs(V x) const { return hn::Abs(x); }
  // x86's maxps and minps are these selects in one instruction; elsewhere, Highway's Max and Min
  // may return the other operand for a NaN, so the selects are spelled out.
  V max(V a, V b) const {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
    return hn::Max(a, b);
#else
    return hn::IfThenElse(hn::Gt(a, b), a, b);
#endif
  }
  V min(V a, V b) const {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && HWY_TARGET != HWY_SCALAR
    return hn::Min(a, b);
#else
    return hn::IfThenElse(hn::Lt(a, b), a, b);
#endif
  }
  B lt(V a, V b) const {
    return hn::Lt(a, b);
  }
  B gt(V a, V b) const {
    return hn::Gt(a, b);
  }
  B isnan(V x) const {
    return hn::IsNaN(x);
  }
  V select(B m, V a, V b) const {
    return hn::IfThenElse(m, a, b);
  }
  V copysign(V magnitude, V sign) const {
    return hn::CopySign(magnitude, sign);
  }
  V roundEven(V x) const {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    return V{_mm512_roundscale_ps(x.raw, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
#else
    return hn::Round(x); // to nearest, ties to even
#endif
  }
  I truncToInt(V x) const {
    return hn::ConvertTo(di, x);
  }
  V toFloat(I i) const {
    return hn::ConvertTo(d, i);
  }
  I halve(I i) const {
    return hn::ShiftRight<1>(i);
  }
  I isub(I a, I b) const {
    return hn::Sub(a, b);
  }
  V pow2(I k) const {
    return hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(k, hn::Set(di, 127))));
  }
  V scale2(V y, V n) const {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    return V{_mm512_scalef_ps(y.raw, n.raw)}; // one instruction, rounded once
#else
    const I k = truncToInt(n), h = halve(k);
    return mul(mul(y, pow2(h)), pow2(isub(k, h)));
#endif
  }
  V lookup8(I i, const float *table) const {
    return vm::lookup8(d, i, table);
  }
};

// The bits of x rounded to the nearest bf16 in the high half (ties to even, support/bf16.h's
// rule in lanes; a NaN stays a NaN), the low half zero: mixed precision's rounding (the GEMM's
// and attention's packing).
using DU = hn::RebindToUnsigned<D>;
using VU = hn::Vec<DU>;
HWY_INLINE HWY_ATTR VU bf16Bits(V x) {
  const DU du;
  const VU u = hn::BitCast(du, x);
  const VU bias = hn::Add(hn::Set(du, 0x7fffu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)));
  const VU rounded = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(x)),
                                    hn::Or(u, hn::Set(du, 0x400000u)), hn::Add(u, bias));
  return hn::And(rounded, hn::Set(du, 0xffff0000u));
}
// x rounded to the nearest bf16, as an f32.
HWY_INLINE HWY_ATTR V roundBf16(V x) {
  return hn::BitCast(D(), bf16Bits(x));
}

#include "runtime/kernels/vector_math.inc" // NOLINT(bugprone-suspicious-include): per target

// The functions on this target, as the kernels call them. exp: 16 operations on AVX-512 where
// Highway's Exp and the guards around it take 28 (the exp of softmax, attention and GELU).
HWY_INLINE HWY_ATTR V vExp(D, V x) {
  return exp(Ops{}, x);
}
// vExp(x) for x in [-inf, 0] (no NaN): the same bits, with three operations fewer (the upper
// clamp, the NaN test and its select), where exponentials are a softmax's compute: a row of 1024
// in L1 5-14% faster on AVX-512.
HWY_INLINE HWY_ATTR V vExpNonPositive(D, V x) {
  return expNonPositive(Ops{}, x);
}
HWY_INLINE HWY_ATTR V vTanh(D, V x) {
  return tanh(Ops{}, x);
}
HWY_INLINE HWY_ATTR V vErf(D, V x) {
  return erf(Ops{}, x);
}

} // namespace vm
} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // KILN_RUNTIME_KERNELS_VMATH_INL_H_
