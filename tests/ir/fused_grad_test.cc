// Gradients of the fused ops. Each case is a graph inputs -> fused op -> loss = sum_r sum(y_r w_r)
// over some of its results, differentiated by passes::differentiate, and checked two ways:
// against f64 central differences (tests/passes/gradcheck_util.h: eps 1e-6, atol 1e-5,
// rtol 1e-3), and against the gradients of the unfused graph (the op replaced by its
// decomposition) to 1e-10. Then the shape of the backward graphs (one fused backward node, no
// Tq x Tk intermediates), and the errors for gradients the fused backward ops do not provide.
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "tests/ir/fused_test_util.h"
#include "tests/passes/gradcheck_util.h"

namespace kiln::ir::fusedtest::fused_grad_test {
namespace {

struct GradCase {
  std::string name;
  OpKind op;
  std::vector<In> ins;
  std::vector<AttrInit> attrs;
  std::vector<int> loss; // the results the loss reads
};

void PrintTo(const GradCase &c, std::ostream *os) {
  *os << c.name;
}

std::vector<GradCase> gradCases() {
  const OpKind A = OpKind::Attention, LN = OpKind::LayerNorm, RN = OpKind::RmsNorm,
               ALN = OpKind::AddLayerNorm, ARN = OpKind::AddRmsNorm;
  return {
      {"attention_plain", A, qkv(1, 2, 2, 3, 3, 2, 2), attn(0.6, 2, 2), {0}},
      {"attention_causal", A, qkv(2, 1, 1, 3, 3, 2, 3), attn(0.6, 1, 1, {{"causal", true}}), {0}},
      {"attention_dropout",
       A,
       qkv(1, 2, 2, 3, 4, 2, 2),
       attn(0.6, 2, 2, {{"dropout", 0.4}, {"seed", int64_t{5}}}),
       {0}},
      {"attention_dropout_gqa_causal_bias",
       A,
       qkv(1, 4, 2, 3, 3, 2, 2, {{"bias", f64t({1, 4, 3, 3})}}),
       attn(0.6, 4, 2,
            {{"dropout", 0.25}, {"seed", int64_t{2}}, {"causal", true}, {"has_bias", true}}),
       {0}},
      {"attention_masked",
       A,
       qkv(1, 2, 2, 3, 4, 2, 2, {{"mask", boolt({1, 2, 3, 4})}}),
       attn(0.6, 2, 2, {{"has_mask", true}}),
       {0}},
      {"attention_padding_mask_causal",
       A,
       qkv(2, 1, 1, 3, 3, 2, 2, {{"mask", boolt({2, 1, 1, 3})}}),
       attn(0.6, 1, 1, {{"has_mask", true}, {"causal", true}}),
       {0}},
      {"attention_bias_full",
       A,
       qkv(1, 2, 2, 3, 3, 2, 2, {{"bias", f64t({1, 2, 3, 3})}}),
       attn(0.6, 2, 2, {{"has_bias", true}}),
       {0}},
      {"attention_bias_broadcast",
       A,
       qkv(2, 2, 2, 2, 3, 2, 2, {{"bias", f64t({2, 3})}}),
       attn(0.6, 2, 2, {{"has_bias", true}}),
       {0}},
      {"attention_mask_and_bias",
       A,
       qkv(1, 2, 2, 3, 3, 2, 2, {{"mask", boolt({3, 3})}, {"bias", f64t({1, 1, 3, 3})}}),
       attn(0.6, 2, 2, {{"has_mask", true}, {"has_bias", true}}),
       {0}},
      {"attention_gqa", A, qkv(1, 4, 2, 3, 3, 2, 2), attn(0.6, 4, 2, {{"causal", true}}), {0}},
      {"attention_gqa_bias",
       A,
       qkv(1, 6, 2, 2, 3, 2, 2, {{"bias", f64t({6, 1, 3})}}),
       attn(0.6, 6, 2, {{"has_bias", true}}),
       {0}},
      {"attention_mqa", A, qkv(2, 3, 1, 2, 3, 2, 2), attn(0.6, 3, 1), {0}},
      {"attention_cross_length", A, qkv(1, 2, 2, 2, 5, 3, 2), attn(0.6, 2, 2), {0}},
      {"attention_cross_causal",
       A,
       qkv(1, 2, 1, 4, 2, 2, 3),
       attn(0.6, 2, 1, {{"causal", true}}),
       {0}},
      {"layer_norm",
       LN,
       {{"x", f64t({3, 4})}, {"weight", f64t({4})}, {"bias", f64t({4})}},
       {},
       {0}},
      {"layer_norm_plain",
       LN,
       {{"x", f64t({2, 3, 4})}},
       {{"has_weight", false}, {"has_bias", false}},
       {0}},
      {"layer_norm_weight_only",
       LN,
       {{"x", f64t({3, 5})}, {"weight", f64t({5})}},
       {{"has_bias", false}},
       {0}},
      {"layer_norm_bias_only",
       LN,
       {{"x", f64t({3, 5})}, {"bias", f64t({5})}},
       {{"has_weight", false}, {"eps", 0.1}},
       {0}},
      {"rms_norm", RN, {{"x", f64t({3, 4})}, {"weight", f64t({4})}}, {}, {0}},
      {"rms_norm_plain", RN, {{"x", f64t({2, 2, 5})}}, {{"has_weight", false}}, {0}},
      {"add_layer_norm",
       ALN,
       {{"a", f64t({2, 3, 4})}, {"b", f64t({2, 3, 4})}, {"weight", f64t({4})}, {"bias", f64t({4})}},
       {},
       {0, 1}},
      {"add_layer_norm_broadcast",
       ALN,
       {{"a", f64t({3, 4})}, {"b", f64t({4})}},
       {{"has_weight", false}, {"has_bias", false}},
       {0, 1}},
      {"add_layer_norm_y_only",
       ALN,
       {{"a", f64t({3, 4})}, {"b", f64t({3, 4})}, {"weight", f64t({4})}},
       {{"has_bias", false}},
       {1}},
      {"add_layer_norm_sum_only",
       ALN,
       {{"a", f64t({3, 4})}, {"b", f64t({1, 4})}, {"weight", f64t({4})}, {"bias", f64t({4})}},
       {},
       {0}},
      {"add_rms_norm",
       ARN,
       {{"a", f64t({2, 4})}, {"b", f64t({2, 4})}, {"weight", f64t({4})}},
       {},
       {0, 1}},
      {"add_rms_norm_broadcast",
       ARN,
       {{"a", f64t({2, 1, 4})}, {"b", f64t({3, 4})}},
       {{"has_weight", false}},
       {0, 1}},
  };
}

// The case's graph with its loss, its arguments, and the float inputs to differentiate.
struct Built {
  OneNode fused;
  std::vector<RefTensor<double>> args;
  std::vector<std::string> wrt;
};

Built build(const GradCase &c) {
  Built b{oneNode(c.op, c.ins, c.attrs), argsFor(c.ins, 5), {}};
  for (const In &in : c.ins)
    if (isFloat(in.type.dtype))
      b.wrt.push_back(in.name);
  addLoss(b.fused.g, b.fused.node, c.loss, b.args);
  return b;
}

class FusedGrad : public ::testing::TestWithParam<GradCase> {};

TEST_P(FusedGrad, MatchesCentralDifferences) {
  Built b = build(GetParam());
  ASSERT_NE(b.fused.node, kNone);
  gradcheck::expectGradientsMatch(b.fused.g, b.args, b.wrt);
}

// "The gradients of a fused graph must equal those of the unfused graph" (DESIGN.md).
TEST_P(FusedGrad, EqualsTheGradientOfTheUnfusedGraph) {
  const GradCase &c = GetParam();
  Built b = build(c);
  ASSERT_NE(b.fused.node, kNone);
  Graph unfused = b.fused.g;
  unfuse(unfused, b.fused.node);
  passes::AutodiffOptions options{.wrt = b.wrt};
  Expected<Graph> dFused = passes::differentiate(b.fused.g, options);
  Expected<Graph> dUnfused = passes::differentiate(unfused, options);
  ASSERT_TRUE(dFused.ok()) << dFused.error().message;
  ASSERT_TRUE(dUnfused.ok()) << dUnfused.error().message;
  auto got = reference::run<double>(*dFused, b.args);
  auto want = reference::run<double>(*dUnfused, b.args);
  ASSERT_TRUE(got.ok() && want.ok());
  std::vector<std::string> names;
  for (const Output &o : dUnfused->outputs())
    names.push_back(o.name);
  ASSERT_EQ(names.size(), b.wrt.size() + 1);
  EXPECT_TRUE(sameOutputs(*got, *want, names, 1e-10));
}

INSTANTIATE_TEST_SUITE_P(FusedOps, FusedGrad, ::testing::ValuesIn(gradCases()),
                         [](const auto &info) { return info.param.name; });

TEST(FusedGradCoverage, EveryFusedForwardOpHasACase) {
  std::set<OpKind> tested;
  for (const GradCase &c : gradCases())
    tested.insert(c.op);
  for (OpKind op : {OpKind::Attention, OpKind::LayerNorm, OpKind::RmsNorm, OpKind::AddLayerNorm,
                    OpKind::AddRmsNorm})
    EXPECT_TRUE(tested.count(op)) << mnemonic(op);
}

// ---- The backward graphs ----

const GradCase &caseNamed(const std::string &name) {
  static const std::vector<GradCase> all = gradCases();
  for (const GradCase &c : all)
    if (c.name == name)
      return c;
  ADD_FAILURE() << "no case " << name;
  return all.front();
}

Graph differentiated(const Built &b) {
  Expected<Graph> d = passes::differentiate(b.fused.g, {.wrt = b.wrt});
  EXPECT_TRUE(d.ok()) << d.error().message;
  return d ? std::move(*d) : Graph();
}

// Attention's gradient is one attention_backward node reading the saved out and lse: no
// probabilities, no exp, no matmul, and no value of the backward part is Tq x Tk except dbias.
TEST(FusedGradGraph, AttentionBackwardIsOneNodeWithoutTqByTkValues) {
  Built b = build(caseNamed("attention_mask_and_bias")); // Tq = Tk = 3, D = Dv = 2
  Graph d = differentiated(b);
  size_t forwardNodes = b.fused.g.nodes().size();
  EXPECT_EQ(countOps(d, OpKind::AttentionBackward), 1);
  const Node *bwd = nullptr;
  for (size_t n = forwardNodes; n < d.nodes().size(); ++n) {
    const Node &node = d.node(static_cast<NodeId>(n));
    EXPECT_NE(node.op, OpKind::Exp);
    EXPECT_NE(node.op, OpKind::Matmul);
    EXPECT_NE(node.op, OpKind::Softmax);
    if (node.op == OpKind::AttentionBackward)
      bwd = &node;
  }
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(bwd->gradOf, b.fused.node);
  const Node &fwd = d.node(b.fused.node);
  // q, k, v, out, lse, dout, mask, bias
  ASSERT_EQ(bwd->operands.size(), 8u);
  EXPECT_EQ(bwd->operands[3], fwd.results[0]);
  EXPECT_EQ(bwd->operands[4], fwd.results[1]);
  EXPECT_EQ(bwd->operands[6], fwd.operands[3]);
  EXPECT_EQ(bwd->operands[7], fwd.operands[4]);
  EXPECT_TRUE(bwd->attrs == fwd.attrs);
  // grad.bias is dbias itself (bias is [1, 1, Tq, Tk]: nothing to sum).
  EXPECT_EQ(d.findOutput("grad.bias")->value, bwd->results[3]);
}

// The backward graph with fused backward ops prints and parses back to the same text.
TEST(FusedGradGraph, BackwardGraphsRoundTripThroughText) {
  for (const char *name : {"attention_mask_and_bias", "layer_norm", "rms_norm", "add_layer_norm",
                           "add_rms_norm_broadcast"}) {
    SCOPED_TRACE(name);
    Graph d = differentiated(build(caseNamed(name)));
    std::string text = print(d);
    ParseResult r = parseGraph(text);
    ASSERT_TRUE(r.graph) << r.errors.front().message;
    EXPECT_EQ(print(*r.graph), text);
  }
}

// layer_norm: one layer_norm_backward (dx, dweight) and dbias = reduce_sum of dy over the rows.
TEST(FusedGradGraph, LayerNormUsesItsBackwardOpAndAReduceForTheBias) {
  Built b = build(caseNamed("layer_norm"));
  Graph d = differentiated(b);
  EXPECT_EQ(countOps(d, OpKind::LayerNormBackward), 1);
  const Node &dbias = d.node(d.value(d.findOutput("grad.bias")->value).def);
  EXPECT_EQ(dbias.op, OpKind::Reshape); // reduce_sum(dy, axes [0], keepdims) -> [N]
  const Node &dweight = d.node(d.value(d.findOutput("grad.weight")->value).def);
  EXPECT_EQ(dweight.op, OpKind::LayerNormBackward);
}

// When only the residual sum of add_layer_norm is used, no norm backward is emitted: da = w,
// db = w summed over rows, and weight and bias get zero gradients.
TEST(FusedGradGraph, AddNormWithOnlyTheSumUsedSkipsTheNorm) {
  Built b = build(caseNamed("add_layer_norm_sum_only"));
  Graph d = differentiated(b);
  EXPECT_EQ(countOps(d, OpKind::LayerNormBackward), 0);
  auto r = reference::run<double>(d, b.args);
  ASSERT_TRUE(r.ok()) << r.error().message;
  const RefTensor<double> &w = b.args.back(); // w0, [3, 4]
  const RefTensor<double> &da = (*r)[gradcheck::outputIndex(d, "grad.a")];
  const RefTensor<double> &db = (*r)[gradcheck::outputIndex(d, "grad.b")];
  const RefTensor<double> &dweight = (*r)[gradcheck::outputIndex(d, "grad.weight")];
  EXPECT_EQ(da.f, w.f);
  for (int64_t j = 0; j < 4; ++j)
    EXPECT_DOUBLE_EQ(db.f[j], w.f[j] + w.f[4 + j] + w.f[8 + j]);
  EXPECT_EQ(dweight.f, std::vector<double>(4, 0.0));
}

// ---- Gradients the fused ops do not provide: errors, never silent zeros ----

TEST(FusedGradErrors, LseInTheLossIsAnError) {
  const GradCase &c = caseNamed("attention_plain");
  std::vector<RefTensor<double>> args;
  OneNode n = oneNode(c.op, c.ins, c.attrs);
  addLoss(n.g, n.node, {0, 1}, args); // out and lse
  Expected<Graph> d = passes::differentiate(n.g, {.wrt = {"q"}});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().message,
            "tests/ir/fused_test.cc:7: autodiff: attention: gradient flows into the statistic "
            "'lse', which the fused backward treats as a constant (differentiate the unfused "
            "graph to use it in a loss)");
}

TEST(FusedGradErrors, NormStatisticsInTheLossAreErrors) {
  for (auto [name, result, stat] : {std::tuple{"layer_norm", 1, "mean"},
                                    {"layer_norm", 2, "rstd"},
                                    {"rms_norm", 1, "rstd"},
                                    {"add_layer_norm", 2, "mean"},
                                    {"add_rms_norm", 2, "rstd"}}) {
    SCOPED_TRACE(name);
    const GradCase &c = caseNamed(name);
    std::vector<RefTensor<double>> args;
    OneNode n = oneNode(c.op, c.ins, c.attrs);
    addLoss(n.g, n.node, {result}, args);
    Expected<Graph> d = passes::differentiate(n.g, {.wrt = {c.ins[0].name}});
    ASSERT_FALSE(d.ok());
    EXPECT_THAT(d.error().message,
                ::testing::HasSubstr(fmt::format("gradient flows into the statistic '{}'", stat)));
  }
}

// A norm whose y is stored in bf16 (bf16_y, a lowering's decision) refuses to be differentiated.
TEST(FusedGradErrors, NormsWithBf16YAreErrors) {
  for (const char *name : {"layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"}) {
    SCOPED_TRACE(name);
    const GradCase &c = caseNamed(name);
    std::vector<In> ins = c.ins; // bf16_y rounds f32
    for (In &in : ins)
      in.type.dtype = DType::F32;
    std::vector<AttrInit> attrs = c.attrs;
    attrs.emplace_back("bf16_y", true);
    std::vector<RefTensor<double>> args;
    OneNode n = oneNode(c.op, ins, attrs);
    addLoss(n.g, n.node, {opInfo(c.op).bf16YResult}, args);
    Expected<Graph> d = passes::differentiate(n.g, {.wrt = {c.ins[0].name}});
    ASSERT_FALSE(d.ok());
    EXPECT_THAT(d.error().message,
                ::testing::HasSubstr(fmt::format("{} with bf16_y has no gradient", name)));
  }
}

// Differentiating a backward graph again reaches the fused backward op, whose rule says so.
TEST(FusedGradErrors, DoubleBackwardThroughAFusedBackwardOpIsAnError) {
  for (auto [name, op] : {std::pair{"attention_causal", "attention_backward"},
                          {"layer_norm", "layer_norm_backward"},
                          {"rms_norm", "rms_norm_backward"}}) {
    SCOPED_TRACE(name);
    Built b = build(caseNamed(name));
    Graph d = differentiated(b);
    std::string first = b.wrt[0];
    ValueId g = d.findOutput("grad." + first)->value;
    Builder builder(d);
    d.addOutput("loss2", builder.sum(builder.mul(g, g), {}, false));
    Expected<Graph> dd =
        passes::differentiate(d, {.loss = "loss2", .wrt = {first}, .gradPrefix = "grad2."});
    ASSERT_FALSE(dd.ok());
    EXPECT_THAT(dd.error().message,
                ::testing::HasSubstr(fmt::format(
                    "{}: {} has no gradient: double backward through a fused backward op is not "
                    "supported (differentiate the unfused graph twice instead)",
                    op, op)));
  }
}

} // namespace
} // namespace kiln::ir::fusedtest::fused_grad_test
