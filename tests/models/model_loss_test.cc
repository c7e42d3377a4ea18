// Training mode of the zoo models: loss=true adds the input "targets" and the scalar output
// "loss" (the mean cross-entropy of the logits, with each model's ignore index and label
// smoothing), init=normal|xavier picks the weight-matrix initialiser, and bad values of the
// new keys are errors that name the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "codegen/reference/interpreter.h"
#include "models/transformer.h"
#include "models/zoo.h"
#include "tests/models/model_test_util.h"

namespace kiln::model_loss_test {
namespace {

using ir::DType;
using ir::ParamInit;
using ir::Type;
using models::Setting;
using Settings = std::vector<Setting>;
using Ref = ir::RefTensor<double>;

using testing_models::build;
using testing_models::buildError;

std::vector<std::string> outputNames(const ir::Graph &g) {
  std::vector<std::string> names;
  for (const ir::Output &o : g.outputs())
    names.push_back(o.name);
  return names;
}

TEST(ModelLoss, TrainingModeAddsTargetsAndALossOutput) {
  struct Case {
    const char *model;
    const char *lengthKey; // the targets' length: seq_len, or the transformer's tgt_len
    int64_t range;         // unstated (0) when the ignore index -100 lies outside the vocabulary
  };
  for (Case c : {Case{"gpt", "seq_len", 0}, Case{"bert", "seq_len", 0},
                 Case{"transformer", "tgt_len", 256}}) {
    SCOPED_TRACE(c.model);
    ir::Graph inference = build(c.model, {{c.lengthKey, "7"}});
    EXPECT_EQ(outputNames(inference), std::vector<std::string>{"logits"});
    EXPECT_EQ(inference.findArg("targets"), nullptr);

    ir::Graph g = build(c.model, {{c.lengthKey, "7"}, {"loss", "true"}});
    EXPECT_TRUE(ir::verify(g).empty());
    EXPECT_EQ(outputNames(g), (std::vector<std::string>{"logits", "loss"}));
    EXPECT_EQ(g.type(g.findOutput("loss")->value), (Type{DType::F32, {}}));
    const ir::Arg *targets = g.findArg("targets");
    ASSERT_NE(targets, nullptr);
    EXPECT_EQ(targets->kind, ir::Arg::Kind::Input);
    EXPECT_EQ(g.type(targets->value), (Type{DType::I64, {2, 7}}));
    EXPECT_EQ(targets->range, c.range);
  }
  // An ignore index inside the vocabulary keeps the range.
  EXPECT_EQ(build("gpt", {{"loss", "true"}, {"ignore_index", "pad_id"}}).findArg("targets")->range,
            256);
  // bf16 models score their logits in f32.
  ir::Graph bf16 = build("gpt", {{"loss", "true"}, {"dtype", "bf16"}});
  EXPECT_EQ(bf16.type(bf16.findOutput("loss")->value), (Type{DType::F32, {}}));
}

// The "loss" output is the mean over scored targets of (1 - e)(-logp[t]) + e mean_v(-logp[v]),
// computed here from the model's own "logits" output.
double lossFromLogits(const Ref &logits, const Ref &targets, int64_t ignore, double e) {
  int64_t v = logits.type.shape.back();
  double total = 0, count = 0;
  for (int64_t n = 0; n < targets.size(); ++n) {
    if (targets.i[n] == ignore)
      continue;
    const double *x = &logits.f[n * v];
    double m = *std::max_element(x, x + v), z = 0, mean = 0;
    for (int64_t c = 0; c < v; ++c)
      z += std::exp(x[c] - m);
    double lse = m + std::log(z);
    for (int64_t c = 0; c < v; ++c)
      mean += (lse - x[c]) / double(v);
    total += (1 - e) * (lse - x[targets.i[n]]) + e * mean;
    count += 1;
  }
  return total / count;
}

TEST(ModelLoss, LossIsTheCrossEntropyOfTheLogits) {
  struct Case {
    const char *model;
    Settings settings;
    int64_t ignore;
    double smoothing;
  };
  std::vector<Case> cases = {
      {"gpt", {{"label_smoothing", "0.1"}}, -100, 0.1},
      {"gpt", {{"ignore_index", "pad_id"}, {"pad_id", "3"}}, 3, 0},
      {"bert", {}, -100, 0},
      {"bert", {{"ignore_index", "7"}, {"label_smoothing", "0.3"}}, 7, 0.3},
      {"transformer", {{"label_smoothing", "0.1"}}, 0, 0.1}, // pad_id by default
      {"transformer", {{"pad_id", "5"}}, 5, 0},              // follows pad_id
      {"transformer", {{"ignore_index", "-100"}}, -100, 0}};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.model + std::string(" ignore ") + std::to_string(c.ignore));
    Settings settings = {{"loss", "true"}, {"dtype", "f64"}, {"vocab", "13"}, {"d_model", "16"}};
    if (std::string_view(c.model) == "transformer")
      settings.insert(settings.end(), {{"src_len", "6"}, {"tgt_len", "6"}});
    else
      settings.push_back({"seq_len", "6"});
    settings.insert(settings.end(), c.settings.begin(), c.settings.end());
    ir::Graph g = build(c.model, settings);
    std::vector<Ref> args = reference::makeArgs<double>(g, 3);
    Ref *targets = nullptr;
    for (size_t i = 0; i < args.size(); ++i)
      if (g.args()[i].name == "targets")
        targets = &args[i];
    ASSERT_NE(targets, nullptr);
    for (int64_t k = 0; k < targets->size(); ++k) // every third target ignored
      targets->i[k] = k % 3 == 2 ? c.ignore : (k * 5 + 1) % 13;
    Expected<std::vector<Ref>> out = reference::run<double>(g, args);
    ASSERT_TRUE(out.ok()) << out.error().message;
    double want = lossFromLogits((*out)[0], *targets, c.ignore, c.smoothing);
    EXPECT_NEAR((*out)[1].f[0], want, 1e-12 * std::fabs(want));
    // A loss near log(V): the fresh model is close to uniform.
    EXPECT_NEAR((*out)[1].f[0], std::log(13.0), 1.0);
  }
}

