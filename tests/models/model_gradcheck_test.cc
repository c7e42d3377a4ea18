// Whole-model gradient checks: each zoo model in training mode (loss=true), in f64 at a tiny
// size, differentiated by passes::differentiate and run on the reference interpreter; every
// parameter's gradient is compared with central differences of the loss,
//   dL/dθ_k ≈ (L(θ + ε e_k) - L(θ - ε e_k)) / 2ε,  ε = 1e-6,  |a - n| <= 1e-5 + 1e-3 |n|,
// at every element of a small tensor and at a fixed stratified sample of larger ones.
// The variants cover every norm placement, norm kind, position scheme, attention kind
// (MHA/GQA/MQA), activation and weight init, with label smoothing, ignored targets, dropout
// under a fixed seed, untied heads and bias-free layers mixed in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "codegen/reference/interpreter.h"
#include "models/zoo.h"
#include "passes/autodiff.h"
#include "support/rng.h"

namespace kiln::model_gradcheck_test {
namespace {

using models::Setting;
using Settings = std::vector<Setting>;
using Ref = ir::RefTensor<double>;

constexpr double kEps = 1e-6, kAtol = 1e-5, kRtol = 1e-3;
constexpr int64_t kVocab = 11;
// Tensors up to this many elements are checked everywhere; larger ones at kSample elements.
constexpr int64_t kAllUpTo = 64, kSample = 16;

struct GradVariant {
  std::string name; // test name suffix
  std::string model;
  Settings settings; // on top of the tiny base below
};

// vocab 11, d_model 8, d_ff 16, batch 2, length 5 (the transformer's target 4), 1 layer each
// unless a variant says otherwise; loss on, f64.
Settings tinyBase(const std::string &model) {
  Settings s = {{"vocab", std::to_string(kVocab)},
                {"d_model", "8"},
                {"n_heads", "2"},
                {"d_ff", "16"},
                {"batch", "2"},
                {"max_len", "8"},
                {"relative_k", "2"},
                {"dtype", "f64"},
                {"loss", "true"}};
  if (model == "transformer") {
    for (Setting kv : Settings{{"src_len", "5"},
                               {"tgt_len", "4"},
                               {"n_encoder_layers", "1"},
                               {"n_decoder_layers", "1"}})
      s.push_back(kv);
  } else {
    s.push_back({"seq_len", "5"});
    s.push_back({"n_layers", "1"});
  }
  return s;
}

// GQA needs more query heads than kv heads with kv heads > 1: 4 heads of width 2, 2 kv heads.
const Settings kGqa = {{"n_heads", "4"}, {"n_kv_heads", "2"}};
const Settings kMqa = {{"n_kv_heads", "1"}};

Settings with(Settings a, const Settings &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<GradVariant> kGradVariants = {
    // GPT-2 as configured by default (pre-LN, learned, MHA, tanh-GELU, tied), two layers.
    {"GptPreLearnedMhaGeluTanh", "gpt", {{"n_layers", "2"}}},
    // LLaMA-like: RMSNorm, RoPE, MQA, SwiGLU, no biases; post-LN here; label smoothing.
    {"GptPostRopeMqaSwiglu", "gpt",
     with(kMqa, {{"norm", "post"},
                 {"norm_kind", "rmsnorm"},
                 {"position", "rope"},
                 {"activation", "swiglu"},
                 {"bias", "false"},
                 {"label_smoothing", "0.1"}})},
    // Gemma-7B-like: GeGLU, the embeddings scaled by sqrt(d_model), heads of 6 (not d_model / 2
    // = 4), RMSNorm, RoPE, MQA, tied.
    {"GptPreRopeMqaGegluScaledWideHeads", "gpt",
     with(kMqa, {{"head_dim", "6"},
                 {"norm_kind", "rmsnorm"},
                 {"position", "rope"},
                 {"activation", "geglu"},
                 {"scale_embeddings", "true"},
                 {"bias", "false"}})},
    {"GptPreAlibiGqaReluDropout", "gpt",
     with(kGqa, {{"norm_kind", "rmsnorm"},
                 {"position", "alibi"},
                 {"activation", "relu"},
                 {"dropout", "0.1"},
                 {"seed", "3"},
                 {"tie_embeddings", "false"}})},
    {"GptPostRelativeMhaGeluXavierPadIgnored",
     "gpt",
     {{"norm", "post"},
      {"position", "relative"},
      {"activation", "gelu"},
      {"init", "xavier"},
      {"ignore_index", "pad_id"}}},
    {"GptPreNoneMqaGeluTanhUntied", "gpt",
     with(kMqa, {{"position", "none"}, {"tie_embeddings", "false"}, {"label_smoothing", "0.2"}})},
    // BERT as configured by default (post-LN, learned, exact GELU, tied), two layers.
    {"BertPostLearnedMhaGelu", "bert", {{"n_layers", "2"}}},
    {"BertPreRopeGqaSwigluSmoothed", "bert",
     with(kGqa, {{"norm", "pre"},
                 {"norm_kind", "rmsnorm"},
                 {"position", "rope"},
                 {"activation", "swiglu"},
                 {"label_smoothing", "0.2"}})},
    {"BertPostAlibiMqaReluDropoutUntied", "bert",
     with(kMqa, {{"position", "alibi"},
                 {"activation", "relu"},
                 {"dropout", "0.1"},
                 {"seed", "7"},
                 {"tie_embeddings", "false"}})},
    {"BertPreRelativeMhaGeluTanhNoBias",
     "bert",
     {{"norm", "pre"},
      {"position", "relative"},
      {"activation", "gelu_tanh"},
      {"bias", "false"},
      {"init", "xavier"}}},
    // The paper's model (post-LN, sinusoidal, ReLU, tied, Xavier) with its label smoothing 0.1.
    {"TransformerPostSinusoidalMhaReluSmoothed", "transformer", {{"label_smoothing", "0.1"}}},
    {"TransformerPreRopeGqaSwigluUntied", "transformer",
     with(kGqa, {{"norm", "pre"},
                 {"norm_kind", "rmsnorm"},
                 {"position", "rope"},
                 {"activation", "swiglu"},
                 {"tie_embeddings", "false"},
                 {"init", "normal"}})},
    {"TransformerPostLearnedMqaGeluDropout", "transformer",
     with(kMqa, {{"position", "learned"},
                 {"activation", "gelu"},
                 {"dropout", "0.1"},
                 {"seed", "11"},
                 {"n_decoder_layers", "2"}})},
    {"TransformerPreRelativeMhaGeluTanhNoBias",
     "transformer",
     {{"norm", "pre"},
      {"position", "relative"},
      {"activation", "gelu_tanh"},
      {"bias", "false"},
      {"label_smoothing", "0.1"}}},
    {"TransformerPostAlibiGqaRelu", "transformer",
     with(kGqa, {{"norm_kind", "rmsnorm"}, {"position", "alibi"}})},
};

Ref &argNamed(const ir::Graph &g, std::vector<Ref> &args, std::string_view name) {
  for (size_t i = 0; i < args.size(); ++i)
    if (g.args()[i].name == name)
      return args[i];
  ADD_FAILURE() << "no argument " << name;
  return args[0];
}

// Fills an i64 [B, L] input: element (b, k) = f(b, k).
template <class Fn> void fill(Ref &t, Fn f) {
  int64_t len = t.type.shape[1];
  for (int64_t k = 0; k < t.size(); ++k)
    t.i[k] = f(k / len, k % len);
}

// Explicit token and target values (random ones could hit a fully padded row, or targets out
// of the vocabulary): real tokens in [1, V), some padding (id 0), and targets that are valid
// ids except where they equal the ignore index.
void setData(const GradVariant &v, const ir::Graph &g, std::vector<Ref> &args, int64_t ignore) {
  auto token = [](int64_t b, int64_t k) { return 1 + (7 * b + 3 * k + 2) % (kVocab - 1); };
  auto target = [&](int64_t b, int64_t k) {
    return (b + k) % 3 == 1 ? ignore : (5 * b + 4 * k + 1) % kVocab;
  };
  if (v.model == "gpt") {
    fill(argNamed(g, args, "tokens"), token);
    fill(argNamed(g, args, "targets"), target);
  } else if (v.model == "bert") {
    // Row 1 ends in two pads; targets scored only at "masked" positions, -100 elsewhere.
    fill(argNamed(g, args, "tokens"),
         [&](int64_t b, int64_t k) { return b == 1 && k >= 3 ? 0 : token(b, k); });
    fill(argNamed(g, args, "token_types"), [](int64_t, int64_t k) { return k >= 3 ? 1 : 0; });
    fill(argNamed(g, args, "targets"),
         [&](int64_t b, int64_t k) { return (b + 2 * k) % 3 == 0 ? token(b, k + 1) : ignore; });
  } else {
    // Source row 0 ends in a pad; target row 1 ends in a pad, unscored.
    fill(argNamed(g, args, "src"),
         [&](int64_t b, int64_t k) { return b == 0 && k == 4 ? 0 : token(b, k); });
    fill(argNamed(g, args, "tgt"), [&](int64_t b, int64_t k) {
      return b == 1 && k == 3 ? 0 : k == 0 ? 1 : token(b + 1, k);
    });
    fill(argNamed(g, args, "targets"),
         [&](int64_t b, int64_t k) { return b == 1 && k >= 2 ? 0 : token(b + 1, k + 1); });
  }
}

// Moves every parameter away from its init to a generic point where activations are O(1):
// matrices and embeddings N(0, 1/fan_in), biases 0.2 N(0, 1), gains 1 + 0.2 N(0, 1). At the
// inits, the attention logits are ~0 and many gradients ~1e-7, under the absolute tolerance
// (a check that cannot fail), and zero biases and unit gains would hide rules that are wrong
// only elsewhere.
void spreadParams(const ir::Graph &g, std::vector<Ref> &args, uint64_t seed) {
  for (size_t i = 0; i < args.size(); ++i) {
    const ir::Arg &a = g.args()[i];
    if (a.kind != ir::Arg::Kind::Param)
      continue;
    Ref &t = args[i];
    uint64_t stream = rng::mix64(seed + i);
    bool matrix = t.type.rank() >= 2, gain = a.init.kind == ir::ParamInit::Kind::Ones;
    double scale = matrix ? 1 / std::sqrt(double(t.type.shape.back())) : 0.2;
    for (int64_t k = 0; k < t.size(); ++k)
      t.f[k] = (gain ? 1 : 0) + scale * rng::normal(stream, k);
  }
}

int64_t countEqual(const Ref &t, int64_t value) {
  return std::count(t.i.begin(), t.i.end(), value);
}

// The elements of a tensor of `n` elements to check: all, or one per stratum of n / kSample.
std::vector<int64_t> sampleOf(int64_t n, uint64_t seed) {
  std::vector<int64_t> ks;
  if (n <= kAllUpTo) {
    for (int64_t k = 0; k < n; ++k)
      ks.push_back(k);
    return ks;
  }
  for (int64_t j = 0; j < kSample; ++j) {
    int64_t lo = j * n / kSample, hi = (j + 1) * n / kSample;
    ks.push_back(lo + static_cast<int64_t>(rng::bits(seed, j) % uint64_t(hi - lo)));
  }
  return ks;
}

// Compares the analytic gradient of argument i with central differences of the loss at the
// sampled elements; returns the largest |central difference| seen.
double checkParam(const std::string &name, const std::vector<Ref> &args, size_t i,
                  const Ref &analytic,
                  const std::function<double(const std::vector<Ref> &)> &loss) {
  double largest = 0;
  int bad = 0;
  for (int64_t k : sampleOf(args[i].size(), rng::mix64(i))) {
    std::vector<Ref> plus = args, minus = args;
    plus[i].f[k] += kEps;
    minus[i].f[k] -= kEps;
    double numeric = (loss(plus) - loss(minus)) / (2 * kEps), got = analytic.f[k];
    largest = std::max(largest, std::fabs(numeric));
    if (!(std::fabs(got - numeric) <= kAtol + kRtol * std::fabs(numeric)) && bad++ < 3)
      ADD_FAILURE() << fmt::format("d loss / d {}[{}] of {}: analytic {}, central difference {}",
                                   name, k, ir::typeString(args[i].type), got, numeric);
  }
  return largest;
}

void PrintTo(const GradVariant &v, std::ostream *os) {
  *os << v.model << " " << v.name;
}

class ModelGrad : public ::testing::TestWithParam<GradVariant> {};

TEST_P(ModelGrad, EveryParameterGradientMatchesCentralDifferences) {
  const GradVariant &v = GetParam();
  Expected<ir::Graph> built = models::buildModel(v.model, with(tinyBase(v.model), v.settings));
  ASSERT_TRUE(built.ok()) << built.error().message;
  const ir::Graph &g = *built;
  Expected<ir::Graph> dg = passes::differentiate(g); // d loss / d every parameter
  ASSERT_TRUE(dg.ok()) << dg.error().message;
  for (const Error &e : ir::verify(*dg))
    ADD_FAILURE() << "backward graph: " << e.message;

  // The ignore index each model uses by default (transformer: pad_id 0) or was given.
  bool padIgnored = v.model == "transformer" ||
                    std::count_if(v.settings.begin(), v.settings.end(), [](const Setting &s) {
                      return s.key == "ignore_index" && s.value == "pad_id";
                    });
  int64_t ignore = padIgnored ? 0 : -100;
  std::vector<Ref> args = reference::makeArgs<double>(g, 17);
  spreadParams(g, args, 23);
  setData(v, g, args, ignore);
  const Ref &targets = argNamed(g, args, "targets");
  ASSERT_GT(countEqual(targets, ignore), 0) << "no ignored target";
  ASSERT_LT(countEqual(targets, ignore), targets.size()) << "no scored target";

  int lossOut = 1; // outputs: logits, loss, grad.*
  ASSERT_EQ(g.outputs()[lossOut].name, "loss");
  auto lossAt = [&](const std::vector<Ref> &a) {
    Expected<std::vector<Ref>> r = reference::run<double>(g, a);
    EXPECT_TRUE(r.ok()) << r.error().message;
    return r.ok() ? (*r)[lossOut].f[0] : NAN;
  };
  Expected<std::vector<Ref>> out = reference::run<double>(*dg, args);
  ASSERT_TRUE(out.ok()) << out.error().message;
  double loss = (*out)[lossOut].f[0];
  ASSERT_TRUE(std::isfinite(loss));
  EXPECT_EQ(loss, lossAt(args)) << "differentiation changed the forward value";

  int params = 0;
  for (size_t i = 0; i < g.args().size(); ++i) {
    const ir::Arg &a = g.args()[i];
    if (a.kind != ir::Arg::Kind::Param)
      continue;
    ++params;
    const ir::Output *go = dg->findOutput("grad." + a.name);
    ASSERT_NE(go, nullptr) << "no gradient for " << a.name;
    const Ref &analytic = (*out)[go - dg->outputs().data()];
    ASSERT_EQ(analytic.type, args[i].type) << a.name;
    double largest = checkParam(a.name, args, i, analytic, lossAt);
    // Softmax ignores a shift shared by all keys, and q_i . b_k is one: the k_proj bias has a
    // zero gradient (RoPE aside), checked as such. Any other tensor needs a gradient well
    // above the tolerance somewhere, or its check could not fail.
    if (!a.name.ends_with("k_proj.bias")) {
      EXPECT_GT(largest, 100 * kAtol) << a.name << ": gradient too small for a meaningful check";
    }
  }
  EXPECT_EQ(dg->outputs().size(), g.outputs().size() + params);
}

INSTANTIATE_TEST_SUITE_P(Model, ModelGrad, ::testing::ValuesIn(kGradVariants),
                         [](const ::testing::TestParamInfo<GradVariant> &info) {
                           return info.param.name;
                         });

// The value of `key` in variant v: its setting, else the model's default (from describe()).
std::string valueOf(const GradVariant &v, const std::string &key) {
  std::string value;
  for (const std::string &line : models::findModel(v.model)->describe())
    if (line.rfind(key + " = ", 0) == 0)
      value = line.substr(key.size() + 3, line.find("  (") - key.size() - 3);
  for (const Setting &s : with(tinyBase(v.model), v.settings))
    if (s.key == key)
      value = s.value;
  return value;
}

// Every value of every variant knob appears in some variant above, for some model.
TEST(ModelGradVariants, CoverEveryValueOfEveryKnob) {
  std::vector<std::pair<std::string, std::vector<std::string>>> knobs = {
      {"norm", {"pre", "post"}},
      {"norm_kind", {"layernorm", "rmsnorm"}},
      {"position", {"sinusoidal", "learned", "relative", "rope", "alibi", "none"}},
      {"n_kv_heads", {"0", "1", "2"}}, // MHA, MQA, GQA (with n_heads 4)
      {"activation", {"relu", "gelu", "gelu_tanh", "swiglu", "geglu"}},
      {"scale_embeddings", {"true", "false"}},
      {"init", {"normal", "xavier"}},
      {"tie_embeddings", {"true", "false"}},
      {"bias", {"true", "false"}},
  };
  for (const auto &[key, values] : knobs)
    for (const std::string &value : values)
      EXPECT_TRUE(std::any_of(kGradVariants.begin(), kGradVariants.end(),
                              [&](const GradVariant &v) { return valueOf(v, key) == value; }))
          << key << "=" << value << " is in no variant";
  for (const char *model : {"gpt", "bert", "transformer"}) {
    auto ofModel = [&](const GradVariant &v) { return v.model == model; };
    EXPECT_GE(std::count_if(kGradVariants.begin(), kGradVariants.end(), ofModel), 4) << model;
  }
  EXPECT_GE(kGradVariants.size(), 12u);
}

} // namespace
} // namespace kiln::model_gradcheck_test
