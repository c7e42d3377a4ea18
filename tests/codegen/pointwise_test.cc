// The Highway backend's interpreter loops (codegen/highway/pointwise.h) on every SIMD target they
// were compiled for, against the ops' scalar functions (ir/ops/elementwise.h): each element bit
// for bit, over odd lengths (vector tails) and values that catch a careless vectorization (NaN,
// infinities, signed zeros, subnormals, exact ties). exp, log, tanh, erf and the activations
// built on them go to runtime/kernels/vmath.h, which vmath_test checks against libm.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "codegen/highway/pointwise.h"
#include "ir/ops/elementwise.h"
#include "tests/util/simd_targets.h"

namespace kiln {
namespace {
using ir::OpKind;
namespace s = ir::scalar;

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

template <class Op> float unaryRef(float x) {
  return Op::template f<float>(x);
}
template <class Op> float binaryRef(float x, float y) {
  return static_cast<float>(Op::template f<float>(x, y));
}

TEST(PointwiseLoops, MatchTheScalarFunctionsOnEveryTarget) {
  struct Unary {
    OpKind op;
    float (*f)(float);
  };
  const Unary unaries[] = {
      {OpKind::Neg, unaryRef<s::Neg>},   {OpKind::Abs, unaryRef<s::Abs>},
      {OpKind::Sqrt, unaryRef<s::Sqrt>}, {OpKind::Rsqrt, unaryRef<s::Rsqrt>},
      {OpKind::Relu, unaryRef<s::Relu>}, {OpKind::Sin, unaryRef<s::Sin>},
      {OpKind::Cos, unaryRef<s::Cos>},   {OpKind::LogicalNot, unaryRef<s::LogicalNot>}};
  struct Binary {
    OpKind op;
    float (*f)(float, float);
  };
  const Binary binaries[] = {{OpKind::Add, binaryRef<s::Add>},
                             {OpKind::Sub, binaryRef<s::Sub>},
                             {OpKind::Mul, binaryRef<s::Mul>},
                             {OpKind::Div, binaryRef<s::Div>},
                             {OpKind::Max, binaryRef<s::Max>},
                             {OpKind::Min, binaryRef<s::Min>},
                             {OpKind::Pow, binaryRef<s::Pow>},
                             {OpKind::LogicalAnd, binaryRef<s::LogicalAnd>},
                             {OpKind::LogicalOr, binaryRef<s::LogicalOr>},
                             {OpKind::Eq, binaryRef<s::Eq>},
                             {OpKind::Ne, binaryRef<s::Ne>},
                             {OpKind::Lt, binaryRef<s::Lt>},
                             {OpKind::Le, binaryRef<s::Le>},
                             {OpKind::Gt, binaryRef<s::Gt>},
                             {OpKind::Ge, binaryRef<s::Ge>}};
  test_util::forEachSimdTarget([&] {
    for (int64_t n : kLengths) {
      const std::vector<float> a = values(n, 0), b = values(n, 3), c = values(n, 11);
      std::vector<float> d(n);
      for (const Unary &u : unaries) {
        highway::runPointwise(u.op, false, d.data(), a.data(), nullptr, nullptr, n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_TRUE(sameBits(d[j], u.f(a[j])))
              << ir::mnemonic(u.op) << "(" << a[j] << ") at " << j << " of " << n;
      }
      for (const Binary &o : binaries) {
        highway::runPointwise(o.op, false, d.data(), a.data(), b.data(), nullptr, n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_TRUE(sameBits(d[j], o.f(a[j], b[j])))
              << ir::mnemonic(o.op) << "(" << a[j] << ", " << b[j] << ") at " << j << " of " << n;
      }
      highway::runPointwise(OpKind::Select, false, d.data(), a.data(), b.data(), c.data(), n);
      for (int64_t j = 0; j < n; ++j)
        ASSERT_TRUE(sameBits(d[j], a[j] != 0 ? b[j] : c[j])) << "select at " << j;
      for (bool toBool : {false, true}) {
        highway::runPointwise(OpKind::Cast, toBool, d.data(), a.data(), nullptr, nullptr, n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_TRUE(sameBits(d[j], toBool ? (a[j] != 0 ? 1.0f : 0.0f) : a[j])) << "cast at " << j;
      }
      // In place (d is a), as an output over its own input.
      std::vector<float> x = a;
      highway::runPointwise(OpKind::Mul, false, x.data(), x.data(), b.data(), nullptr, n);
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
      std::vector<float> lanes(highway::kSumLanes), want(highway::kSumLanes);
      for (int64_t l = 0; l < highway::kSumLanes; ++l)
        lanes[l] = want[l] = 1e-3f * static_cast<float>(l);
      for (int64_t j = 0; j < n; ++j)
        want[j % highway::kSumLanes] += x[j];
      highway::accumulateSum(lanes.data(), x.data(), n);
      for (int64_t l = 0; l < highway::kSumLanes; ++l)
        ASSERT_TRUE(sameBits(lanes[l], want[l])) << "lane " << l << " of a sum over " << n;

      for (int64_t stride : {0, 1, 3}) {
        std::vector<int64_t> ints(n * 3 + 1);
        std::vector<uint8_t> bools(n * 3 + 1);
        for (size_t i = 0; i < ints.size(); ++i) {
          ints[i] = (static_cast<int64_t>(i) * 7919 % (int64_t{1} << 24)) - (int64_t{1} << 23);
          bools[i] = i % 3 == 1;
        }
        std::vector<float> d(n);
        highway::intsToFloats(d.data(), ints.data(), stride, n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(d[j], static_cast<float>(ints[j * stride])) << j << ", stride " << stride;
        highway::boolsToFloats(d.data(), bools.data(), stride, n);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(d[j], bools[j * stride] ? 1.0f : 0.0f) << j << ", stride " << stride;
      }
    }
  });
}

} // namespace
} // namespace kiln
