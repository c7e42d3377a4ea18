// The fusion region op (ir/ops/region.h): its text form round-trips with the body nested, its
// reference equals its body inlined bit for bit, its gradient matches central differences, and
// every body rule it states is enforced with a message at the right place.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/reference/interpreter.h"
#include "ir/ops/region.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "tests/passes/gradcheck_util.h"

namespace kiln::ir::region_test {
namespace {

// x [2,3,4], w [4,4], b [4]: the matmul + bias + gelu + residual epilogue, and a pointwise region
// with two outputs and a trailing row sum.
constexpr const char *kGraph = R"(graph @regions {
  %x = input "x" : f64[2,3,4]
  %w = input "w" : f64[4,4]
  %b = input "b" : f64[4]
  %h, %y = fusion(%x, %w, %b) {body = graph @fusion {
    %0 = input "in0" : f64[2,3,4]
    %1 = input "in1" : f64[4,4]
    %2 = input "in2" : f64[4]
    %3 = matmul(%0, %1) : f64[2,3,4]
    %4 = add(%3, %2) : f64[2,3,4]
    %5 = gelu(%4) : f64[2,3,4]
    %6 = add(%5, %0) : f64[2,3,4]
    output "out0" = %4
    output "out1" = %6
  }} : f64[2,3,4], f64[2,3,4]
  %e, %s = fusion(%y, %h) {body = graph @fusion {
    %0 = input "in0" : f64[2,3,4]
    %1 = input "in1" : f64[2,3,4]
    %2 = constant() {value = 0.5, dtype = f64} : f64[]
    %3 = mul(%0, %2) : f64[2,3,4]
    %4 = tanh(%3) : f64[2,3,4]
    %5 = mul(%4, %1) : f64[2,3,4]
    %6 = reduce_sum(%5) {axes = [-1]} : f64[2,3]
    output "out0" = %4
    output "out1" = %6
  }} : f64[2,3,4], f64[2,3]
  output "e" = %e
  output "s" = %s
}
)";

Graph parsed(const std::string &text) {
  ParseResult r = parseGraph(text);
  for (const Error &e : r.errors)
    ADD_FAILURE() << e.message;
  return r.graph ? std::move(*r.graph) : Graph();
}

// The same graph with every fusion node replaced by its body's nodes.
Graph inlined(const Graph &g) {
  Graph out = g;
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    if (g.node(id).op != OpKind::Fusion)
      continue;
    Expected<std::vector<int32_t>> rs = decomposeFusion(out, out.node(id));
    EXPECT_TRUE(rs) << rs.error().message;
    for (size_t k = 0; rs && k < rs->size(); ++k)
      out.replaceAllUses(out.node(id).results[k], (*rs)[k]);
    out.eraseNode(id);
  }
  out.compact();
  return out;
}

TEST(Region, PrintParsePrintIsStable) {
  Graph g = parsed(kGraph);
  std::string once = print(g);
  EXPECT_NE(once.find("  %3, %4 = fusion(%0, %1, %2) {body = graph @fusion {\n    %0 = input"),
            std::string::npos)
      << once;
  EXPECT_NE(once.find("    output \"out1\" = %6\n  }} : f64[2,3,4], f64[2,3,4]\n"),
            std::string::npos)
      << once;
  EXPECT_EQ(print(parsed(once)), once);
}

