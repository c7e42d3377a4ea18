// The zoo's graphs do what their architectures promise, on the reference interpreter: a causal
// model's logits at t ignore later tokens; padding keys reach no other position; only position
// schemes make token order matter; dropout acts; every variant is finite, and so is a training
// step on a batch with a row that is all padding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "codegen/reference/interpreter.h"
#include "models/zoo.h"
#include "passes/autodiff.h"
#include "passes/optimizer.h"
#include "passes/stages.h"
#include "tests/util/model_variants.h"

namespace kiln::model_numerics_test {
namespace {

using models::Setting;
using Settings = std::vector<Setting>;
using Ref = ir::RefTensor<double>;

using test_util::label;

// A zoo model with deterministic arguments, run in f64.
struct ModelRun {
  ir::Graph g;
  std::vector<Ref> args;
  int64_t t = 0, v = 0; // logits [B, t, v]

  ModelRun(std::string_view model, const Settings &settings) {
    Expected<ir::Graph> built = models::buildModel(model, settings);
    EXPECT_TRUE(built.ok()) << built.error().message;
    if (!built.ok())
      return;
    g = std::move(*built);
    args = reference::makeArgs<double>(g, 5);
    const ir::Shape &shape = g.type(g.outputs()[0].value).shape;
    t = shape[1];
    v = shape[2];
  }
  Ref &arg(std::string_view name) {
    for (size_t i = 0; i < args.size(); ++i)
      if (g.args()[i].name == name)
        return args[i];
    ADD_FAILURE() << "no argument " << name;
    return args[0];
  }
  // Token k of batch row b of an i64 [B, L] input.
  int64_t &token(std::string_view input, int64_t b, int64_t k) {
    Ref &x = arg(input);
    return x.i[b * x.type.shape[1] + k];
  }
  Ref logits() {
    Expected<std::vector<Ref>> out = reference::run<double>(g, args);
    EXPECT_TRUE(out.ok()) << out.error().message;
    return out.ok() ? (*out)[0] : Ref();
  }
  // The logits of batch row b at position p.
  std::vector<double> row(const Ref &logits, int64_t b, int64_t p) const {
    auto first = logits.f.begin() + (b * t + p) * v;
    return {first, first + v};
  }
};

double maxDiff(const std::vector<double> &a, const std::vector<double> &b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, std::abs(a[i] - b[i]));
  return a.size() == b.size() ? d : INFINITY;
}

constexpr double kSame = 1e-9, kDifferent = 1e-6;

// Replaces every token of `input` after position `after` (in every batch row) by another id
// that is not 0 (the padding id).
void changeTokensAfter(ModelRun &r, std::string_view input, int64_t after) {
  Ref &x = r.arg(input);
  int64_t len = x.type.shape[1];
  for (int64_t b = 0; b < x.type.shape[0]; ++b)
    for (int64_t k = after + 1; k < len; ++k)
      r.token(input, b, k) = r.token(input, b, k) % 200 + 7;
}

// Makes every token of `input` nonzero (not padding).
void noPadding(ModelRun &r, std::string_view input) {
  for (int64_t &id : r.arg(input).i)
    id = id == 0 ? 1 : id;
}

void expectCausal(std::string_view model, const Settings &s, std::string_view input) {
  SCOPED_TRACE(label(model, s));
  ModelRun r(model, s);
  noPadding(r, input);
  Ref before = r.logits();
  const int64_t t0 = 9;
  changeTokensAfter(r, input, t0);
  Ref after = r.logits();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t p = 0; p <= t0; ++p)
      EXPECT_LT(maxDiff(r.row(before, b, p), r.row(after, b, p)), kSame) << b << "," << p;
    EXPECT_GT(maxDiff(r.row(before, b, r.t - 1), r.row(after, b, r.t - 1)), kDifferent);
  }
}

class ModelPositions : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelPositions, GptLogitsIgnoreLaterTokens) {
  expectCausal("gpt", {{"position", GetParam()}}, "tokens");
  expectCausal("gpt", {{"position", GetParam()}, {"norm", "post"}, {"n_kv_heads", "2"}}, "tokens");
}

TEST_P(ModelPositions, TransformerLogitsIgnoreLaterTargetTokens) {
  expectCausal("transformer", {{"position", GetParam()}}, "tgt");
  expectCausal("transformer", {{"position", GetParam()}, {"norm", "pre"}, {"n_kv_heads", "1"}},
               "tgt");
}

