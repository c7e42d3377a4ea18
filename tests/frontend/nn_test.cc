// The nn building blocks against their papers' formulas, run on the reference interpreter in
// f64: the norms, the position tables, and multi-head attention (MHA/GQA/MQA, relative, RoPE,
// ALiBi, masks) against a direct loop implementation of the equations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "codegen/reference/interpreter.h"
#include "frontend/nn.h"

namespace kiln::nn_test {
namespace {

using frontend::Builder;
using frontend::Scope;
using frontend::Tensor;
using ir::DType;
using ir::Type;
namespace nn = frontend::nn;
using Ref = ir::RefTensor<double>;

// A finished graph with fresh deterministic arguments, run on the interpreter.
struct Interp {
  ir::Graph g;
  std::vector<Ref> args;

  explicit Interp(Builder &b, uint64_t seed = 1) : g(b.finish()) {
    EXPECT_TRUE(ir::verify(g).empty());
    args = reference::makeArgs<double>(g, seed);
  }
  Ref &arg(std::string_view name) {
    for (size_t i = 0; i < args.size(); ++i)
      if (g.args()[i].name == name)
        return args[i];
    ADD_FAILURE() << "no argument " << name;
    return args[0];
  }
  std::vector<Ref> outputs() {
    Expected<std::vector<Ref>> out = reference::run<double>(g, args);
    EXPECT_TRUE(out.ok()) << out.error().message;
    return out.ok() ? *out : std::vector<Ref>{};
  }
  Ref output() { return outputs().at(0); }
};

// ---- Norms ----

TEST(DslNn, LayerNormMatchesItsDefinition) {
  Builder b("ln", DType::F64);
  Tensor x = b.input("x", Type{DType::F64, {3, 8}});
  nn::LayerNorm ln(Scope(b).child("ln"), 8);
  b.output("y", ln(x));
  Interp r(b);
  for (int k = 0; k < 8; ++k) { // a non-trivial gain and shift
    r.arg("ln.weight").f[k] = 1 + 0.1 * k;
    r.arg("ln.bias").f[k] = -0.05 * k;
  }
  Ref y = r.output();
  const Ref &in = r.arg("x");
  for (int row = 0; row < 3; ++row) {
    double mu = 0, var = 0;
    for (int k = 0; k < 8; ++k)
      mu += in.f[row * 8 + k] / 8;
    for (int k = 0; k < 8; ++k)
      var += (in.f[row * 8 + k] - mu) * (in.f[row * 8 + k] - mu) / 8;
    for (int k = 0; k < 8; ++k) {
      double want = (in.f[row * 8 + k] - mu) / std::sqrt(var + 1e-5) * (1 + 0.1 * k) - 0.05 * k;
      EXPECT_NEAR(y.f[row * 8 + k], want, 1e-12);
    }
  }
}

TEST(DslNn, RMSNormMatchesItsDefinition) {
  Builder b("rms", DType::F64);
  Tensor x = b.input("x", Type{DType::F64, {2, 6}});
  nn::RMSNorm norm(Scope(b).child("norm"), 6);
  b.output("y", norm(x));
  Interp r(b);
  Ref y = r.output();
  const Ref &in = r.arg("x");
  for (int row = 0; row < 2; ++row) {
    double ms = 0;
    for (int k = 0; k < 6; ++k)
      ms += in.f[row * 6 + k] * in.f[row * 6 + k] / 6;
    for (int k = 0; k < 6; ++k)
      EXPECT_NEAR(y.f[row * 6 + k], in.f[row * 6 + k] / std::sqrt(ms + 1e-6), 1e-12);
  }
}

// nn::Norm (what configurations build): each kind's usual eps unless one is given. A row of
// equal entries has variance 0 and mean square c^2, so eps decides the output outright:
// LayerNorm gives 0 whatever eps; with x = [c, -c, ...] it gives c / sqrt(c^2 + eps).
TEST(DslNn, NormUsesItsKindsEpsUnlessGiven) {
  struct Case {
    nn::NormKind kind;
    std::optional<double> eps;
    double want; // the eps the graph must use
  };
  for (Case c :
       {Case{nn::NormKind::LayerNorm, std::nullopt, 1e-5},
        Case{nn::NormKind::RMSNorm, std::nullopt, 1e-6},
        Case{nn::NormKind::LayerNorm, 1e-12, 1e-12}, Case{nn::NormKind::LayerNorm, 0.25, 0.25},
        Case{nn::NormKind::RMSNorm, 0.5, 0.5}}) {
    SCOPED_TRACE(fmt::format("kind={} eps={}", int(c.kind), c.want));
    Builder b("norm", DType::F64);
    Tensor x = b.input("x", Type{DType::F64, {1, 4}});
    nn::Norm norm(Scope(b).child("norm"), c.kind, 4, c.eps);
    b.output("y", norm(x));
    Interp r(b);
    const double v = 0.01; // small enough that eps 1e-5 changes the result by ~5%
    r.arg("x").f = {v, -v, v, -v};
    Ref y = r.output();
    for (int k = 0; k < 4; ++k) // mean 0, so LayerNorm and RMSNorm agree here
      EXPECT_NEAR(y.f[k], (k % 2 ? -v : v) / std::sqrt(v * v + c.want), 1e-12);
  }
  EXPECT_EQ(nn::defaultNormEps(nn::NormKind::LayerNorm), 1e-5);
  EXPECT_EQ(nn::defaultNormEps(nn::NormKind::RMSNorm), 1e-6);
}

TEST(DslNn, ActivateAppliesThePerElementActivations) {
  for (nn::Activation act :
       {nn::Activation::Relu, nn::Activation::Gelu, nn::Activation::GeluTanh}) {
    Builder b("act", DType::F64);
    Tensor x = b.input("x", Type{DType::F64, {5}});
    b.output("y", nn::activate(x, act));
    Interp r(b);
    r.arg("x").f = {-2, -0.5, 0, 0.7, 3};
    Ref y = r.output();
    for (int k = 0; k < 5; ++k) {
      double v = r.arg("x").f[k], want = std::max(v, 0.0);
      if (act == nn::Activation::Gelu)
        want = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      if (act == nn::Activation::GeluTanh)
        want = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      EXPECT_NEAR(y.f[k], want, 1e-12) << int(act) << " at " << v;
    }
  }
}

// ---- Position tables and masks ----

TEST(DslNn, SinusoidalTableIsSinOnEvenCosOnOdd) {
  Builder b("pe", DType::F64);
  b.output("pe", nn::sinusoidalTable(b, 5, 6, DType::F64));
  Ref pe = Interp(b).output();
  ASSERT_EQ(pe.type, (Type{DType::F64, {5, 6}}));
  for (int t = 0; t < 5; ++t)
    for (int i = 0; i < 3; ++i) {
      double angle = t / std::pow(10000.0, 2.0 * i / 6);
      EXPECT_NEAR(pe.f[t * 6 + 2 * i], std::sin(angle), 1e-12);
      EXPECT_NEAR(pe.f[t * 6 + 2 * i + 1], std::cos(angle), 1e-12);
    }
}

TEST(DslNn, RelativeIndexIsClippedDistancePlusK) {
  Builder b;
  b.output("idx", nn::relativeIndex(b, 4, 5, 2));
  Ref idx = Interp(b).output();
  ASSERT_EQ(idx.type, (Type{DType::I64, {4, 5}}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      EXPECT_EQ(idx.i[i * 5 + j], std::clamp(j - i, -2, 2) + 2) << i << "," << j;
}

// Hugging Face's T5Attention._relative_position_bucket as it computes it (torch, float32 log),
// for relative position j - i.
int64_t hfT5Bucket(int64_t rel, bool bidirectional, int64_t buckets, int64_t maxDistance) {
  int64_t out = 0, n = buckets;
  if (bidirectional) {
    n /= 2;
    out += rel > 0 ? n : 0;
    rel = std::abs(rel);
  } else {
    rel = -std::min<int64_t>(rel, 0);
  }
  const int64_t exact = n / 2;
  if (rel < exact)
    return out + rel;
  const float x = std::log(static_cast<float>(rel) / static_cast<float>(exact)) /
                  static_cast<float>(std::log(double(maxDistance) / double(exact))) *
                  static_cast<float>(n - exact);
  return out + std::min<int64_t>(exact + static_cast<int64_t>(x), n - 1);
}

// t5Buckets compares integer distances with edges found in Hugging Face's float32 arithmetic; it
// gives its buckets at every distance, for T5's own settings and others, both directions, also
// where the formula lands on a whole number (18 buckets and 128 at distance 8; 48 and 81 at 36),
// which edges found in double put one bucket lower.
TEST(DslNn, T5BucketsAreHuggingFaces) {
  struct Case {
    int64_t buckets, maxDistance, t, s;
  };
  for (const Case &c :
       {Case{32, 128, 300, 310}, Case{8, 12, 40, 40}, Case{16, 20, 64, 50},
        Case{64, 1000, 200, 1500}, Case{6, 4, 30, 30}, Case{18, 128, 40, 40}, Case{48, 81, 60, 60}})
    for (bool bidirectional : {true, false}) {
      SCOPED_TRACE(fmt::format("{} buckets, max distance {}, bidirectional {}", c.buckets,
                               c.maxDistance, bidirectional));
      Builder b;
      b.output("buckets", nn::t5Buckets(b, c.t, c.s, bidirectional, c.buckets, c.maxDistance));
      Ref got = Interp(b).output();
      ASSERT_EQ(got.type, (Type{DType::I64, {c.t, c.s}}));
      int64_t wrong = 0;
      for (int64_t i = 0; i < c.t; ++i)
        for (int64_t j = 0; j < c.s; ++j)
          wrong += got.i[i * c.s + j] != hfT5Bucket(j - i, bidirectional, c.buckets, c.maxDistance);
      EXPECT_EQ(wrong, 0);
    }
  Builder b;
  EXPECT_THROW(nn::t5Buckets(b, 4, 4, true, 2, 8), frontend::DslError); // 1 bucket a side
}

// The slopes of the ALiBi reference get_slopes(H), worked out by hand as powers of two:
// a power of two H gives 2^(-8h/H), h = 1..H; otherwise m = 2^floor(log2 H) gives
// 2^(-8h/m), h = 1..m, then the first H - m of every other slope of 2m, 2^(-(8i + 4)/m).
TEST(DslNn, AlibiSlopesAreTheReferences) {
  struct Case {
    int64_t heads;
    std::vector<double> log2Slopes;
  };
  std::vector<Case> cases = {
      {1, {-8}},
      {3, {-4, -8, /* 2m = 4: 2^(-2h) at h = 1 */ -2}},
      {4, {-2, -4, -6, -8}},
      {6, {-2, -4, -6, -8, /* 2m = 8: 2^-h at h = 1, 3 */ -1, -3}},
      {8, {-1, -2, -3, -4, -5, -6, -7, -8}},
      {12,
       {-1, -2, -3, -4, -5, -6, -7, -8, /* 2m = 16: 2^(-h/2) at h = 1, 3, 5, 7 */ -0.5, -1.5, -2.5,
        -3.5}},
  };
  for (const Case &c : cases)
    for (bool causal : {false, true}) {
      SCOPED_TRACE(fmt::format("H={} causal={}", c.heads, causal));
      Builder b("alibi", DType::F64);
      b.output("bias", nn::alibiBias(b, c.heads, 3, 4, causal, DType::F64));
      Ref bias = Interp(b).output();
      ASSERT_EQ(bias.type, (Type{DType::F64, {c.heads, 3, 4}}));
      for (int64_t h = 0; h < c.heads; ++h)
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 4; ++j) {
            double m = std::exp2(c.log2Slopes[h]);
            double want = causal ? m * (j - i) : -m * std::abs(j - i);
            EXPECT_NEAR(bias.f[(h * 3 + i) * 4 + j], want, 1e-14) << h << "," << i << "," << j;
          }
    }
}

TEST(DslNn, RopeRotatesHalves) {
  Builder b("rope", DType::F64);
  Tensor x = b.input("x", Type{DType::F64, {1, 2, 3, 4}}); // [B, H, T, D]
  b.output("y", nn::applyRope(x));
  Interp r(b);
  Ref y = r.output();
  const Ref &in = r.arg("x");
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 3; ++t)
      for (int i = 0; i < 2; ++i) {
        double a = t * std::pow(10000.0, -2.0 * i / 4);
        int base = (h * 3 + t) * 4;
        double x1 = in.f[base + i], x2 = in.f[base + i + 2];
        EXPECT_NEAR(y.f[base + i], x1 * std::cos(a) - x2 * std::sin(a), 1e-12);
        EXPECT_NEAR(y.f[base + i + 2], x2 * std::cos(a) + x1 * std::sin(a), 1e-12);
      }
}

// Llama 3.1's scaled frequencies, against transformers' _compute_llama3_parameters written out
// with its three branches (kiln blends them in one clamped formula): 8 frequencies of base
// 500000 and L = 256 cover all three (2 kept, 1 blended, 5 slowed), at positions far enough
// apart for the slowest to turn.
TEST(DslNn, RopeScalingIsLlama31s) {
  const nn::RopeScaling s{
      .factor = 8, .lowFreqFactor = 1, .highFreqFactor = 4, .originalMaxLen = 256};
  const double base = 500000, pi = std::numbers::pi, L = double(s.originalMaxLen);
  constexpr int D = 16;
  std::vector<double> freq(D / 2);
  int kept = 0, slowed = 0;
  for (int i = 0; i < D / 2; ++i) {
    double inv = std::pow(base, -2.0 * i / D), wavelen = 2 * pi / inv;
    if (wavelen < L / s.highFreqFactor) {
      freq[i] = inv, ++kept;
    } else if (wavelen > L / s.lowFreqFactor) {
      freq[i] = inv / s.factor, ++slowed;
    } else {
      double smooth = (L / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      freq[i] = (1 - smooth) * inv / s.factor + smooth * inv;
    }
  }
  ASSERT_EQ(kept, 2);
  ASSERT_EQ(slowed, 5);
  Builder b("rope", DType::F64);
  Tensor x = b.input("x", Type{DType::F64, {1, 1, 3, D}}); // [B, H, T, D]
  Tensor pos = b.input("pos", Type{DType::I64, {1, 3}}, 1 << 20);
  b.output("y", nn::applyRopeAt(x, pos, nn::Rope(base, s)));
  b.output("unscaled", nn::applyRopeAt(x, pos, base));
  Interp r(b);
  r.arg("pos").i = {5, 3000, 200000};
  std::vector<Ref> out = r.outputs();
  const Ref &in = r.arg("x");
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < D / 2; ++i) {
      double a = double(r.arg("pos").i[t]) * freq[i];
      int row = t * D;
      double x1 = in.f[row + i], x2 = in.f[row + i + D / 2];
      EXPECT_NEAR(out[0].f[row + i], x1 * std::cos(a) - x2 * std::sin(a), 1e-9) << t << "," << i;
      EXPECT_NEAR(out[0].f[row + i + D / 2], x2 * std::cos(a) + x1 * std::sin(a), 1e-9);
    }
  EXPECT_NE(out[0].f, out[1].f);
}

// Linear scaling (position interpolation) against transformers'
// _compute_linear_scaling_rope_parameters: every frequency divided by the factor, which is RoPE at
// positions divided by it.
TEST(DslNn, LinearRopeScalingDividesThePositions) {
  nn::RopeScaling s;
  s.kind = nn::RopeScalingKind::Linear;
  s.factor = 4;
  Builder b("rope", DType::F64);
  Tensor x = b.input("x", Type{DType::F64, {1, 1, 3, 8}}); // [B, H, T, D]
  Tensor pos = b.input("pos", Type{DType::I64, {1, 3}}, 1 << 20);
  b.output("y", nn::applyRopeAt(x, pos, nn::Rope(500, s)));
  Interp r(b);
  r.arg("pos").i = {4, 300, 7000};
  std::vector<Ref> out = r.outputs();
  const Ref &in = r.arg("x");
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 4; ++i) {
      const double angle = double(r.arg("pos").i[t]) / 4 * std::pow(500.0, -2.0 * i / 8);
      const int row = t * 8;
      const double x1 = in.f[row + i], x2 = in.f[row + i + 4];
      EXPECT_NEAR(out[0].f[row + i], x1 * std::cos(angle) - x2 * std::sin(angle), 1e-9);
      EXPECT_NEAR(out[0].f[row + i + 4], x2 * std::cos(angle) + x1 * std::sin(angle), 1e-9);
    }
}

// Phi-3's longrope against transformers' _compute_longrope_parameters written out: each frequency
// divided by its own factor, from the short list for a context within L and the long one past it,
// and cos and sin scaled by a = sqrt(1 + ln(factor) / ln L) (1 for a factor <= 1).
TEST(DslNn, LongRopeIsPhi3s) {
  const nn::RopeScaling s{.factor = 32,
                          .originalMaxLen = 16,
                          .kind = nn::RopeScalingKind::LongRope,
                          .shortFactor = {1, 1.5, 4, 9},
                          .longFactor = {2, 3, 5, 17}};
  const double base = 10000, a = std::sqrt(1 + std::log(32.0) / std::log(16.0));
  EXPECT_EQ(nn::ropeMagnitude(s), a);
  nn::RopeScaling unstretched = s;
  unstretched.factor = 1;
  EXPECT_EQ(nn::ropeMagnitude(unstretched), 1);
  constexpr int D = 8;
  for (int64_t context : {16, 17}) {
    const std::vector<double> &f = context > 16 ? s.longFactor : s.shortFactor;
    Builder b("rope", DType::F64);
    Tensor x = b.input("x", Type{DType::F64, {1, 1, 3, D}}); // [B, H, T, D]
    Tensor pos = b.input("pos", Type{DType::I64, {1, 3}}, 1 << 20);
    b.output("y", nn::applyRopeAt(x, pos, nn::Rope(base, s, context)));
    Interp r(b);
    r.arg("pos").i = {5, 300, 7000};
    std::vector<Ref> out = r.outputs();
    const Ref &in = r.arg("x");
    for (int t = 0; t < 3; ++t)
      for (int i = 0; i < D / 2; ++i) {
        double angle = double(r.arg("pos").i[t]) / (f[i] * std::pow(base, 2.0 * i / D));
        int row = t * D;
        double x1 = in.f[row + i], x2 = in.f[row + i + D / 2];
        EXPECT_NEAR(out[0].f[row + i], a * (x1 * std::cos(angle) - x2 * std::sin(angle)), 1e-9)
            << context << ": " << t << "," << i;
        EXPECT_NEAR(out[0].f[row + i + D / 2], a * (x2 * std::cos(angle) + x1 * std::sin(angle)),
                    1e-9);
      }
  }
}

// YaRN against transformers' _compute_yarn_parameters written out: the ramp's ends from the
// indices at which a frequency turns beta_fast and beta_slow times over L (rounded outwards, or
// not), each frequency blended between itself and itself / factor, cos and sin scaled by the
// attention factor (the paper's 0.1 ln(factor) + 1 where it is 0). D 16 of base 10^4 and L 2048:
// the ends are c(32) = 2.02 and c(1) = 5.03, so the ramp has kept, blended and slowed frequencies.
TEST(DslNn, YarnIsTransformers) {
  constexpr int D = 16;
  const double base = 10000, pi = std::numbers::pi;
  for (const bool truncate : {true, false})
    for (const double attention : {0.0, 1.25}) {
      const nn::RopeScaling s{.factor = 4,
                              .originalMaxLen = 2048,
                              .kind = nn::RopeScalingKind::Yarn,
                              .attentionFactor = attention,
                              .truncate = truncate};
      auto correction = [&](double turns) {
        return D * std::log(2048 / (turns * 2 * pi)) / (2 * std::log(base));
      };
      double lo = correction(32), hi = correction(1);
      if (truncate)
        lo = std::floor(lo), hi = std::ceil(hi);
      lo = std::max(lo, 0.0), hi = std::min(hi, D - 1.0);
      ASSERT_EQ(truncate ? lo : std::floor(lo), 2);
      ASSERT_EQ(truncate ? hi : std::ceil(hi), 6);
      std::vector<double> freq(D / 2);
      for (int i = 0; i < D / 2; ++i) {
        const double extrapolation = 1 / std::pow(base, 2.0 * i / D);
        const double interpolation = extrapolation / s.factor;
        const double keep = 1 - std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
        freq[i] = interpolation * (1 - keep) + extrapolation * keep;
      }
      const double a = attention != 0 ? attention : 0.1 * std::log(4.0) + 1;
      EXPECT_EQ(nn::ropeMagnitude(s), a);
      Builder b("rope", DType::F64);
      Tensor x = b.input("x", Type{DType::F64, {1, 1, 3, D}}); // [B, H, T, D]
      Tensor pos = b.input("pos", Type{DType::I64, {1, 3}}, 1 << 20);
      b.output("y", nn::applyRopeAt(x, pos, nn::Rope(base, s)));
      Interp r(b);
      r.arg("pos").i = {5, 3000, 200000};
      const Ref y = r.output();
      const Ref &in = r.arg("x");
      for (int t = 0; t < 3; ++t)
        for (int i = 0; i < D / 2; ++i) {
          const double angle = double(r.arg("pos").i[t]) * freq[i];
          const int row = t * D;
          const double x1 = in.f[row + i], x2 = in.f[row + i + D / 2];
          EXPECT_NEAR(y.f[row + i], a * (x1 * std::cos(angle) - x2 * std::sin(angle)), 1e-9)
              << truncate << attention << ": " << t << "," << i;
          EXPECT_NEAR(y.f[row + i + D / 2], a * (x2 * std::cos(angle) + x1 * std::sin(angle)),
                      1e-9);
        }
    }
  // A factor of 1 scales nothing: the paper's a is 1 there.
  EXPECT_EQ(nn::ropeMagnitude({.factor = 1, .kind = nn::RopeScalingKind::Yarn}), 1);
}

// Partial rotary (Phi-4-mini's partial_rotary_factor), against transformers' Phi-3 written out:
// R = int(D × fraction) first dimensions of each head turned as a head of R would be (θ_i =
// base^(-2i/R), longrope's R/2 factors and its a), the other D - R passed as they are; the same
// with the heads before their split (positionAxis 1), as attention applies it.
TEST(DslNn, PartialRopeTurnsTheFirstDimensions) {
  const nn::RopeScaling s{.factor = 4,
                          .originalMaxLen = 16,
                          .kind = nn::RopeScalingKind::LongRope,
                          .shortFactor = {1, 2.5, 7},
                          .longFactor = {1, 1, 1}};
  constexpr int D = 8, R = 6;
  const double base = 100, a = nn::ropeMagnitude(s);
  ASSERT_EQ(nn::rotatedDims(D, 0.75), R);
  // (Truncated from the double product, as Python's int() is: 1/49 × 49 is just under 1.)
  EXPECT_EQ(nn::rotatedDims(49, 1.0 / 49), 0);
  Builder b("rope", DType::F64);
  Tensor x = b.input("x", Type{DType::F64, {1, 2, 3, D}}); // [B, H, T, D]
  Tensor pos = b.input("pos", Type{DType::I64, {1, 3}}, 1 << 20);
  const nn::Rope rope(base, s, /*context=*/16, /*fraction=*/0.75);
  b.output("y", nn::applyRopeAt(x, pos, rope));
  b.output("outer", nn::applyRopeAt(x.transpose(1, 2), pos, rope, 1).transpose(1, 2));
  Interp r(b);
  r.arg("pos").i = {3, 40, 900};
  std::vector<Ref> out = r.outputs();
  const Ref &in = r.arg("x");
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 3; ++t) {
      const int row = (h * 3 + t) * D;
      for (int i = 0; i < R / 2; ++i) {
        const double angle =
            double(r.arg("pos").i[t]) / (s.shortFactor[i] * std::pow(base, 2.0 * i / R));
        const double x1 = in.f[row + i], x2 = in.f[row + i + R / 2];
        EXPECT_NEAR(out[0].f[row + i], a * (x1 * std::cos(angle) - x2 * std::sin(angle)), 1e-9)
            << h << "," << t << "," << i;
        EXPECT_NEAR(out[0].f[row + i + R / 2], a * (x2 * std::cos(angle) + x1 * std::sin(angle)),
                    1e-9);
      }
      for (int i = R; i < D; ++i)
        EXPECT_EQ(out[0].f[row + i], in.f[row + i]) << h << "," << t << "," << i;
    }
  EXPECT_EQ(out[0].f, out[1].f);
}