TEST(Region, ReferenceIsTheBodyInlinedBitForBit) {
  Graph g = parsed(kGraph);
  Graph flat = inlined(g);
  for (const Node &n : flat.nodes())
    EXPECT_NE(n.op, OpKind::Fusion);
  EXPECT_TRUE(verify(flat).empty());
  std::vector<RefTensor<double>> args = reference::makeArgs<double>(g, 3);
  auto a = reference::run<double>(g, args), b = reference::run<double>(flat, args);
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->size(), 2u);
  for (size_t k = 0; k < a->size(); ++k)
    EXPECT_EQ((*a)[k].f, (*b)[k].f) << "output " << k;
  // A hand value: s[0,0] = sum_j tanh(0.5 y) h over the first row.
  const RefTensor<double> &x = args[0], &w = args[1], &bias = args[2];
  double s = 0;
  for (int j = 0; j < 4; ++j) {
    double h = bias.f[j];
    for (int k = 0; k < 4; ++k)
      h += x.f[k] * w.f[k * 4 + j];
    double gelu = 0.5 * h * (1 + std::erf(h / std::sqrt(2.0)));
    s += std::tanh(0.5 * (gelu + x.f[j])) * h;
  }
  EXPECT_NEAR((*a)[1].f[0], s, 1e-12);
}

TEST(Region, F32ReferenceIsTheBodyInlinedBitForBit) {
  std::string text = kGraph;
  for (size_t at; (at = text.find("f64")) != std::string::npos;)
    text.replace(at, 3, "f32");
  Graph g = parsed(text);
  std::vector<RefTensor<float>> args = reference::makeArgs<float>(g, 5);
  auto a = reference::run<float>(g, args), b = reference::run<float>(inlined(g), args);
  ASSERT_TRUE(a && b);
  for (size_t k = 0; k < a->size(); ++k)
    EXPECT_EQ((*a)[k].f, (*b)[k].f) << "output " << k;
}

TEST(Region, GradientMatchesCentralDifferences) {
  Graph g = parsed(kGraph);
  // loss = sum(e * we) + sum(s * ws)
  ValueId we = g.addInput("we", g.type(g.findOutput("e")->value));
  ValueId ws = g.addInput("ws", g.type(g.findOutput("s")->value));
  auto node = [&](OpKind op, std::initializer_list<ValueId> xs) {
    return g.result(*g.addNode(op, xs));
  };
  ValueId le = node(OpKind::ReduceSum, {node(OpKind::Mul, {g.findOutput("e")->value, we})});
  ValueId ls = node(OpKind::ReduceSum, {node(OpKind::Mul, {g.findOutput("s")->value, ws})});
  g.addOutput("loss", node(OpKind::Add, {le, ls}), OutputRole::Loss);
  std::vector<RefTensor<double>> args = reference::makeArgs<double>(g, 11);
  Graph grads = gradcheck::expectGradientsMatch(g, args, {"x", "w", "b"});
  // The backward nodes of a region are its inlined body and their rules, marked as its gradient.
  int fromRegion = 0;
  for (const Node &n : grads.nodes())
    if (n.gradOf != kNone && grads.node(n.gradOf).op == OpKind::Fusion)
      ++fromRegion;
  EXPECT_GT(fromRegion, 0);
}

// An operand passed twice gets its gradient once, not twice.
TEST(Region, OperandPassedTwiceGetsOneGradient) {
  Graph g = parsed(R"(graph @twice {
  %x = input "x" : f64[3]
  %y = fusion(%x, %x) {body = graph @fusion {
    %0 = input "in0" : f64[3]
    %1 = input "in1" : f64[3]
    %2 = mul(%0, %1) : f64[3]
    output "out0" = %2
  }} : f64[3]
  %l = reduce_sum(%y) : f64[]
  output "loss" = %l
}
)");
  std::vector<RefTensor<double>> args = reference::makeArgs<double>(g, 2);
  gradcheck::expectGradientsMatch(g, args, {"x"});
}

struct BadRegion {
  std::string name;
  std::string body;     // the fusion statement's body lines (operands %a f32[2,4], %v f32[4])
  std::string operands; // the fusion's operand list
  std::string result;   // its result types
  std::string message;  // expected, exactly
};