TEST_P(ModelPositions, BertPaddingKeysReachNoOtherPosition) {
  for (const char *norm : {"post", "pre"}) {
    Settings s = {{"position", GetParam()}, {"norm", norm}};
    SCOPED_TRACE(label("bert", s));
    ModelRun r("bert", s);
    noPadding(r, "tokens");
    r.token("tokens", 0, 5) = 0; // pad_id
    Ref before = r.logits();
    r.token("token_types", 0, 5) = 1 - r.token("token_types", 0, 5); // the pad's embedding changes
    Ref after = r.logits();
    for (int64_t p = 0; p < r.t; ++p) {
      double d = maxDiff(r.row(before, 0, p), r.row(after, 0, p));
      if (p == 5)
        EXPECT_GT(d, kDifferent);
      else
        EXPECT_LT(d, kSame) << p;
    }
  }
}

TEST_P(ModelPositions, TransformerSourcePaddingReachesNothing) {
  Settings s = {{"position", GetParam()}, {"tie_embeddings", "false"}};
  SCOPED_TRACE(label("transformer", s));
  ModelRun r("transformer", s);
  noPadding(r, "src");
  noPadding(r, "tgt");
  r.token("src", 0, 3) = 0; // pad_id
  Ref before = r.logits();
  Ref &embed = r.arg("encoder.embed.weight"); // row 0 is the padding token's source embedding
  for (int64_t e = 0; e < embed.type.shape[1]; ++e)
    embed.f[e] += 0.5;
  EXPECT_LT(maxDiff(before.f, r.logits().f), kSame);
  r.token("src", 0, 4) = r.token("src", 0, 4) % 200 + 7; // a real source token reaches all
  Ref after = r.logits();
  for (int64_t p = 0; p < r.t; ++p)
    EXPECT_GT(maxDiff(r.row(before, 0, p), r.row(after, 0, p)), kDifferent) << p;
  EXPECT_LT(maxDiff(r.row(before, 1, 0), r.row(after, 1, 0)), kSame); // the other batch row
}

// Passes iff `d` is ~0 when there is no position information and clearly nonzero otherwise.
void expectOrderEffect(bool none, double d) {
  if (none)
    EXPECT_LT(d, kSame);
  else
    EXPECT_GT(d, kDifferent);
}

// Without positions, attention sees a set: a one-layer GPT's output at t depends on token t and
// the set of tokens up to t (deeper, the earlier hidden states differ), and BERT is
// permutation-equivariant. Position schemes break both.
TEST_P(ModelPositions, TokenOrderMattersOnlyWithPositions) {
  bool none = GetParam() == "none";
  {
    Settings s = {{"position", GetParam()}, {"n_layers", "1"}};
    SCOPED_TRACE(label("gpt", s));
    ModelRun r("gpt", s);
    r.token("tokens", 0, 0) = 10;
    r.token("tokens", 0, 1) = 20;
    Ref before = r.logits();
    std::swap(r.token("tokens", 0, 0), r.token("tokens", 0, 1));
    Ref after = r.logits();
    for (int64_t p : {2, 3})
      expectOrderEffect(none, maxDiff(r.row(before, 0, p), r.row(after, 0, p)));
    // Relative distances are clipped to +-relative_k (8): from the last position both swapped
    // tokens are "8 or more back", so the swap is invisible there.
    if (GetParam() == "relative") {
      EXPECT_LT(maxDiff(r.row(before, 0, r.t - 1), r.row(after, 0, r.t - 1)), kSame);
    }
  }
  {
    SCOPED_TRACE(label("bert", {{"position", GetParam()}}));
    ModelRun r("bert", {{"position", GetParam()}});
    noPadding(r, "tokens");
    for (int64_t &type : r.arg("token_types").i)
      type = 0;
    r.token("tokens", 0, 2) = 10;
    r.token("tokens", 0, 7) = 20;
    Ref before = r.logits();
    std::swap(r.token("tokens", 0, 2), r.token("tokens", 0, 7));
    Ref after = r.logits();
    double swapped = maxDiff(r.row(before, 0, 7), r.row(after, 0, 2));
    double others = maxDiff(r.row(before, 0, 0), r.row(after, 0, 0));
    expectOrderEffect(none, swapped);
    expectOrderEffect(none, others);
  }
}

INSTANTIATE_TEST_SUITE_P(Model, ModelPositions,
                         ::testing::Values("learned", "sinusoidal", "relative", "rope", "alibi",
                                           "none"));

