// Reference semantics and inference errors of the elementwise ops (ir/ops/elementwise.h), each
// against hand-computed values in f32 and f64: broadcasting, scalars, NaN/inf, integer dtypes.
#include <cstdint>

#include <gtest/gtest.h>

#include "ir/ops/elementwise.h"
#include "support/rng.h"
#include "tests/ir/ops_test_util.h"

namespace kiln::ir::optest::ops_elementwise_test {
namespace {

constexpr double kE = 2.718281828459045, kPi = 3.141592653589793;

// ---- Unary ----

TEST(OpElementwise, Neg) {
  EXPECT_TRUE(refIs(OpKind::Neg, {f32({3}, {1.5, -2, 0})}, {}, f32t({3}), {-1.5, 2, 0}));
  EXPECT_TRUE(refIs(OpKind::Neg, {i64({2}, {3, -4})}, {}, T(DType::I64, {2}), {-3, 4}));
  EXPECT_TRUE(refIs(OpKind::Neg, {f64({}, {kInf})}, {}, T(DType::F64, {}), {-kInf}));
}

TEST(OpElementwise, Abs) {
  EXPECT_TRUE(
      refIs(OpKind::Abs, {f32({4}, {-1.5, 2, 0, -kInf})}, {}, f32t({4}), {1.5, 2, 0, kInf}));
  EXPECT_TRUE(refIs(OpKind::Abs, {i32({2}, {-7, 7})}, {}, T(DType::I32, {2}), {7, 7}));
}

TEST(OpElementwise, Exp) {
  EXPECT_TRUE(refIs(OpKind::Exp, {f32({5}, {0, 1, -kInf, kInf, kNaN})}, {}, f32t({5}),
                    {1, kE, 0, kInf, kNaN}));
}

TEST(OpElementwise, Log) {
  EXPECT_TRUE(refIs(OpKind::Log, {f32({4}, {1, kE, 0, -1})}, {}, f32t({4}), {0, 1, -kInf, kNaN}));
}

TEST(OpElementwise, Sqrt) {
  EXPECT_TRUE(
      refIs(OpKind::Sqrt, {f32({3}, {4, 2, -1})}, {}, f32t({3}), {2, 1.4142135623730951, kNaN}));
}

TEST(OpElementwise, Rsqrt) {
  EXPECT_TRUE(refIs(OpKind::Rsqrt, {f32({3}, {4, 0.25, 0})}, {}, f32t({3}), {0.5, 2, kInf}));
}

TEST(OpElementwise, Tanh) {
  EXPECT_TRUE(refIs(OpKind::Tanh, {f32({4}, {0, 1, -kInf, 50})}, {}, f32t({4}),
                    {0, 0.7615941559557649, -1, 1}));
}

TEST(OpElementwise, Sigmoid) {
  // Neither branch overflows: +-1000 give exactly 1 and 0, not NaN.
  EXPECT_TRUE(refIs(OpKind::Sigmoid, {f32({5}, {0, 2, -100, 1000, -1000})}, {}, f32t({5}),
                    {0.5, 0.8807970779778823, 3.720075976020836e-44, 1, 0}));
}

TEST(OpElementwise, Relu) {
  EXPECT_TRUE(
      refIs(OpKind::Relu, {f32({4}, {-1, 0, 2.5, kNaN})}, {}, f32t({4}), {0, 0, 2.5, kNaN}));
}

TEST(OpElementwise, Gelu) {
  EXPECT_TRUE(refIs(OpKind::Gelu, {f32({4}, {0, 1, -1, 2})}, {}, f32t({4}),
                    {0, 0.8413447460685429, -0.15865525393145707, 1.9544997361036416}));
}

// Phi(x) + x phi(x)
TEST(OpElementwise, GeluGrad) {
  EXPECT_TRUE(refIs(OpKind::GeluGrad, {f32({4}, {0, 1, -1, 2})}, {}, f32t({4}),
                    {0.5, 1.0833154705876864, -0.0833154705876863, 1.085231801078197}));
}

// (1 + t)/2 + x/2 (1 - t^2) u'
TEST(OpElementwise, GeluTanhGrad) {
  EXPECT_TRUE(refIs(OpKind::GeluTanhGrad, {f32({4}, {0, 0.3, -2, 1.5})}, {}, f32t({4}),
                    {0.5, 0.7322954516388018, -0.08609925662361825, 1.1277107931514332}));
}

TEST(OpElementwise, GeluTanh) {
  EXPECT_TRUE(refIs(OpKind::GeluTanh, {f32({4}, {0, 1, -1, 2})}, {}, f32t({4}),
                    {0, 0.8411919906082768, -0.15880800939172324, 1.954597694087775}));
}

TEST(OpElementwise, Silu) {
  EXPECT_TRUE(refIs(OpKind::Silu, {f32({3}, {0, 1, -1})}, {}, f32t({3}),
                    {0, 0.7310585786300049, -0.2689414213699951}));
}

// log(1 + e^x) (log1p, so -20 keeps its 2e-9), and x itself above the threshold 20
TEST(OpElementwise, Softplus) {
  EXPECT_TRUE(refIs(OpKind::Softplus, {f64({6}, {0, 1, -1, -20, 20, 25})}, {}, T(DType::F64, {6}),
                    {0.6931471805599453, 1.3132616875182228, 0.31326168751822286,
                     2.061153620314381e-09, 20.000000002061153, 25}));
  EXPECT_TRUE(refIs(OpKind::Softplus, {f32({3}, {kInf, -kInf, 30})}, {}, f32t({3}), {kInf, 0, 30}));
}

// s (1 + x (1 - s)),  s = sigmoid(x)
TEST(OpElementwise, SiluGrad) {
  EXPECT_TRUE(refIs(OpKind::SiluGrad, {f32({3}, {0, 1, -2})}, {}, f32t({3}),
                    {0.5, 0.9276705118714869, -0.09078424878489547}));
}

TEST(OpElementwise, Sin) {
  EXPECT_TRUE(
      refIs(OpKind::Sin, {f32({3}, {0, kPi / 2, 1})}, {}, f32t({3}), {0, 1, 0.8414709848078965}));
}

TEST(OpElementwise, Cos) {
  EXPECT_TRUE(
      refIs(OpKind::Cos, {f32({3}, {0, kPi, 1})}, {}, f32t({3}), {1, -1, 0.5403023058681398}));
}

TEST(OpElementwise, Erf) {
  EXPECT_TRUE(refIs(OpKind::Erf, {f32({6}, {0, 1, -2, kInf, -kInf, kNaN})}, {}, f32t({6}),
                    {0, 0.8427007929497149, -0.9953222650189527, 1, -1, kNaN}));
}

TEST(OpElementwise, LogicalNot) {
  EXPECT_TRUE(refIs(OpKind::LogicalNot, {boolean({2}, {1, 0})}, {}, T(DType::Bool, {2}), {0, 1}));
}

// ---- Binary, numpy broadcasting ----

TEST(OpElementwise, Add) {
  // [2,1] + [3] -> [2,3]
  EXPECT_TRUE(refIs(OpKind::Add, {f32({2, 1}, {1, 2}), f32({3}, {10, 20, 30})}, {}, f32t({2, 3}),
                    {11, 21, 31, 12, 22, 32}));
  // A scalar [] broadcasts to anything.
  EXPECT_TRUE(
      refIs(OpKind::Add, {f64({}, {0.5}), f64({2}, {1, 2})}, {}, T(DType::F64, {2}), {1.5, 2.5}));
  EXPECT_TRUE(
      refIs(OpKind::Add, {i64({2}, {1, -5}), i64({1}, {3})}, {}, T(DType::I64, {2}), {4, -2}));
  EXPECT_TRUE(refIs(OpKind::Add, {f32({2}, {kInf, kInf}), f32({2}, {1, -kInf})}, {}, f32t({2}),
                    {kInf, kNaN}));
}

TEST(OpElementwise, Sub) {
  // [2,3] - [1,3]: rows minus one row.
  EXPECT_TRUE(refIs(OpKind::Sub, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({1, 3}, {1, 1, 2})}, {},
                    f32t({2, 3}), {0, 1, 1, 3, 4, 4}));
  EXPECT_TRUE(
      refIs(OpKind::Sub, {i32({1}, {2}), i32({3}, {1, 2, 3})}, {}, T(DType::I32, {3}), {1, 0, -1}));
}

TEST(OpElementwise, Mul) {
  // [3,1] * [1,2] -> [3,2], an outer product.
  EXPECT_TRUE(refIs(OpKind::Mul, {f32({3, 1}, {1, 2, 3}), f32({1, 2}, {10, -1})}, {}, f32t({3, 2}),
                    {10, -1, 20, -2, 30, -3}));
  EXPECT_TRUE(refIs(OpKind::Mul, {f32({1}, {0}), f32({1}, {kInf})}, {}, f32t({1}), {kNaN}));
}

TEST(OpElementwise, Div) {
  EXPECT_TRUE(refIs(OpKind::Div, {f32({4}, {1, -1, 0, 1}), f32({4}, {0, 0, 0, 4})}, {}, f32t({4}),
                    {kInf, -kInf, kNaN, 0.25}));
}

TEST(OpElementwise, Max) {
  EXPECT_TRUE(refIs(OpKind::Max, {f32({3}, {1, kNaN, 3}), f32({3}, {2, 1, kNaN})}, {}, f32t({3}),
                    {2, kNaN, kNaN}));
  EXPECT_TRUE(
      refIs(OpKind::Max, {i64({2}, {-3, 5}), i64({}, {0})}, {}, T(DType::I64, {2}), {0, 5}));
}

TEST(OpElementwise, Min) {
  EXPECT_TRUE(refIs(OpKind::Min, {f32({3}, {1, kNaN, 3}), f32({3}, {2, 1, kNaN})}, {}, f32t({3}),
                    {1, kNaN, kNaN}));
  EXPECT_TRUE(
      refIs(OpKind::Min, {i32({2}, {-3, 5}), i32({}, {0})}, {}, T(DType::I32, {2}), {-3, 0}));
}

TEST(OpElementwise, Pow) {
  EXPECT_TRUE(refIs(OpKind::Pow, {f32({4}, {2, 4, -8, 0}), f32({4}, {3, 0.5, 0.5, 0})}, {},
                    f32t({4}), {8, 2, kNaN, 1}));
}

TEST(OpElementwise, LogicalAnd) {
  EXPECT_TRUE(refIs(OpKind::LogicalAnd, {boolean({2, 1}, {1, 0}), boolean({2}, {1, 0})}, {},
                    T(DType::Bool, {2, 2}), {1, 0, 0, 0}));
}

TEST(OpElementwise, LogicalOr) {
  EXPECT_TRUE(refIs(OpKind::LogicalOr, {boolean({2, 1}, {1, 0}), boolean({2}, {1, 0})}, {},
                    T(DType::Bool, {2, 2}), {1, 1, 1, 0}));
}

// ---- Comparisons: bool results; every comparison with NaN is false except ne ----

const std::vector<Arg> kCmpArgs = {f32({4}, {1, 2, 3, kNaN}), f32({4}, {2, 2, 2, kNaN})};

TEST(OpElementwise, Eq) {
  EXPECT_TRUE(refIs(OpKind::Eq, kCmpArgs, {}, T(DType::Bool, {4}), {0, 1, 0, 0}));
  EXPECT_TRUE(
      refIs(OpKind::Eq, {boolean({2}, {1, 0}), boolean({}, {1})}, {}, T(DType::Bool, {2}), {1, 0}));
}
TEST(OpElementwise, Ne) {
  EXPECT_TRUE(refIs(OpKind::Ne, kCmpArgs, {}, T(DType::Bool, {4}), {1, 0, 1, 1}));
}
TEST(OpElementwise, Lt) {
  EXPECT_TRUE(refIs(OpKind::Lt, kCmpArgs, {}, T(DType::Bool, {4}), {1, 0, 0, 0}));
  // Integer comparison, broadcast [2,1] against [2].
  EXPECT_TRUE(refIs(OpKind::Lt, {i64({2, 1}, {0, 5}), i64({2}, {1, 5})}, {}, T(DType::Bool, {2, 2}),
                    {1, 1, 0, 0}));
}
TEST(OpElementwise, Le) {
  EXPECT_TRUE(refIs(OpKind::Le, kCmpArgs, {}, T(DType::Bool, {4}), {1, 1, 0, 0}));
}
TEST(OpElementwise, Gt) {
  EXPECT_TRUE(refIs(OpKind::Gt, kCmpArgs, {}, T(DType::Bool, {4}), {0, 0, 1, 0}));
}
TEST(OpElementwise, Ge) {
  EXPECT_TRUE(refIs(OpKind::Ge, kCmpArgs, {}, T(DType::Bool, {4}), {0, 1, 1, 0}));
}

TEST(OpElementwise, Select) {
  // cond [2,1], on_true [3], on_false [] -> [2,3]
  EXPECT_TRUE(refIs(OpKind::Select,
                    {boolean({2, 1}, {1, 0}), f32({3}, {1, 2, 3}), f32({}, {-kInf})}, {},
                    f32t({2, 3}), {1, 2, 3, -kInf, -kInf, -kInf}));
  EXPECT_TRUE(refIs(OpKind::Select, {boolean({2}, {0, 1}), i64({2}, {1, 2}), i64({2}, {-1, -2})},
                    {}, T(DType::I64, {2}), {-1, 2}));
}

TEST(OpElementwise, Cast) {
  // float -> int truncates toward zero; -> bool is x != 0 (NaN is nonzero).
  EXPECT_TRUE(refIs(OpKind::Cast, {f32({2}, {1.7, -1.7})}, {{"dtype", DType::I32}},
                    T(DType::I32, {2}), {1, -1}));
  EXPECT_TRUE(refIs(OpKind::Cast, {f32({3}, {0, 0.5, kNaN})}, {{"dtype", DType::Bool}},
                    T(DType::Bool, {3}), {0, 1, 1}));
  EXPECT_TRUE(refIs(OpKind::Cast, {i64({2}, {3, -2})}, {{"dtype", DType::F64}}, T(DType::F64, {2}),
                    {3, -2}));
  // i64 -> i32 wraps modulo 2^32: 3e9 - 2^32.
  EXPECT_TRUE(refIs(OpKind::Cast, {i64({1}, {3e9})}, {{"dtype", DType::I32}}, T(DType::I32, {1}),
                    {-1294967296}));
}

TEST(OpElementwise, DropoutZeroPIsIdentity) {
  EXPECT_TRUE(refIs(OpKind::Dropout, {f32({3}, {1, -2, 3})}, {{"p", 0.0}, {"seed", int64_t{7}}},
                    f32t({3}), {1, -2, 3}));
}

TEST(OpElementwise, DropoutKeepsAboutOneMinusPAndScales) {
  const int64_t n = 20000;
  const double p = 0.25;
  Arg ones = f32({n}, std::vector<double>(n, 1.0));
  auto run = [&](int64_t seed) {
    auto r = runOp<double>(OpKind::Dropout, {ones}, {{"p", p}, {"seed", seed}});
    EXPECT_TRUE(r) << r.error().message;
    return r ? (*r)[0].f : std::vector<double>{};
  };
  std::vector<double> a = run(42), b = run(42), c = run(43);
  ASSERT_EQ(static_cast<int64_t>(a.size()), n);
  EXPECT_EQ(a, b) << "same seed, same mask";
  EXPECT_NE(a, c) << "another seed, another mask";
  int64_t kept = 0;
  for (int64_t k = 0; k < n; ++k) {
    // Element k is kept iff uniform(seed, k) >= p, and then scaled by 1/(1-p).
    bool keep = rng::uniform(42, k) >= p;
    ASSERT_EQ(a[k], keep ? 1.0 / (1 - p) : 0.0) << "element " << k;
    kept += keep;
  }
  // Binomial(n, 0.75): std ~ 61 elements; 5 sigma is ~0.015 of n.
  EXPECT_NEAR(double(kept) / n, 1 - p, 0.015);
  // f32 mode keeps the same elements.
  auto r32 = runOp<float>(OpKind::Dropout, {ones}, {{"p", p}, {"seed", int64_t{42}}});
  ASSERT_TRUE(r32);
  for (int64_t k = 0; k < n; ++k)
    ASSERT_EQ((*r32)[0].f[k] != 0, a[k] != 0) << "element " << k;
}

// dropout(x, step) draws its mask from stream stepSeed(seed, step): step 0 is the stream of a
// dropout without one, another step another mask (the same for the same step), and a step that
// is not a scalar number is refused.
TEST(OpElementwise, DropoutStepDrawsTheStepsMask) {
  const int64_t n = 4096;
  const double p = 0.5;
  Arg ones = f32({n}, std::vector<double>(n, 1.0));
  auto run = [&](std::vector<Arg> args) {
    auto r = runOp<double>(OpKind::Dropout, std::move(args), {{"p", p}, {"seed", int64_t{42}}});
    EXPECT_TRUE(r) << r.error().message;
    return r ? (*r)[0].f : std::vector<double>{};
  };
  const std::vector<double> none = run({ones}), step0 = run({ones, f32({}, {0})}),
                            step3 = run({ones, f32({}, {3})}), again = run({ones, f32({}, {3})}),
                            step4 = run({ones, f32({}, {4})});
  EXPECT_EQ(step0, none);
  EXPECT_EQ(step3, again);
  EXPECT_NE(step3, step0);
  EXPECT_NE(step4, step3);
  for (int64_t k = 0; k < n; ++k)
    ASSERT_EQ(step3[k], rng::uniform(rng::stepSeed(42, 3), k) >= p ? 2.0 : 0.0) << k;
  EXPECT_EQ(inferError(OpKind::Dropout, {f32t({2}), f32t({2})}, {{"p", 0.5}, {"seed", int64_t{0}}}),
            "step is f32[2], expected a number (a scalar: the training step's count)");
}

// stop_gradient is the identity on values of every dtype; only autodiff treats it specially.
TEST(OpElementwise, StopGradientIsIdentity) {
  EXPECT_TRUE(refIs(OpKind::StopGradient, {f32({2, 2}, {1.5, -kInf, kNaN, 0})}, {}, f32t({2, 2}),
                    {1.5, -kInf, kNaN, 0}));
  EXPECT_TRUE(refIs(OpKind::StopGradient, {i64({2}, {-3, 1LL << 40})}, {}, T(DType::I64, {2}),
                    {-3, 0x1p40}));
  EXPECT_TRUE(refIs(OpKind::StopGradient, {boolean({2}, {1, 0})}, {}, T(DType::Bool, {2}), {1, 0}));
  EXPECT_EQ(opInfo(OpKind::StopGradient).differentiable, Differentiable::No);
  EXPECT_EQ(opInfo(OpKind::StopGradient).grad, nullptr);
}

// ---- Inference errors ----

TEST(OpElementwiseInfer, Errors) {
  EXPECT_EQ(inferError(OpKind::Add, {f32t({2}), T(DType::F64, {2})}),
            "operand dtypes differ: f32[2] vs f64[2] (insert a cast)");
  EXPECT_EQ(inferError(OpKind::Add, {f32t({2, 3}), f32t({4})}),
            "shapes [2,3] and [4] do not broadcast (dimension 1 from the right: 3 vs 4)");
  EXPECT_EQ(inferError(OpKind::Exp, {T(DType::I32, {2})}),
            "operand has dtype i32, expected a float dtype (f32, f64, bf16)");
  EXPECT_EQ(inferError(OpKind::Add, {T(DType::Bool, {2}), T(DType::Bool, {2})}),
            "operands have dtype bool, expected a numeric dtype (not bool)");
  EXPECT_EQ(inferError(OpKind::Pow, {T(DType::I64, {2}), T(DType::I64, {})}),
            "operands have dtype i64, expected a float dtype (f32, f64, bf16)");
  EXPECT_EQ(inferError(OpKind::Erf, {T(DType::I32, {2})}),
            "operand has dtype i32, expected a float dtype (f32, f64, bf16)");
  EXPECT_EQ(inferError(OpKind::LogicalNot, {f32t({2})}), "operand has dtype f32, expected bool");
  EXPECT_EQ(inferError(OpKind::Select, {f32t({2}), f32t({2}), f32t({2})}),
            "condition has dtype f32, expected bool");
  EXPECT_EQ(inferError(OpKind::Dropout, {f32t({2})}, {{"p", 1.0}, {"seed", int64_t{0}}}),
            "p = 1.0 is outside [0, 1)");
  EXPECT_EQ(inferError(OpKind::Neg, {f32t({2}), f32t({2})}), "expects 1 operand, got 2");
}

TEST(OpElementwiseInfer, ResultTypes) {
  EXPECT_EQ(inferOne(OpKind::Lt, {T(DType::I64, {3, 1}), T(DType::I64, {4})}),
            T(DType::Bool, {3, 4}));
  EXPECT_EQ(inferOne(OpKind::Cast, {f32t({2})}, {{"dtype", DType::BF16}}), T(DType::BF16, {2}));
  EXPECT_EQ(inferOne(OpKind::StopGradient, {T(DType::Bool, {2, 0})}), T(DType::Bool, {2, 0}));
  EXPECT_EQ(inferOne(OpKind::Erf, {T(DType::BF16, {3})}), T(DType::BF16, {3}));
  EXPECT_EQ(inferOne(OpKind::Select, {T(DType::Bool, {2, 1}), f32t({1, 3}), f32t({})}),
            f32t({2, 3}));
}

} // namespace
} // namespace kiln::ir::optest::ops_elementwise_test
