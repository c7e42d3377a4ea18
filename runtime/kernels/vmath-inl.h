// Vectorized exp, tanh and erf over f32 vectors, as inline per-target functions: the
// pointwise ops' math on the Highway backend (codegen/highway/pointwise.cc) and the exp of the
// softmax and attention kernels. Include after hwy/foreach_target.h and hwy/highway.h, as
// Highway's -inl.h headers are (once per target, hence the toggled guard).
// exp and tanh come from Highway's contrib/math (1 and 4 ulp within their valid ranges), with the
// edges the reference's std:: functions have made explicit (NaN in, NaN out; exp overflowing to
// inf and underflowing to 0). On AVX-512, exp
// keeps Highway's reduction and polynomial but scales by 2^n with one scalef. erf is our own
// (Highway 1.0.3 has none): a degree-6 polynomial per interval of 0.5 on |x| < 4, its
// coefficients picked per lane by one permute (erf_table.h states the method); +-1 from 4 on.
// codegen/llvm/vector_math.h emits exp, tanh and erf as the same operations in IR. The measured
// error bounds are in tests/runtime/vmath_test.cc.
#if defined(KILN_RUNTIME_KERNELS_VMATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_RUNTIME_KERNELS_VMATH_INL_H_
#undef KILN_RUNTIME_KERNELS_VMATH_INL_H_
#else
#define KILN_RUNTIME_KERNELS_VMATH_INL_H_
#endif

#include <cmath>

#include "hwy/highway.h"

// After highway.h (clang-format must not sort it above).
#include "hwy/contrib/math/math-inl.h"
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

// Highway's Exp, Expm1 (in Tanh) and Log convert floats to integers; the emulated targets do so
// lane by lane in C++, where converting a NaN is undefined behaviour (UBSan reports it). So NaN
// lanes go in as 0 and come out as the NaN they were.
HWY_INLINE HWY_ATTR V noNaN(V x) {
  return hn::IfThenZeroElse(hn::IsNaN(x), x);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512: Highway's reduction and polynomial around n = round(x / ln 2), then r's exp times 2^n
// by one scalef, which rounds once and gives inf past the top and 0 below the bottom by itself.
// x must be clamped to [-104, 89] (so that n fits) and not NaN.
HWY_INLINE HWY_ATTR V expClamped(D d, V x) {
  const V n = V{_mm512_roundscale_ps(hn::Mul(x, hn::Set(d, 1.442695040888963407359924681f)).raw,
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
  V r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), x); // ln 2 in two parts
  r = hn::MulAdd(n, hn::Set(d, -1.428606765330187045e-6f), r);
  const V y = hn::Add(hn::impl::ExpImpl<float>().ExpPoly(d, r), hn::Set(d, 1.0f));
  return V{_mm512_scalef_ps(y.raw, n.raw)};
}
#endif

HWY_INLINE HWY_ATTR V vExp(D d, V x) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // 16 operations where Highway's Exp and the guards around it take 28 (the exp of softmax,
  // attention and GELU); NaN is put back at the end.
  const V xc = hn::Min(hn::Max(x, hn::Set(d, -104.0f)), hn::Set(d, 89.0f));
  return hn::IfThenElse(hn::IsNaN(x), x, expClamped(d, xc));
#else
  const V inf = hn::Set(d, HUGE_VALF);
  V y = hn::Exp(d, noNaN(x)); // 0 below -104, as exp underflows
  y = hn::IfThenElse(hn::Gt(x, hn::Set(d, 88.72283935546875f)), inf, y);
  return hn::IfThenElse(hn::IsNaN(x), x, y);
#endif
}

// vExp(x) for x in [-inf, 0] (no NaN): softmax's exp(x - max), attention's exp(x - lse). The same
// bits as vExp there, with three operations fewer on AVX-512 (the upper clamp, the NaN test and its
// select), where exponentials are a softmax's compute: a row of 1024 in L1 5-14% faster.
HWY_INLINE HWY_ATTR V vExpNonPositive(D d, V x) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return expClamped(d, hn::Max(x, hn::Set(d, -104.0f)));
#else
  return vExp(d, x);