TEST(ModelNumerics, DropoutChangesTheLogitsAndItsSeedTheMask) {
  Ref plain = ModelRun("gpt", {}).logits();
  Ref seed0 = ModelRun("gpt", {{"dropout", "0.1"}}).logits();
  Ref seed9 = ModelRun("gpt", {{"dropout", "0.1"}, {"seed", "9"}}).logits();
  EXPECT_GT(maxDiff(plain.f, seed0.f), kDifferent); // same weights: arguments follow names
  EXPECT_GT(maxDiff(seed0.f, seed9.f), kDifferent);
  EXPECT_LT(maxDiff(seed0.f, ModelRun("gpt", {{"dropout", "0.1"}}).logits().f), kSame);
}

TEST(ModelNumerics, TiedLogitsAreHiddenStatesTimesTheEmbedding) {
  // Zeroing a token's embedding row zeroes its logit everywhere (no output bias in GPT).
  ModelRun r("gpt", {});
  Ref &embed = r.arg("tok_embed.weight");
  for (int64_t e = 0; e < 64; ++e)
    embed.f[42 * 64 + e] = 0;
  Ref logits = r.logits();
  for (int64_t p = 0; p < r.t; ++p)
    EXPECT_EQ(r.row(logits, 1, p)[42], 0.0);
}

TEST(ModelNumerics, EveryVariantGivesFiniteLogits) {
  std::vector<std::pair<std::string, Settings>> variants;
  for (const char *model : {"gpt", "bert", "transformer"})
    for (const char *position : {"learned", "sinusoidal", "relative", "rope", "alibi", "none"}) {
      variants.push_back({model, {{"position", position}}});
      variants.push_back({model,
                          {{"position", position},
                           {"norm_kind", "rmsnorm"},
                           {"activation", "swiglu"},
                           {"n_kv_heads", "1"},
                           {"dtype", "bf16"},
                           {"dropout", "0.1"}}});
    }
  for (const auto &[model, s] : variants) {
    SCOPED_TRACE(label(model, s));
    Expected<ir::Graph> g = models::buildModel(model, s);
    ASSERT_TRUE(g.ok()) << g.error().message;
    std::vector<ir::RefTensor<float>> args = reference::makeArgs<float>(*g, 11);
    Expected<std::vector<ir::RefTensor<float>>> out = reference::run<float>(*g, args);
    ASSERT_TRUE(out.ok()) << out.error().message;
    for (float x : (*out)[0].f)
      ASSERT_TRUE(std::isfinite(x));
  }
}

// A batch row that is all padding (BERT's padding mask, the encoder-decoder's source mask) leaves
// its attention rows with no key at all. Softmax and the fused attention give such rows zeros,
// not NaN, so the whole training step -- loss, every updated parameter and optimizer state --
// stays finite, on the raw graph and on the fused and lowered one, for several positions and
// attention kinds. (A NaN there used to poison every weight in one step.)
TEST(ModelNumerics, AnAllPaddingRowKeepsTheTrainingStepFinite) {
  const std::pair<std::string, std::string> padded[] = {{"bert", "tokens"}, {"transformer", "src"}};
  for (const auto &[model, input] : padded)
    for (const char *position : {"learned", "alibi", "relative"}) {
      Settings s = {{"loss", "true"},  {"position", position}, {"n_kv_heads", "2"},
                    {"d_model", "16"}, {"n_heads", "4"},       {"d_ff", "32"}};
      SCOPED_TRACE(label(model, s));
      Expected<ir::Graph> forward = models::buildModel(model, s);
      ASSERT_TRUE(forward.ok()) << forward.error().message;
      for (bool fused : {false, true}) {
        Expected<ir::Graph> step =
            fused ? passes::trainingStep(*forward, {})
                  : passes::buildTrainingStep(*passes::differentiate(*forward), {});
        ASSERT_TRUE(step.ok()) << step.error().message;
        std::vector<ir::RefTensor<float>> args = reference::makeArgs<float>(*step, 3);
        for (size_t a = 0; a < args.size(); ++a)
          if (step->args()[a].name == input) // row 0 is all padding (id 0)
            std::fill(args[a].i.begin(), args[a].i.begin() + args[a].type.shape[1], 0);
        Expected<std::vector<ir::RefTensor<float>>> out = reference::run<float>(*step, args);
        ASSERT_TRUE(out.ok()) << out.error().message;
        for (size_t o = 0; o < out->size(); ++o)
          for (float x : (*out)[o].f)
            ASSERT_TRUE(std::isfinite(x)) << step->outputs()[o].name << (fused ? " (fused)" : "");
      }
    }
}

} // namespace
} // namespace kiln::model_numerics_test