std::vector<BadRegion> badRegions() {
  const std::string in2 = "    %0 = input \"in0\" : f32[2,4]\n    %1 = input \"in1\" : f32[4]\n";
  return {
      {"dropout_in_body",
       in2 + "    %2 = dropout(%0) {p = 0.5, seed = 1} : f32[2,4]\n    output \"out0\" = %2\n",
       "%a, %v", "f32[2,4]",
       "5:3: fusion: body @fusion: 8:5: dropout cannot be part of a fusion region (only pointwise "
       "ops, trailing reductions and one leading matmul)"},
      {"softmax_in_body", in2 + "    %2 = softmax(%0) : f32[2,4]\n    output \"out0\" = %2\n",
       "%a, %v", "f32[2,4]",
       "5:3: fusion: body @fusion: 8:5: softmax cannot be part of a fusion region (only pointwise "
       "ops, trailing reductions and one leading matmul)"},
      {"reduction_used_again",
       in2 + "    %2 = reduce_sum(%0) {axes = [-1], keepdims = true} : f32[2,1]\n"
             "    %3 = sub(%0, %2) : f32[2,4]\n    output \"out0\" = %3\n",
       "%a, %v", "f32[2,4]",
       "5:3: fusion: body @fusion: 8:5: a reduction's result may only be a body output "
       "(reductions come at the end)"},
      {"matmul_of_a_computed_value",
       "    %0 = input \"in0\" : f32[2,4]\n    %1 = input \"in1\" : f32[4,4]\n"
       "    %2 = exp(%0) : f32[2,4]\n    %3 = matmul(%2, %1) : f32[2,4]\n"
       "    output \"out0\" = %3\n",
       "%a, %m", "f32[2,4]",
       "5:3: fusion: body @fusion: 9:5: the matmul's operands must be body inputs"},
      {"output_not_the_whole_space",
       in2 + "    %2 = add(%0, %1) : f32[2,4]\n    %3 = exp(%1) : f32[4]\n"
             "    output \"out0\" = %2\n    output \"out1\" = %3\n",
       "%a, %v", "f32[2,4], f32[4]",
       "5:3: fusion: body @fusion: output \"out1\" has shape [4], not the iteration space [2,4]"},
      {"operand_type_differs", in2 + "    %2 = add(%0, %1) : f32[2,4]\n    output \"out0\" = %2\n",
       "%a, %a", "f32[2,4]", "5:3: fusion: operand 1 is f32[2,4] but body input \"in1\" is f32[4]"},
      {"operand_count_differs", in2 + "    %2 = add(%0, %1) : f32[2,4]\n    output \"out0\" = %2\n",
       "%a", "f32[2,4]", "5:3: fusion: the body takes 2 inputs, but the node has 1 operands"},
      {"param_in_body",
       in2 + "    %p = param \"w\" init zeros : f32[4]\n    %2 = add(%0, %p) : f32[2,4]\n"
             "    output \"out0\" = %2\n",
       "%a, %v", "f32[2,4]",
       "5:3: fusion: body @fusion: the body has parameter \"w\"; a region's body takes only "
       "inputs"},
      {"result_type_differs", in2 + "    %2 = add(%0, %1) : f32[2,4]\n    output \"out0\" = %2\n",
       "%a, %v", "f64[2,4]",
       "5:3: fusion: result 0 is declared f64[2,4] but the operands give f32[2,4]"},
      {"error_inside_the_body", in2 + "    %2 = add(%0, %9) : f32[2,4]\n    output \"out0\" = %2\n",
       "%a, %v", "f32[2,4]", "8:18: value %9 is not defined"},
  };
}

class RegionDiagnostics : public ::testing::TestWithParam<BadRegion> {};

