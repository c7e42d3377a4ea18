// The verifier reports every problem of a graph, not just the first, each with its place: the
// IR line:col for parsed graphs, the DSL file:line or node number for built ones.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "tests/util/ir_types.h"

namespace kiln::ir::text_verify_test {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<std::string> messages(const std::vector<Error> &errors) {
  std::vector<std::string> out;
  for (const Error &e : errors)
    out.push_back(e.message);
  return out;
}

TEST(VerifyParsed, EveryProblemIsReportedAtItsLineAndColumn) {
  ParseResult r = parseGraph(R"(graph @g {
  %x = input "x" : f32[2]
  %i = input "x" : i64[2]
  %a = add(%x, %x) : f32[3]
  %b = add(%x, %i) : f32[2]
  %c = reduce_sum(%x) {axes = [3]} : f32[]
  %d = add(%x, %undefined) : f32[2]
  %e = matmul(%x, %x) : f32[2]
  %f = neg(%a) : f32[3]
  output "y" = %f
  output "y" = %c
}
)");
  EXPECT_FALSE(r.graph.has_value());
  // %f uses the wrongly typed %a and is checked against %a's declared type, so the one mistake
  // is reported once.
  EXPECT_THAT(messages(r.errors),
              ElementsAre("3:14: input name \"x\" is used twice (first at 2:14)",
                          "4:3: add: result 0 is declared f32[3] but the operands give f32[2]",
                          AllOf(StartsWith("5:3: add: "), HasSubstr("dtypes differ")),
                          AllOf(StartsWith("6:3: reduce_sum: "), HasSubstr("out of range")),
                          "7:16: value %undefined is not defined",
                          AllOf(StartsWith("8:3: matmul: "), HasSubstr("rank")),
                          "11:10: output name \"y\" is used twice (first at 10:10)"));
}

TEST(VerifyParsed, AValidGraphParsesWithoutProblems) {
  ParseResult r = parseGraph(R"(graph @g {
  %x = input "x" : f32[2,3]
  %m = reduce_max(%x) {axes = [1], keepdims = true} : f32[2,1]
  %s = sub(%x, %m) : f32[2,3]
  output "s" = %s
}
)");
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  EXPECT_TRUE(verify(*r.graph).empty());
}

TEST(VerifyBuilt, EveryProblemIsReportedWithItsPlace) {
  Graph g("g");
  ValueId x = g.addInput("x", T(DType::F32, {2}));
  g.addParam("x", T(DType::F32, {2}));
  g.addInput("", T(DType::F32, {2}));
  Type f32x2 = T(DType::F32, {2}), f64x2 = T(DType::F64, {2});
  NodeId bad =
      g.addNodeUnchecked(OpKind::Add, {x, 99}, Attrs(), std::span(&f32x2, 1), {"models/m.cc", 7});
  NodeId typed = g.addNodeUnchecked(OpKind::Neg, {x}, Attrs(), std::span(&f64x2, 1));
  g.addNodeUnchecked(OpKind::Exp, {x, x}, Attrs(), std::span(&f32x2, 1), {"models/m.cc", 9});
  g.addOutput("y", g.result(bad));
  g.addOutput("y", g.result(typed));
  g.addOutput("z", 77);
  EXPECT_THAT(messages(verify(g)),
              ElementsAre("graph arguments: the name \"x\" is used twice",
                          "graph arguments: an input has an empty name",
                          "models/m.cc:7: add: operand %99 is not defined before its use",
                          "node #1: neg: result 0 is declared f64[2] but the operands give f32[2]",
                          "models/m.cc:9: exp: expects 1 operand, got 2",
                          "output \"y\": the name is used twice",
                          "output \"z\": value %77 is not defined"));
}

TEST(VerifyBuilt, AGraphWithoutOutputs) {
  Graph g("empty");
  g.addInput("x", T(DType::F32, {2}));
  EXPECT_THAT(messages(verify(g)), ElementsAre("graph @empty: has no outputs"));
}

TEST(VerifyBuilt, AttributesOfTheWrongOp) {
  Graph g("g");
  ValueId x = g.addInput("x", T(DType::F32, {2}));
  Type t = T(DType::F32, {2});
  // Attrs aligned with softmax's declaration, on a neg node.
  NodeId n = g.addNodeUnchecked(OpKind::Neg, {x}, Attrs(opInfo(OpKind::Softmax).attrs),
                                std::span(&t, 1), {"models/m.cc", 3});
  g.addOutput("y", g.result(n));
  EXPECT_THAT(messages(verify(g)),
              ElementsAre("models/m.cc:3: neg: attributes do not match the op's declaration"));
}

TEST(VerifyBuilt, AValidBuiltGraphHasNoProblems) {
  Graph g("g");
  ValueId x = g.addInput("x", T(DType::F32, {2, 3}));
  Expected<NodeId> n = g.addNode(OpKind::Softmax, {x}, {{"axis", int64_t{0}}});
  ASSERT_TRUE(n.ok()) << n.error().message;
  g.addOutput("y", g.result(*n));
  EXPECT_TRUE(verify(g).empty());
  // And printing it, then parsing, gives a graph that verifies too.
  ParseResult r = parseGraph(print(g));
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  EXPECT_TRUE(verify(*r.graph).empty());
}

} // namespace
} // namespace kiln::ir::text_verify_test
