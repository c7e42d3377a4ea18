// The Highway backend's interpreter loops (codegen/common/pointwise.h) on every SIMD target they
// were compiled for, against the ops' formulas on scalars (ir/ops/elementwise.h, the reference's
// ScalarMath<float>): every op with a formula, taken from the op table, each element bit for bit,
// over odd lengths (vector tails) and values that catch a careless vectorization (NaN,
// infinities, signed zeros, subnormals, exact ties). Formulas that call exp, tanh or erf run the
// vector math there (runtime/kernels/vmath-inl.h), which vmath_test checks against libm.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "codegen/common/pointwise.h"
#include "ir/ops/elementwise.h"
#include "support/bf16.h"
#include "tests/util/simd_targets.h"

namespace kiln::pointwise_test {
namespace {
using ir::OpKind;

constexpr int64_t kLengths[] = {1, 7, 16, 17, 127, 129, 512};

// n values cycling through the awkward ones, then a spread of ordinary ones.
std::vector<float> values(int64_t n, int salt) {
  const float inf = std::numeric_limits<float>::infinity();
  const float special[] = {0.0f,   -0.0f, 1.0f, -1.0f, inf,   -inf,  std::nanf(""),
                           1e-40f, 2.0f,  0.5f, 3.0f,  -2.5f, 1e30f, -7.0f};
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = (i * 5 + salt) % 24;
    v[i] = k < 14 ? special[k] : static_cast<float>(k - 19) * 0.75f;
  }
  return v;
}

bool sameBits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// The reference's scalar math, noting whether the formula called the functions the vector
// backends compute with their own polynomials.
struct ProbeMath : ir::ScalarMath<float> {
  mutable bool vectorMath = false;
  float exp(float x) const { return vectorMath = true, std::exp(x); }
  float tanh(float x) const { return vectorMath = true, std::tanh(x); }
  float erf(float x) const { return vectorMath = true, std::erf(x); }
};

// An op's formula on one element (as many operands as it takes; a comparison's bool as 1 or 0).
using ScalarFn = float (*)(float a, float b, float c, bool *vectorMath);
template <class F> float scalarFormula(float a, float b, float c, bool *vectorMath) {
  const ProbeMath m;
  float r;
  if constexpr (requires { F::f(m, a, a, a); })
    r = F::f(m, a, b, c);
  else if constexpr (requires { F::f(m, a, a); })
    r = static_cast<float>(F::f(m, a, b));
  else
    r = F::f(m, a);
  *vectorMath = m.vectorMath;
  return r;
}
constexpr auto kFormulas =
    ir::formulaTable<ScalarFn>([]<class F>() -> ScalarFn { return &scalarFormula<F>; });

TEST(PointwiseLoops, MatchTheFormulasOnEveryTarget) {
  test_util::forEachSimdTarget([&] {
    for (int64_t n : kLengths) {
      const std::vector<float> a = values(n, 0), b = values(n, 3), c = values(n, 11);
      std::vector<float> d(n);
      int ops = 0;
      for (const ir::OpInfo *op : ir::allOps()) {
        const ScalarFn f = kFormulas[static_cast<size_t>(op->kind)];
        if (!f)
          continue;
        bool vectorMath = false;
        f(a[0], b[0], c[0], &vectorMath);
        if (vectorMath)
          continue;
        ++ops;
        codegen::runPointwise(op->kind, ir::CastTo::Same, d.data(), a.data(), b.data(), c.data(),
                              n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_TRUE(sameBits(d[j], f(a[j], b[j], c[j], &vectorMath)))
              << op->mnemonic << "(" << a[j] << ", " << b[j] << ", " << c[j] << ") at " << j
              << " of " << n;
      }
      EXPECT_GE(ops, 25); // all but the ten built on exp, tanh and erf
      // Casts: as is, to bool, to bf16 (the nearest, ties to even: 1 + 2^-8 to 1, 1 + 3 2^-8 to
      // 1 + 2^-6; a NaN stays a NaN; the largest floats to infinity), and a bf16 stored as halves.
      std::vector<float> e = a;
      const float special[] = {1 + 0x1p-8f, 1 + 3 * 0x1p-8f,
                               -std::numeric_limits<float>::quiet_NaN(), 3.4e38f, -1e-40f};
      for (int64_t j = 0; j < n && j < 5; ++j)
        e[j] = special[j];
      for (ir::CastTo to : {ir::CastTo::Same, ir::CastTo::Bool, ir::CastTo::Bf16}) {
        codegen::runPointwise(OpKind::Cast, to, d.data(), e.data(), nullptr, nullptr, n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_TRUE(sameBits(d[j], to == ir::CastTo::Bool   ? (e[j] != 0 ? 1.0f : 0.0f)
                                     : to == ir::CastTo::Bf16 ? roundToBf16(e[j])
                                                              : e[j]))
              << "cast " << static_cast<int>(to) << " of " << e[j] << " at " << j;
      }
      std::vector<uint16_t> halves(n);
      codegen::storeBf16Halves(halves.data(), d.data(), n);
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(halves[j], toBf16Bits(e[j])) << j;
      // In place (d is a), as an output over its own input.
      std::vector<float> x = a;
      codegen::runPointwise(OpKind::Mul, ir::CastTo::Same, x.data(), x.data(), b.data(), nullptr,
                            n);
      for (int64_t j = 0; j < n; ++j)
        ASSERT_TRUE(sameBits(x[j], a[j] * b[j])) << "mul in place at " << j;
    }
  });
}

// A row sum's lanes: lane l adds the elements j = l mod 16 in order of j, from where it stood.
TEST(PointwiseLoops, SumLanesAndInputConversionsOnEveryTarget) {
  test_util::forEachSimdTarget([&] {
    for (int64_t n : kLengths) {
      std::vector<float> x(n);
      for (int64_t j = 0; j < n; ++j)
        x[j] = 1.0f / static_cast<float>(j + 3) * (j % 3 == 0 ? -1.0f : 1.0f);
      std::vector<float> lanes(codegen::kSumLanes), want(codegen::kSumLanes);
      for (int64_t l = 0; l < codegen::kSumLanes; ++l)
        lanes[l] = want[l] = 1e-3f * static_cast<float>(l);
      for (int64_t j = 0; j < n; ++j)
        want[j % codegen::kSumLanes] += x[j];
      codegen::accumulateSum(lanes.data(), x.data(), n);
      for (int64_t l = 0; l < codegen::kSumLanes; ++l)
        ASSERT_TRUE(sameBits(lanes[l], want[l])) << "lane " << l << " of a sum over " << n;

      for (int64_t stride : {0, 1, 3}) {
        std::vector<int64_t> ints(n * 3 + 1);
        std::vector<uint8_t> bools(n * 3 + 1);
        for (size_t i = 0; i < ints.size(); ++i) {
          ints[i] = (static_cast<int64_t>(i) * 7919 % (int64_t{1} << 24)) - (int64_t{1} << 23);
          bools[i] = i % 3 == 1;
        }
        std::vector<float> d(n);
        codegen::intsToFloats(d.data(), ints.data(), stride, n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(d[j], static_cast<float>(ints[j * stride])) << j << ", stride " << stride;
        codegen::boolsToFloats(d.data(), bools.data(), stride, n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(d[j], bools[j * stride] ? 1.0f : 0.0f) << j << ", stride " << stride;
      }
    }
  });
}

} // namespace
} // namespace kiln::pointwise_test
