// Reference semantics and inference errors of the ops made from attributes alone: constant,
// iota and tri (ir/ops/constant.h), in f32 and f64.
#include <cstdint>

#include <gtest/gtest.h>

#include "ir/ops/constant.h"
#include "tests/ir/ops_test_util.h"

namespace kiln::ir::optest::ops_constant_test {
namespace {

using Ints = std::vector<int64_t>;

TEST(OpConstant, Constant) {
  EXPECT_TRUE(refIs(OpKind::Constant, {}, {{"value", 1.5}, {"shape", Ints{2, 2}}}, f32t({2, 2}),
                    {1.5, 1.5, 1.5, 1.5}));
  // Default shape [] (a scalar) and dtype f32.
  EXPECT_TRUE(refIs(OpKind::Constant, {}, {{"value", -kInf}}, f32t({}), {-kInf}));
  EXPECT_TRUE(refIs(OpKind::Constant, {}, {{"value", kNaN}, {"dtype", DType::F64}},
                    T(DType::F64, {}), {kNaN}));
  EXPECT_TRUE(refIs(OpKind::Constant, {},
                    {{"value", -3.0}, {"shape", Ints{3}}, {"dtype", DType::I64}},
                    T(DType::I64, {3}), {-3, -3, -3}));
  EXPECT_TRUE(refIs(OpKind::Constant, {}, {{"value", 2147483647.0}, {"dtype", DType::I32}},
                    T(DType::I32, {}), {2147483647}));
  EXPECT_TRUE(refIs(OpKind::Constant, {},
                    {{"value", 1.0}, {"shape", Ints{1, 2}}, {"dtype", DType::Bool}},
                    T(DType::Bool, {1, 2}), {1, 1}));
  EXPECT_TRUE(
      refIs(OpKind::Constant, {}, {{"value", 0.0}, {"shape", Ints{0, 4}}}, f32t({0, 4}), {}));
}

TEST(OpConstant, Iota) {
  EXPECT_TRUE(refIs(OpKind::Iota, {}, {{"shape", Ints{2, 3}}, {"axis", int64_t{1}}},
                    T(DType::I64, {2, 3}), {0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(refIs(OpKind::Iota, {},
                    {{"shape", Ints{2, 3}}, {"axis", int64_t{-2}}, {"dtype", DType::F32}},
                    f32t({2, 3}), {0, 0, 0, 1, 1, 1}));
  EXPECT_TRUE(refIs(OpKind::Iota, {},
                    {{"shape", Ints{4}}, {"axis", int64_t{0}}, {"dtype", DType::I32}},
                    T(DType::I32, {4}), {0, 1, 2, 3}));
}

TEST(OpConstant, Tri) {
  auto tri = [](std::vector<AttrInit> inits, Shape shape, std::vector<double> want,
                DType d = DType::Bool) {
    inits.push_back({"shape", shape});
    return refIs(OpKind::Tri, {}, inits, T(d, shape), want);
  };
  // Lower, diagonal 0: the causal mask (row r may attend to columns c <= r).
  EXPECT_TRUE(tri({}, {3, 3}, {1, 0, 0, 1, 1, 0, 1, 1, 1}));
  EXPECT_TRUE(tri({{"diagonal", int64_t{1}}}, {3, 3}, {1, 1, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_TRUE(tri({{"diagonal", int64_t{-1}}}, {3, 3}, {0, 0, 0, 1, 0, 0, 1, 1, 0}));
  // Upper: c - r >= diagonal.
  EXPECT_TRUE(tri({{"lower", false}}, {3, 3}, {1, 1, 1, 0, 1, 1, 0, 0, 1}));
  EXPECT_TRUE(
      tri({{"lower", false}, {"diagonal", int64_t{1}}}, {3, 3}, {0, 1, 1, 0, 0, 1, 0, 0, 0}));
  // Non-square, batched, float: the same [2,3] mask repeated over the batch.
  EXPECT_TRUE(
      tri({{"dtype", DType::F32}}, {2, 2, 3}, {1, 0, 0, 1, 1, 0, 1, 0, 0, 1, 1, 0}, DType::F32));
  EXPECT_TRUE(
      tri({{"dtype", DType::I64}, {"lower", false}}, {2, 3}, {1, 1, 1, 0, 1, 1}, DType::I64));
}

TEST(OpConstantInfer, Errors) {
  EXPECT_EQ(inferError(OpKind::Constant, {}, {{"value", 2.5}, {"dtype", DType::I32}}),
            "value 2.5 is not an integer that i32 can hold");
  EXPECT_EQ(inferError(OpKind::Constant, {}, {{"value", 3e9}, {"dtype", DType::I32}}),
            "value 3e+09 is not an integer that i32 can hold");
  EXPECT_EQ(inferError(OpKind::Constant, {}, {{"value", kNaN}, {"dtype", DType::I64}}),
            "value nan is not an integer that i64 can hold");
  EXPECT_EQ(inferError(OpKind::Constant, {}, {{"value", 2.0}, {"dtype", DType::Bool}}),
            "value 2.0 is not a bool (expected 0 or 1)");
  EXPECT_EQ(inferError(OpKind::Constant, {}, {{"value", 1.0}, {"shape", Ints{2, -1}}}),
            "shape [2,-1] has a negative dimension (-1 at index 1)");
  EXPECT_EQ(inferError(OpKind::Constant, {f32t({})}, {{"value", 1.0}}),
            "expects 0 operands, got 1");
  EXPECT_EQ(inferError(OpKind::Iota, {},
                       {{"shape", Ints{2}}, {"axis", int64_t{0}}, {"dtype", DType::Bool}}),
            "dtype bool is not allowed, expected an integer or float dtype");
  EXPECT_EQ(inferError(OpKind::Iota, {}, {{"shape", Ints{2, 3}}, {"axis", int64_t{2}}}),
            "axis 2 is out of range for rank 2 (shape [2,3])");
  EXPECT_EQ(inferError(OpKind::Iota, {}, {{"shape", Ints{}}, {"axis", int64_t{0}}}),
            "axis 0 is out of range for rank 0 (shape [])");
  EXPECT_EQ(inferError(OpKind::Iota, {}, {{"shape", Ints{-2}}, {"axis", int64_t{0}}}),
            "shape [-2] has a negative dimension (-2 at index 0)");
  EXPECT_EQ(
      inferError(OpKind::Iota, {},
                 {{"shape", Ints{int64_t{1} << 32}}, {"axis", int64_t{0}}, {"dtype", DType::I32}}),
      "shape [4294967296]: index 4294967295 along axis 0 does not fit in i32");
  EXPECT_EQ(inferError(OpKind::Tri, {}, {{"shape", Ints{4}}}),
            "shape [4] has rank 1, expected rank >= 2 (rows and columns last)");
  EXPECT_EQ(inferError(OpKind::Tri, {}, {{"shape", Ints{-4, 4}}}),
            "shape [-4,4] has a negative dimension (-4 at index 0)");
}

TEST(OpConstantInfer, ResultTypes) {
  EXPECT_EQ(
      inferOne(OpKind::Constant, {}, {{"value", 1.0}, {"dtype", DType::BF16}, {"shape", Ints{3}}}),
      T(DType::BF16, {3}));
  EXPECT_EQ(inferOne(OpKind::Tri, {}, {{"shape", Ints{1, 8, 8}}}), T(DType::Bool, {1, 8, 8}));
  EXPECT_EQ(inferOne(OpKind::Iota, {}, {{"shape", Ints{5}}, {"axis", int64_t{-1}}}),
            T(DType::I64, {5}));
}

} // namespace
} // namespace kiln::ir::optest::ops_constant_test
