// The reference interpreter: runs graphs node by node, checks its arguments, reports data errors
// at the failing node, rounds bf16 results, and makes deterministic arguments.
#include <gtest/gtest.h>

#include <cmath>

#include "codegen/reference/interpreter.h"
#include "ir/graph.h"
#include "support/bf16.h"
#include "tests/util/ir_types.h"

namespace kiln::interpreter_test {
namespace {
using namespace ir;

TEST(Interpreter, RunsAChainOfNodes) {
  // y = exp(x) * x + 1 on a [2] input.
  Graph g;
  ValueId x = g.addInput("x", f64t({2}));
  ValueId e = g.result(*g.addNode(OpKind::Exp, {x}));
  ValueId m = g.result(*g.addNode(OpKind::Mul, {e, x}));
  ValueId one = g.result(*g.addNode(OpKind::Constant, {}, {{"value", 1.0}, {"dtype", DType::F64}}));
  ValueId y = g.result(*g.addNode(OpKind::Add, {m, one}));
  g.addOutput("y", y);
  RefTensor<double> in(f64t({2}));
  in.f = {0.0, 2.0};
  auto out = reference::run<double>(g, std::span(&in, 1));
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_DOUBLE_EQ((*out)[0].f[0], 1.0);
  EXPECT_DOUBLE_EQ((*out)[0].f[1], 2.0 * std::exp(2.0) + 1.0);
}

TEST(Interpreter, RejectsArgumentsOfTheWrongType) {
  Graph g;
  ValueId x = g.addInput("x", f64t({2}));
  g.addOutput("y", x);
  RefTensor<double> wrong(f64t({3}));
  auto out = reference::run<double>(g, std::span(&wrong, 1));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().message, "argument \"x\": expected f64[2], got f64[3]");
  auto none = reference::run<double>(g, {});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message, "graph @main takes 1 arguments, got 0");
}

TEST(Interpreter, DataErrorsNameTheNode) {
  // A gather index outside the table is reported at the node's DSL location.
  Graph g;
  ValueId table = g.addParam("emb", f64t({4, 2}));
  ValueId ids = g.addInput("ids", Type{DType::I64, {3}});
  ValueId y =
      g.result(*g.addNode(OpKind::Gather, {table, ids}, {}, SourceLoc{"models/toy.cc", 12}));
  g.addOutput("y", y);
  std::vector<RefTensor<double>> args = reference::makeArgs<double>(g, 0);
  args[1].i = {0, 7, 1};
  auto out = reference::run<double>(g, args);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().message.rfind("models/toy.cc:12: gather: ", 0), 0u) << out.error().message;
}

TEST(Interpreter, RoundsBf16Results) {
  // 1 + 2^-10 is not a bf16 value (7 mantissa bits): the sum must round to 1.
  Graph g;
  ValueId a = g.addInput("a", Type{DType::BF16, {1}});
  ValueId b = g.addInput("b", Type{DType::BF16, {1}});
  g.addOutput("y", g.result(*g.addNode(OpKind::Add, {a, b})));
  std::vector<RefTensor<float>> args(2, RefTensor<float>(Type{DType::BF16, {1}}));
  args[0].f = {1.0f};
  args[1].f = {0x1.0p-10f};
  auto out = reference::run<float>(g, args);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].f[0], 1.0f);
  args[1].f = {0x1.0p-7f}; // exactly representable: 1 + 2^-7
  out = reference::run<float>(g, args);
  EXPECT_EQ((*out)[0].f[0], 1.0f + 0x1.0p-7f);
}

TEST(Interpreter, MakeArgsIsDeterministicAndFollowsInits) {
  Graph g;
  g.addInput("tokens", Type{DType::I64, {64}}, /*range=*/5);
  g.addParam("w", f64t({8, 16}), ParamInit{ParamInit::Kind::Normal, 0.02});
  g.addParam("g", f64t({16}), ParamInit{ParamInit::Kind::Ones, 0});
  g.addParam("x", f64t({8, 16}), ParamInit{ParamInit::Kind::XavierUniform, 1.0});
  auto a = reference::makeArgs<double>(g, 42);
  auto b = reference::makeArgs<double>(g, 42);
  auto c = reference::makeArgs<double>(g, 43);
  EXPECT_EQ(a[0].i, b[0].i);
  EXPECT_EQ(a[1].f, b[1].f);
  EXPECT_NE(a[1].f, c[1].f);
  for (int64_t t : a[0].i)
    EXPECT_TRUE(t >= 0 && t < 5);
  double sq = 0;
  for (double w : a[1].f)
    sq += w * w;
  EXPECT_NEAR(std::sqrt(sq / 128), 0.02, 0.006); // sample std of normal(0.02)
  for (double v : a[2].f)
    EXPECT_EQ(v, 1.0);
  double bound = std::sqrt(6.0 / (16 + 8));
  for (double v : a[3].f)
    EXPECT_LE(std::fabs(v), bound);
}

} // namespace
} // namespace kiln::interpreter_test
