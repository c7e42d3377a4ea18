// Graphviz export: the exact DOT text of a small graph (ids, shapes, labels, edges in graph
// order), label escaping, and multi-result edges.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/dot.h"
#include "tests/util/ir_types.h"

namespace kiln::ir::dot_test {
namespace {

TEST(DotExport, ExactText) {
  Graph g("tiny");
  ValueId tokens = g.addInput("tokens", T(DType::I64, {4}), 10);
  ValueId wte = g.addParam("wte.weight", T(DType::F32, {10, 8}));
  Expected<NodeId> emb = g.addNode(OpKind::Gather, {wte, tokens});
  ASSERT_TRUE(emb.ok()) << emb.error().message;
  Expected<NodeId> act = g.addNode(OpKind::Relu, {g.result(*emb)});
  ASSERT_TRUE(act.ok()) << act.error().message;
  g.node(*act).gradOf = *emb; // shaded as a backward node
  g.addOutput("h", g.result(*act));
  g.addOutput("emb", g.result(*emb));
  EXPECT_EQ(toDot(g), R"(digraph "tiny" {
  node [fontname="monospace"];
  a0 [shape=ellipse, label="input tokens\ni64[4]"];
  a1 [shape=ellipse, style=filled, fillcolor="#e8e8e8", label="param wte.weight\nf32[10,8]"];
  n0 [shape=box, label="gather\nf32[4,8]"];
  n1 [shape=box, style=filled, fillcolor="#fde8e8", label="relu\nf32[4,8]"];
  o0 [shape=doubleoctagon, label="output h"];
  o1 [shape=doubleoctagon, label="output emb"];
  a1 -> n0;
  a0 -> n0;
  n0 -> n1;
  n1 -> o0;
  n0 -> o1;
}
)");
}

TEST(DotExport, LabelsAreEscaped) {
  Graph g("say \"hi\"");
  ValueId x = g.addInput("a\"b\\c\nd", T(DType::F32, {1}));
  g.addOutput("out\"", x);
  std::string dot = toDot(g);
  EXPECT_THAT(dot, ::testing::HasSubstr("digraph \"say \\\"hi\\\"\" {\n"));
  EXPECT_THAT(dot, ::testing::HasSubstr("label=\"input a\\\"b\\\\c\\nd\\nf32[1]\""));
  EXPECT_THAT(dot, ::testing::HasSubstr("o0 [shape=doubleoctagon, label=\"output out\\\"\"];"));
  EXPECT_THAT(dot, ::testing::HasSubstr("  a0 -> o0;\n"));
}

TEST(DotExport, MultiResultEdgesNameTheResultAndBrokenOperandsAreSkipped) {
  Graph g("g");
  ValueId x = g.addInput("x", T(DType::F32, {2}));
  Type ts[] = {T(DType::F32, {2}), T(DType::I64, {2})};
  NodeId two = g.addNodeUnchecked(OpKind::Neg, {x}, Attrs(), ts);
  Type t = ts[0];
  g.addNodeUnchecked(OpKind::Add, {g.node(two).results[1], 99}, Attrs(), std::span(&t, 1));
  g.addOutput("y", g.node(two).results[0]);
  std::string dot = toDot(g);
  EXPECT_THAT(dot, ::testing::HasSubstr("n0 [shape=box, label=\"neg\\nf32[2]\\ni64[2]\"];"));
  EXPECT_THAT(dot, ::testing::HasSubstr("  n0 -> n1 [label=\"#1\"];\n"));
  EXPECT_THAT(dot, ::testing::HasSubstr("  n0 -> o0;\n"));
  EXPECT_EQ(dot.find("99"), std::string::npos);
  // Three edges: x -> neg, neg#1 -> add, neg -> output; the undefined operand draws none.
  size_t edges = 0;
  for (size_t at = dot.find(" -> "); at != std::string::npos; at = dot.find(" -> ", at + 1))
    ++edges;
  EXPECT_EQ(edges, 3u);
}

} // namespace
} // namespace kiln::ir::dot_test
