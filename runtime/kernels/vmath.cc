// Vectorized math (see vmath.h). Whole vectors go through the SIMD path; the last n mod lanes
// elements through a padded vector (so every element is computed by the same code).
#include <algorithm>
#include <cstring>

#include "runtime/kernels/vmath.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/vmath.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

// After highway.h (clang-format must not sort it above foreach_target.h).
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

HWY_ATTR V vExp(D d, V x) {
  const V inf = hn::Set(d, HUGE_VALF);
  V y = hn::Exp(d, x); // 0 below -104, as exp underflows
  y = hn::IfThenElse(hn::Gt(x, hn::Set(d, 88.72283935546875f)), inf, y);
  return hn::IfThenElse(hn::IsNaN(x), x, y);
}

HWY_ATTR V vLog(D d, V x) {
  const V zero = hn::Zero(d);
  V y = hn::Log(d, x);
  y = hn::IfThenElse(hn::Eq(x, zero), hn::Set(d, -HUGE_VALF), y);
  y = hn::IfThenElse(hn::Eq(x, hn::Set(d, HUGE_VALF)), x, y);
  // x < 0 or NaN: NaN (0/0 spelled so the compiler cannot fold it).
  const V nan = hn::Div(zero, zero);
  return hn::IfThenElse(hn::Or(hn::Lt(x, zero), hn::IsNaN(x)), hn::IfThenElse(hn::IsNaN(x), x, nan),
                        y);
}

HWY_ATTR V vTanh(D d, V x) {
  return hn::IfThenElse(hn::IsNaN(x), x, hn::Tanh(d, x));
}

HWY_ATTR V vErf(D d, V x) {
  const V z = hn::Abs(x), one = hn::Set(d, 1.0f);
  // Small |x|: x P(x^2), Horner from the highest term.
  const V x2 = hn::Mul(x, x);
  V p = hn::Set(d, 1.1283791670955126f / 9360.0f);
  p = hn::MulAdd(p, x2, hn::Set(d, -1.1283791670955126f / 1320.0f));
  p = hn::MulAdd(p, x2, hn::Set(d, 1.1283791670955126f / 216.0f));
  p = hn::MulAdd(p, x2, hn::Set(d, -1.1283791670955126f / 42.0f));
  p = hn::MulAdd(p, x2, hn::Set(d, 1.1283791670955126f / 10.0f));
  p = hn::MulAdd(p, x2, hn::Set(d, -1.1283791670955126f / 3.0f));
  p = hn::MulAdd(p, x2, hn::Set(d, 1.1283791670955126f));
  const V small = hn::Mul(x, p);
  // Large |x|: 1 - erfc(|x|), with x's sign.
  const V t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.5f), z, one));
  V q = hn::Set(d, 0.17087277f);
  for (float c : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f,
                  0.37409196f, 1.00002368f, -1.26551223f})
    q = hn::MulAdd(q, t, hn::Set(d, c));
  const V erfc = hn::Mul(t, vExp(d, hn::Sub(q, hn::Mul(z, z))));
  const V large = hn::CopySign(hn::Sub(one, erfc), x);
  return hn::IfThenElse(hn::Lt(z, hn::Set(d, 0.5f)), small, large);
}

HWY_ATTR V vSigmoid(D d, V x) {
  const V one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, vExp(d, hn::Neg(x))));
}

HWY_ATTR V apply(MathFn f, D d, V x) {
  const V half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  switch (f) {
  case MathFn::Exp:
    return vExp(d, x);
  case MathFn::Log:
    return vLog(d, x);
  case MathFn::Tanh:
    return vTanh(d, x);
  case MathFn::Erf:
    return vErf(d, x);
  case MathFn::Sigmoid:
    return vSigmoid(d, x);
  case MathFn::Silu:
    return hn::Mul(x, vSigmoid(d, x));
  case MathFn::Gelu:
    return hn::Mul(hn::Mul(half, x),
                   hn::Add(one, vErf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752440f)))));
  case MathFn::GeluTanh: {
    const V inner = hn::Mul(hn::Set(d, 0.79788456080286535588f),
                            hn::Add(x, hn::Mul(hn::Set(d, 0.044715f), hn::Mul(hn::Mul(x, x), x))));
    return hn::Mul(hn::Mul(half, x), hn::Add(one, vTanh(d, inner)));
  }
  }
  return x;
}

template <MathFn F> HWY_ATTR void run(const float *x, float *y, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + N <= n; j += N)
    hn::StoreU(apply(F, d, hn::LoadU(d, x + j)), d, y + j);
  if (j < n) {
    HWY_ALIGN float buf[hn::MaxLanes(D())] = {};
    std::memcpy(buf, x + j, sizeof(float) * static_cast<size_t>(n - j));
    hn::Store(apply(F, d, hn::Load(d, buf)), d, buf);
    std::memcpy(y + j, buf, sizeof(float) * static_cast<size_t>(n - j));
  }
}

HWY_ATTR void mathRun(MathFn f, const float *x, float *y, int64_t n) {
  switch (f) {
  case MathFn::Exp:
    return run<MathFn::Exp>(x, y, n);
  case MathFn::Log:
    return run<MathFn::Log>(x, y, n);
  case MathFn::Tanh:
    return run<MathFn::Tanh>(x, y, n);
  case MathFn::Erf:
    return run<MathFn::Erf>(x, y, n);
  case MathFn::Sigmoid:
    return run<MathFn::Sigmoid>(x, y, n);
  case MathFn::Silu:
    return run<MathFn::Silu>(x, y, n);
  case MathFn::Gelu:
    return run<MathFn::Gelu>(x, y, n);
  case MathFn::GeluTanh:
    return run<MathFn::GeluTanh>(x, y, n);
  }
}

} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::kernels {

HWY_EXPORT(mathRun);

void mathFn(MathFn f, const float *x, float *y, int64_t n) {
  if (n > 0)
    HWY_DYNAMIC_DISPATCH(mathRun)(f, x, y, n);
}

} // namespace kiln::kernels
#endif
