// Vectorized math (see vmath.h). Whole vectors go through the SIMD path; the last n mod lanes
// elements through a vector loaded and stored masked (vm::loadFirst; every element is computed by
// the same code).
#include <algorithm>

#include "runtime/kernels/vmath.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/vmath.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

// After highway.h (clang-format must not sort it above foreach_target.h).
#include "runtime/kernels/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = vm::D;
using V = vm::V;
using vm::vErf, vm::vExp, vm::vLog, vm::vSigmoid, vm::vTanh;

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
  case MathFn::GeluGrad: { // elementwise.h's operations in its order (no multiply-add fused)
    const V cdf =
        hn::Mul(half, hn::Add(one, vErf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752440f)))));
    const V pdf = hn::Mul(hn::Set(d, 0.39894228040143267794f),
                          vExp(d, hn::Mul(hn::Set(d, -0.5f), hn::Mul(x, x))));
    return hn::Add(cdf, hn::Mul(x, pdf));
  }
  case MathFn::GeluTanhGrad: { // as GeluGrad
    const V s = hn::Set(d, 0.79788456080286535588f), x2 = hn::Mul(x, x);
    const V t = vTanh(d, hn::Mul(s, hn::Add(x, hn::Mul(hn::Set(d, 0.044715f), hn::Mul(x2, x)))));
    const V du =
        hn::Mul(s, hn::Add(one, hn::Mul(hn::Set(d, static_cast<float>(3 * 0.044715)), x2)));
    return hn::Add(hn::Mul(half, hn::Add(one, t)),
                   hn::Mul(hn::Mul(half, x), hn::Mul(hn::Sub(one, hn::Mul(t, t)), du)));
  }
  case MathFn::SiluGrad: { // as GeluGrad
    const V s = vSigmoid(d, x);
    return hn::Mul(s, hn::Add(one, hn::Mul(x, hn::Sub(one, s))));
  }
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
    const size_t tail = static_cast<size_t>(n - j);
    vm::storeFirst(apply(F, d, vm::loadFirst(d, x + j, tail)), d, y + j, tail);
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
  case MathFn::GeluGrad:
    return run<MathFn::GeluGrad>(x, y, n);
  case MathFn::GeluTanhGrad:
    return run<MathFn::GeluTanhGrad>(x, y, n);
  case MathFn::SiluGrad:
    return run<MathFn::SiluGrad>(x, y, n);
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
