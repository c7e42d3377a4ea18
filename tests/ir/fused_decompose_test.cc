// Each fused op against its decomposition into primitives (add_layer_norm / add_rms_norm: an add
// and the norm's decomposition), on random inputs through the reference interpreter: every result
// must agree, in f64 to 1e-12 and in f32 to 1e-5. Covers causal and cross-length attention,
// masks and biases of every broadcast shape, GQA, MQA, fully masked rows, large logits and bf16
// products.
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/ir/fused_test_util.h"

namespace kiln::ir::fusedtest::fused_decompose_test {
namespace {

struct Case {
  std::string name;
  OpKind op;
  std::vector<In> ins;
  std::vector<AttrInit> attrs;
};

void PrintTo(const Case &c, std::ostream *os) {
  *os << c.name;
}

// qkv's operands in the bthd layout: q [B, Tq, Hq, D], k [B, Tk, Hkv, D], v [B, Tk, Hkv, Dv].
std::vector<In> qkvBthd(int64_t b, int64_t hq, int64_t hkv, int64_t tq, int64_t tk, int64_t d,
                        int64_t dv) {
  return {{"q", f64t({b, tq, hq, d})}, {"k", f64t({b, tk, hkv, d})}, {"v", f64t({b, tk, hkv, dv})}};
}
std::vector<In> with(std::vector<In> ins, std::vector<In> more) {
  ins.insert(ins.end(), more.begin(), more.end());
  return ins;
}

std::vector<Case> cases() {
  const OpKind A = OpKind::Attention;
  std::vector<AttrInit> mask = {{"has_mask", true}}, bias = {{"has_bias", true}};
  // Two rows with no allowed key, the rest random (key 0 allowed).
  std::vector<double> deadRows = {0, 0, 0, 1, 1, 0, 1, 0, 1, 0, 0, 0};
  return {
      {"attention_plain", A, qkv(2, 2, 2, 3, 3, 4, 5), attn(0.5, 2, 2)},
      {"attention_causal", A, qkv(2, 2, 2, 4, 4, 3, 3), attn(0.5, 2, 2, {{"causal", true}})},
      {"attention_causal_tq_gt_tk", A, qkv(1, 2, 2, 4, 2, 3, 3),
       attn(0.7, 2, 2, {{"causal", true}})},
      {"attention_causal_tq_lt_tk", A, qkv(1, 1, 1, 2, 5, 3, 2),
       attn(0.7, 1, 1, {{"causal", true}})},
      {"attention_cross", A, qkv(2, 2, 2, 3, 6, 4, 2), attn(0.5, 2, 2)},
      {"attention_mask_full", A, with(qkv(2, 2, 2, 3, 3, 4, 4), {{"mask", boolt({2, 2, 3, 3})}}),
       attn(0.5, 2, 2, mask)},
      {"attention_mask_padding", A, with(qkv(2, 2, 2, 3, 4, 4, 4), {{"mask", boolt({2, 1, 1, 4})}}),
       attn(0.5, 2, 2, mask)},
      {"attention_mask_causal", A, with(qkv(1, 2, 2, 4, 4, 2, 3), {{"mask", boolt({4, 4})}}),
       attn(0.5, 2, 2, {{"has_mask", true}, {"causal", true}})},
      {"attention_bias_full", A, with(qkv(2, 2, 2, 3, 3, 4, 4), {{"bias", f64t({2, 2, 3, 3})}}),
       attn(0.5, 2, 2, bias)},
      {"attention_bias_rows", A, with(qkv(2, 2, 2, 3, 4, 4, 4), {{"bias", f64t({3, 4})}}),
       attn(0.5, 2, 2, bias)},
      {"attention_bias_per_head", A, with(qkv(2, 3, 3, 2, 2, 4, 4), {{"bias", f64t({3, 1, 2})}}),
       attn(0.5, 3, 3, bias)},
      {"attention_gqa", A, qkv(2, 6, 2, 3, 4, 4, 3), attn(0.5, 6, 2)},
      {"attention_mqa", A, qkv(1, 4, 1, 3, 3, 2, 5), attn(0.5, 4, 1, {{"causal", true}})},
      {"attention_everything", A,
       with(qkv(2, 4, 2, 3, 5, 4, 3),
            {{"mask", boolt({2, 1, 3, 5})}, {"bias", f64t({1, 4, 3, 5})}}),
       attn(0.4, 4, 2, {{"has_mask", true}, {"has_bias", true}, {"causal", true}})},
      {"attention_bias_only_with_gqa", A,
       with(qkv(1, 4, 2, 3, 3, 2, 2), {{"bias", f64t({1, 4, 3, 3})}}), attn(0.5, 4, 2, bias)},
      {"attention_dead_rows", A,
       with(qkv(1, 1, 1, 4, 3, 2, 2), {{"mask", boolt({4, 3}), deadRows}}), attn(1, 1, 1, mask)},
      {"attention_large_logits", A, qkv(1, 2, 2, 3, 3, 4, 4), attn(200, 2, 2)},
      // Attention dropout: the same mask as the dropout op on [B, Hq, Tq, Tk].
      {"attention_dropout", A, qkv(2, 2, 2, 4, 5, 3, 3),
       attn(0.5, 2, 2, {{"dropout", 0.3}, {"seed", int64_t{9}}})},
      {"attention_dropout_gqa_causal_masked", A,
       with(qkv(1, 4, 2, 4, 4, 2, 3), {{"mask", boolt({1, 1, 4, 4})}}),
       attn(0.5, 4, 2,
            {{"dropout", 0.5}, {"seed", int64_t{1}}, {"causal", true}, {"has_mask", true}})},
      {"attention_bthd_gqa_causal_window", A, qkvBthd(2, 4, 2, 5, 5, 3, 2),
       attn(0.5, 4, 2, {{"causal", true}, {"window", int64_t{3}}, {"bthd", true}})},
      {"attention_bthd_mask_bias_dropout", A,
       with(qkvBthd(2, 2, 1, 3, 4, 2, 3),
            {{"mask", boolt({2, 1, 1, 4})}, {"bias", f64t({2, 3, 4})}}),
       attn(0.5, 2, 1,
            {{"has_mask", true},
             {"has_bias", true},
             {"dropout", 0.3},
             {"seed", int64_t{4}},
             {"bthd", true}})},
      // bf16 products: both matmuls of the decomposition marked, the sum dividing the product.
      {"attention_bf16_everything", A,
       with(qkv(2, 4, 2, 3, 5, 4, 3),
            {{"mask", boolt({2, 1, 3, 5})}, {"bias", f64t({1, 4, 3, 5})}}),
       attn(0.4, 4, 2,
            {{"has_mask", true}, {"has_bias", true}, {"causal", true}, {"bf16_products", true}})},
      {"attention_bf16_bthd_dropout_dead_rows", A,
       with(qkvBthd(1, 1, 1, 4, 3, 2, 2), {{"mask", boolt({4, 3}), deadRows}}),
       attn(1, 1, 1,
            {{"has_mask", true},
             {"dropout", 0.3},
             {"seed", int64_t{5}},
             {"bthd", true},
             {"bf16_products", true}})},
      {"layer_norm",
       OpKind::LayerNorm,
       {{"x", f64t({3, 4, 5})}, {"weight", f64t({5})}, {"bias", f64t({5})}},
       {}},
      {"layer_norm_plain_1d",
       OpKind::LayerNorm,
       {{"x", f64t({6})}},
       {{"has_weight", false}, {"has_bias", false}, {"eps", 0.1}}},
      {"layer_norm_weight_only",
       OpKind::LayerNorm,
       {{"x", f64t({4, 3})}, {"weight", f64t({3})}},
       {{"has_bias", false}}},
      {"layer_norm_bias_only",
       OpKind::LayerNorm,
       {{"x", f64t({4, 3})}, {"bias", f64t({3})}},
       {{"has_weight", false}}},
      {"rms_norm", OpKind::RmsNorm, {{"x", f64t({2, 3, 6})}, {"weight", f64t({6})}}, {}},
      {"rms_norm_plain",
       OpKind::RmsNorm,
       {{"x", f64t({5, 4})}},
       {{"has_weight", false}, {"eps", 0.5}}},
      {"add_layer_norm",
       OpKind::AddLayerNorm,
       {{"a", f64t({2, 3, 4})}, {"b", f64t({4})}, {"weight", f64t({4})}, {"bias", f64t({4})}},
       {}},
      {"add_layer_norm_plain",
       OpKind::AddLayerNorm,
       {{"a", f64t({3, 1})}, {"b", f64t({1, 4})}},
       {{"has_weight", false}, {"has_bias", false}}},
      {"add_rms_norm",
       OpKind::AddRmsNorm,
       {{"a", f64t({3, 4})}, {"b", f64t({3, 4})}, {"weight", f64t({4})}},
       {}},
  };
}

template <class F> std::vector<RefTensor<F>> converted(const std::vector<RefTensor<double>> &in) {
  std::vector<RefTensor<F>> out;
  for (const RefTensor<double> &t : in) {
    RefTensor<F> c(t.type);
    for (size_t k = 0; k < t.f.size(); ++k)
      c.f[k] = static_cast<F>(t.f[k]);
    c.i = t.i;
    out.push_back(std::move(c));
  }
  return out;
}

class FusedDecompose : public ::testing::TestWithParam<Case> {};

TEST_P(FusedDecompose, EveryResultMatchesTheUnfusedGraph) {
  const Case &c = GetParam();
  OneNode fused = oneNode(c.op, c.ins, c.attrs);
  ASSERT_NE(fused.node, kNone);
  std::vector<std::string> names;
  for (size_t r = 0; r < fused.results().size(); ++r) {
    names.push_back(fmt::format("result {}", r));
    fused.g.addOutput(names.back(), fused.results()[r]);
  }
  Graph unfused = fused.g;
  unfuse(unfused, fused.node);
  for (const Error &e : verify(unfused))
    ADD_FAILURE() << e.message;
  for (const Node &n : unfused.nodes()) {
    EXPECT_NE(n.op, c.op) << "the unfused graph still has the fused op";
    EXPECT_EQ(n.loc, kLoc) << mnemonic(n.op) << " does not keep the fused node's location";
  }

  std::vector<RefTensor<double>> args = argsFor(c.ins, 3);
  auto want = reference::run<double>(fused.g, args);
  auto got = reference::run<double>(unfused, args);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_TRUE(sameOutputs(*got, *want, names, 1e-12)) << "f64";

  std::vector<RefTensor<float>> args32 = converted<float>(args);
  auto want32 = reference::run<float>(fused.g, args32);
  auto got32 = reference::run<float>(unfused, args32);
  ASSERT_TRUE(want32.ok() && got32.ok());
  EXPECT_TRUE(sameOutputs(*got32, *want32, names, c.name == "attention_large_logits" ? 1e-3 : 1e-5))
      << "f32";
}

INSTANTIATE_TEST_SUITE_P(FusedOps, FusedDecompose, ::testing::ValuesIn(cases()),
                         [](const auto &info) { return info.param.name; });

// Every fused forward op has a case above.
TEST(FusedDecomposeCoverage, EveryFusedForwardOpHasACase) {
  std::set<OpKind> tested;
  for (const Case &c : cases())
    tested.insert(c.op);
  for (OpKind op : {OpKind::Attention, OpKind::LayerNorm, OpKind::RmsNorm, OpKind::AddLayerNorm,
                    OpKind::AddRmsNorm})
    EXPECT_TRUE(tested.count(op)) << mnemonic(op);
}

// The decomposition's statistics are in the stat dtype even for bf16 (computed in bf16, cast up).
TEST(FusedDecomposeTypes, Bf16StatisticsAreF32) {
  Type x{DType::BF16, {2, 4}};
  OneNode ln = oneNode(OpKind::LayerNorm, {{"x", x}}, {{"has_weight", false}, {"has_bias", false}});
  Graph g = ln.g;
  Node n = g.node(ln.node);
  Expected<std::vector<int32_t>> d = opInfo(OpKind::LayerNorm).decompose(g, n);
  ASSERT_TRUE(d.ok());
  for (size_t r = 0; r < d->size(); ++r)
    EXPECT_EQ(g.type((*d)[r]), g.type(n.results[r])) << r;
  Type q{DType::BF16, {1, 2, 3, 4}};
  OneNode at = oneNode(OpKind::Attention, {{"q", q}, {"k", q}, {"v", q}},
                       {{"scale", 0.5}, {"q_heads", int64_t{2}}, {"kv_heads", int64_t{2}}});
  Graph ga = at.g;
  Node na = ga.node(at.node);
  Expected<std::vector<int32_t>> da = opInfo(OpKind::Attention).decompose(ga, na);
  ASSERT_TRUE(da.ok());
  EXPECT_EQ(ga.type((*da)[1]), (Type{DType::F32, {1, 2, 3}}));
}

// bf16_y: the decomposition casts its y to bf16, and gives the fused op's values (within a bf16
// ulp: the two compute the f32 y in another order before rounding it).
TEST(FusedDecomposeTypes, Bf16YIsACastOfY) {
  for (OpKind op : {OpKind::LayerNorm, OpKind::RmsNorm}) {
    SCOPED_TRACE(mnemonic(op));
    std::vector<AttrInit> attrs = {{"bf16_y", true}};
    if (op == OpKind::LayerNorm)
      attrs.emplace_back("has_bias", false);
    OneNode fused = oneNode(op, {{"x", f32t({3, 5})}, {"weight", f32t({5})}}, attrs);
    ASSERT_NE(fused.node, kNone);
    std::vector<std::string> names;
    for (size_t r = 0; r < fused.results().size(); ++r) {
      names.push_back(fmt::format("result {}", r));
      fused.g.addOutput(names.back(), fused.results()[r]);
    }
    EXPECT_EQ(fused.g.type(fused.results()[0]).dtype, DType::BF16);
    Graph unfused = fused.g;
    unfuse(unfused, fused.node);
    for (const Error &e : verify(unfused))
      ADD_FAILURE() << e.message;
    std::vector<RefTensor<float>> args =
        converted<float>(argsFor({{"x", f32t({3, 5})}, {"weight", f32t({5})}}, 4));
    auto want = reference::run<float>(fused.g, args);
    auto got = reference::run<float>(unfused, args);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_TRUE(sameOutputs(*got, *want, names, 1e-2));
  }
}

} // namespace
} // namespace kiln::ir::fusedtest::fused_decompose_test
