// Reference semantics and inference errors of matmul (ir/ops/matmul.h) and the data-movement
// ops (ir/ops/shape.h, pad and scatter_add included) against hand-computed values, in f32 and f64.
#include <cmath>
#include <cstdint>

#include <gtest/gtest.h>

#include "ir/ops/matmul.h"
#include "ir/ops/shape.h"
#include "tests/ir/ops_test_util.h"

namespace kiln::ir::optest::ops_matmul_shape_test {
namespace {

using Ints = std::vector<int64_t>;
AttrInit i(std::string_view name, int64_t v) {
  return {name, v};
}

// ---- matmul ----

// [[1,2,3],[4,5,6]] @ [[7,8],[9,10],[11,12]] = [[58,64],[139,154]], stored plainly or transposed.
const std::vector<double> kAB = {58, 64, 139, 154};
const Arg kA = f32({2, 3}, {1, 2, 3, 4, 5, 6}), kAT = f32({3, 2}, {1, 4, 2, 5, 3, 6});
const Arg kB = f32({3, 2}, {7, 8, 9, 10, 11, 12}), kBT = f32({2, 3}, {7, 9, 11, 8, 10, 12});

TEST(OpMatmul, Plain) {
  EXPECT_TRUE(refIs(OpKind::Matmul, {kA, kB}, {}, f32t({2, 2}), kAB));
}

TEST(OpMatmul, Transposed) {
  EXPECT_TRUE(refIs(OpKind::Matmul, {kAT, kB}, {{"transpose_a", true}}, f32t({2, 2}), kAB));
  EXPECT_TRUE(refIs(OpKind::Matmul, {kA, kBT}, {{"transpose_b", true}}, f32t({2, 2}), kAB));
  EXPECT_TRUE(refIs(OpKind::Matmul, {kAT, kBT}, {{"transpose_a", true}, {"transpose_b", true}},
                    f32t({2, 2}), kAB));
}

TEST(OpMatmul, BatchBroadcastTransposed) {
  // a [2,1 | 1,2] rows [1,2], [3,4]; b [3 | 1,2] stored transposed: columns [1,0], [0,1], [1,1].
  // Batch [2,1] x [3] -> [2,3]; y[i,j] = a_i . b_j.
  EXPECT_TRUE(refIs(OpKind::Matmul,
                    {f32({2, 1, 1, 2}, {1, 2, 3, 4}), f32({3, 1, 2}, {1, 0, 0, 1, 1, 1})},
                    {{"transpose_b", true}}, f32t({2, 3, 1, 1}), {1, 2, 3, 3, 4, 7}));
  // a [2 | 2,2] transposed against an unbatched b [2,2]: A0^T B, A1^T B.
  EXPECT_TRUE(
      refIs(OpKind::Matmul, {f64({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), f64({2, 2}, {1, 2, 3, -1})},
            {{"transpose_a", true}}, T(DType::F64, {2, 2, 2}), {6, -2, 10, -1, 22, 2, 26, 3}));
}

TEST(OpMatmul, EdgeCases) {
  // K = 0: an empty sum is 0. inf * 0 = NaN.
  EXPECT_TRUE(refIs(OpKind::Matmul, {f32({2, 0}, {}), f32({0, 3}, {})}, {}, f32t({2, 3}),
                    {0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(refIs(OpKind::Matmul, {f32({1, 2}, {kInf, 1}), f32({2, 2}, {0, 1, 1, 1})}, {},
                    f32t({1, 2}), {kNaN, kInf}));
}

TEST(OpMatmulInfer, ResultTypes) {
  EXPECT_EQ(inferOne(OpKind::Matmul, {f32t({4, 1, 3, 5}), f32t({2, 5, 6})}), f32t({4, 2, 3, 6}));
  EXPECT_EQ(inferOne(OpKind::Matmul, {f32t({8, 16}), f32t({32, 16})}, {{"transpose_b", true}}),
            f32t({8, 32}));
  // bf16 products: each operand stored in f32 or bf16 (a weight, passes/bf16_weights.cc; an
  // activation, passes/bf16_activations.cc), f32 sums.
  const std::vector<AttrInit> products = {{"transpose_b", true}, {"bf16_products", true}};
  EXPECT_EQ(inferOne(OpKind::Matmul, {f32t({8, 16}), T(DType::BF16, {32, 16})}, products),
            f32t({8, 32}));
  EXPECT_EQ(inferOne(OpKind::Matmul, {T(DType::BF16, {8, 16}), f32t({32, 16})}, products),
            f32t({8, 32}));
  EXPECT_EQ(inferOne(OpKind::Matmul, {T(DType::BF16, {8, 16}), T(DType::BF16, {32, 16})}, products),
            f32t({8, 32}));
  EXPECT_EQ(inferOne(OpKind::Matmul, {T(DType::BF16, {8, 16}), T(DType::BF16, {32, 16})},
                     {{"transpose_b", true}}),
            T(DType::BF16, {8, 32}));
}

TEST(OpMatmulInfer, Errors) {
  EXPECT_EQ(inferError(OpKind::Matmul, {f32t({2, 3, 4}), f32t({5, 6})}),
            "inner dimensions differ: [2,3,4] x [5,6] (4 vs 5)");
  EXPECT_EQ(inferError(OpKind::Matmul, {f32t({2, 4, 3}), f32t({5, 6})}, {{"transpose_a", true}}),
            "inner dimensions differ: [2,4,3]^T x [5,6] (4 vs 5)");
  EXPECT_EQ(inferError(OpKind::Matmul, {f32t({3}), f32t({3, 2})}),
            "operands must have rank >= 2 (a vector is a [1, K] or [K, 1] matrix): [3] x [3,2]");
  EXPECT_EQ(inferError(OpKind::Matmul, {T(DType::I32, {2, 2}), T(DType::I32, {2, 2})}),
            "operand has dtype i32, expected a float dtype (f32, f64, bf16): [2,2] x [2,2]");
  const std::string differ = " (insert a cast; with bf16_products each may be f32 or bf16)";
  EXPECT_EQ(inferError(OpKind::Matmul, {f32t({2, 2}), T(DType::F64, {2, 2})}),
            "operand dtypes differ: f32[2,2] x f64[2,2]" + differ);
  EXPECT_EQ(inferError(OpKind::Matmul, {f32t({2, 2}), T(DType::BF16, {2, 2})}),
            "operand dtypes differ: f32[2,2] x bf16[2,2]" + differ);
  EXPECT_EQ(inferError(OpKind::Matmul, {T(DType::F64, {2, 2}), T(DType::BF16, {2, 2})},
                       {{"bf16_products", true}}),
            "operand dtypes differ: f64[2,2] x bf16[2,2]" + differ);
  EXPECT_EQ(inferError(OpKind::Matmul, {f32t({2, 3, 4}), f32t({5, 4, 6})}),
            "batch dimensions do not broadcast: [2,3,4] x [5,4,6] ([2] vs [5])");
}

// ---- reshape, transpose, broadcast ----

TEST(OpShape, Reshape) {
  EXPECT_TRUE(refIs(OpKind::Reshape, {f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {{"shape", Ints{3, 2}}},
                    f32t({3, 2}), {1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(refIs(OpKind::Reshape, {f32({}, {7})}, {{"shape", Ints{1, 1}}}, f32t({1, 1}), {7}));
  EXPECT_TRUE(refIs(OpKind::Reshape, {i64({2, 2}, {1, -2, 3, 4})}, {{"shape", Ints{4}}},
                    T(DType::I64, {4}), {1, -2, 3, 4}));
}

TEST(OpShape, Transpose) {
  EXPECT_TRUE(refIs(OpKind::Transpose, {f32({2, 3}, {1, 2, 3, 4, 5, 6})}, {{"perm", Ints{1, 0}}},
                    f32t({3, 2}), {1, 4, 2, 5, 3, 6}));
  // x[a,b,c] = 6a + 2b + c over [2,3,2]; perm [2,0,1]: y[i,j,k] = x[j,k,i] = 6j + 2k + i.
  std::vector<double> iota12;
  for (int k = 0; k < 12; ++k)
    iota12.push_back(k);
  EXPECT_TRUE(refIs(OpKind::Transpose, {i32({2, 3, 2}, iota12)}, {{"perm", Ints{2, 0, 1}}},
                    T(DType::I32, {2, 2, 3}), {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11}));
  EXPECT_TRUE(refIs(OpKind::Transpose, {f64({}, {3})}, {{"perm", Ints{}}}, T(DType::F64, {}), {3}));
}

TEST(OpShape, Broadcast) {
  EXPECT_TRUE(refIs(OpKind::Broadcast, {f32({3}, {1, 2, 3})}, {{"shape", Ints{2, 3}}}, f32t({2, 3}),
                    {1, 2, 3, 1, 2, 3}));
  EXPECT_TRUE(refIs(OpKind::Broadcast, {f32({2, 1}, {1, 2})}, {{"shape", Ints{2, 3}}}, f32t({2, 3}),
                    {1, 1, 1, 2, 2, 2}));
  EXPECT_TRUE(refIs(OpKind::Broadcast, {boolean({}, {1})}, {{"shape", Ints{2}}},
                    T(DType::Bool, {2}), {1, 1}));
  EXPECT_TRUE(refIs(OpKind::Broadcast, {f32({1}, {kNaN})}, {{"shape", Ints{0}}}, f32t({0}), {}));
}

TEST(OpShapeInfer, ReshapeTransposeBroadcastErrors) {
  EXPECT_EQ(inferError(OpKind::Reshape, {f32t({2, 3})}, {{"shape", Ints{4, 2}}}),
            "cannot reshape [2,3] (6 elements) to [4,2] (8 elements)");
  EXPECT_EQ(inferError(OpKind::Reshape, {f32t({2, 3})}, {{"shape", Ints{-1, 6}}}),
            "shape [-1,6] has a negative dimension (-1 at index 0)");
  EXPECT_EQ(
      inferError(OpKind::Transpose, {f32t({2, 3})}, {{"perm", Ints{0}}}),
      "perm [0] has 1 entries for operand [2,3] of rank 2; expected a permutation of 0..rank-1");
  EXPECT_EQ(inferError(OpKind::Transpose, {f32t({2, 3})}, {{"perm", Ints{0, 2}}}),
            "perm [0,2] has entry 2 outside [0, 2); expected a permutation of 0..rank-1");
  EXPECT_EQ(inferError(OpKind::Transpose, {f32t({2, 3})}, {{"perm", Ints{-1, 0}}}),
            "perm [-1,0] has entry -1 outside [0, 2); expected a permutation of 0..rank-1");
  EXPECT_EQ(inferError(OpKind::Transpose, {f32t({2, 3})}, {{"perm", Ints{1, 1}}}),
            "perm [1,1] names dimension 1 twice; expected a permutation of 0..rank-1");
  EXPECT_EQ(inferError(OpKind::Broadcast, {f32t({2, 3})}, {{"shape", Ints{3}}}),
            "cannot broadcast [2,3] to [3]: the target's rank 1 is less than the operand's 2");
  EXPECT_EQ(inferError(OpKind::Broadcast, {f32t({2, 3})}, {{"shape", Ints{5, 2, 4}}}),
            "cannot broadcast [2,3] to [5,2,4]: operand dimension 1 is 3, expected 4 or 1");
  EXPECT_EQ(inferError(OpKind::Broadcast, {f32t({1})}, {{"shape", Ints{2, -3}}}),
            "shape [2,-3] has a negative dimension (-3 at index 1)");
  EXPECT_EQ(inferOne(OpKind::Broadcast, {T(DType::I64, {3, 1})}, {{"shape", Ints{2, 3, 4}}}),
            T(DType::I64, {2, 3, 4}));
}

// ---- slice, concat, gather ----

TEST(OpShape, Slice) {
  // [2,5] columns 1:5:2 -> columns 1 and 3.
  const Arg x = f32({2, 5}, {0, 1, 2, 3, 4, 10, 11, 12, 13, 14});
  EXPECT_TRUE(refIs(OpKind::Slice, {x}, {i("axis", 1), i("start", 1), i("end", 5), i("step", 2)},
                    f32t({2, 2}), {1, 3, 11, 13}));
  // ceil((5 - 0) / 3) = 2 elements: 0 and 3.
  EXPECT_TRUE(refIs(OpKind::Slice, {x}, {i("axis", -1), i("start", 0), i("end", 5), i("step", 3)},
                    f32t({2, 2}), {0, 3, 10, 13}));
  EXPECT_TRUE(refIs(OpKind::Slice, {x}, {i("axis", -2), i("start", 1), i("end", 2)}, f32t({1, 5}),
                    {10, 11, 12, 13, 14}));
  EXPECT_TRUE(
      refIs(OpKind::Slice, {x}, {i("axis", 1), i("start", 5), i("end", 5)}, f32t({2, 0}), {}));
  EXPECT_TRUE(refIs(OpKind::Slice, {i64({4}, {5, 6, 7, 8})},
                    {i("axis", 0), i("start", 1), i("end", 3)}, T(DType::I64, {2}), {6, 7}));
}

TEST(OpShape, ConcatThreeWay) {
  // Along axis 1: [2,1] + [2,2] + [2,1] -> [2,4].
  std::vector<Arg> xs = {f32({2, 1}, {1, 2}), f32({2, 2}, {3, 4, 5, 6}), f32({2, 1}, {7, 8})};
  EXPECT_TRUE(refIs(OpKind::Concat, xs, {i("axis", 1)}, f32t({2, 4}), {1, 3, 4, 7, 2, 5, 6, 8}));
  EXPECT_TRUE(refIs(OpKind::Concat, xs, {i("axis", -1)}, f32t({2, 4}), {1, 3, 4, 7, 2, 5, 6, 8}));
  // Along axis 0, with an empty operand in the middle.
  EXPECT_TRUE(refIs(OpKind::Concat,
                    {i64({1, 2}, {1, 2}), i64({0, 2}, {}), i64({2, 2}, {3, 4, 5, 6})},
                    {i("axis", 0)}, T(DType::I64, {3, 2}), {1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(refIs(OpKind::Concat, {f32({2}, {1, 2})}, {i("axis", 0)}, f32t({2}), {1, 2}));
}

TEST(OpShape, Gather) {
  // Embedding lookup (axis 0): table [3,2], indices [2,2] -> [2,2,2].
  EXPECT_TRUE(refIs(OpKind::Gather, {f32({3, 2}, {1, 2, 3, 4, 5, 6}), i64({2, 2}, {2, 0, 1, 1})},
                    {}, f32t({2, 2, 2}), {5, 6, 1, 2, 3, 4, 3, 4}));
  // Axis 1: table [2,3], indices [2] -> [2,2]: out[p, i] = table[p, indices[i]].
  const Arg table = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(
      refIs(OpKind::Gather, {table, i32({2}, {2, 0})}, {i("axis", 1)}, f32t({2, 2}), {3, 1, 6, 4}));
  EXPECT_TRUE(refIs(OpKind::Gather, {table, i32({2}, {2, 0})}, {i("axis", -1)}, f32t({2, 2}),
                    {3, 1, 6, 4}));
  // A scalar index removes the axis.
  EXPECT_TRUE(refIs(OpKind::Gather, {table, i64({}, {1})}, {}, f32t({3}), {4, 5, 6}));
  // Integer table, indices of rank 2 on a middle axis: [1,3,2] x [1,2] -> [1,1,2,2].
  EXPECT_TRUE(refIs(OpKind::Gather, {i64({1, 3, 2}, {0, 1, 2, 3, 4, 5}), i64({1, 2}, {2, 1})},
                    {i("axis", 1)}, T(DType::I64, {1, 1, 2, 2}), {4, 5, 2, 3}));
}

TEST(OpShape, GatherIndexOutOfRange) {
  const Arg table = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(refError(OpKind::Gather, {table, i64({2}, {0, 3})}, {i("axis", 1)}),
            "index 3 at position [1] of indices [2] is outside [0, 3) (axis 1 of table [2,3])");
  EXPECT_EQ(
      refError(OpKind::Gather, {table, i64({1, 2}, {-1, 0})}),
      "index -1 at position [0,0] of indices [1,2] is outside [0, 2) (axis 0 of table [2,3])");
  // Checked even when the output is empty.
  EXPECT_EQ(refError(OpKind::Gather, {f32({2, 0}, {}), i64({1}, {5})}),
            "index 5 at position [0] of indices [1] is outside [0, 2) (axis 0 of table [2,0])");
}

TEST(OpShape, Pad) {
  // [2,3] along axis 1: one -1 before, two after, one between: 1 + 3 + 2 + 2 = 8 columns.
  const Arg x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(refIs(OpKind::Pad, {x},
                    {i("axis", 1), i("low", 1), i("high", 2), i("interior", 1), {"value", -1.0}},
                    f32t({2, 8}), {-1, 1, -1, 2, -1, 3, -1, -1, -1, 4, -1, 5, -1, 6, -1, -1}));
  // Axis -2, default interior and value (0): a zero row after.
  EXPECT_TRUE(refIs(OpKind::Pad, {x}, {i("axis", -2), i("low", 0), i("high", 1)}, f32t({3, 3}),
                    {1, 2, 3, 4, 5, 6, 0, 0, 0}));
  // An empty axis pads to low + high elements of `value` (interior has nothing to go between).
  EXPECT_TRUE(refIs(OpKind::Pad, {f32({2, 0}, {})},
                    {i("axis", 1), i("low", 1), i("high", 2), i("interior", 5), {"value", 7.0}},
                    f32t({2, 3}), {7, 7, 7, 7, 7, 7}));
  // Integer and bool operands, with an integer / bool fill value.
  EXPECT_TRUE(refIs(OpKind::Pad, {i64({3}, {1, 2, 3})},
                    {i("axis", 0), i("low", 0), i("high", 0), i("interior", 2), {"value", 9.0}},
                    T(DType::I64, {7}), {1, 9, 9, 2, 9, 9, 3}));
  EXPECT_TRUE(refIs(OpKind::Pad, {boolean({2}, {1, 1})}, {i("axis", 0), i("low", 1), i("high", 0)},
                    T(DType::Bool, {3}), {0, 1, 1}));
}

TEST(OpShape, ScatterAdd) {
  // Axis 0 (the transpose of an embedding lookup): repeated index 2 adds both rows.
  EXPECT_TRUE(refIs(OpKind::ScatterAdd, {i64({3}, {2, 0, 2}), f32({3, 2}, {1, 2, 3, 4, 5, 6})},
                    {i("size", 4)}, f32t({4, 2}), {3, 4, 0, 0, 6, 8, 0, 0}));
  // Axis 1 with rank-2 indices: updates [2 | 2,2] -> [2, 3]; out[p, indices[i]] += updates[p, i].
  EXPECT_TRUE(refIs(OpKind::ScatterAdd,
                    {i32({2, 2}, {1, 1, 0, 2}), f64({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})},
                    {i("axis", 1), i("size", 3)}, T(DType::F64, {2, 3}), {3, 3, 4, 7, 11, 8}));
  EXPECT_TRUE(refIs(OpKind::ScatterAdd,
                    {i32({2, 2}, {1, 1, 0, 2}), f64({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})},
                    {i("axis", -1), i("size", 3)}, T(DType::F64, {2, 3}), {3, 3, 4, 7, 11, 8}));
  // A scalar index adds a new axis: updates [3] land in row 1 of [2,3].
  EXPECT_TRUE(refIs(OpKind::ScatterAdd, {i64({}, {1}), f32({3}, {1, 2, 3})}, {i("size", 2)},
                    f32t({2, 3}), {0, 0, 0, 1, 2, 3}));
  // Integer sums wrap like a cast to i32 would: (2^31 - 1) + 1 = -2^31.
  EXPECT_TRUE(refIs(OpKind::ScatterAdd, {i64({2}, {0, 0}), i32({2}, {2147483647, 1})},
                    {i("size", 1)}, T(DType::I32, {1}), {-2147483648.0}));
  // Nothing to add: zeros.
  EXPECT_TRUE(refIs(OpKind::ScatterAdd, {i64({0}, {}), f32({0, 2}, {})}, {i("size", 2)},
                    f32t({2, 2}), {0, 0, 0, 0}));
  // Into a base: named rows 0 and 2 are base + their sums, rows 1 and 3 the base as it is (its -0
  // stays -0, where add(base, scatter_add(...)) would give +0).
  EXPECT_TRUE(refIs(OpKind::ScatterAdd,
                    {i64({3}, {2, 0, 2}), f32({3, 2}, {1, 2, 3, 4, 5, 6}),
                     f32({4, 2}, {10, 20, -0.0, 30, 40, 50, 60, 70})},
                    {i("size", 4)}, f32t({4, 2}), {13, 24, -0.0, 30, 46, 58, 60, 70}));
  auto signed0 =
      runOp<float>(OpKind::ScatterAdd, {i64({1}, {0}), f32({1, 1}, {1}), f32({2, 1}, {5, -0.0})},
                   {i("size", 2)});
  ASSERT_TRUE(signed0);
  EXPECT_TRUE(std::signbit((*signed0)[0].get(1))); // closeTo does not tell -0 from +0
  EXPECT_TRUE(refIs(
      OpKind::ScatterAdd,
      {i64({2}, {1, 1}), i32({2, 3}, {1, 2, 3, 4, 5, 6}), i32({3, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8})},
      {i("size", 3)}, T(DType::I32, {3, 3}), {0, 1, 2, 8, 11, 14, 6, 7, 8}));
}

TEST(OpShape, ScatterAddIndexOutOfRange) {
  const Arg updates = f32({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(
      refError(OpKind::ScatterAdd, {i64({2}, {0, 4}), updates}, {i("size", 4)}),
      "index 4 at position [1] of indices [2] is outside [0, 4) (axis 0 of the result [4,2])");
  EXPECT_EQ(
      refError(OpKind::ScatterAdd, {i64({2}, {-1, 0}), updates}, {i("axis", 1), i("size", 3)}),
      "index -1 at position [0] of indices [2] is outside [0, 3) (axis 1 of the result [2,3])");
  // Checked even when there is nothing to add.
  EXPECT_EQ(
      refError(OpKind::ScatterAdd, {i64({1}, {2}), f32({1, 0}, {})}, {i("size", 2)}),
      "index 2 at position [0] of indices [1] is outside [0, 2) (axis 0 of the result [2,0])");
}

TEST(OpShapeInfer, PadScatterAddErrors) {
  EXPECT_EQ(inferError(OpKind::Pad, {f32t({2, 3})}, {i("axis", 0), i("low", -1), i("high", 0)}),
            "low = -1, high = 0, interior = 0: expected each >= 0");
  EXPECT_EQ(inferError(OpKind::Pad, {f32t({2, 3})},
                       {i("axis", 0), i("low", 0), i("high", 0), i("interior", -2)}),
            "low = 0, high = 0, interior = -2: expected each >= 0");
  EXPECT_EQ(inferError(OpKind::Pad, {f32t({2, 3})}, {i("axis", 2), i("low", 0), i("high", 0)}),
            "axis 2 is out of range for rank 2 (operand [2,3])");
  EXPECT_EQ(inferError(OpKind::Pad, {T(DType::I64, {3})},
                       {i("axis", 0), i("low", 1), i("high", 0), {"value", 0.5}}),
            "value 0.5 is not an integer that i64 can hold (operand i64[3])");
  EXPECT_EQ(inferError(OpKind::Pad, {T(DType::Bool, {3})},
                       {i("axis", 0), i("low", 1), i("high", 0), {"value", 2.0}}),
            "value 2.0 is not a bool (expected 0 or 1) (operand bool[3])");
  EXPECT_EQ(inferOne(OpKind::Pad, {T(DType::BF16, {4, 5})},
                     {i("axis", 1), i("low", 2), i("high", 3), i("interior", 4), {"value", -1e9}}),
            T(DType::BF16, {4, 2 + 5 + 4 * 4 + 3}));

  const Type idx = T(DType::I64, {3});
  EXPECT_EQ(inferError(OpKind::ScatterAdd, {f32t({3}), f32t({3, 2})}, {i("size", 4)}),
            "indices have dtype f32, expected i32 or i64");
  EXPECT_EQ(inferError(OpKind::ScatterAdd, {idx, T(DType::Bool, {3})}, {i("size", 4)}),
            "updates have dtype bool, expected a numeric dtype (cast them first)");
  EXPECT_EQ(inferError(OpKind::ScatterAdd, {idx, f32t({3})}, {i("size", -1)}),
            "size -1 is negative");
  EXPECT_EQ(inferError(OpKind::ScatterAdd, {T(DType::I64, {2, 3}), f32t({6})}, {i("size", 4)}),
            "updates [6] have rank 1, less than the rank 2 of indices [2,3]");
  EXPECT_EQ(inferError(OpKind::ScatterAdd, {idx, f32t({2, 3})}, {i("axis", 2), i("size", 4)}),
            "axis 2 is out of range for rank 2 (result of updates [2,3] scattered by indices [3])");
  EXPECT_EQ(inferError(OpKind::ScatterAdd, {idx, f32t({2, 3})}, {i("size", 4)}),
            "updates [2,3] have [2] at axis 0, expected the indices shape [3]");
  EXPECT_EQ(inferError(OpKind::ScatterAdd, {idx, f32t({3, 2}), f32t({4, 3})}, {i("size", 4)}),
            "base f32[4,3] does not match the result f32[4,2]: expected the same type");
  EXPECT_EQ(
      inferError(OpKind::ScatterAdd, {idx, f32t({3, 2}), T(DType::F64, {4, 2})}, {i("size", 4)}),
      "base f64[4,2] does not match the result f32[4,2]: expected the same type");
  // The exact inverse of gather's shape rule: [2,3,4] gathered by [5,6] on axis 1 is [2,5,6,4].
  EXPECT_EQ(inferOne(OpKind::ScatterAdd, {T(DType::I32, {5, 6}), T(DType::BF16, {2, 5, 6, 4})},
                     {i("axis", 1), i("size", 3)}),
            T(DType::BF16, {2, 3, 4}));
  EXPECT_EQ(inferOne(OpKind::ScatterAdd, {T(DType::I32, {}), T(DType::I64, {7})}, {i("size", 0)}),
            T(DType::I64, {0, 7}));
}

TEST(OpShapeInfer, SliceConcatGatherErrors) {
  const Type x = f32t({2, 5});
  EXPECT_EQ(inferError(OpKind::Slice, {x}, {i("axis", 1), i("start", 3), i("end", 2)}),
            "slice [3:2] of axis 1 (size 5) of [2,5]: expected 0 <= start <= end <= 5");
  EXPECT_EQ(inferError(OpKind::Slice, {x}, {i("axis", 1), i("start", 0), i("end", 6)}),
            "slice [0:6] of axis 1 (size 5) of [2,5]: expected 0 <= start <= end <= 5");
  EXPECT_EQ(inferError(OpKind::Slice, {x}, {i("axis", 0), i("start", -1), i("end", 1)}),
            "slice [-1:1] of axis 0 (size 2) of [2,5]: expected 0 <= start <= end <= 2");
  EXPECT_EQ(
      inferError(OpKind::Slice, {x}, {i("axis", 0), i("start", 0), i("end", 1), i("step", 0)}),
      "step 0 is not positive");
  EXPECT_EQ(inferError(OpKind::Slice, {x}, {i("axis", 2), i("start", 0), i("end", 1)}),
            "axis 2 is out of range for rank 2 (operand [2,5])");
  EXPECT_EQ(inferError(OpKind::Concat, {f32t({2, 3}), f32t({2, 3, 1})}, {i("axis", 0)}),
            "operand 1 is [2,3,1], operand 0 is [2,3]: ranks differ");
  EXPECT_EQ(inferError(OpKind::Concat, {f32t({2, 3}), f32t({2, 3}), T(DType::F64, {2, 3})},
                       {i("axis", 0)}),
            "operand 2 is f64[2,3], operand 0 is f32[2,3]: dtypes differ (insert a cast)");
  EXPECT_EQ(inferError(OpKind::Concat, {f32t({2, 3}), f32t({3, 4})}, {i("axis", 0)}),
            "operand 1 is [3,4], operand 0 is [2,3]: dimension 1 differs (4 vs 3); only the concat "
            "axis 0 may");
  EXPECT_EQ(inferError(OpKind::Concat, {f32t({}), f32t({})}, {i("axis", 0)}),
            "axis 0 is out of range for rank 0 (operand 0 [])");
  EXPECT_EQ(inferError(OpKind::Concat, {}, {i("axis", 0)}), "expects at least 1 operand, got 0");
  EXPECT_EQ(inferError(OpKind::Gather, {f32t({3, 2}), f32t({4})}),
            "indices have dtype f32, expected i32 or i64");
  EXPECT_EQ(inferError(OpKind::Gather, {f32t({3, 2}), T(DType::I64, {4})}, {i("axis", -3)}),
            "axis -3 is out of range for rank 2 (table [3,2])");
  EXPECT_EQ(
      inferOne(OpKind::Gather, {T(DType::BF16, {2, 3, 4}), T(DType::I32, {5, 6})}, {i("axis", 1)}),
      T(DType::BF16, {2, 5, 6, 4}));
  // widen: a bf16 table looked up as f32 (an inference weight stored in bf16), and only that
  EXPECT_EQ(
      inferOne(OpKind::Gather, {T(DType::BF16, {3, 4}), T(DType::I64, {5})}, {{"widen", true}}),
      f32t({5, 4}));
  EXPECT_EQ(inferError(OpKind::Gather, {f32t({3, 4}), T(DType::I64, {5})}, {{"widen", true}}),
            "widen: the table has dtype f32, expected bf16");
  EXPECT_EQ(inferOne(OpKind::Concat, {f32t({2, 3}), f32t({2, 1}), f32t({2, 0})}, {i("axis", 1)}),
            f32t({2, 4}));
}

} // namespace
} // namespace kiln::ir::optest::ops_matmul_shape_test