#endif
}

// tanh(x) = sign(x) e / (e + 2), e = expm1(2|x|), 1 past |x| = 18.7 (where tanh rounds to 1):
// Highway's Tanh and Expm1, written out here so that every multiply-add is fused or not by what
// the code says (GCC would contract one, clang not; the LLVM backend emits the same operations).
// expm1(t): q = trunc(t / ln 2 + 1/2), r = t - q ln 2, y = expm1(r) by ExpPoly; t < ln 2 / 2: y,
// else (y + 1) 2^q - 1 (2^q as two powers, the subtraction fused). t is clamped to 40, which
// changes no result (all are 1 there) but keeps q in range.
HWY_INLINE HWY_ATTR V vTanh(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V one = hn::Set(d, 1.0f), a = hn::Abs(noNaN(x));
  const V t = hn::Min(hn::Add(a, a), hn::Set(d, 40.0f));
  const auto q = hn::ConvertTo(
      di, hn::MulAdd(t, hn::Set(d, 1.442695040888963407359924681f), hn::Set(d, 0.5f)));
  const V qf = hn::ConvertTo(d, q);
  V r = hn::MulAdd(qf, hn::Set(d, -0.693145751953125f), t);
  r = hn::MulAdd(qf, hn::Set(d, -1.428606765330187045e-6f), r);
  const V y = hn::impl::ExpImpl<float>().ExpPoly(d, r);
  auto pow2 = [&](auto k) {
    return hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(k, hn::Set(di, 127))));
  };
  const auto h = hn::ShiftRight<1>(q);
  const V big = hn::MulSub(hn::Mul(hn::Add(y, one), pow2(h)), pow2(hn::Sub(q, h)), one);
  const V e = hn::IfThenElse(hn::Lt(t, hn::Set(d, 0.346573590279972654708616f)), y, big);
  const V z = hn::IfThenElse(hn::Gt(a, hn::Set(d, 18.714973875f)), one,
                             hn::Div(e, hn::Add(e, hn::Set(d, 2.0f))));
  return hn::IfThenElse(hn::IsNaN(x), x, hn::CopySign(z, x));
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

// erf by the piecewise polynomial of erf_table.h: interval i = trunc(2 |x|) of 8; z P0(z^2) on
// the first, Pi(z - i/2 - 1/4) on the others, each lane's coefficients looked up by its interval;
// +-1 from |x| = 4 on (and for inf), NaN as it came, erf(-0) = -0.
HWY_INLINE HWY_ATTR V vErf(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V z = hn::Abs(x);
  const auto inside = hn::Lt(z, hn::Set(d, 4.0f)); // false for NaN too
  const V zc = hn::IfThenElseZero(inside, z);
  const auto i = hn::ConvertTo(di, hn::Add(zc, zc)); // truncates; 2 z is exact
  const auto first = hn::Lt(zc, hn::Set(d, 0.5f));
  const V centre = hn::MulAdd(hn::ConvertTo(d, i), hn::Set(d, 0.5f), hn::Set(d, 0.25f));
  const V s = hn::IfThenElse(first, hn::Mul(zc, zc), hn::Sub(zc, centre));
  V p = lookup8(d, i, kErfPoly[kErfDegree]);
  for (int k = kErfDegree - 1; k >= 0; --k)
    p = hn::MulAdd(p, s, lookup8(d, i, kErfPoly[k]));
  const V y = hn::IfThenElse(inside, hn::IfThenElse(first, hn::Mul(zc, p), p), hn::Set(d, 1.0f));
  return hn::IfThenElse(hn::IsNaN(x), x, hn::CopySign(y, x));
}

} // namespace vm
} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // KILN_RUNTIME_KERNELS_VMATH_INL_H_
