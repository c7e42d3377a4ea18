// Reference semantics and inference errors of the reductions and softmax / log_softmax
// (ir/ops/reduce.h) against hand-computed values, in f32 and f64.
#include <cmath>
#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

#include "ir/ops/reduce.h"
#include "tests/ir/ops_test_util.h"

namespace kiln::ir::optest::ops_reduce_test {
namespace {

using Axes = std::vector<int64_t>;

// x[2,3] = [[1,2,3],[4,5,6]]
const Arg kX23 = f32({2, 3}, {1, 2, 3, 4, 5, 6});

TEST(OpReduce, ReduceSum) {
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {kX23}, {}, f32t({}), {21})); // empty axes: all
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {kX23}, {{"axes", Axes{0}}}, f32t({3}), {5, 7, 9}));
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {kX23}, {{"axes", Axes{-1}}, {"keepdims", true}},
                    f32t({2, 1}), {6, 15}));
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {kX23}, {{"axes", Axes{1, 0}}, {"keepdims", true}},
                    f32t({1, 1}), {21}));
  // x[i,j,k] = 6i + 2j + k over [2,3,2]; summing i and k leaves, for each j, 4 terms.
  std::vector<double> iota12;
  for (int k = 0; k < 12; ++k)
    iota12.push_back(k);
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {f64({2, 3, 2}, iota12)}, {{"axes", Axes{0, -1}}},
                    T(DType::F64, {3}), {14, 22, 30}));
  // A scalar reduces to itself; a size-1 dim; an empty axis sums to 0.
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {f32({}, {2.5})}, {}, f32t({}), {2.5}));
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {f32({1, 3}, {1, 2, 3})}, {{"axes", Axes{0}}}, f32t({3}),
                    {1, 2, 3}));
  EXPECT_TRUE(
      refIs(OpKind::ReduceSum, {f32({0, 3}, {})}, {{"axes", Axes{0}}}, f32t({3}), {0, 0, 0}));
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {f32({3}, {kInf, -kInf, 1})}, {}, f32t({}), {kNaN}));
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {f32({2}, {1, kNaN})}, {}, f32t({}), {kNaN}));
  // Integers are exact; an i32 sum wraps modulo 2^32 like the i32 it is.
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {i64({2, 2}, {1, 2, 3, 4})}, {{"axes", Axes{1}}},
                    T(DType::I64, {2}), {3, 7}));
  EXPECT_TRUE(refIs(OpKind::ReduceSum, {i32({2}, {2147483647, 1})}, {}, T(DType::I32, {}),
                    {-2147483648.0}));
}

TEST(OpReduce, ReduceMean) {
  EXPECT_TRUE(refIs(OpKind::ReduceMean, {kX23}, {}, f32t({}), {3.5}));
  EXPECT_TRUE(refIs(OpKind::ReduceMean, {kX23}, {{"axes", Axes{-1}}}, f32t({2}), {2, 5}));
  EXPECT_TRUE(refIs(OpKind::ReduceMean, {kX23}, {{"axes", Axes{0}}, {"keepdims", true}},
                    f32t({1, 3}), {2.5, 3.5, 4.5}));
  EXPECT_TRUE(refIs(OpKind::ReduceMean, {f64({3}, {1, 2, kInf})}, {}, T(DType::F64, {}), {kInf}));
  // The mean of nothing is 0/0 = NaN (torch.mean of an empty tensor).
  EXPECT_TRUE(refIs(OpKind::ReduceMean, {f32({0}, {})}, {}, f32t({}), {kNaN}));
}

TEST(OpReduce, ReduceMeanAccumulatesInF) {
  // 1e8 + 1 rounds back to 1e8 in float (spacing 8 there), so an f32-mode mean is 0; in f64 mode
  // the sum is exact and the mean is 1/3.
  Arg x = f32({3}, {1e8, 1, -1e8});
  auto r32 = runOp<float>(OpKind::ReduceMean, {x});
  auto r64 = runOp<double>(OpKind::ReduceMean, {x});
  ASSERT_TRUE(r32 && r64);
  EXPECT_EQ((*r32)[0].f[0], 0.0f);
  EXPECT_DOUBLE_EQ((*r64)[0].f[0], 1.0 / 3);
}

