// Vectorized transcendental functions over f32 arrays, compiled per SIMD target and dispatched
// at run time: what the fusion interpreter calls for exp, log, tanh, erf and the activations
// built on them. exp, log and tanh come from Highway's contrib/math (1, 4 and 4 ulp within their
// valid ranges), with the edges the reference's std:: functions have made explicit (NaN in, NaN
// out; exp overflowing to inf and underflowing to 0; log(0) = -inf, log(x < 0) = NaN). On AVX-512,
// exp keeps Highway's reduction and polynomial but scales by 2^n with one scalef (vmath-inl.h).
// erf is our own (Highway 1.0.3 has none):
//   |x| < 0.5:  erf(x) = 2/sqrt(pi) sum_{n<=6} (-1)^n x^(2n+1) / (n! (2n+1))   (Taylor; the first
//               omitted term is below 1e-9 relative there)
//   |x| >= 0.5: erf(x) = sign(x) (1 - erfc(|x|)), erfc(z) = t exp(-z^2 - 1.26551223 + t P(t)),
//               t = 1 / (1 + z/2) (Numerical Recipes' erfcc: fractional error < 1.2e-7)
// The activations use the reference's formulas (ir/ops/elementwise.h) on these:
//   sigmoid(x) = 1 / (1 + exp(-x)),  silu(x) = x sigmoid(x),
//   gelu(x) = 0.5 x (1 + erf(x / sqrt 2)),  gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715
//   x^3)))
// The measured error bounds are in tests/runtime/vmath_test.cc.
#pragma once

#include <cstdint>

namespace kiln::kernels {

enum class MathFn : uint8_t { Exp, Log, Tanh, Erf, Sigmoid, Silu, Gelu, GeluTanh };

// y[j] = f(x[j]) for j < n (y may be x).
void mathFn(MathFn f, const float *x, float *y, int64_t n);

} // namespace kiln::kernels