TEST_P(RegionDiagnostics, NamesThePlaceAndTheRule) {
  const BadRegion &c = GetParam();
  std::string text = "graph @bad {\n  %a = input \"a\" : f32[2,4]\n  %v = input \"v\" : f32[4]\n"
                     "  %m = input \"m\" : f32[4,4]\n  %r = fusion(" +
                     c.operands + ") {body = graph @fusion {\n" + c.body + "  }} : " + c.result +
                     "\n  output \"r\" = %r\n}\n";
  if (c.result.find(", ") != std::string::npos)
    text.replace(text.find("  %r = fusion("), 6, "  %r, %r2 = ");
  ParseResult r = parseGraph(text);
  ASSERT_FALSE(r.graph) << text;
  ASSERT_EQ(r.errors.size(), 1u) << r.errors[0].message << "\n" << text;
  EXPECT_EQ(r.errors[0].message, c.message) << text;
}

INSTANTIATE_TEST_SUITE_P(Region, RegionDiagnostics, ::testing::ValuesIn(badRegions()),
                         [](const auto &info) { return info.param.name; });

TEST(Region, BodyOfTheWrongKindIsAnAttributeMismatch) {
  ParseResult r = parseGraph("graph @g {\n  %a = input \"a\" : f32[2]\n"
                             "  %r = fusion(%a) {body = 3} : f32[2]\n  output \"r\" = %r\n}\n");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message, "3:27: attribute 'body' of fusion expects graph, found 3");
  r = parseGraph("graph @g {\n  %a = input \"a\" : f32[2]\n"
                 "  %r = exp(%a) {body = graph @b {\n  }} : f32[2]\n  output \"r\" = %r\n}\n");
  ASSERT_EQ(r.errors.size(), 2u);
  EXPECT_EQ(r.errors[0].message, "3:17: unknown attribute 'body' for exp (it has no attributes)");
  EXPECT_EQ(r.errors[1].message, "3:24: graph @b has no outputs");
}

// Bodies nested without end (hostile text) stop at a fixed depth with one diagnostic, not a
// stack overflow.
TEST(Region, DeepNestingIsAnErrorNotACrash) {
  std::string text = "graph @g {\n";
  for (int i = 0; i < 10000; ++i)
    text += "  %a = input \"a\" : f32[2]\n  %r = fusion(%a) {body = graph @b {\n";
  ParseResult r = parseGraph(text);
  ASSERT_EQ(r.errors.size(), 1u) << r.errors[0].message;
  EXPECT_EQ(r.errors[0].message, "19:27: region bodies nest more than 8 deep");
}

TEST(Region, RolesFollowTheOpTable) {
  EXPECT_EQ(regionRole(OpKind::Add), RegionRole::Pointwise);
  EXPECT_EQ(regionRole(OpKind::Select), RegionRole::Pointwise);
  EXPECT_EQ(regionRole(OpKind::Broadcast), RegionRole::Pointwise);
  EXPECT_EQ(regionRole(OpKind::Constant), RegionRole::Pointwise);
  EXPECT_EQ(regionRole(OpKind::Dropout), RegionRole::None);
  EXPECT_EQ(regionRole(OpKind::ReduceMax), RegionRole::Reduction);
  EXPECT_EQ(regionRole(OpKind::Matmul), RegionRole::Matmul);
  EXPECT_EQ(regionRole(OpKind::Softmax), RegionRole::None);
  EXPECT_EQ(regionRole(OpKind::Fusion), RegionRole::None); // no nesting
  EXPECT_EQ(regionRole(OpKind::Transpose), RegionRole::None);
}

TEST(Region, AnalysisReportsSpaceMatmulAndReductions) {
  Graph g = parsed(kGraph);
  Expected<RegionInfo> a = analyzeRegion(regionBody(g.node(0)));
  Expected<RegionInfo> b = analyzeRegion(regionBody(g.node(1)));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->space, (Shape{2, 3, 4}));
  EXPECT_EQ(a->matmul, 0);
  EXPECT_TRUE(a->reductions.empty());
  EXPECT_EQ(b->matmul, kNone);
  EXPECT_EQ(b->reductions, (std::vector<NodeId>{4}));
}

} // namespace
} // namespace kiln::ir::region_test