TEST(OpReduce, ReduceMax) {
  EXPECT_TRUE(refIs(OpKind::ReduceMax, {kX23}, {{"axes", Axes{1}}}, f32t({2}), {3, 6}));
  EXPECT_TRUE(refIs(OpKind::ReduceMax, {kX23}, {{"axes", Axes{-2}}, {"keepdims", true}},
                    f32t({1, 3}), {4, 5, 6}));
  // NaN propagates wherever it sits in the row (torch.amax); -inf is an ordinary value.
  EXPECT_TRUE(refIs(OpKind::ReduceMax, {f32({3, 3}, {kNaN, 1, 2, 1, kNaN, 2, -kInf, -kInf, -5})},
                    {{"axes", Axes{1}}}, f32t({3}), {kNaN, kNaN, -5}));
  EXPECT_TRUE(refIs(OpKind::ReduceMax, {i32({2, 2}, {-7, -3, 4, -9})}, {{"axes", Axes{1}}},
                    T(DType::I32, {2}), {-3, 4}));
  // An empty reduction gives max's identity, the lowest value of the dtype.
  EXPECT_TRUE(
      refIs(OpKind::ReduceMax, {f32({2, 0}, {})}, {{"axes", Axes{1}}}, f32t({2}), {-kInf, -kInf}));
  EXPECT_TRUE(refIs(OpKind::ReduceMax, {i64({0}, {})}, {}, T(DType::I64, {}),
                    {double(std::numeric_limits<int64_t>::min())}));
}

TEST(OpReduce, Softmax) {
  EXPECT_TRUE(refIs(
      OpKind::Softmax, {f32({2, 3}, {1, 2, 3, 0, 0, 0})}, {}, f32t({2, 3}),
      {0.09003057317038046, 0.24472847105479764, 0.6652409557748218, 1. / 3, 1. / 3, 1. / 3}));
  // axis 0 of [[0, 0], [ln 3, 0]]: columns [1/4, 3/4] and [1/2, 1/2].
  EXPECT_TRUE(refIs(OpKind::Softmax, {f64({2, 2}, {0, 0, std::log(3.0), 0})},
                    {{"axis", int64_t{0}}}, T(DType::F64, {2, 2}), {0.25, 0.5, 0.75, 0.5}));
  // Large values do not overflow; a -inf logit gets probability 0.
  EXPECT_TRUE(refIs(OpKind::Softmax, {f32({2, 2}, {1000, 1000, -kInf, 0})}, {}, f32t({2, 2}),
                    {0.5, 0.5, 0, 1}));
  // An all -inf row (fully masked) is zeros, not PyTorch's NaN; as in PyTorch, a +inf logit or
  // a NaN makes its row NaN.
  EXPECT_TRUE(refIs(OpKind::Softmax, {f32({3, 2}, {-kInf, -kInf, kInf, 1, kNaN, 1})}, {},
                    f32t({3, 2}), {0, 0, kNaN, kNaN, kNaN, kNaN}));
  // Only the all -inf row is zeros; the others are unaffected, in f32 and f64.
  EXPECT_TRUE(refIs(OpKind::Softmax, {f32({2, 2}, {-kInf, -kInf, 0, 0})}, {}, f32t({2, 2}),
                    {0, 0, 0.5, 0.5}));
  EXPECT_TRUE(refIs(OpKind::Softmax, {f64({2, 3}, {-kInf, -kInf, -kInf, -1e300, -1e300, 0})}, {},
                    T(DType::F64, {2, 3}), {0, 0, 0, 0, 0, 1}));
  // Size-1 axis: every element is 1. Empty tensors, whether or not the axis is the empty one.
  EXPECT_TRUE(refIs(OpKind::Softmax, {f32({2, 1}, {-3, 7})}, {}, f32t({2, 1}), {1, 1}));
  EXPECT_TRUE(refIs(OpKind::Softmax, {f32({3, 0}, {})}, {{"axis", int64_t{0}}}, f32t({3, 0}), {}));
  EXPECT_TRUE(refIs(OpKind::LogSoftmax, {f32({3, 0}, {})}, {}, f32t({3, 0}), {}));
}