// What RoPE refuses at a fraction: out of (0, 1], an odd or too small part, longrope's lists
// not one factor a turned frequency.
TEST(DslNn, PartialRopeFaults) {
  EXPECT_EQ(nn::ropeFault(nn::Rope(1e4, std::nullopt, 0, 0.75), 8), "");
  EXPECT_EQ(nn::ropeFault(nn::Rope(1e4, std::nullopt, 0, 0), 8),
            "the fraction of a head it turns must be in (0, 1], got 0");
  EXPECT_EQ(nn::ropeFault(nn::Rope(1e4, std::nullopt, 0, 1.5), 8),
            "the fraction of a head it turns must be in (0, 1], got 1.5");
  EXPECT_EQ(nn::ropeFault(nn::Rope(1e4, std::nullopt, 0, 0.6), 8), ""); // (int(4.8): 4)
  EXPECT_EQ(nn::ropeFault(nn::Rope(1e4, std::nullopt, 0, 0.7), 8),
            "the 5 dimensions it turns of a head of 8 (fraction 0.7) must be even and at least 2");
  EXPECT_EQ(nn::ropeFault(nn::Rope(1e4, std::nullopt, 0, 0.2), 8),
            "the 1 dimensions it turns of a head of 8 (fraction 0.2) must be even and at least 2");
  EXPECT_EQ(nn::ropeFault(nn::Rope(), 5), "the head dimension 5 must be even");
  const nn::RopeScaling s{.factor = 4,
                          .originalMaxLen = 16,
                          .kind = nn::RopeScalingKind::LongRope,
                          .shortFactor = {1, 2, 3, 4},
                          .longFactor = {1, 2, 3, 4}};
  EXPECT_EQ(nn::ropeFault(nn::Rope(1e4, s, 0, 0.75), 8),
            "scaling: longrope has 4 factors a list, expected one per frequency: 3 (half the 6 "
            "dimensions it turns of a head of 8 (fraction 0.75))");
}

