// fuse-attention and fuse-layer-norm on hand-written graphs: each way of writing attention or a
// norm is found (with the expected attributes), computes what the unfused graph computes in f64
// and f32, and so does its training graph (differentiated after fusion: fused backward ops, no
// softmax); look-alikes whose meaning differs are left exactly as they were.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "frontend/nn.h"
#include "ir/printer.h"
#include "tests/passes/fusion_util.h"

namespace kiln::fusion_util::fusion_test {
namespace {

using frontend::Builder;
using frontend::concat;
using frontend::Scope;
using frontend::Tensor;
namespace nn = frontend::nn;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kB = 2, kH = 4, kT = 5, kS = 7, kD = 8, kN = 8;
const double kScale = 1 / std::sqrt(double(kD));

using Body = std::function<Tensor(Builder &)>;

// A graph with output "out" = body, and "loss" = sum(out * w) for a random input w.
Graph build(const Body &body, DType dtype) {
  Builder b("fusion", dtype);
  Tensor out = body(b);
  b.output("out", out);
  Tensor w = b.input("w", out.type());
  b.loss("loss", (out * w).sum());
  return b.finish();
}

Tensor in(Builder &b, const char *name, Shape shape) {
  return b.input(name, {b.dtype(), std::move(shape)});
}
Tensor q(Builder &b, int64_t t = kT) {
  return in(b, "q", {kB, kH, t, kD});
}
Tensor k(Builder &b, int64_t heads = kH, int64_t s = kT) {
  return in(b, "k", {kB, heads, s, kD});
}
Tensor v(Builder &b, int64_t heads = kH, int64_t s = kT) {
  return in(b, "v", {kB, heads, s, kD});
}
Tensor scores(const Tensor &q, const Tensor &k) {
  return q.matmul(k, {.transposeB = true});
}
Tensor attend(const Tensor &logits, const Tensor &v) {
  return logits.softmax(-1).matmul(v);
}
Tensor causal(Builder &b, int64_t t = kT) {
  return b.tri({t, t});
}
// Key padding, true where a key may be attended: [B, 1, 1, S] (set by keepFirstKey).
Tensor keep(Builder &b, int64_t s = kT) {
  return b.input("keep", {DType::Bool, {kB, 1, 1, s}});
}
// Key 0 is always allowed, so no row is masked entirely (that gives NaN in both graphs).
template <class F> void keepFirstKey(const Graph &g, std::vector<RefTensor<F>> &args) {
  for (size_t i = 0; i < args.size(); ++i)
    if (g.args()[i].name == "keep")
      for (int64_t k = 0; k < args[i].size(); k += args[i].type.shape.back())
        args[i].i[k] = 1;
}

struct Expect {
  bool causal = false, mask = false, bias = false;
  int64_t kvHeads = kH, qHeads = kH;
  double scale = kScale;
  bool recompute = false; // the probabilities are used besides p v
  double dropout = 0;     // attention dropout moved into the op
  int64_t window = 0;     // a band of the diagonal read as the sliding window
};

struct Case {
  Case(const char *name, Body body, Expect expect = {})
      : name(name), body(std::move(body)), expect(expect) {}
  const char *name;
  Body body;
  Expect expect;
};

// The ways of writing attention (each a different matcher path).
std::vector<Case> attentionCases() {
  return {
      {"ScaleOnScoresMul", [](Builder &b) { return attend(scores(q(b), k(b)) * kScale, v(b)); }},
      {"ScaleOnScoresDiv",
       [](Builder &b) { return attend(scores(q(b), k(b)) / std::sqrt(double(kD)), v(b)); }},
      {"ScaleOnQ", [](Builder &b) { return attend(scores(q(b) * kScale, k(b)), v(b)); }},
      {"ScaleOnKDivExplicitTranspose",
       [](Builder &b) {
         Tensor kt = (k(b) / std::sqrt(double(kD))).transpose(2, 3); // [B, H, D, S]
         return attend(q(b).matmul(kt), v(b));
       }},
      {"ScaleSplitAcrossQKAndScores",
       [](Builder &b) { return attend(scores(q(b) * 0.5, k(b) / 4) * (8 * kScale), v(b)); },
       {.scale = kScale}},
      {"CausalAdditiveNegInf",
       [](Builder &b) {
         Tensor add = where(causal(b), b.scalar(0, b.dtype()), -kInf);
         return attend(scores(q(b), k(b)) * kScale + add, v(b));
       },
       {.causal = true}},
      {"CausalSelect",
       [](Builder &b) {
         return attend(where(causal(b), scores(q(b), k(b)) * kScale, -kInf), v(b));
       },
       {.causal = true}},
      {"CausalTriangularConstant", // log of a 1/0 triangle: 0 / -inf
       [](Builder &b) {
         Tensor tri = b.tri({kT, kT}, 0, true, b.dtype());
         return attend(scores(q(b), k(b)) * kScale + tri.log(), v(b));
       },
       {.causal = true}},
      {"CausalFromFloatTriangleCompared", // where(tri != 0, s, -inf) with a 1/0 float triangle
       [](Builder &b) {
         Tensor keepTri = b.tri({kT, kT}, 0, true, b.dtype()).ne(0.0);
         return attend(where(keepTri, scores(q(b), k(b)) * kScale, -kInf), v(b));
       },
       {.causal = true}},
      {"CausalFromIota",
       [](Builder &b) {
         Tensor i = b.iota({kT, 1}, 0), j = b.iota({1, kT}, 1);
         return attend(where(j.le(i), scores(q(b), k(b)) * kScale, -kInf), v(b));
       },
       {.causal = true}},
      {"CausalDropUpperTriangle",
       [](Builder &b) {
         Tensor future = b.tri({kT, kT}, 1, /*lower=*/false);
         return attend(where(future, -kInf, scores(q(b), k(b)) * kScale), v(b));
       },
       {.causal = true}},
      {"PaddingMask",
       [](Builder &b) { return attend(where(keep(b), scores(q(b), k(b)) * kScale, -kInf), v(b)); },
       {.mask = true}},
      {"PaddingMaskNegated",
       [](Builder &b) { return attend(where(!keep(b), -kInf, scores(q(b), k(b)) * kScale), v(b)); },
       {.mask = true}},
      {"PaddingAndCausal",
       [](Builder &b) {
         Tensor m = causal(b) & keep(b);
         return attend(where(m, scores(q(b), k(b)) * kScale, -kInf), v(b));
       },
       {.causal = true, .mask = true}},
      {"CausalSlidingWindow",
       [](Builder &b) {
         Tensor m = nn::windowMask(b, kT, 3, true);
         return attend(where(m, scores(q(b), k(b)) * kScale, -kInf), v(b));
       },
       {.causal = true, .window = 3}},
      {"BandOnBothSidesWithPadding",
       [](Builder &b) {
         Tensor m = nn::windowMask(b, kT, 2, false) & keep(b);
         return attend(where(m, scores(q(b), k(b)) * kScale, -kInf), v(b));
       },
       {.mask = true, .window = 2}},
      {"BandAsNegatedTriangles", // !(j - i <= -3) & !(j - i >= 1): i - j < 3 and j <= i
       [](Builder &b) {
         Tensor m = (!b.tri({kT, kT}, -3, true)) & (!b.tri({kT, kT}, 1, false));
         return attend(where(m, scores(q(b), k(b)) * kScale, -kInf), v(b));
       },
       {.causal = true, .window = 3}},
      {"UnequalBandEdgesStayAMask", // i - j < 3 and j - i < 4: no one window
       [](Builder &b) {
         Tensor m = b.tri({kT, kT}, -2, false) & b.tri({kT, kT}, 3, true);
         return attend(where(m, scores(q(b), k(b)) * kScale, -kInf), v(b));
       },
       {.mask = true}},
      {"AlibiBias",
       [](Builder &b) {
         Tensor bias = nn::alibiBias(b, kH, kT, kT, true, b.dtype());
         return attend(where(causal(b), scores(q(b), k(b)) * kScale + bias, -kInf), v(b));
       },
       {.causal = true, .bias = true}},
      {"FloatBiasScaledWithScores",
       [](Builder &b) {
         return attend((scores(q(b), k(b)) + in(b, "bias", {kH, kT, kT})) * kScale, v(b));
       },
       {.bias = true}},
      {"CrossAttention",
       [](Builder &b) {
         return attend(where(keep(b, kS), scores(q(b), k(b, kH, kS)) * kScale, -kInf),
                       v(b, kH, kS));
       },
       {.mask = true}},
      {"MqaBroadcastHeads",
       [](Builder &b) { return attend(scores(q(b), k(b, 1)) * kScale, v(b, 1)); },
       {.kvHeads = 1}},
      {"GqaRepeatByBroadcast",
       [](Builder &b) {
         auto rep = [](const Tensor &x) { // [B, 2, T, D] -> [B, 4, T, D], head h reads h / 2
           return x.reshape({kB, 2, 1, kT, kD})
               .broadcastTo({kB, 2, 2, kT, kD})
               .reshape({kB, kH, kT, kD});
         };
         return attend(where(causal(b), scores(q(b), rep(k(b, 2))) * kScale, -kInf), rep(v(b, 2)));
       },
       {.causal = true, .kvHeads = 2}},
      {"GqaRepeatByConcat",
       [](Builder &b) {
         auto rep = [](const Tensor &x) {
           Tensor x1 = x.reshape({kB, 2, 1, kT, kD});
           return concat({x1, x1}, 2).reshape({kB, kH, kT, kD});
         };
         return attend(scores(q(b), rep(k(b, 2))) * kScale, rep(v(b, 2)));
       },
       {.kvHeads = 2}},
      {"MqaConcatHeads",
       [](Builder &b) {
         Tensor k1 = k(b, 1), v1 = v(b, 1);
         return attend(scores(q(b), concat({k1, k1, k1, k1}, 1)) * kScale,
                       concat({v1, v1, v1, v1}, 1));
       },
       {.kvHeads = 1}},
      {"KeyStoredTransposed",
       [](Builder &b) {
         return attend(q(b).matmul(in(b, "kt", {kB, kH, kD, kT})) * kScale, v(b));
       }},
      {"BshdLayout", // q, k, v as [B, T, H, D], the output back to [B, T, H, D]
       [](Builder &b) {
         auto heads = [](const Tensor &x) { return x.transpose(1, 2); };
         Tensor qt = in(b, "q", {kB, kT, kH, kD}), kt = in(b, "k", {kB, kT, kH, kD});
         Tensor vt = in(b, "v", {kB, kT, kH, kD});
         return attend(scores(heads(qt), heads(kt)) * kScale, heads(vt)).transpose(1, 2);
       }},
      {"HeadsMergedRank3", // [B*H, T, D]: B = 8 sequences of one head
       [](Builder &b) {
         Tensor q3 = in(b, "q", {kB * kH, kT, kD}), k3 = in(b, "k", {kB * kH, kT, kD});
         return attend(where(b.tri({kT, kT}), scores(q3, k3) * kScale, -kInf),
                       in(b, "v", {kB * kH, kT, kD}));
       },
       {.causal = true, .kvHeads = 1, .qHeads = 1}},
      {"AttentionDropout",
       [](Builder &b) {
         return (scores(q(b), k(b)) * kScale).softmax(-1).dropout(0.1, 3).matmul(v(b));
       },
       {.dropout = 0.1}},
      {"GqaCausalDropout", // the mask is drawn over the query heads' [B, Hq, T, T]
       [](Builder &b) {
         auto rep = [](const Tensor &x) {
           return x.reshape({kB, 2, 1, kT, kD})
               .broadcastTo({kB, 2, 2, kT, kD})
               .reshape({kB, kH, kT, kD});
         };
         Tensor p = where(causal(b), scores(q(b), rep(k(b, 2))) * kScale, -kInf).softmax(-1);
         return p.dropout(0.25, 11).matmul(rep(v(b, 2)));
       },
       {.causal = true, .kvHeads = 2, .dropout = 0.25}},
      {"AttentionMapAlsoOutput",
       [](Builder &b) {
         Tensor p = where(causal(b), scores(q(b), k(b)) * kScale, -kInf).softmax(-1);
         b.output("map", p);
         return p.matmul(v(b));
       },
       {.causal = true, .recompute = true}},
      {"ShawRelativePositions", // bias q.a^K and the value-side sum_j p_ij a^V_ij (uses p again)
       [](Builder &b) {
         nn::MultiHeadAttention mha(Scope(b, "attn"), {.dModel = kH * kD,
                                                       .nHeads = kH,
                                                       .position = nn::PositionKind::Relative,
                                                       .relativeK = 2});
         return mha(in(b, "x", {kB, kT, kH * kD}), nn::Mask{.keep = causal(b)});
       },
       {.causal = true, .bias = true, .recompute = true}},
  };
}

// Look-alikes whose meaning differs: left as they are.
std::vector<Case> attentionLookAlikes() {
  return {
      {"SoftmaxOverQueries",
       [](Builder &b) { return scores(q(b), k(b)).softmax(-2).matmul(v(b)); }},
      {"FiniteFill",
       [](Builder &b) {
         return attend(where(causal(b), scores(q(b), k(b)) * kScale, -1e9), v(b));
       }},
      {"BiasComputedFromValues",
       [](Builder &b) {
         Tensor qq = q(b), vv = v(b);
         return attend(scores(qq, k(b)) * kScale + scores(qq, vv), vv);
       }},
      {"ProbabilitiesTransposed", // p^T v
       [](Builder &b) {
         return (scores(q(b), k(b)) * kScale).softmax(-1).matmul(v(b), {.transposeA = true});
       }},
      {"ValuesTimesProbabilities", // w p: p on the right
       [](Builder &b) {
         return in(b, "x", {kB, kH, kD, kT}).matmul((scores(q(b), k(b)) * kScale).softmax(-1));
       }},
      {"DroppedMapAlsoRead", // dropout(p) is read besides p v: the op cannot give it
       [](Builder &b) {
         Tensor d = (scores(q(b), k(b)) * kScale).softmax(-1).dropout(0.1, 3);
         return d.matmul(v(b)) + d.sum({-1}, true);
       }},
      {"NegatedMaskedLogits", // -(select(m, s, -inf)) has +inf where masked
       [](Builder &b) { return attend(-where(causal(b), scores(q(b), k(b)), -kInf), v(b)); }},
  };
}

class FuseAttentionForms : public ::testing::TestWithParam<size_t> {};

TEST_P(FuseAttentionForms, FoundForwardAndTraining) {
  const Case c = attentionCases()[GetParam()];
  SCOPED_TRACE(c.name);
  const Expect &e = c.expect;
  Graph plain = build(c.body, DType::F64);
  Graph fused = runSpec(plain, "fuse-attention");
  EXPECT_EQ(count(fused, OpKind::Softmax), 0);
  ASSERT_EQ(count(fused, OpKind::Attention), 1) << print(fused);
  const Attrs &a = firstOf(fused, OpKind::Attention)->attrs;
  EXPECT_EQ(a.getBool("causal"), e.causal);
  EXPECT_EQ(a.getBool("has_mask"), e.mask);
  EXPECT_EQ(a.getBool("has_bias"), e.bias);
  EXPECT_EQ(a.getInt("q_heads"), e.qHeads);
  EXPECT_EQ(a.getInt("kv_heads"), e.kvHeads);
  EXPECT_NEAR(a.getFloat("scale"), e.scale, 1e-15);
  EXPECT_EQ(a.getFloat("dropout"), e.dropout);
  EXPECT_EQ(a.getInt("window"), e.window);
  EXPECT_EQ(count(fused, OpKind::Dropout), 0);
  EXPECT_EQ(count(fused, OpKind::Exp) > count(plain, OpKind::Exp), e.recompute);
  if ((e.causal || e.window) && !e.recompute) { // the T x T triangles are gone (p needs them
                                                // if recomputed)
    EXPECT_EQ(count(fused, OpKind::Tri), 0);
  }
  expectSameOutputs<double>(fused, plain, 1e-9, 1, keepFirstKey<double>);

  // Training: differentiate after fusion; the same gradients as differentiating the unfused.
  Graph dFused = differentiated(fused, floatArgs(plain));
  Graph dPlain = differentiated(plain, floatArgs(plain));
  EXPECT_EQ(count(dFused, OpKind::AttentionBackward), 1);
  EXPECT_EQ(count(dFused, OpKind::Softmax), 0);
  expectSameOutputs<double>(dFused, dPlain, 1e-9, 2, keepFirstKey<double>);

  // f32: the same graph in f32 agrees to f32 rounding.
  Graph plain32 = build(c.body, DType::F32);
  Graph fused32 = runSpec(plain32, "fuse-attention");
  expectSameOutputs<float>(fused32, plain32, 1e-4, 3, keepFirstKey<float>);
  expectSameOutputs<float>(differentiated(fused32, floatArgs(plain32)),
                           differentiated(plain32, floatArgs(plain32)), 1e-4, 4,
                           keepFirstKey<float>);
}

INSTANTIATE_TEST_SUITE_P(FuseAttention, FuseAttentionForms,
                         ::testing::Range<size_t>(0, attentionCases().size()),
                         [](const auto &info) { return attentionCases()[info.param].name; });

class FuseAttentionLookAlike : public ::testing::TestWithParam<size_t> {};

TEST_P(FuseAttentionLookAlike, LeftAlone) {
  const Case c = attentionLookAlikes()[GetParam()];
  SCOPED_TRACE(c.name);
  Graph plain = build(c.body, DType::F32);
  Graph after = runSpec(plain, "fuse-attention");
  EXPECT_EQ(count(after, OpKind::Attention), 0);
  EXPECT_EQ(print(after), print(plain));
}

INSTANTIATE_TEST_SUITE_P(FuseAttention, FuseAttentionLookAlike,
                         ::testing::Range<size_t>(0, attentionLookAlikes().size()),
                         [](const auto &info) { return attentionLookAlikes()[info.param].name; });

TEST(FuseAttentionForms, AtLeastTenVariantsAndThreeLookAlikes) {
  EXPECT_GE(attentionCases().size(), 10u);
  EXPECT_GE(attentionLookAlikes().size(), 3u);
}

// ---- Norms ----

Tensor x(Builder &b) {
  return in(b, "x", {kB, kT, kN});
}
Tensor gamma(Builder &b) {
  return in(b, "gamma", {kN});
}
Tensor beta(Builder &b) {
  return in(b, "beta", {kN});
}
Tensor meanLast(const Tensor &t) {
  return t.mean({-1}, true);
}
Tensor centered(const Tensor &t) {
  return t - meanLast(t);
}
Tensor variance(const Tensor &t) {
  Tensor c = centered(t);
  return meanLast(c * c);
}

struct NormCase {
  const char *name;
  Body body;
  OpKind op; // the fused op expected
  bool weight = true, bias = true;
  double eps = 1e-5;
  int means = 0; // reduce_mean nodes left (a mean also used outside the norm keeps its own)
};

std::vector<NormCase> normCases() {
  return {
      {"LayerNormModule", [](Builder &b) { return nn::LayerNorm(Scope(b, "ln"), kN, 1e-5)(x(b)); },
       OpKind::LayerNorm},
      {"RmsNormModule", [](Builder &b) { return nn::RMSNorm(Scope(b, "rms"), kN, 1e-6)(x(b)); },
       OpKind::RmsNorm, true, false, 1e-6},
      {"NoWeightNoBias",
       [](Builder &b) {
         Tensor xx = x(b);
         return centered(xx) * (variance(xx) + 1e-5).rsqrt();
       },
       OpKind::LayerNorm, false, false},
      {"DivideBySqrt",
       [](Builder &b) {
         Tensor xx = x(b);
         return centered(xx) / (variance(xx) + 1e-5).sqrt() * gamma(b) + beta(b);
       },
       OpKind::LayerNorm},
      {"MeanOfSquaresMinusSquaredMean",
       [](Builder &b) {
         Tensor xx = x(b), mu = meanLast(xx);
         Tensor var = meanLast(xx * xx) - mu * mu;
         return (xx - mu) * (var + 1e-5).rsqrt() * gamma(b) + beta(b);
       },
       OpKind::LayerNorm},
      {"SumOverNAndPow",
       [](Builder &b) {
         Tensor xx = x(b);
         Tensor xc = xx - xx.sum({-1}, true) / double(kN);
         Tensor var = xc.pow(2.0).sum({-1}, true) * (1.0 / kN);
         return gamma(b) * (xc * (var + 1e-5).pow(-0.5)) + beta(b);
       },
       OpKind::LayerNorm},
      {"MeanWithoutKeepdims",
       [](Builder &b) {
         Tensor xx = x(b);
         Tensor mu = xx.mean({-1}).reshape({kB, kT, 1});
         Tensor xc = xx - mu;
         Tensor var = (xc * xc).mean({2}).reshape({kB, kT, 1});
         return xc * (var + 1e-5).rsqrt() * gamma(b) + beta(b);
       },
       OpKind::LayerNorm},
      {"WeightBeforeScaleNoEps",
       [](Builder &b) {
         Tensor xx = x(b);
         return (centered(xx) * gamma(b)) * variance(xx).rsqrt() - beta(b);
       },
       OpKind::LayerNorm, true, true, 0},
      {"RmsDivideWithBias",
       [](Builder &b) {
         Tensor xx = x(b);
         return xx / (meanLast(xx * xx) + 1e-6).sqrt() * gamma(b) + beta(b);
       },
       OpKind::RmsNorm, true, false, 1e-6},
      {"MeanAlsoUsedElsewhere", // that use keeps its reduce_mean (no gradient into the stats)
       [](Builder &b) {
         Tensor xx = x(b), mu = meanLast(xx), xc = xx - mu;
         return xc * (meanLast(xc * xc) + 1e-5).rsqrt() * gamma(b) + beta(b) + mu;
       },
       OpKind::LayerNorm, true, true, 1e-5, 1},
      {"ResidualAddLayerNorm", // the sum feeds the norm and the output: both kept
       [](Builder &b) {
         Tensor h = x(b) + in(b, "r", {kB, kT, kN});
         Tensor y = nn::LayerNorm(Scope(b, "ln"), kN, 1e-5)(h);
         return h + y;
       },
       OpKind::AddLayerNorm},
      {"ResidualAddRmsNorm",
       [](Builder &b) {
         Tensor h = x(b) + in(b, "r", {kB, kT, kN});
         return h + nn::RMSNorm(Scope(b, "rms"), kN, 1e-6)(h);
       },
       OpKind::AddRmsNorm, true, false, 1e-6},
  };
}

std::vector<Case> normLookAlikes() {
  return {
      {"OverAnotherAxis",
       [](Builder &b) {
         Tensor xx = x(b), xc = xx - xx.mean({-2}, true);
         return xc * ((xc * xc).mean({-2}, true) + 1e-5).rsqrt();
       }},
      {"VarianceOfAnotherTensor",
       [](Builder &b) {
         Tensor xx = x(b), z = in(b, "z", {kB, kT, kN});
         return centered(xx) * (variance(z) + 1e-5).rsqrt();
       }},
      {"EpsOutsideTheRoot",
       [](Builder &b) {
         Tensor xx = x(b);
         return centered(xx) * (variance(xx).rsqrt() + 1e-5);
       }},
      {"FullShapeFactor", // (x z) / rms(x): z is not a per-feature weight
       [](Builder &b) {
         Tensor xx = x(b);
         return xx * in(b, "z", {kB, kT, kN}) * (meanLast(xx * xx) + 1e-6).rsqrt();
       }},
      {"RmsOfAnotherTensor",
       [](Builder &b) {
         Tensor xx = x(b);
         return in(b, "z", {kB, kT, kN}) * (meanLast(xx * xx) + 1e-6).rsqrt();
       }},
  };
}

class FuseNormForms : public ::testing::TestWithParam<size_t> {};

TEST_P(FuseNormForms, FoundForwardAndTraining) {
  const NormCase c = normCases()[GetParam()];
  SCOPED_TRACE(c.name);
  Graph plain = build(c.body, DType::F64);
  Graph fused = runSpec(plain, "fuse-layer-norm");
  ASSERT_EQ(count(fused, c.op), 1) << print(fused);
  for (OpKind op : {OpKind::Rsqrt, OpKind::Sqrt, OpKind::Pow})
    EXPECT_EQ(count(fused, op), 0) << mnemonic(op);
  EXPECT_EQ(count(fused, OpKind::ReduceMean), c.means);
  EXPECT_EQ(count(fused, OpKind::ReduceSum), 1) << "only the loss's";
  const Attrs &a = firstOf(fused, c.op)->attrs;
  EXPECT_EQ(a.getBool("has_weight"), c.weight);
  if (a.indexOf("has_bias") >= 0) {
    EXPECT_EQ(a.getBool("has_bias"), c.bias);
  }
  EXPECT_NEAR(a.getFloat("eps"), c.eps, 1e-20);
  expectSameOutputs<double>(fused, plain, 1e-9, 5);

  Graph dFused = differentiated(fused, floatArgs(plain));
  Graph dPlain = differentiated(plain, floatArgs(plain));
  bool layer = c.op == OpKind::LayerNorm || c.op == OpKind::AddLayerNorm;
  EXPECT_EQ(count(dFused, layer ? OpKind::LayerNormBackward : OpKind::RmsNormBackward), 1);
  expectSameOutputs<double>(dFused, dPlain, 1e-9, 6);

  Graph plain32 = build(c.body, DType::F32);
  Graph fused32 = runSpec(plain32, "fuse-layer-norm");
  expectSameOutputs<float>(fused32, plain32, 1e-4, 7);
  expectSameOutputs<float>(differentiated(fused32, floatArgs(plain32)),
                           differentiated(plain32, floatArgs(plain32)), 1e-4, 8);
}

INSTANTIATE_TEST_SUITE_P(FuseNorm, FuseNormForms, ::testing::Range<size_t>(0, normCases().size()),
                         [](const auto &info) { return normCases()[info.param].name; });

class FuseNormLookAlike : public ::testing::TestWithParam<size_t> {};

TEST_P(FuseNormLookAlike, LeftAlone) {
  const Case c = normLookAlikes()[GetParam()];
  SCOPED_TRACE(c.name);
  Graph plain = build(c.body, DType::F32);
  Graph after = runSpec(plain, "fuse-layer-norm");
  EXPECT_EQ(print(after), print(plain));
}

INSTANTIATE_TEST_SUITE_P(FuseNorm, FuseNormLookAlike,
                         ::testing::Range<size_t>(0, normLookAlikes().size()),
                         [](const auto &info) { return normLookAlikes()[info.param].name; });

} // namespace
} // namespace kiln::fusion_util::fusion_test
