// The fused ops' reference semantics on small cases computed by hand, in f32 and f64: attention
// (scale, causal with Tq = Tk and Tq != Tk, masks, bias, GQA and MQA head mapping, fully masked
// rows, no keys), attention_backward, layer_norm / rms_norm and their backward ops, and the fused
// residual adds. (Inference: fused_infer_test.cc; numerics against the decompositions and
// central differences: fused_decompose_test.cc, fused_grad_test.cc.)
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "tests/ir/fused_test_util.h"
#include "tests/ir/ops_test_util.h"

namespace kiln::ir::optest::fused_test {
namespace {

const double ln2 = std::log(2.0), ln3 = std::log(3.0), ln4 = std::log(4.0);

struct Want {
  Type type;
  std::vector<double> values;
};

// Runs op k in f32 and f64 mode; the results must be `want`, in order.
::testing::AssertionResult resultsAre(OpKind k, const std::vector<Arg> &args,
                                      const std::vector<AttrInit> &attrs,
                                      const std::vector<Want> &want) {
  auto check = [&](auto r, const char *mode, double tol) -> ::testing::AssertionResult {
    if (!r)
      return ::testing::AssertionFailure() << mode << ": " << r.error().message;
    if (r->size() != want.size())
      return ::testing::AssertionFailure()
             << mode << ": " << r->size() << " results, expected " << want.size();
    for (size_t i = 0; i < want.size(); ++i) {
      ::testing::AssertionResult m = tensorMatches((*r)[i], want[i].type, want[i].values, tol);
      if (!m)
        return ::testing::AssertionFailure() << mode << ": result " << i << ": " << m.message();
    }
    return ::testing::AssertionSuccess();
  };
  ::testing::AssertionResult r32 = check(runOp<float>(k, args, attrs), "ref32", kTol32);
  if (!r32)
    return r32;
  return check(runOp<double>(k, args, attrs), "ref64", kTol64);
}

using fusedtest::attn;

// ---- attention ----
// The running example: B = H = 1, Tq = Tk = 2, D = 1, Dv = 2, scale 1, q = [0, ln 3], k = [0, 1]:
//   row 0: logits [0, 0]     p = [1/2, 1/2]  out = [6, 2]  lse = ln 2
//   row 1: logits [0, ln 3]  p = [1/4, 3/4]  out = [4, 3]  lse = ln 4
Arg q2() {
  return f32({1, 1, 2, 1}, {0, ln3});
}
Arg k2() {
  return f32({1, 1, 2, 1}, {0, 1});
}
Arg v2() {
  return f32({1, 1, 2, 2}, {10, 0, 2, 4});
}
const Type kOut2 = f32t({1, 1, 2, 2}), kLse2 = f32t({1, 1, 2});

TEST(FusedAttention, SoftmaxOfScaledLogitsWeighsValues) {
  EXPECT_TRUE(resultsAre(OpKind::Attention, {q2(), k2(), v2()}, attn(1, 1, 1),
                         {{kOut2, {6, 2, 4, 3}}, {kLse2, {ln2, ln4}}}));
  // scale multiplies the logits: q doubled, scale halved, same result.
  EXPECT_TRUE(resultsAre(OpKind::Attention, {f32({1, 1, 2, 1}, {0, 2 * ln3}), k2(), v2()},
                         attn(0.5, 1, 1), {{kOut2, {6, 2, 4, 3}}, {kLse2, {ln2, ln4}}}));
}

TEST(FusedAttention, CausalLetsRowIAttendToKeysUpToI) {
  // Row 0 sees key 0 only: out = v[0], lse = logit 0 = 0.
  EXPECT_TRUE(resultsAre(OpKind::Attention, {q2(), k2(), v2()}, attn(1, 1, 1, {{"causal", true}}),
                         {{kOut2, {10, 0, 4, 3}}, {kLse2, {0, ln4}}}));
}

TEST(FusedAttention, CausalWithMoreQueriesThanKeysIsTopLeftAligned) {
  // Tq = 3, Tk = 2: row i sees keys j <= i; row 2 (q = 0) sees both keys.
  EXPECT_TRUE(
      resultsAre(OpKind::Attention, {f32({1, 1, 3, 1}, {0, ln3, 0}), k2(), v2()},
                 attn(1, 1, 1, {{"causal", true}}),
                 {{f32t({1, 1, 3, 2}), {10, 0, 4, 3, 6, 2}}, {f32t({1, 1, 3}), {0, ln4, ln2}}}));
}

TEST(FusedAttention, OneQueryOverThreeKeys) {
  // logits [0, 0, ln 2]: p = [1/4, 1/4, 1/2], out = 4/4 + 8/4 + 2/2 = 4, lse = ln 4.
  EXPECT_TRUE(resultsAre(
      OpKind::Attention,
      {f32({1, 1, 1, 1}, {1}), f32({1, 1, 3, 1}, {0, 0, ln2}), f32({1, 1, 3, 1}, {4, 8, 2})},
      attn(1, 1, 1), {{f32t({1, 1, 1, 1}), {4}}, {f32t({1, 1, 1}), {ln4}}}));
}

TEST(FusedAttention, MaskRemovesKeys) {
  // Each row sees only "its" key: out = v[i], lse = its logit.
  EXPECT_TRUE(resultsAre(OpKind::Attention, {q2(), k2(), v2(), boolean({2, 2}, {1, 0, 0, 1})},
                         attn(1, 1, 1, {{"has_mask", true}}),
                         {{kOut2, {10, 0, 2, 4}}, {kLse2, {0, ln3}}}));
}

TEST(FusedAttention, PaddingMaskBroadcastsOverHeadsAndRows) {
  // B = 2, mask [B, 1, 1, Tk]: batch 0 sees both keys, batch 1 only key 0.
  Arg q = f32({2, 1, 1, 1}, {ln3, ln3}), k = f32({2, 1, 2, 1}, {0, 1, 0, 1}),
      v = f32({2, 1, 2, 1}, {0, 4, 0, 4}), mask = boolean({2, 1, 1, 2}, {1, 1, 1, 0});
  EXPECT_TRUE(resultsAre(OpKind::Attention, {q, k, v, mask}, attn(1, 1, 1, {{"has_mask", true}}),
                         {{f32t({2, 1, 1, 1}), {3, 0}}, {f32t({2, 1, 1}), {ln4, 0}}}));
}

TEST(FusedAttention, RowWithNoAllowedKeyIsZeroAsSoftmax) {
  // Row 0: key 0 masked, key 1 in the future; row 1 sees both. Row 0 attends nothing: out = 0
  // and lse = log 0 = -inf (a sequence that is all padding must not make the step NaN).
  EXPECT_TRUE(resultsAre(OpKind::Attention, {q2(), k2(), v2(), boolean({2, 2}, {0, 1, 1, 1})},
                         attn(1, 1, 1, {{"causal", true}, {"has_mask", true}}),
                         {{kOut2, {0, 0, 4, 3}}, {kLse2, {-kInf, ln4}}}));
}

TEST(FusedAttention, NoKeysAtAllGivesEmptySums) {
  EXPECT_TRUE(resultsAre(
      OpKind::Attention, {f32({1, 1, 1, 2}, {1, 2}), f32({1, 1, 0, 2}, {}), f32({1, 1, 0, 3}, {})},
      attn(1, 1, 1), {{f32t({1, 1, 1, 3}), {0, 0, 0}}, {f32t({1, 1, 1}), {-kInf}}}));
}

TEST(FusedAttention, BiasAddsToLogits) {
  // q = k = 0: the logits are the bias. Row 0: [0, ln 3] -> p = [1/4, 3/4]; row 1: [ln 3, 0].
  Arg q = f32({1, 1, 2, 1}, {0, 0}), k = f32({1, 1, 2, 1}, {0, 0});
  Arg bias = f32({1, 1, 2, 2}, {0, ln3, ln3, 0});
  EXPECT_TRUE(resultsAre(OpKind::Attention, {q, k, v2(), bias}, attn(1, 1, 1, {{"has_bias", true}}),
                         {{kOut2, {4, 3, 8, 1}}, {kLse2, {ln4, ln4}}}));
  // With a mask too (mask before bias): row 0 loses key 1.
  EXPECT_TRUE(resultsAre(OpKind::Attention, {q, k, v2(), boolean({2}, {1, 0}), f32({2}, {0, ln3})},
                         attn(1, 1, 1, {{"has_mask", true}, {"has_bias", true}}),
                         {{kOut2, {10, 0, 10, 0}}, {kLse2, {0, 0}}}));
}

TEST(FusedAttention, GqaQueryHeadHReadsKvHeadHOverG) {
  // Hq = 4, Hkv = 2 (g = 2): heads 0, 1 read kv head 0 (v = [0, 4]), heads 2, 3 kv head 1
  // (v = [8, 0]). q alternates 0 and ln 3, so p alternates [1/2, 1/2] and [1/4, 3/4]. (Tiling,
  // head h reading kv head h % 2, would give [2, 2, 4, 3].)
  Arg q = f32({1, 4, 1, 1}, {0, ln3, 0, ln3}), k = f32({1, 2, 2, 1}, {0, 1, 0, 1}),
      v = f32({1, 2, 2, 1}, {0, 4, 8, 0});
  EXPECT_TRUE(
      resultsAre(OpKind::Attention, {q, k, v}, attn(1, 4, 2),
                 {{f32t({1, 4, 1, 1}), {2, 3, 4, 2}}, {f32t({1, 4, 1}), {ln2, ln4, ln2, ln4}}}));
}

TEST(FusedAttention, MqaAllQueryHeadsShareOneKvHead) {
  Arg q = f32({1, 3, 1, 1}, {0, ln3, -ln3}), k = f32({1, 1, 2, 1}, {0, 1}),
      v = f32({1, 1, 2, 1}, {0, 4});
  // p = [1/2, 1/2], [1/4, 3/4], [3/4, 1/4]
  EXPECT_TRUE(resultsAre(
      OpKind::Attention, {q, k, v}, attn(1, 3, 1),
      {{f32t({1, 3, 1, 1}), {2, 3, 1}}, {f32t({1, 3, 1}), {ln2, ln4, std::log(4.0 / 3)}}}));
}

// ---- attention_backward ----
// One row: q = ln 3, k = [0, 1], v = [0, 1], scale 1, dout = 1. p = [1/4, 3/4], out = 3/4:
//   dv = p = [1/4, 3/4];  dp = v;  delta = dout out = 3/4;  dl = p (dp - delta) = [-3/16, 3/16]
//   dq = s sum_j dl_j k_j = 3/16;  dk = s dl q = [-3/16, 3/16] ln 3;  dbias = dl
TEST(FusedAttentionBackward, OneRowByHand) {
  Arg q = f32({1, 1, 1, 1}, {ln3}), k = f32({1, 1, 2, 1}, {0, 1}), v = f32({1, 1, 2, 1}, {0, 1});
  Arg out = f32({1, 1, 1, 1}, {0.75}), lse = f32({1, 1, 1}, {ln4}), dout = f32({1, 1, 1, 1}, {1});
  EXPECT_TRUE(resultsAre(OpKind::AttentionBackward, {q, k, v, out, lse, dout, f32({2}, {0, 0})},
                         attn(1, 1, 1, {{"has_bias", true}}),
                         {{f32t({1, 1, 1, 1}), {3.0 / 16}},
                          {f32t({1, 1, 2, 1}), {-3.0 / 16 * ln3, 3.0 / 16 * ln3}},
                          {f32t({1, 1, 2, 1}), {0.25, 0.75}},
                          {f32t({2}), {-3.0 / 16, 3.0 / 16}}}));
}

TEST(FusedAttentionBackward, GqaSumsKvGradientsOverTheHeadsThatShareThem) {
  // Two query heads, identical to the row above, share one kv head: dk, dv and the broadcast
  // dbias add up both heads' contributions; dq is per head.
  Arg q = f32({1, 2, 1, 1}, {ln3, ln3}), k = f32({1, 1, 2, 1}, {0, 1}),
      v = f32({1, 1, 2, 1}, {0, 1});
  Arg out = f32({1, 2, 1, 1}, {0.75, 0.75}), lse = f32({1, 2, 1}, {ln4, ln4}),
      dout = f32({1, 2, 1, 1}, {1, 1});
  EXPECT_TRUE(resultsAre(OpKind::AttentionBackward, {q, k, v, out, lse, dout, f32({2}, {0, 0})},
                         attn(1, 2, 1, {{"has_bias", true}}),
                         {{f32t({1, 2, 1, 1}), {3.0 / 16, 3.0 / 16}},
                          {f32t({1, 1, 2, 1}), {-3.0 / 8 * ln3, 3.0 / 8 * ln3}},
                          {f32t({1, 1, 2, 1}), {0.5, 1.5}},
                          {f32t({2}), {-3.0 / 8, 3.0 / 8}}}));
}

TEST(FusedAttentionBackward, MaskedKeysAndDeadRowsGetNoGradient) {
  // Row 0 sees key 0 only (p = [1, 0], out = v[0]): dl_0 = dp_0 - delta = 0, so dq = 0, and
  // dv[0] = dout. Row 1 is fully masked (NaN out and lse): it contributes nothing.
  Arg q = f32({1, 1, 2, 1}, {ln3, 1}), k = f32({1, 1, 2, 1}, {0, 1}), v = f32({1, 1, 2, 1}, {5, 1});
  Arg out = f32({1, 1, 2, 1}, {5, kNaN}), lse = f32({1, 1, 2}, {0, kNaN}),
      dout = f32({1, 1, 2, 1}, {2, 7});
  EXPECT_TRUE(resultsAre(
      OpKind::AttentionBackward, {q, k, v, out, lse, dout, boolean({2, 2}, {1, 0, 0, 0})},
      attn(1, 1, 1, {{"has_mask", true}}),
      {{f32t({1, 1, 2, 1}), {0, 0}}, {f32t({1, 1, 2, 1}), {0, 0}}, {f32t({1, 1, 2, 1}), {2, 0}}}));
}

// ---- norms ----

TEST(FusedNorm, LayerNormByHand) {
  // eps = 3. Row [1, 3]: mean 2, var 1, rstd 1/2, xhat [-1/2, 1/2]. Row [4, 4]: mean 4, var 0,
  // rstd 1/sqrt 3, xhat 0. y = xhat * [2, 3] + [1, -1].
  Arg x = f32({2, 2}, {1, 3, 4, 4});
  EXPECT_TRUE(resultsAre(OpKind::LayerNorm, {x, f32({2}, {2, 3}), f32({2}, {1, -1})},
                         {{"eps", 3.0}},
                         {{f32t({2, 2}), {0, 0.5, 1, -1}},
                          {f32t({2}), {2, 4}},
                          {f32t({2}), {0.5, 1 / std::sqrt(3.0)}}}));
  // Without weight and bias; a 1-D x has scalar statistics.
  EXPECT_TRUE(resultsAre(OpKind::LayerNorm, {f32({2}, {1, 3})},
                         {{"eps", 0.0}, {"has_weight", false}, {"has_bias", false}},
                         {{f32t({2}), {-1, 1}}, {f32t({}), {2}}, {f32t({}), {1}}}));
  // Bias alone.
  EXPECT_TRUE(resultsAre(OpKind::LayerNorm, {f32({2}, {1, 3}), f32({2}, {10, 20})},
                         {{"eps", 0.0}, {"has_weight", false}},
                         {{f32t({2}), {9, 21}}, {f32t({}), {2}}, {f32t({}), {1}}}));
}

TEST(FusedNorm, RmsNormByHand) {
  // Row [2, -2]: mean square 4, rstd 1/2. Row [1, 1]: rstd 1. eps 0; weight [2, 3].
  Arg x = f32({2, 2}, {2, -2, 1, 1});
  EXPECT_TRUE(resultsAre(OpKind::RmsNorm, {x, f32({2}, {2, 3})}, {{"eps", 0.0}},
                         {{f32t({2, 2}), {2, -3, 2, 3}}, {f32t({2}), {0.5, 1}}}));
  // eps = 5: rstd 1/3 and 1/sqrt 6; no weight.
  double r6 = 1 / std::sqrt(6.0);
  EXPECT_TRUE(
      resultsAre(OpKind::RmsNorm, {x}, {{"eps", 5.0}, {"has_weight", false}},
                 {{f32t({2, 2}), {2.0 / 3, -2.0 / 3, r6, r6}}, {f32t({2}), {1.0 / 3, r6}}}));
}

TEST(FusedNorm, StatisticsAreF64ForF64AndF32Otherwise) {
  auto r = runOp<double>(OpKind::RmsNorm, {f64({1, 2}, {3, 4})}, {{"has_weight", false}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)[1].type, (Type{DType::F64, {1}}));
  auto b = runOp<double>(OpKind::LayerNorm, {{{DType::BF16, {1, 2}}, {3, 4}}},
                         {{"has_weight", false}, {"has_bias", false}});
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_EQ((*b)[0].type, (Type{DType::BF16, {1, 2}}));
  EXPECT_EQ((*b)[1].type, f32t({1}));
  EXPECT_EQ((*b)[2].type, f32t({1}));
}

TEST(FusedNorm, AddLayerNormYieldsTheSumAndItsNorm) {
  // a [2, 2] + b [2] (broadcast): sum [[1, 3], [3, 5]]; each row has var 1; eps 0.
  Arg a = f32({2, 2}, {1, 2, 3, 4}), b = f32({2}, {0, 1});
  EXPECT_TRUE(resultsAre(OpKind::AddLayerNorm, {a, b, f32({2}, {1, 2}), f32({2}, {0, 1})},
                         {{"eps", 0.0}},
                         {{f32t({2, 2}), {1, 3, 3, 5}},
                          {f32t({2, 2}), {-1, 3, -1, 3}},
                          {f32t({2}), {2, 4}},
                          {f32t({2}), {1, 1}}}));
}

TEST(FusedNorm, AddRmsNormYieldsTheSumAndItsNorm) {
  // b [1] broadcasts: sum [2, -2], rstd 1/2, y [1, -1] * weight.
  EXPECT_TRUE(resultsAre(OpKind::AddRmsNorm, {f32({2}, {1, -3}), f32({1}, {1}), f32({2}, {3, 5})},
                         {{"eps", 0.0}},
                         {{f32t({2}), {2, -2}}, {f32t({2}), {3, -5}}, {f32t({}), {0.5}}}));
}

// layer_norm_backward is a formula in x, mean, rstd, dy, weight (mean and rstd need not be x's own
// statistics). Row 0: x [1, 2, 4], mean 2, rstd 1/2: xhat [-1/2, 0, 1]; dy [1, 2, 3], w [1, 1, 2]:
// g = [1, 2, 6], mean g = 3, mean g xhat = 11/6, dx = rstd (g - 3 - xhat 11/6)
//   = [-13/24, -1/2, 7/12]. Row 1: x [1, 0, 0], mean 0, rstd 1: xhat [1, 0, 0]; dy = 1:
// g = [1, 1, 2], mean g = 4/3, mean g xhat = 1/3, dx = [-2/3, -1/3, 2/3].
// dweight = sum over rows of dy xhat = [-1/2, 0, 3] + [1, 0, 0].
TEST(FusedNorm, LayerNormBackwardByHand) {
  Arg x = f32({2, 3}, {1, 2, 4, 1, 0, 0}), mean = f32({2}, {2, 0}), rstd = f32({2}, {0.5, 1}),
      dy = f32({2, 3}, {1, 2, 3, 1, 1, 1});
  EXPECT_TRUE(resultsAre(OpKind::LayerNormBackward, {x, mean, rstd, dy, f32({3}, {1, 1, 2})}, {},
                         {{f32t({2, 3}), {-13.0 / 24, -0.5, 7.0 / 12, -2.0 / 3, -1.0 / 3, 2.0 / 3}},
                          {f32t({3}), {0.5, 0, 3}}}));
  // Without weight: g = dy. Row 0: mean g = 2, mean g xhat = 5/2 / 3 = 5/6,
  // dx = 1/2 ([1, 2, 3] - 2 - xhat 5/6) = [-7/24, 0, 1/12]; row 1: dy constant, xhat [1,0,0]:
  // mean g = 1, mean g xhat = 1/3, dx = [-1/3, 0, 0].
  EXPECT_TRUE(resultsAre(OpKind::LayerNormBackward, {x, mean, rstd, dy}, {{"has_weight", false}},
                         {{f32t({2, 3}), {-7.0 / 24, 0, 1.0 / 12, -1.0 / 3, 0, 0}}}));
}

// rms_norm_backward: x [1, 2, 4], rstd 1/2: xhat [1/2, 1, 2]; dy [1, 2, 3], w [1, 1, 2]:
// g = [1, 2, 6], mean g xhat = 14.5 / 3 = 29/6, dx = 1/2 (g - xhat 29/6) = [-17/24, -17/12, -11/6];
// dweight = dy xhat = [1/2, 2, 6].
TEST(FusedNorm, RmsNormBackwardByHand) {
  EXPECT_TRUE(resultsAre(
      OpKind::RmsNormBackward,
      {f32({1, 3}, {1, 2, 4}), f32({1}, {0.5}), f32({1, 3}, {1, 2, 3}), f32({3}, {1, 1, 2})}, {},
      {{f32t({1, 3}), {-17.0 / 24, -17.0 / 12, -11.0 / 6}}, {f32t({3}), {0.5, 2, 6}}}));
}

} // namespace
} // namespace kiln::ir::optest::fused_test
