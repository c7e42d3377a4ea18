// The vectorized math against the C library in double precision (the truth, rounded to float),
// on every compiled SIMD target: the largest error in ulps over a dense sweep of each function's
// interesting range, and the edges (NaN, infinities, overflow, underflow, log of 0 and of
// negatives). The bounds asserted are the measured ones (the same on every target: exp and log
// 1 ulp, tanh, erf, sigmoid and silu 2, gelu_tanh and gelu 3); vmath-inl.h states the methods.
// The functions are run as the Highway backend runs the pointwise ops: their formulas
// (ir/ops/elementwise.h) over that math (codegen/common/pointwise.h).

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/common/pointwise.h"
#include "tests/util/simd_targets.h"

namespace kiln::kernels::vmath_test {
namespace {
using MathFn = ir::OpKind;

// y[j] = f(x[j]) for j < n, as the Highway backend's pointwise loop computes it.
void mathFn(MathFn f, const float *x, float *y, int64_t n) {
  codegen::runPointwise(f, ir::CastTo::Same, y, x, nullptr, nullptr, n);
}

// Distance in representable floats (0: equal; both NaN: 0).
int64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto ordered = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, 4);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::llabs(ordered(a) - ordered(b));
}

// Each function in double precision, written out independently of the formulas.
double truth(MathFn f, double x) {
  using Fn = double (*)(double);
  static const std::pair<MathFn, Fn> kTruth[] = {
      {MathFn::Exp, [](double x) { return std::exp(x); }},
      {MathFn::Log, [](double x) { return std::log(x); }},
      {MathFn::Tanh, [](double x) { return std::tanh(x); }},
      {MathFn::Erf, [](double x) { return std::erf(x); }},
      {MathFn::Sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {MathFn::Silu, [](double x) { return x / (1 + std::exp(-x)); }},
      {MathFn::Gelu, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {MathFn::GeluTanh,
       [](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
       }},
      {MathFn::GeluGrad,
       [](double x) {
         return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
                x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
       }},
      {MathFn::SiluGrad,
       [](double x) {
         const double s = 1 / (1 + std::exp(-x));
         return s * (1 + x * (1 - s));
       }},
      {MathFn::GeluTanhGrad, [](double x) {
         const double s = std::sqrt(2 / M_PI), t = std::tanh(s * (x + 0.044715 * x * x * x));
         return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * s * (1 + 3 * 0.044715 * x * x);
       }}};
  for (auto [g, fn] : kTruth)
    if (g == f)
      return fn(x);
  ADD_FAILURE() << "no truth for " << ir::mnemonic(f);
  return 0;
}

std::vector<float> sweep(float lo, float hi, int n) {
  std::vector<float> x;
  for (int i = 0; i <= n; ++i)
    x.push_back(lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n));
  for (float s = 1e-30f; s < 1; s *= 1.7f) // tiny magnitudes, both signs
    if (s >= std::fabs(lo) || s <= std::fabs(hi))
      x.push_back(s), x.push_back(-s);
  return x;
}

struct Case {
  MathFn f;
  const char *name;
  float lo, hi;
  int64_t maxUlps;
};

// The largest ulp error over the sweep (odd length: the tail path too).
int64_t maxError(const Case &c, std::vector<float> x) {
  if (c.f == MathFn::Log)
    for (float &v : x)
      v = std::fabs(v) + 1e-38f;
  std::vector<float> y(x.size());
  mathFn(c.f, x.data(), y.data(), static_cast<int64_t>(x.size()));
  int64_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t e = ulps(y[i], static_cast<float>(truth(c.f, x[i])));
    if (e > worst)
      worst = e;
    EXPECT_LE(e, c.maxUlps) << c.name << "(" << x[i] << ") = " << y[i] << ", want "
                            << static_cast<float>(truth(c.f, x[i]));
    if (e > c.maxUlps)
      break;
  }
  return worst;
}

TEST(VectorMath, UlpErrorAgainstDoublePrecisionOnEveryTarget) {
  // gelu's 1 + erf(x / sqrt 2) cancels for x < 0 (as in the reference and PyTorch, which compute
  // the same formula in float): the rounding of the sum is amplified by 1 / (1 + erf), so the ulp
  // sweep stops at -1 and below that the error is bounded relative to |x| (next test).
  const Case cases[] = {
      {MathFn::Exp, "exp", -103, 88.7f, 1},     {MathFn::Log, "log", -1e4f, 1e4f, 1},
      {MathFn::Tanh, "tanh", -12, 12, 2},       {MathFn::Erf, "erf", -6, 6, 2},
      {MathFn::Sigmoid, "sigmoid", -80, 80, 2}, {MathFn::Silu, "silu", -80, 80, 2},
      {MathFn::Gelu, "gelu", -1, 10, 3},        {MathFn::GeluTanh, "gelu_tanh", -1, 10, 3}};
  test_util::forEachSimdTarget([&] {
    for (const Case &c : cases) {
      const int64_t worst = maxError(c, sweep(c.lo, c.hi, 200001));
      if (getenv("KILN_PRINT_ULPS"))
        printf("%s %s: %lld ulps\n", kernels::activeTarget().c_str(), c.name,
               static_cast<long long>(worst));
    }
  });
}