// With positionAxis 1 (x [B, T, H, D]) each head of each position gets the same rotation: the
// transpose of RoPE on [B, H, T, D], and so too at given positions (decoding).
TEST(DslNn, RopeOnPositionsFirstIsTheTransposedRope) {
  Builder b("rope", DType::F64);
  Tensor x = b.input("x", Type{DType::F64, {2, 3, 2, 4}}); // [B, T, H, D]
  Tensor pos = b.input("pos", Type{DType::I64, {2, 3}}, 9);
  b.output("inner", nn::applyRope(x, 100, 1));
  b.output("outer", nn::applyRope(x.transpose(1, 2), 100).transpose(1, 2));
  b.output("inner_at", nn::applyRopeAt(x, pos, 100, 1));
  b.output("outer_at", nn::applyRopeAt(x.transpose(1, 2), pos, 100).transpose(1, 2));
  Interp r(b);
  r.arg("pos").i = {4, 0, 7, 1, 8, 2};
  std::vector<Ref> out = r.outputs();
  EXPECT_EQ(out[0].f, out[1].f);
  EXPECT_EQ(out[2].f, out[3].f);
  EXPECT_NE(out[0].f, out[2].f);
}

TEST(DslNn, MasksSayWhoMayAttend) {
  Builder b;
  Tensor tokens = b.input("tokens", Type{DType::I64, {2, 3}}, 4);
  b.output("causal", nn::causalMask(b, 3));
  b.output("padding", nn::paddingMask(tokens, 0));
  Interp r(b);
  r.arg("tokens").i = {1, 0, 2, 0, 3, 3};
  std::vector<Ref> out = r.outputs();
  EXPECT_EQ(out[0].i, (std::vector<int64_t>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(out[1].type, (Type{DType::Bool, {2, 1, 1, 3}}));
  EXPECT_EQ(out[1].i, (std::vector<int64_t>{1, 0, 1, 0, 1, 1}));
}

// ---- Attention against the equations, written as loops ----

using Rows = std::vector<std::vector<double>>; // [T][width]

// y = x W^T + b for W [out, in].
Rows linear(const Rows &x, const Ref &w, const Ref &b) {
  int64_t out = w.type.shape[0], in = w.type.shape[1];
  Rows y(x.size(), std::vector<double>(out));
  for (size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.f[o];
      for (int64_t i = 0; i < in; ++i)
        acc += x[t][i] * w.f[o * in + i];
      y[t][o] = acc;
    }
  return y;
}

std::vector<double> head(const std::vector<double> &row, int64_t h, int64_t d) {
  return {row.begin() + h * d, row.begin() + (h + 1) * d};
}

// RoPE on one head vector at position t.
std::vector<double> rope(std::vector<double> u, int64_t t) {
  int64_t half = u.size() / 2;
  std::vector<double> r = u;
  for (int64_t i = 0; i < half; ++i) {
    double a = t * std::pow(10000.0, -2.0 * i / double(u.size()));
    r[i] = u[i] * std::cos(a) - u[i + half] * std::sin(a);
    r[i + half] = u[i + half] * std::cos(a) + u[i] * std::sin(a);
  }
  return r;
}

double dot(const std::vector<double> &a, const double *b) {
  double acc = 0;
  for (size_t i = 0; i < a.size(); ++i)
    acc += a[i] * b[i];
  return acc;
}

struct AttnCase {
  int64_t heads, kvHeads;
  nn::PositionKind position;
  bool causal;
};

// Self-attention of one sequence x [T][d] as in the papers, with parameters from `r`.
Rows referenceAttention(Interp &r, const Rows &x, const AttnCase &c) {
  int64_t t = x.size(), d = x[0].size(), hd = d / c.heads, group = c.heads / c.kvHeads, k = 2;
  Rows q = linear(x, r.arg("attn.q_proj.weight"), r.arg("attn.q_proj.bias"));
  Rows kk = linear(x, r.arg("attn.k_proj.weight"), r.arg("attn.k_proj.bias"));
  Rows v = linear(x, r.arg("attn.v_proj.weight"), r.arg("attn.v_proj.bias"));
  bool relative = c.position == nn::PositionKind::Relative;
  Rows z(t, std::vector<double>(d));
  for (int64_t h = 0; h < c.heads; ++h) {
    int64_t kvh = h / group; // query head h reads kv head h / G
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> qi = head(q[i], h, hd), logits(t);
      if (c.position == nn::PositionKind::Rope)
        qi = rope(qi, i);
      for (int64_t j = 0; j < t; ++j) {
        std::vector<double> kj = head(kk[j], kvh, hd);
        if (c.position == nn::PositionKind::Rope)
          kj = rope(kj, j);
        double e = dot(qi, kj.data());
        int64_t rel = std::clamp<int64_t>(j - i, -k, k) + k;
        if (relative)
          e += dot(qi, &r.arg("attn.relative_key.weight").f[rel * hd]);
        e /= std::sqrt(double(hd));
        if (c.position == nn::PositionKind::Alibi)
          e -= std::pow(2.0, -8.0 * (h + 1) / c.heads) * std::abs(double(j - i));
        logits[j] = c.causal && j > i ? -INFINITY : e;
      }
      double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
      for (double &l : logits)
        sum += (l = std::exp(l - mx));
      for (int64_t j = 0; j < t; ++j) {
        int64_t rel = std::clamp<int64_t>(j - i, -k, k) + k;
        for (int64_t e = 0; e < hd; ++e) {
          double value = v[j][kvh * hd + e];
          if (relative)
            value += r.arg("attn.relative_value.weight").f[rel * hd + e];
          z[i][h * hd + e] += logits[j] / sum * value;
        }
      }
    }
  }
  return linear(z, r.arg("attn.o_proj.weight"), r.arg("attn.o_proj.bias"));
}

class DslAttention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(DslAttention, MatchesTheEquations) {
  const AttnCase &c = GetParam();
  const int64_t batch = 2, t = 5, d = 8;
  Builder b("attn", DType::F64);
  Tensor x = b.input("x", Type{DType::F64, {batch, t, d}});
  nn::MultiHeadAttention attn(Scope(b).child("attn"), {.dModel = d,
                                                       .nHeads = c.heads,
                                                       .nKvHeads = c.kvHeads,
                                                       .position = c.position,
                                                       .relativeK = 2,
                                                       .alibiCausal = false});
  nn::Mask mask;
  if (c.causal)
    mask.keep = nn::causalMask(b, t);
  b.output("y", attn(x, mask));
  Interp r(b, 3);
  for (double &w : r.arg("attn.q_proj.bias").f) // the init is zeros; make biases matter
    w = 0.1;
  for (double &w : r.arg("attn.v_proj.bias").f)
    w = -0.2;
  Ref y = r.output();
  for (int64_t bi = 0; bi < batch; ++bi) {
    Rows xs(t, std::vector<double>(d));
    for (int64_t i = 0; i < t; ++i)
      for (int64_t e = 0; e < d; ++e)
        xs[i][e] = r.arg("x").f[(bi * t + i) * d + e];
    Rows want = referenceAttention(r, xs, c);
    for (int64_t i = 0; i < t; ++i)
      for (int64_t e = 0; e < d; ++e)
        EXPECT_NEAR(y.f[(bi * t + i) * d + e], want[i][e], 1e-12) << bi << "," << i << "," << e;
  }
}

std::string caseName(const ::testing::TestParamInfo<AttnCase> &info) {
  constexpr const char *kKinds[] = {"None", "Sinusoidal", "Learned", "Relative", "Rope", "Alibi"};
  const AttnCase &c = info.param;
  return fmt::format("H{}Kv{}{}{}", c.heads, c.kvHeads, kKinds[int(c.position)],
                     c.causal ? "Causal" : "");
}

INSTANTIATE_TEST_SUITE_P(Dsl, DslAttention,
                         ::testing::Values(AttnCase{2, 2, nn::PositionKind::None, false},
                                           AttnCase{2, 2, nn::PositionKind::None, true},
                                           AttnCase{4, 2, nn::PositionKind::None, true},  // GQA
                                           AttnCase{4, 1, nn::PositionKind::None, false}, // MQA
                                           AttnCase{2, 2, nn::PositionKind::Relative, false},
                                           AttnCase{2, 1, nn::PositionKind::Relative, true},
                                           AttnCase{2, 2, nn::PositionKind::Rope, true},
                                           AttnCase{4, 2, nn::PositionKind::Rope, false},
                                           AttnCase{2, 2, nn::PositionKind::Alibi, false},
                                           AttnCase{4, 4, nn::PositionKind::Alibi, true}),
                         caseName);

TEST(DslNn, CrossAttentionReadsTheMemoryUnderItsPaddingMask) {
  // Keys at padding positions of the memory do not reach any query.
  Builder b("cross", DType::F64);
  Tensor x = b.input("x", Type{DType::F64, {1, 3, 8}});
  Tensor memory = b.input("memory", Type{DType::F64, {1, 4, 8}});
  Tensor src = b.input("src", Type{DType::I64, {1, 4}}, 5);
  nn::MultiHeadAttention attn(Scope(b).child("attn"), {.dModel = 8, .nHeads = 2});
  b.output("y", attn(x, memory, {.keep = nn::paddingMask(src, 0)}));
  Interp r(b);
  r.arg("src").i = {3, 0, 4, 0};
  Ref before = r.output();
  for (int e = 0; e < 8; ++e) // change the memory at padding position 1
    r.arg("memory").f[8 + e] += 1.0;
  EXPECT_EQ(r.output().f, before.f);
  r.arg("memory").f[2 * 8] += 1.0; // a real position changes every query's result
  Ref after = r.output();
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(after.f[i * 8], before.f[i * 8]);
}

} // namespace
} // namespace kiln::nn_test