TEST(ModelLoss, InitChoosesTheWeightMatrixInitialiser) {
  ParamInit normal{ParamInit::Kind::Normal, 0.02}, xavier{ParamInit::Kind::XavierUniform, 1.0};
  auto initOf = [](const ir::Graph &g, const char *name) { return g.findArg(name)->init; };
  // gpt and bert default to normal(0, 0.02), the transformer to Xavier uniform.
  ir::Graph gpt = build("gpt", {{"tie_embeddings", "false"}});
  EXPECT_EQ(initOf(gpt, "blocks.0.attn.q_proj.weight"), normal);
  ir::Graph gptX = build("gpt", {{"tie_embeddings", "false"}, {"init", "xavier"}});
  for (const char *w : {"blocks.0.attn.q_proj.weight", "blocks.1.attn.o_proj.weight",
                        "blocks.0.mlp.fc1.weight", "lm_head.weight"})
    EXPECT_EQ(initOf(gptX, w), xavier) << w;
  // Embeddings, biases and norm gains are the same under both.
  EXPECT_EQ(initOf(gptX, "tok_embed.weight"), normal);
  EXPECT_EQ(initOf(gptX, "pos_embed.weight"), normal);
  EXPECT_EQ(initOf(gptX, "blocks.0.mlp.fc1.bias").kind, ParamInit::Kind::Zeros);
  EXPECT_EQ(initOf(gptX, "blocks.0.ln1.weight").kind, ParamInit::Kind::Ones);

  ir::Graph bertX = build("bert", {{"init", "xavier"}, {"tie_embeddings", "false"}});
  for (const char *w : {"mlm.dense.weight", "mlm.decoder.weight", "blocks.0.attn.k_proj.weight"})
    EXPECT_EQ(initOf(bertX, w), xavier) << w;
  EXPECT_EQ(initOf(build("bert", {}), "mlm.dense.weight"), normal);

  ir::Graph t = build("transformer", {{"tie_embeddings", "false"}, {"activation", "swiglu"}});
  for (const char *w :
       {"encoder.blocks.0.attn.v_proj.weight", "decoder.blocks.1.cross_attn.q_proj.weight",
        "decoder.blocks.0.mlp.up_proj.weight", "generator.weight"})
    EXPECT_EQ(initOf(t, w), xavier) << w;
  EXPECT_EQ(initOf(t, "encoder.embed.weight"), normal);
  EXPECT_EQ(initOf(build("transformer", {{"init", "normal"}}), "encoder.blocks.0.mlp.fc2.weight"),
            normal);
}

TEST(ModelLoss, KeysHaveModelDefaultsAndCheckedValues) {
  auto has = [](std::string_view model, const std::string &line) {
    std::vector<std::string> lines = models::findModel(model)->describe();
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string &l) { return l.rfind(line, 0) == 0; });
  };
  for (const char *model : {"gpt", "bert"}) {
    EXPECT_TRUE(has(model, "loss = false  (")) << model;
    EXPECT_TRUE(has(model, "ignore_index = -100  (")) << model;
    EXPECT_TRUE(has(model, "init = normal  (normal|xavier")) << model;
    EXPECT_TRUE(has(model, "label_smoothing = 0  (")) << model;
  }
  EXPECT_TRUE(has("transformer", "ignore_index = pad_id  ("));
  EXPECT_TRUE(has("transformer", "init = xavier  ("));
  EXPECT_TRUE(has("transformer", "label_smoothing = 0  ("));
  Expected<models::TransformerConfig> t =
      models::transformerConfig(std::vector<Setting>{{"pad_id", "4"}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->ignoreId(), 4);

  EXPECT_EQ(buildError("gpt", {{"label_smoothing", "1.5"}}),
            "gpt: label_smoothing: expected a value in [0, 1], got 1.5");
  EXPECT_EQ(buildError("bert", {{"label_smoothing", "-0.1"}}),
            "bert: label_smoothing: expected a value in [0, 1], got -0.1");
  EXPECT_EQ(buildError("transformer", {{"ignore_index", "pad"}}),
            "transformer: ignore_index=pad: expected an integer or pad_id");
  EXPECT_EQ(buildError("gpt", {{"init", "he"}}), "gpt: init=he: expected one of normal|xavier");
  EXPECT_EQ(buildError("bert", {{"loss", "1"}}), "bert: loss=1: expected true|false");
}

} // namespace
} // namespace kiln::model_loss_test
