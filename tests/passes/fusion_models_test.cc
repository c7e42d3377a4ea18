// The `fusion` pipeline on every zoo model in many variants (positions, MQA/GQA, norm kind and
// placement, activations, loss): afterwards no softmax and no mean/variance/rsqrt chain is left
// outside fused ops, in the forward and in the training graph; and the optimized graph computes
// what the unoptimized one does -- outputs and every parameter gradient -- in f64 (rtol 1e-9) and
// in f32 (rtol 1e-4).
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "ir/ops/region.h"
#include "models/gpt.h"
#include "models/transformer.h"
#include "models/zoo.h"
#include "passes/optimizer.h"
#include "passes/stages.h"
#include "tests/passes/fusion_util.h"

namespace kiln::fusion_util::fusion_models_test {
namespace {

using models::Setting;
using Settings = std::vector<Setting>;

struct Variant {
  const char *model;
  Settings settings;
};

// Tiny shapes keep the reference interpreter fast: d_model 16, 4 heads, length 6 (5 targets).
Settings tiny(std::string_view model, const Settings &extra) {
  Settings s = {
      {"batch", "2"}, {"vocab", "32"}, {"d_model", "16"}, {"n_heads", "4"}, {"d_ff", "32"}};
  if (model != "t5") // t5 has no absolute positions
    s.push_back({"max_len", "16"});
  if (model == "transformer" || model == "t5")
    s.insert(
        s.end(),
        {{"src_len", "6"}, {"tgt_len", "5"}, {"n_encoder_layers", "1"}, {"n_decoder_layers", "1"}});
  else
    s.insert(s.end(), {{"seq_len", "6"}, {"n_layers", "1"}});
  s.insert(s.end(), extra.begin(), extra.end());
  return s;
}

// Twelve variants per model: every position scheme, MHA / MQA / GQA, both norm kinds and
// placements, the activations, untied heads without biases and with dropout (attention dropout
// fuses too), two layers; sliding windows for gpt and bert (the band becomes attention's
// window: gpt's causal, bert's both sides beside the padding mask); and t5's variants.
std::vector<Variant> variants() {
  const std::vector<Settings> common = {
      {},
      {{"norm", "post"}},
      {{"norm_kind", "rmsnorm"}, {"activation", "swiglu"}, {"position", "rope"}},
      {{"position", "alibi"}, {"n_kv_heads", "1"}},
      {{"position", "relative"}, {"relative_k", "2"}},
      {{"position", "sinusoidal"}, {"activation", "relu"}},
      {{"position", "none"}, {"n_kv_heads", "2"}, {"activation", "gelu_tanh"}},
      {{"bias", "false"}, {"tie_embeddings", "false"}, {"dropout", "0.1"}},
      {{"norm", "post"}, {"norm_kind", "rmsnorm"}, {"layers", "2"}},
      {{"position", "rope"}, {"n_kv_heads", "2"}, {"norm", "post"}},
      {{"position", "alibi"}, {"n_heads", "2"}, {"norm_kind", "rmsnorm"}},
      {{"position", "relative"}, {"n_kv_heads", "1"}, {"norm", "post"}, {"relative_k", "3"}},
  };
  std::vector<Variant> out;
  for (const char *model : {"gpt", "bert", "transformer"})
    for (Settings s : common) {
      for (Setting &kv : s) // "layers" is spelt per model
        if (kv.key == "layers")
          kv.key = std::string(model) == "transformer" ? "n_decoder_layers" : "n_layers";
      out.push_back({model, s});
    }
  for (const char *model : {"gpt", "bert"}) {
    out.push_back({model, {{"window", "2"}}});
    out.push_back({model, {{"window", "3"}, {"position", "alibi"}, {"n_kv_heads", "2"}}});
    out.push_back({model, {{"window", "4"}, {"position", "rope"}, {"n_layers", "2"}}});
  }
  // T5's own: its bucket biases (few buckets: the log ones in reach), gated, untied, GQA.
  out.push_back({"t5", {}});
  out.push_back({"t5", {{"activation", "swiglu"}, {"tie_embeddings", "false"}}});
  out.push_back({"t5", {{"num_buckets", "8"}, {"max_distance", "12"}, {"n_kv_heads", "2"}}});
  return out;
}

int64_t windowOf(const Variant &v) {
  for (const Setting &kv : v.settings)
    if (kv.key == "window")
      return std::stoll(kv.value);
  return 0;
}

std::string label(const Variant &v) {
  std::string s = v.model;
  for (const Setting &kv : v.settings)
    s += " " + kv.key + "=" + kv.value;
  return s;
}

Graph buildModel(const Variant &v, bool loss, std::string_view dtype) {
  Settings s = tiny(v.model, v.settings);
  s.push_back({"loss", loss ? "true" : "false"});
  s.push_back({"dtype", std::string(dtype)});
  Expected<Graph> g = models::buildModel(v.model, s);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : Graph();
}

// A mean over the last axis keeping it: the shape of a norm's mean or variance.
int normStatistics(const Graph &g) {
  int n = 0;
  for (const Node &node : g.nodes())
    if (node.op == OpKind::ReduceMean && node.attrs.getBool("keepdims") &&
        g.type(node.results[0]).shape.back() == 1 && g.type(node.operands[0]).shape.back() > 1)
      ++n;
  return n;
}

int fusedNorms(const Graph &g) {
  return count(g, OpKind::LayerNorm) + count(g, OpKind::AddLayerNorm) + count(g, OpKind::RmsNorm) +
         count(g, OpKind::AddRmsNorm);
}

// Causal self-attentions: GPT's blocks and the decoder's.
int causalAttentions(const Variant &v) {
  int layers = 1;
  for (const Setting &kv : v.settings)
    if (kv.key == "n_layers" || kv.key == "n_decoder_layers")
      layers = std::stoi(kv.value);
  return std::string(v.model) == "bert" ? 0 : layers;
}

// An attention per softmax of `plain` (which has some), a fused norm per rsqrt, and no softmax
// or norm chain left in `fused`.
void expectAttentionAndNormsFused(const Graph &plain, const Graph &fused) {
  EXPECT_GT(count(plain, OpKind::Softmax), 0);
  EXPECT_EQ(count(fused, OpKind::Attention), count(plain, OpKind::Softmax));
  EXPECT_EQ(fusedNorms(fused), count(plain, OpKind::Rsqrt));
  for (OpKind op : {OpKind::Softmax, OpKind::Rsqrt, OpKind::Sqrt})
    EXPECT_EQ(count(fused, op), 0) << mnemonic(op);
}

class FuseModels : public ::testing::TestWithParam<size_t> {};

// Every softmax became an attention and every rsqrt a fused norm; nothing of either is left,
// before or after differentiation; the causal triangles became `causal`.
TEST_P(FuseModels, NoSoftmaxOrNormChainLeft) {
  const Variant v = variants()[GetParam()];
  SCOPED_TRACE(label(v));
  bool relative = false;
  for (const Setting &kv : v.settings)
    relative = relative || kv.value == "relative";
  for (bool loss : {false, true}) {
    Graph plain = buildModel(v, loss, "f32");
    Graph fused = runSpec(plain, "fusion");
    expectAttentionAndNormsFused(plain, fused);
    EXPECT_GT(normStatistics(plain), 0);
    EXPECT_EQ(normStatistics(fused), 0);
    int causal = 0;
    for (const Node &n : fused.nodes())
      causal += n.op == OpKind::Attention && n.attrs.getBool("causal");
    EXPECT_EQ(causal, causalAttentions(v));
    int windowed = 0;
    for (const Node &n : fused.nodes())
      windowed +=
          n.op == OpKind::Attention && n.attrs.getInt("window") == windowOf(v) && windowOf(v) > 0;
    EXPECT_EQ(windowed, windowOf(v) > 0 ? count(fused, OpKind::Attention) : 0);
    // The T x T triangle is gone, except where Shaw's value term re-reads the probabilities and
    // in the encoder-decoder's target mask (keys that are not padding, or the query itself).
    if (!relative && std::string(v.model) != "transformer") {
      EXPECT_EQ(count(fused, OpKind::Tri), 0);
    }
    if (!loss)
      continue;
    Graph train = differentiated(fused, {});
    for (OpKind op : {OpKind::Softmax, OpKind::Rsqrt, OpKind::Sqrt})
      EXPECT_EQ(count(train, op), 0) << mnemonic(op);
    EXPECT_EQ(count(train, OpKind::AttentionBackward), count(fused, OpKind::Attention));
    EXPECT_EQ(count(train, OpKind::LayerNormBackward) + count(train, OpKind::RmsNormBackward),
              fusedNorms(fused));
  }
}

// The generation graphs (a decoder's prefill and one-token decode step over a KV cache, an
// encoder-decoder's encoder and decode step) fuse as the forward does: no softmax and no norm
// chain left, an attention per softmax.
TEST_P(FuseModels, GenerationGraphsFuseToo) {
  const Variant v = variants()[GetParam()];
  if (std::string(v.model) != "gpt" && std::string(v.model) != "transformer")
    GTEST_SKIP() << "no generation graphs";
  SCOPED_TRACE(label(v));
  const Settings s = tiny(v.model, v.settings);
  std::vector<Graph> graphs;
  if (std::string(v.model) == "gpt") {
    Expected<models::GptConfig> c = models::gptConfig(s);
    ASSERT_TRUE(c.ok()) << c.error().message;
    for (models::GptGraph which : {models::GptGraph::Prefill, models::GptGraph::Decode}) {
      Expected<Graph> g = models::buildGptCached(*c, which);
      ASSERT_TRUE(g.ok()) << g.error().message;
      graphs.push_back(std::move(*g));
    }
  } else {
    Expected<models::TransformerConfig> c = models::transformerConfig(s);
    ASSERT_TRUE(c.ok()) << c.error().message;
    for (models::TransformerGraph which :
         {models::TransformerGraph::Encode, models::TransformerGraph::Decode}) {
      Expected<Graph> g = models::buildTransformerCached(*c, which);
      ASSERT_TRUE(g.ok()) << g.error().message;
      graphs.push_back(std::move(*g));
    }
  }
  for (const Graph &plain : graphs) {
    Graph fused = runSpec(plain, "fusion");
    expectAttentionAndNormsFused(plain, fused);
  }
}

// Optimized vs unoptimized: outputs (logits, loss) and every parameter gradient.
TEST_P(FuseModels, SameOutputsAndGradients) {
  const Variant v = variants()[GetParam()];
  SCOPED_TRACE(label(v));
  Graph plain = buildModel(v, true, "f64");
  Graph fused = runSpec(plain, "fusion");
  EXPECT_EQ(count(fused, OpKind::Softmax), 0);
  EXPECT_EQ(count(fused, OpKind::Attention), count(plain, OpKind::Softmax));
  double fwd = expectSameOutputs<double>(fused, plain, 1e-9, 11);
  double bwd =
      expectSameOutputs<double>(differentiated(fused, {}), differentiated(plain, {}), 1e-9, 12);
  Graph plain32 = buildModel(v, true, "f32");
  Graph fused32 = runSpec(plain32, "fusion");
  double fwd32 = expectSameOutputs<float>(fused32, plain32, 1e-4, 13);
  double bwd32 =
      expectSameOutputs<float>(differentiated(fused32, {}), differentiated(plain32, {}), 1e-4, 14);
  RecordProperty("max_rel_diff_f64", fmt::format("{:.3g}", std::max(fwd, bwd)));
  RecordProperty("max_rel_diff_f32", fmt::format("{:.3g}", std::max(fwd32, bwd32)));
}

// `lower` after fusion (pointwise regions, matmul epilogues, the memory plan): the forward graph,
// gradients taken through its regions, and the whole lowered training step compute what the
// plain graphs do.
TEST_P(FuseModels, LoweredGraphsAgree) {
  const Variant v = variants()[GetParam()];
  SCOPED_TRACE(label(v));
  Graph plain = buildModel(v, true, "f64");
  Graph lowered = runSpec(plain, "default,lower");
  EXPECT_NE(lowered.memoryPlan(), nullptr);
  int epilogues = 0, looseMatmuls = count(lowered, OpKind::Matmul);
  for (const Node &n : lowered.nodes())
    if (n.op == OpKind::Fusion) {
      Expected<RegionInfo> info = analyzeRegion(regionBody(n));
      ASSERT_TRUE(info) << info.error().message;
      epilogues += info->matmul != kNone;
    }
  EXPECT_GT(epilogues, 0);
  EXPECT_LT(looseMatmuls, count(plain, OpKind::Matmul));
  double fwd = expectSameOutputs<double>(lowered, plain, 1e-9, 21);
  double bwd =
      expectSameOutputs<double>(differentiated(lowered, {}), differentiated(plain, {}), 1e-9, 22);
  passes::OptimizerConfig sgd;
  sgd.kind = passes::OptimizerConfig::Kind::Sgd;
  sgd.momentum = 0.9;
  Expected<Graph> step = passes::trainingStep(plain, sgd);
  Expected<Graph> plainStep = passes::buildTrainingStep(differentiated(plain, {}), sgd);
  ASSERT_TRUE(step && plainStep);
  EXPECT_GT(count(*step, OpKind::Fusion), count(lowered, OpKind::Fusion));
  double stepDiff = expectSameOutputs<double>(*step, *plainStep, 1e-9, 23);
  Graph plain32 = buildModel(v, true, "f32");
  Expected<Graph> step32 = passes::trainingStep(plain32, sgd);
  Expected<Graph> plainStep32 = passes::buildTrainingStep(differentiated(plain32, {}), sgd);
  ASSERT_TRUE(step32 && plainStep32);
  double stepDiff32 = expectSameOutputs<float>(*step32, *plainStep32, 1e-4, 24);
  RecordProperty("max_rel_diff_f64", fmt::format("{:.3g}", std::max({fwd, bwd, stepDiff})));
  RecordProperty("max_rel_diff_f32_step", fmt::format("{:.3g}", stepDiff32));
}

// Named model_vN, N counting that model's variants.
INSTANTIATE_TEST_SUITE_P(FuseModelZoo, FuseModels, ::testing::Range<size_t>(0, variants().size()),
                         [](const auto &info) {
                           const std::vector<Variant> all = variants();
                           const std::string model = all[info.param].model;
                           size_t n = 0;
                           for (size_t k = 0; k < info.param; ++k)
                             n += all[k].model == model;
                           return model + "_v" + std::to_string(n);
                         });

} // namespace
} // namespace kiln::fusion_util::fusion_models_test