TEST(VectorMath, GeluWhereItCancelsIsAccurateRelativeToX) {
  test_util::forEachSimdTarget([&] {
    for (MathFn f : {MathFn::Gelu, MathFn::GeluTanh}) {
      std::vector<float> x = sweep(-20, -1, 4001), y(x.size());
      mathFn(f, x.data(), y.data(), static_cast<int64_t>(x.size()));
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(y[i], truth(f, x[i]), 2e-7 * std::fabs(x[i])) << x[i];
    }
  });
}

// gelu_grad, gelu_tanh_grad and silu_grad are the operations of gelu's, gelu_tanh's and silu's
// gradients as the IR wrote them before the ops existed (ir/ops/elementwise.h), each rounded:
// their bits are those of that chain run through the vector erf, exp, tanh and sigmoid one
// operation at a time. All cross 0 (gelu's near x = -0.75, silu's near -2.4), so their error
// against the truth is bounded absolutely (the roundings of 0.5 (1 + erf), 0.5 (1 + t) and the
// other term; for silu, 1 - s rounded where s nears 1, times x: 5e-7 at x = 5).
TEST(VectorMath, ActivationGradientsAreTheChainsOfTheirOperations) {
  test_util::forEachSimdTarget([&] {
    std::vector<float> x = sweep(-12, 12, 100001);
    x.push_back(std::numeric_limits<float>::infinity());
    x.push_back(-std::numeric_limits<float>::infinity());
    x.push_back(std::nanf(""));
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<float> y(x.size()), erf(x.size()), e(x.size()), t(x.size()), sg(x.size());
    const float s = 0.79788456080286535588f, a3 = static_cast<float>(3 * 0.044715);
    for (int64_t i = 0; i < n; ++i) {
      erf[i] = x[i] * 0.70710678118654752440f, e[i] = -0.5f * (x[i] * x[i]);
      t[i] = s * (x[i] + 0.044715f * ((x[i] * x[i]) * x[i]));
    }
    mathFn(MathFn::Erf, erf.data(), erf.data(), n);
    mathFn(MathFn::Exp, e.data(), e.data(), n);
    mathFn(MathFn::Tanh, t.data(), t.data(), n);
    mathFn(MathFn::Sigmoid, x.data(), sg.data(), n);
    // f's values bit for bit its chain's, and within `bound` of the truth.
    auto check = [&](MathFn f, const char *name, double bound, auto chain) {
      mathFn(f, x.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float want = chain(i);
        ASSERT_EQ(ulps(y[i], want), 0)
            << name << "(" << x[i] << ") = " << y[i] << ", chain " << want;
        if (std::isfinite(x[i])) {
          ASSERT_NEAR(y[i], truth(f, x[i]), bound) << name << "(" << x[i] << ")";
        }
      }
    };
    check(MathFn::GeluGrad, "gelu_grad", 3e-7, [&](int64_t i) {
      return 0.5f * (1.0f + erf[i]) + x[i] * (0.39894228040143267794f * e[i]);
    });
    // (Near |x| = 5, 1 - t^2 is a few of t's ulps (6e-8) times x u' / 2, up to 10: 1.3e-6 off the
    // truth here, as in the operations one by one, and in PyTorch's float formula.)
    check(MathFn::GeluTanhGrad, "gelu_tanh_grad", 2e-6, [&](int64_t i) {
      const float du = s * (1.0f + a3 * (x[i] * x[i]));
      return 0.5f * (1.0f + t[i]) + (0.5f * x[i]) * ((1.0f - t[i] * t[i]) * du);
    });
    check(MathFn::SiluGrad, "silu_grad", 1e-6,
          [&](int64_t i) { return sg[i] * (1.0f + x[i] * (1.0f - sg[i])); });
  });
}

TEST(VectorMath, Edges) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  struct Edge {
    MathFn f;
    float x, want;
  };
  const Edge edges[] = {
      {MathFn::Exp, inf, inf},    {MathFn::Exp, -inf, 0},      {MathFn::Exp, 89, inf},
      {MathFn::Exp, -120, 0},     {MathFn::Exp, 0, 1},         {MathFn::Log, 0, -inf},
      {MathFn::Log, -1, nan},     {MathFn::Log, inf, inf},     {MathFn::Log, 1, 0},
      {MathFn::Tanh, inf, 1},     {MathFn::Tanh, -inf, -1},    {MathFn::Erf, inf, 1},
      {MathFn::Erf, -inf, -1},    {MathFn::Erf, 0, 0},         {MathFn::Sigmoid, inf, 1},
      {MathFn::Sigmoid, -inf, 0}, {MathFn::Gelu, inf, inf},    {MathFn::Gelu, -inf, nan},
      {MathFn::Exp, nan, nan},    {MathFn::Log, nan, nan},     {MathFn::Tanh, nan, nan},
      {MathFn::Erf, nan, nan},    {MathFn::Sigmoid, nan, nan}, {MathFn::Silu, nan, nan},
      {MathFn::Gelu, nan, nan},   {MathFn::GeluTanh, nan, nan}};
  test_util::forEachSimdTarget([&] {
    for (const Edge &e : edges) {
      float y = 0;
      mathFn(e.f, &e.x, &y, 1);
      if (std::isnan(e.want))
        EXPECT_TRUE(std::isnan(y)) << static_cast<int>(e.f) << "(" << e.x << ") = " << y;
      else
        EXPECT_EQ(y, e.want) << static_cast<int>(e.f) << "(" << e.x << ")";
    }
  });
}

} // namespace
} // namespace kiln::kernels::vmath_test