TEST(OpReduce, LogSoftmax) {
  const double ln2 = 0.6931471805599453;
  EXPECT_TRUE(refIs(OpKind::LogSoftmax, {f32({1, 3}, {1, 2, 3})}, {{"axis", int64_t{-1}}},
                    f32t({1, 3}), {-2.4076059644443806, -1.4076059644443804, -0.4076059644443804}));
  // Axis 0 of [2,2] = [[0, 5], [0, 5]]: log(1/2) everywhere.
  EXPECT_TRUE(refIs(OpKind::LogSoftmax, {f64({2, 2}, {0, 5, 0, 5})}, {{"axis", int64_t{0}}},
                    T(DType::F64, {2, 2}), {-ln2, -ln2, -ln2, -ln2}));
  EXPECT_TRUE(refIs(OpKind::LogSoftmax, {f32({3, 2}, {1000, 1000, -kInf, 0, -kInf, -kInf})}, {},
                    f32t({3, 2}), {-ln2, -ln2, -kInf, 0, kNaN, kNaN}));
}

TEST(OpReduceInfer, ResultTypes) {
  EXPECT_EQ(inferOne(OpKind::ReduceSum, {f32t({2, 3, 4})}, {{"axes", Axes{-1, 0}}}), f32t({3}));
  EXPECT_EQ(inferOne(OpKind::ReduceMax, {T(DType::I32, {2, 3, 4})},
                     {{"axes", Axes{1}}, {"keepdims", true}}),
            T(DType::I32, {2, 1, 4}));
  EXPECT_EQ(inferOne(OpKind::ReduceMean, {T(DType::BF16, {2, 3})}, {{"keepdims", true}}),
            T(DType::BF16, {1, 1}));
  EXPECT_EQ(inferOne(OpKind::ReduceSum, {f32t({})}), f32t({}));
  EXPECT_EQ(inferOne(OpKind::Softmax, {f32t({2, 3})}, {{"axis", int64_t{-2}}}), f32t({2, 3}));
}

TEST(OpReduceInfer, Errors) {
  EXPECT_EQ(inferError(OpKind::ReduceSum, {f32t({2, 3})}, {{"axes", Axes{2}}}),
            "axes [2]: axis 2 is out of range for rank 2 (operand f32[2,3])");
  EXPECT_EQ(inferError(OpKind::ReduceMax, {f32t({2, 3})}, {{"axes", Axes{-3}}}),
            "axes [-3]: axis -3 is out of range for rank 2 (operand f32[2,3])");
  EXPECT_EQ(inferError(OpKind::ReduceSum, {f32t({2, 3})}, {{"axes", Axes{1, -1}}}),
            "axes [1,-1] name axis 1 more than once (operand f32[2,3])");
  EXPECT_EQ(inferError(OpKind::ReduceSum, {f32t({})}, {{"axes", Axes{0}}}),
            "axes [0]: axis 0 is out of range for rank 0 (operand f32[])");
  EXPECT_EQ(inferError(OpKind::ReduceSum, {T(DType::Bool, {2})}),
            "operand has dtype bool, expected a numeric dtype (cast it first)");
  EXPECT_EQ(inferError(OpKind::ReduceMean, {T(DType::I32, {2})}),
            "operand has dtype i32, expected a float dtype (f32, f64, bf16)");
  EXPECT_EQ(inferError(OpKind::Softmax, {f32t({2, 3})}, {{"axis", int64_t{2}}}),
            "axis 2 is out of range for rank 2 (operand f32[2,3])");
  EXPECT_EQ(inferError(OpKind::LogSoftmax, {f32t({})}),
            "axis -1 is out of range for rank 0 (operand f32[])");
  EXPECT_EQ(inferError(OpKind::LogSoftmax, {T(DType::I64, {4})}),
            "operand has dtype i64, expected a float dtype (f32, f64, bf16)");
}

} // namespace
} // namespace kiln::ir::optest::ops_reduce_test
