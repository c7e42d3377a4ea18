// Vectorized transcendental functions over f32 arrays, compiled per SIMD target and dispatched
// at run time: what the fusion interpreter calls for exp, log, tanh, erf and the activations
// built on them. exp, log and tanh come from Highway's contrib/math (1, 4 and 4 ulp within their
// valid ranges), with the edges the reference's std:: functions have made explicit (NaN in, NaN
// out; exp overflowing to inf and underflowing to 0; log(0) = -inf, log(x < 0) = NaN). On AVX-512,
// exp keeps Highway's reduction and polynomial but scales by 2^n with one scalef (vmath-inl.h).
// erf is our own (Highway 1.0.3 has none): a degree-6 polynomial per interval of 0.5 on
// |x| < 4, its coefficients picked per lane by one permute (erf_table.h states the method);
// +-1 from 4 on.
// The activations use the reference's formulas (ir/ops/elementwise.h) on these:
//   sigmoid(x) = 1 / (1 + exp(-x)),  silu(x) = x sigmoid(x),
//   gelu(x) = 0.5 x (1 + erf(x / sqrt 2)),  gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715
//   x^3))),  gelu_grad(x) = 0.5 (1 + erf(x / sqrt 2)) + x (e^(-x^2/2) / sqrt(2 pi)),
//   gelu_tanh_grad (its formula in ir/ops/elementwise.h),  silu_grad(x) = s (1 + x (1 - s))
// The measured error bounds are in tests/runtime/vmath_test.cc.
#pragma once

#include <cstdint>

namespace kiln::kernels {

enum class MathFn : uint8_t {
  Exp,
  Log,
  Tanh,
  Erf,
  Sigmoid,
  Silu,
  Gelu,
  GeluTanh,
  GeluGrad,
  GeluTanhGrad,
  SiluGrad
};

// y[j] = f(x[j]) for j < n (y may be x).
void mathFn(MathFn f, const float *x, float *y, int64_t n);

} // namespace kiln::kernels
