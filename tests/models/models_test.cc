// The model zoo: every model builds and verifies across its variants with the documented
// interface, parameters are named and sized as in the papers, bad settings are errors that name
// the key, and the graphs behave as the architectures promise (causality, padding, positions),
// checked on the reference interpreter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "codegen/reference/interpreter.h"
#include "models/config.h"
#include "models/zoo.h"
#include "tests/models/model_test_util.h"
#include "tests/util/model_variants.h"

namespace kiln::models_test {
namespace {

using ir::DType;
using ir::Type;
using models::Setting;
using Settings = std::vector<Setting>;

using testing_models::build;
using testing_models::buildError;

std::map<std::string, Type> params(const ir::Graph &g) {
  std::map<std::string, Type> out;
  for (const ir::Arg &a : g.args())
    if (a.kind == ir::Arg::Kind::Param)
      out[a.name] = g.type(a.value);
  return out;
}

int64_t paramCount(const ir::Graph &g) {
  int64_t n = 0;
  for (const auto &[name, type] : params(g))
    n += type.numElements();
  return n;
}

using test_util::label;

// ---- Every model x many variants builds, verifies, and has its interface ----

struct Interface {
  std::vector<std::pair<std::string, int64_t>> inputs; // name, range
  int64_t batch, length, vocab;
};

Interface interfaceOf(std::string_view model) {
  if (model == "bert")
    return {{{"tokens", 256}, {"token_types", 2}}, 2, 16, 256};
  if (model == "transformer")
    return {{{"src", 256}, {"tgt", 256}}, 2, 16, 256};
  return {{{"tokens", 256}}, 2, 16, 256};
}

void expectWellFormed(std::string_view model, const Settings &s, DType dtype) {
  SCOPED_TRACE(label(model, s));
  Expected<ir::Graph> g = models::buildModel(model, s);
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::vector<Error> errors = ir::verify(*g);
  EXPECT_TRUE(errors.empty()) << errors.front().message;
  Interface want = interfaceOf(model);
  for (const auto &[name, range] : want.inputs) {
    const ir::Arg *a = g->findArg(name);
    ASSERT_NE(a, nullptr) << name;
    EXPECT_EQ(a->kind, ir::Arg::Kind::Input);
    EXPECT_EQ(a->range, range);
    EXPECT_EQ(g->type(a->value).dtype, DType::I64);
  }
  bool training = std::any_of(
      s.begin(), s.end(), [](const Setting &kv) { return kv.key == "loss" && kv.value == "true"; });
  ASSERT_EQ(g->outputs().size(), training ? 2u : 1u);
  EXPECT_EQ(g->outputs()[0].name, "logits");
  EXPECT_EQ(g->type(g->outputs()[0].value), (Type{dtype, {want.batch, want.length, want.vocab}}));
  if (training) { // the loss is computed in f32 for bf16 models
    EXPECT_EQ(g->outputs()[1].name, "loss");
    EXPECT_EQ(g->type(g->outputs()[1].value),
              (Type{dtype == DType::BF16 ? DType::F32 : dtype, {}}));
    ASSERT_NE(g->findArg("targets"), nullptr);
    EXPECT_EQ(g->type(g->findArg("targets")->value), (Type{DType::I64, {want.batch, want.length}}));
  }
  // Every parameter is read by some node: no module made a weight it forgot to use.
  std::vector<bool> used(g->numValues(), false);
  for (const ir::Node &n : g->nodes())
    for (ir::ValueId v : n.operands)
      used[v] = true;
  for (const ir::Arg &a : g->args())
    EXPECT_TRUE(used[a.value]) << a.name << " is never used";
}

class ModelVariants : public ::testing::TestWithParam<std::string> {};

// Each position scheme x activation x (norm placement, norm kind), with the other knobs
// (kv heads, tying, bias, dropout, dtype, init, training mode) cycling so that each value
// meets many others.
TEST_P(ModelVariants, EveryCombinationBuildsAndVerifies) {
  const char *positions[] = {"sinusoidal", "learned", "relative", "rope", "alibi", "none"};
  const char *activations[] = {"relu", "gelu", "gelu_tanh", "swiglu"};
  const char *norms[][2] = {
      {"pre", "layernorm"}, {"post", "layernorm"}, {"pre", "rmsnorm"}, {"post", "rmsnorm"}};
  const char *kvHeads[] = {"0", "2", "1", "4"};
  const char *dtypes[] = {"f32", "f64", "bf16"};
  int k = 0;
  for (const char *position : positions)
    for (const char *activation : activations)
      for (const auto &norm : norms) {
        ++k;
        Settings s = {{"position", position},
                      {"activation", activation},
                      {"norm", norm[0]},
                      {"norm_kind", norm[1]},
                      {"n_kv_heads", kvHeads[k % 4]},
                      {"tie_embeddings", k % 2 ? "true" : "false"},
                      {"bias", k % 3 ? "true" : "false"},
                      {"dropout", k % 5 == 0 ? "0.1" : "0"},
                      {"dtype", dtypes[k % 3]},
                      {"relative_k", "3"},
                      {"init", k % 7 < 3 ? "xavier" : "normal"},
                      {"loss", k % 4 < 2 ? "true" : "false"},
                      {"label_smoothing", k % 5 == 1 ? "0.1" : "0"}};
        expectWellFormed(GetParam(), s, *ir::parseDType(dtypes[k % 3]));
      }
  EXPECT_EQ(k, 6 * 4 * 4);
}

INSTANTIATE_TEST_SUITE_P(Model, ModelVariants, ::testing::Values("gpt", "bert", "transformer"));

TEST(ModelZoo, TableListsTheBuiltInModels) {
  std::vector<std::string> names;
  for (const models::ModelEntry &m : models::allModels())
    names.push_back(std::string(m.name));
  EXPECT_EQ(names, (std::vector<std::string>{"gpt", "bert", "transformer", "t5"}));
  EXPECT_EQ(buildError("llama", {}), "unknown model 'llama' (known: gpt, bert, transformer, t5)");
}

// A program's own models join the table through addModels (tools/cli.h); a malformed table is
// refused whole. (The success path runs in lit examples/custom-gpt: adding would change the
// table for every later test of this process.)
TEST(ModelZoo, AddModelsRefusesATableWithABadEntryAndAddsNone) {
  const models::ModelEntry gpt = *models::findModel("gpt");
  auto refused = [](std::vector<models::ModelEntry> table) {
    Status s = models::addModels(table);
    return s ? std::string("added") : s.error().message;
  };
  models::ModelEntry mine = gpt, other = gpt;
  mine.name = "mine", other.name = "other";
  EXPECT_EQ(refused({mine, gpt}), "model 'gpt': the name is taken");
  EXPECT_EQ(refused({mine, mine}), "model 'mine': the name is taken");
  models::ModelEntry bad = gpt;
  bad.name = "My-GPT";
  EXPECT_EQ(refused({other, bad}), "model 'My-GPT': a model name is made of a-z, 0-9 and _");
  bad.name = "";
  EXPECT_EQ(refused({bad}), "model table entry 0: a model needs a name, a builder and a describer");
  bad = mine, bad.build = nullptr;
  EXPECT_EQ(refused({other, bad}),
            "model table entry 1: a model needs a name, a builder and a describer");
  EXPECT_EQ(models::allModels().size(), 4u); // the built-in ones
  EXPECT_EQ(models::findModel("mine"), nullptr);
}

// Unset, max_len grows to the longest sequence (512 at least): a learned table per position.
TEST(ModelZoo, MaxLenFollowsLongSequencesUnlessSet) {
  auto table = [](std::string_view model, const Settings &s) {
    const ir::Graph g = build(model, s);
    for (const ir::Arg &a : g.args())
      if (a.kind == ir::Arg::Kind::Param && a.name.find("pos") != std::string::npos)
        return g.type(a.value).shape[0];
    return int64_t{-1};
  };
  EXPECT_EQ(table("gpt", {}), 512);
  EXPECT_EQ(table("gpt", {{"seq_len", "600"}}), 600);
  EXPECT_EQ(table("gpt", {{"seq_len", "600"}, {"max_len", "700"}}), 700);
  EXPECT_EQ(table("bert", {{"seq_len", "520"}}), 520);
  EXPECT_EQ(table("transformer", {{"position", "learned"}, {"src_len", "600"}, {"tgt_len", "601"}}),
            601);
}

TEST(ModelZoo, LengthsAndLayerCountsAreSettable) {
  ir::Graph g = build("transformer", {{"src_len", "12"},
                                      {"tgt_len", "7"},
                                      {"n_encoder_layers", "1"},
                                      {"n_decoder_layers", "3"},
                                      {"batch", "3"},
                                      {"vocab", "100"}});
  EXPECT_EQ(g.type(g.findArg("src")->value), (Type{DType::I64, {3, 12}}));
  EXPECT_EQ(g.type(g.findArg("tgt")->value), (Type{DType::I64, {3, 7}}));
  EXPECT_EQ(g.type(g.outputs()[0].value), (Type{DType::F32, {3, 7, 100}}));
  auto p = params(g);
  EXPECT_TRUE(p.count("encoder.blocks.0.attn.q_proj.weight"));
  EXPECT_FALSE(p.count("encoder.blocks.1.attn.q_proj.weight"));
  EXPECT_TRUE(p.count("decoder.blocks.2.cross_attn.k_proj.weight"));
  EXPECT_FALSE(p.count("decoder.blocks.3.cross_attn.k_proj.weight"));
  // A later setting of the same key wins.
  ir::Graph gpt = build("gpt", {{"n_layers", "1"}, {"n_layers", "3"}, {"seq_len", "5"}});
  EXPECT_TRUE(params(gpt).count("blocks.2.ln1.weight"));
  EXPECT_EQ(gpt.type(gpt.outputs()[0].value), (Type{DType::F32, {2, 5, 256}}));
}

// ---- Parameters ----

// One pre-LN layer with LayerNorm, biased projections and a d -> f -> d MLP.
int64_t layerParams(int64_t d, int64_t f, int64_t kvWidth) {
  return 2 * 2 * d                     // ln1, ln2
         + 2 * (d * d + d)             // q_proj, o_proj
         + 2 * (kvWidth * d + kvWidth) // k_proj, v_proj
         + (d * f + f) + (f * d + d);  // fc1, fc2
}

TEST(ModelParams, GptHasGpt2sParameters) {
  ir::Graph g = build("gpt", {});
  auto p = params(g);
  EXPECT_EQ(p.at("tok_embed.weight"), (Type{DType::F32, {256, 64}}));
  EXPECT_EQ(p.at("pos_embed.weight"), (Type{DType::F32, {512, 64}}));
  EXPECT_EQ(p.at("blocks.1.attn.q_proj.weight"), (Type{DType::F32, {64, 64}}));
  EXPECT_EQ(p.at("blocks.1.mlp.fc1.weight"), (Type{DType::F32, {256, 64}}));
  EXPECT_EQ(p.at("ln_f.weight"), (Type{DType::F32, {64}}));
  EXPECT_FALSE(p.count("lm_head.weight")); // tied by default
  EXPECT_EQ(paramCount(g), 256 * 64 + 512 * 64 + 2 * layerParams(64, 256, 64) + 2 * 64);
  EXPECT_EQ(g.findArg("tok_embed.weight")->init,
            (ir::ParamInit{ir::ParamInit::Kind::Normal, 0.02}));
  EXPECT_EQ(g.findArg("blocks.0.attn.o_proj.bias")->init.kind, ir::ParamInit::Kind::Zeros);
  EXPECT_EQ(g.findArg("blocks.0.ln2.weight")->init.kind, ir::ParamInit::Kind::Ones);
}

TEST(ModelParams, UntyingAddsAnOutputProjection) {
  for (const char *model : {"gpt", "bert", "transformer"}) {
    SCOPED_TRACE(model);
    ir::Graph tied = build(model, {{"tie_embeddings", "true"}});
    ir::Graph untied = build(model, {{"tie_embeddings", "false"}});
    int64_t extra = std::string_view(model) == "transformer" ? 2 * 256 * 64 : 256 * 64;
    EXPECT_EQ(paramCount(untied) - paramCount(tied), extra); // transformer: + tgt embedding too
  }
  EXPECT_EQ(params(build("gpt", {{"tie_embeddings", "false"}})).at("lm_head.weight"),
            (Type{DType::F32, {256, 64}}));
  EXPECT_EQ(params(build("bert", {{"tie_embeddings", "false"}})).at("mlm.decoder.weight"),
            (Type{DType::F32, {256, 64}}));
  auto untied = params(build("transformer", {{"tie_embeddings", "false"}}));
  for (const char *name : {"encoder.embed.weight", "decoder.embed.weight", "generator.weight"})
    EXPECT_TRUE(untied.count(name)) << name;
  auto tied = params(build("transformer", {}));
  EXPECT_TRUE(tied.count("embed.weight"));
  EXPECT_FALSE(tied.count("encoder.embed.weight") || tied.count("generator.weight"));
}

TEST(ModelParams, GroupedQueryAttentionShrinksKeyValueProjections) {
  int64_t full = paramCount(build("gpt", {}));
  for (int64_t kv : {2, 1}) {
    ir::Graph g = build("gpt", {{"n_kv_heads", std::to_string(kv)}});
    EXPECT_EQ(params(g).at("blocks.0.attn.k_proj.weight"), (Type{DType::F32, {kv * 16, 64}}));
    EXPECT_EQ(params(g).at("blocks.0.attn.v_proj.bias"), (Type{DType::F32, {kv * 16}}));
    EXPECT_EQ(params(g).at("blocks.0.attn.q_proj.weight"), (Type{DType::F32, {64, 64}}));
    EXPECT_EQ(full - paramCount(g), 2 * 2 * (64 - kv * 16) * (64 + 1)); // 2 layers x k, v
  }
}

TEST(ModelParams, VariantsChangeTheParameterSet) {
  auto noBias = params(build("gpt", {{"bias", "false"}}));
  EXPECT_FALSE(noBias.count("blocks.0.attn.q_proj.bias") || noBias.count("blocks.0.mlp.fc1.bias"));
  EXPECT_TRUE(noBias.count("blocks.0.ln1.bias")); // LayerNorm keeps its shift
  // Qwen2's: biases on q, k and v alone, in self- and cross-attention.
  auto qkv = params(build("gpt", {{"bias", "false"}, {"qkv_bias", "true"}, {"n_kv_heads", "2"}}));
  EXPECT_EQ(qkv.at("blocks.1.attn.q_proj.bias"), (Type{DType::F32, {64}}));
  EXPECT_EQ(qkv.at("blocks.1.attn.k_proj.bias"), (Type{DType::F32, {32}}));
  EXPECT_EQ(qkv.at("blocks.1.attn.v_proj.bias"), (Type{DType::F32, {32}}));
  EXPECT_FALSE(qkv.count("blocks.0.attn.o_proj.bias") || qkv.count("blocks.0.mlp.fc1.bias"));
  EXPECT_EQ(paramCount(build("gpt", {{"qkv_bias", "true"}})), paramCount(build("gpt", {})));
  auto crossQkv = params(build("transformer", {{"bias", "false"}, {"qkv_bias", "true"}}));
  EXPECT_TRUE(crossQkv.count("decoder.blocks.0.cross_attn.k_proj.bias"));
  EXPECT_FALSE(crossQkv.count("decoder.blocks.0.cross_attn.o_proj.bias"));
  auto llama = params(build("gpt", {{"norm_kind", "rmsnorm"},
                                    {"activation", "swiglu"},
                                    {"position", "rope"},
                                    {"bias", "false"}}));
  for (const char *name : {"blocks.0.mlp.gate_proj.weight", "blocks.0.mlp.up_proj.weight",
                           "blocks.0.mlp.down_proj.weight", "ln_f.weight"})
    EXPECT_TRUE(llama.count(name)) << name;
  for (const char *name : {"blocks.0.mlp.fc1.weight", "blocks.0.ln1.bias", "pos_embed.weight"})
    EXPECT_FALSE(llama.count(name)) << name;
  auto relative = params(build("gpt", {{"position", "relative"}, {"relative_k", "4"}}));
  EXPECT_EQ(relative.at("blocks.1.attn.relative_key.weight"), (Type{DType::F32, {9, 16}}));
  EXPECT_EQ(relative.at("blocks.1.attn.relative_value.weight"), (Type{DType::F32, {9, 16}}));
  for (const char *position : {"sinusoidal", "alibi", "none"})
    EXPECT_FALSE(params(build("gpt", {{"position", position}})).count("pos_embed.weight"));
  EXPECT_FALSE(params(build("gpt", {{"norm", "post"}})).count("ln_f.weight"));
  EXPECT_EQ(params(build("gpt", {{"dtype", "bf16"}})).at("ln_f.bias").dtype, DType::BF16);
}

TEST(ModelParams, BertHasItsEmbeddingsAndMlmHead) {
  ir::Graph g = build("bert", {{"type_vocab", "3"}});
  auto p = params(g);
  EXPECT_EQ(p.at("embeddings.word_embeddings.weight"), (Type{DType::F32, {256, 64}}));
  EXPECT_EQ(p.at("embeddings.position_embeddings.weight"), (Type{DType::F32, {512, 64}}));
  EXPECT_EQ(p.at("embeddings.token_type_embeddings.weight"), (Type{DType::F32, {3, 64}}));
  for (const char *name :
       {"embeddings.norm.weight", "mlm.dense.weight", "mlm.norm.bias", "blocks.1.ln2.weight"})
    EXPECT_TRUE(p.count(name)) << name;
  EXPECT_EQ(p.at("mlm.bias"), (Type{DType::F32, {256}}));
  EXPECT_FALSE(p.count("ln_f.weight")); // post-LN
  EXPECT_EQ(g.findArg("token_types")->range, 3);
}

TEST(ModelParams, TransformerHasCrossAttentionInEveryDecoderLayer) {
  ir::Graph g = build("transformer", {{"norm", "pre"}});
  auto p = params(g);
  for (int i = 0; i < 2; ++i)
    for (const char *leaf : {"self_attn.q_proj.weight", "cross_attn.q_proj.weight",
                             "cross_attn.v_proj.bias", "ln3.weight"})
      EXPECT_TRUE(p.count(fmt::format("decoder.blocks.{}.{}", i, leaf))) << leaf;
  EXPECT_TRUE(p.count("encoder.ln_f.weight") && p.count("decoder.ln_f.weight"));
  EXPECT_FALSE(p.count("encoder.blocks.0.cross_attn.q_proj.weight"));
  EXPECT_FALSE(p.count("encoder.pos_embed.weight")); // sinusoidal by default
  auto learned = params(build("transformer", {{"position", "learned"}}));
  EXPECT_TRUE(learned.count("encoder.pos_embed.weight") &&
              learned.count("decoder.pos_embed.weight"));
}

// The eps of every norm in g: the constant added under each rsqrt (LayerNorm's var + eps,
// RMSNorm's mean(x^2) + eps; nothing else in a forward graph takes an rsqrt).
std::vector<double> normEpsilons(const ir::Graph &g) {
  std::vector<double> eps;
  for (const ir::Node &n : g.nodes()) {
    if (n.op != ir::OpKind::Rsqrt)
      continue;
    const ir::Node &add = g.node(g.value(n.operands[0]).def);
    EXPECT_EQ(add.op, ir::OpKind::Add);
    for (ir::ValueId v : add.operands) {
      ir::NodeId def = g.value(v).def;
      if (def != ir::kNone && g.node(def).op == ir::OpKind::Constant)
        eps.push_back(g.node(def).attrs.getFloat("value"));
    }
  }
  return eps;
}

TEST(ModelNorms, NormEpsDefaultsPerModelAndKindAndIsSettable) {
  struct Case {
    const char *model;
    Settings settings;
    double eps;
    size_t norms;
  };
  std::vector<Case> cases = {
      // gpt: 2 layers x 2 norms + ln_f (pre-LN); bert: embeddings + 2 x 2 + the MLM head's
      // (post-LN: no ln_f); transformer (post-LN): 2 x 2 encoder + 2 x 3 decoder.
      {"gpt", {}, 1e-5, 5},
      {"gpt", {{"norm_kind", "rmsnorm"}}, 1e-6, 5},
      {"gpt", {{"norm_eps", "1e-3"}}, 1e-3, 5},
      {"gpt", {{"norm_kind", "rmsnorm"}, {"norm_eps", "0.25"}}, 0.25, 5},
      {"bert", {}, 1e-12, 6}, // BERT's own (Devlin et al.'s code, Hugging Face's BertConfig)
      {"bert", {{"norm_kind", "rmsnorm"}}, 1e-6, 6},
      {"bert", {{"norm_eps", "1e-5"}}, 1e-5, 6},
      {"bert", {{"norm_eps", "1e-3"}, {"norm_eps", "auto"}, {"norm", "pre"}}, 1e-12, 7},
      {"transformer", {}, 1e-5, 10},
      {"transformer", {{"norm_kind", "rmsnorm"}}, 1e-6, 10},
      {"transformer", {{"norm_eps", "2e-4"}, {"norm", "pre"}}, 2e-4, 12},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(label(c.model, c.settings));
    std::vector<double> eps = normEpsilons(build(c.model, c.settings));
    EXPECT_EQ(eps, std::vector<double>(c.norms, c.eps));
  }
}

// ModelEntry::autoValues: the eps auto gives the graph, whatever norm_eps says (a bundle checks a
// checkpoint's auto against an imported number by it, runtime::checkSameModel).
TEST(ModelNorms, AutoValuesGiveTheEpsAutoBuilds) {
  for (const models::ModelEntry &m : models::allModels())
    for (const char *kind : {"layernorm", "rmsnorm"}) {
      if (m.name == "t5" && std::string(kind) == "layernorm")
        continue; // (T5's norms are RMSNorms, and it has no norm_kind)
      Settings settings = {{"norm_eps", "0.25"}};
      if (m.name != "t5")
        settings.push_back({"norm_kind", kind});
      SCOPED_TRACE(label(std::string(m.name), settings));
      ASSERT_NE(m.autoValues, nullptr);
      Expected<std::vector<Setting>> autos = m.autoValues(settings);
      ASSERT_TRUE(autos.ok()) << autos.error().message;
      ASSERT_EQ(autos->size(), 1u);
      EXPECT_EQ((*autos)[0].key, "norm_eps");
      settings[0].value = "auto";
      const std::vector<double> eps = normEpsilons(build(std::string(m.name), settings));
      ASSERT_FALSE(eps.empty());
      EXPECT_EQ(eps[0], std::stod((*autos)[0].value));
    }
  EXPECT_FALSE(models::findModel("gpt")->autoValues({{{"norm_kind", "batchnorm"}}}).ok());
}

// BERT's MLM head transform uses the hidden activation (BertPredictionHeadTransform's
// hidden_act); SwiGLU, which is not per-element, falls back to exact GELU there.
TEST(ModelParams, BertMlmHeadUsesTheHiddenActivation) {
  auto count = [](const ir::Graph &g, ir::OpKind op) {
    return std::count_if(g.nodes().begin(), g.nodes().end(),
                         [&](const ir::Node &n) { return n.op == op; });
  };
  struct Case {
    const char *activation;
    long relu, gelu, geluTanh, silu; // 2 feed-forward layers + the head
  };
  for (Case c : {Case{"gelu", 0, 3, 0, 0}, Case{"gelu_tanh", 0, 0, 3, 0}, Case{"relu", 3, 0, 0, 0},
                 Case{"swiglu", 0, 1, 0, 2}}) {
    SCOPED_TRACE(c.activation);
    ir::Graph g = build("bert", {{"activation", c.activation}});
    EXPECT_EQ(count(g, ir::OpKind::Relu), c.relu);
    EXPECT_EQ(count(g, ir::OpKind::Gelu), c.gelu);
    EXPECT_EQ(count(g, ir::OpKind::GeluTanh), c.geluTanh);
    EXPECT_EQ(count(g, ir::OpKind::Silu), c.silu);
    // The head's activation reads mlm.dense: dense(h) = h W^T + b, the bias add.
    const ir::Arg *denseBias = g.findArg("mlm.dense.bias");
    ASSERT_NE(denseBias, nullptr);
    ir::OpKind headAct = c.relu       ? ir::OpKind::Relu
                         : c.geluTanh ? ir::OpKind::GeluTanh
                                      : ir::OpKind::Gelu;
    bool found = false;
    for (const ir::Node &n : g.nodes()) {
      if (n.op != headAct)
        continue;
      const ir::Node &in = g.node(g.value(n.operands[0]).def);
      for (ir::ValueId v : in.operands)
        found = found || v == denseBias->value;
    }
    EXPECT_TRUE(found) << "no " << c.activation << " on mlm.dense's output";
  }
}

// ---- Settings errors name the key ----

TEST(ModelSettings, BadSettingsNameTheKey) {
  struct Case {
    const char *model;
    Settings settings;
    std::string error;
  };
  std::vector<Case> cases = {
      {"gpt", {{"n_heads", "x"}}, "gpt: n_heads=x: expected an integer"},
      {"gpt", {{"norm", "middle"}}, "gpt: norm=middle: expected one of pre|post"},
      {"bert", {{"tie_embeddings", "yes"}}, "bert: tie_embeddings=yes: expected true|false"},
      {"gpt", {{"dropout", "lots"}}, "gpt: dropout=lots: expected a number"},
      {"gpt", {{"dtype", "i64"}}, "gpt: dtype=i64: expected one of f32|f64|bf16"},
      {"gpt",
       {{"position", "absolute"}},
       "gpt: position=absolute: expected one of sinusoidal|learned|relative|rope|alibi|none"},
      {"gpt",
       {{"activation", "tanh"}},
       "gpt: activation=tanh: expected one of relu|gelu|gelu_tanh|softplus|swiglu|geglu"},
      {"gpt",
       {{"n_heads", "5"}},
       "gpt: n_heads: d_model 64 is not divisible by n_heads 5 (or set head_dim)"},
      {"gpt",
       {{"head_dim", "-8"}},
       "gpt: head_dim: expected 0 (d_model / n_heads) or a positive width, got -8"},
      {"gpt",
       {{"head_dim", "7"}, {"position", "rope"}},
       "gpt: position: rope needs an even head dimension (head_dim, or d_model/n_heads), got 7"},
      {"gpt",
       {{"n_kv_heads", "3"}},
       "gpt: n_kv_heads: expected 0 or a divisor of n_heads 4, got 3"},
      {"gpt", {{"dropout", "1"}}, "gpt: dropout: expected a probability in [0, 1), got 1"},
      {"bert", {{"pad_id", "256"}}, "bert: pad_id: expected a token id in [0, vocab 256), got 256"},
      {"gpt",
       {{"seq_len", "600"}, {"max_len", "512"}},
       "gpt: max_len: learned positions need max_len >= seq_len 600, got 512"},
      {"transformer",
       {{"position", "learned"}, {"max_len", "8"}, {"src_len", "8"}},
       "transformer: max_len: learned positions need max_len >= tgt_len 16, got 8"},
      {"gpt", {{"n_layers", "0"}}, "gpt: n_layers: expected a positive integer, got 0"},
      {"bert", {{"type_vocab", "0"}}, "bert: type_vocab: expected a positive integer, got 0"},
      {"transformer",
       {{"n_decoder_layers", "-1"}},
       "transformer: n_decoder_layers: expected a positive integer, got -1"},
      {"gpt", {{"batch", "0"}}, "gpt: batch: expected a positive integer, got 0"},
      {"gpt",
       {{"position", "rope"}, {"d_model", "60"}},
       "gpt: position: rope needs an even head dimension (head_dim, or d_model/n_heads), got 15"},
      {"transformer",
       {{"d_model", "63"}, {"n_heads", "3"}},
       "transformer: position: sinusoidal positions need an even d_model, got 63"},
      {"gpt",
       {{"position", "relative"}, {"relative_k", "0"}},
       "gpt: relative_k: expected a positive integer, got 0"},
      {"gpt",
       {{"position", "rope"}, {"rope_scaling", "llama3:0.5:1:4:8192"}},
       "gpt: rope_scaling: expected a finite factor >= 1, got 0.5"},
      {"gpt",
       {{"position", "rope"}, {"rope_scaling", "llama3:8:1:4:0"}},
       "gpt: rope_scaling: expected an original length >= 1, got 0"},
      {"gpt",
       {{"position", "rope"}, {"rope_scaling", "llama3:8:1:4:99999999999"}},
       "gpt: rope_scaling: the original length 99999999999 is over the limit of 16777216"},
      // A value no model takes is refused whatever the positions, as rope_theta's is.
      {"gpt",
       {{"position", "learned"}, {"relative_k", "0"}},
       "gpt: relative_k: expected a positive integer, got 0"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(buildError(c.model, c.settings), c.error) << label(c.model, c.settings);
  for (const Case &c : std::vector<Case>{
           {"gpt", {{"norm_eps", "small"}}, "gpt: norm_eps=small: expected a number or auto"},
           {"bert", {{"norm_eps", ""}}, "bert: norm_eps=: expected a number or auto"},
           {"transformer",
            {{"norm_eps", "inf"}},
            "transformer: norm_eps=inf: expected a number or auto"},
           {"bert",
            {{"norm_eps", "0"}},
            "bert: norm_eps: expected a positive number within f32's range, or auto, got 0"},
           {"gpt",
            {{"norm_kind", "rmsnorm"}, {"norm_eps", "-1e-6"}},
            "gpt: norm_eps: expected a positive number within f32's range, or auto, got -1e-06"},
           // (An eps f32 cannot hold: imported from a config.json, it wrote a checkpoint no
           // command could build.)
           {"gpt",
            {{"norm_eps", "1e39"}},
            "gpt: norm_eps: expected a positive number within f32's range, or auto, got 1e+39"},
           {"t5",
            {{"norm_eps", "1e-46"}},
            "t5: norm_eps: expected a positive number within f32's range, or auto, got 1e-46"},
           {"gpt",
            {{"rope_scaling", "llama3:8:1:4"}},
            "gpt: rope_scaling=llama3:8:1:4: expected none, "
            "llama3:FACTOR:LOW:HIGH:ORIGINAL_LEN (e.g. llama3:8:1:4:8192), "
            "longrope:FACTOR:ORIGINAL_LEN:SHORT_FACTORS:LONG_FACTORS (the factors "
            "comma-separated, one per frequency), linear:FACTOR, or "
            "yarn:FACTOR:ORIGINAL_LEN[:BETA_FAST:BETA_SLOW:ATTENTION_FACTOR:TRUNCATE] (e.g. "
            "yarn:4:32768 or yarn:4:32768:32:1:auto:true)"},
           {"gpt",
            {{"position", "rope"}, {"rope_scaling", "longrope:4:8:1,2:1,2"}},
            "gpt: rope_scaling: longrope needs one factor a frequency, half the head dimension "
            "16: 8, got 2"},
           {"gpt",
            {{"rope_scaling", "longrope:4:1:1,2,3,4,5,6,7,8:1,2,3,4,5,6,7,8"}},
            "gpt: rope_scaling: expected an original length >= 2, got 1"},
           {"gpt",
            {{"rope_scaling", "longrope:4:8:1,2,3,4,5,6,7,8:1,2,3,4,5,6,7,0"}},
            "gpt: rope_scaling: expected finite factors > 0, got 0"},
           {"gpt",
            {{"rope_scaling", "yarn:8:1:4:8192"}},
            "gpt: rope_scaling=yarn:8:1:4:8192: expected none, "
            "llama3:FACTOR:LOW:HIGH:ORIGINAL_LEN (e.g. llama3:8:1:4:8192), "
            "longrope:FACTOR:ORIGINAL_LEN:SHORT_FACTORS:LONG_FACTORS (the factors "
            "comma-separated, one per frequency), linear:FACTOR, or "
            "yarn:FACTOR:ORIGINAL_LEN[:BETA_FAST:BETA_SLOW:ATTENTION_FACTOR:TRUNCATE] (e.g. "
            "yarn:4:32768 or yarn:4:32768:32:1:auto:true)"},
           {"gpt",
            {{"rope_scaling", "linear:0.5"}},
            "gpt: rope_scaling: expected a finite factor >= 1, got 0.5"},
           {"gpt",
            {{"rope_scaling", "yarn:0.5:4096"}},
            "gpt: rope_scaling: expected a finite factor >= 1, got 0.5"},
           {"gpt",
            {{"rope_scaling", "yarn:4:4096:1:32:auto:true"}},
            "gpt: rope_scaling: expected finite turns beta_fast >= beta_slow > 0, got beta_fast 1 "
            "and beta_slow 32"},
           {"gpt",
            {{"rope_scaling", "yarn:4:4096:32:1:-1:true"}},
            "gpt: rope_scaling: expected an attention factor > 0, or 0 for the paper's 0.1 "
            "ln(factor) + 1, got -1"},
           {"gpt",
            {{"rope_fraction", "0"}},
            "gpt: rope_fraction: expected a fraction in (0, 1], got 0"},
           {"gpt",
            {{"rope_fraction", "1.25"}},
            "gpt: rope_fraction: expected a fraction in (0, 1], got 1.25"},
           {"gpt",
            {{"position", "rope"}, {"rope_fraction", "0.2"}},
            "gpt: rope_fraction: 0.2 turns int(16 x 0.2) = 3 of a head's dimensions: expected an "
            "even number, at least 2"},
           {"gpt",
            {{"position", "rope"}, {"rope_fraction", "0.1"}},
            "gpt: rope_fraction: 0.1 turns int(16 x 0.1) = 1 of a head's dimensions: expected an "
            "even number, at least 2"},
           {"gpt",
            {{"position", "rope"},
             {"rope_fraction", "0.75"},
             {"rope_scaling", "longrope:4:8:1,2,3,4,5,6,7,8:1,2,3,4,5,6,7,8"}},
            "gpt: rope_scaling: longrope needs one factor a frequency, half the 12 dimensions "
            "rope turns of a head of 16: 6, got 8"},
       })
    EXPECT_EQ(buildError(c.model, c.settings), c.error) << label(c.model, c.settings);
  // Partial rotary: the first int(16 x 0.75) = 12 dimensions, of 6 longrope factors.
  EXPECT_EQ(buildError("gpt", {{"position", "rope"},
                               {"rope_fraction", "0.75"},
                               {"rope_scaling", "longrope:4:8:1,2,3,4,5,6:1,2,3,4,5,6"}}),
            "<built>");
  // A sequence longer than max_len is fine when positions are not a learned table.
  EXPECT_EQ(buildError("gpt", {{"seq_len", "20"}, {"max_len", "8"}, {"position", "rope"}}),
            "<built>");
}

// A model of one's own that asks for its loss but made no targets: a DslError at its line (the
// missing targets were dereferenced: a segfault).
TEST(ModelSettings, AddOutputsWithALossNeedsTheTargets) {
  frontend::Builder b;
  models::CommonConfig c;
  c.loss = true;
  const frontend::Tensor logits = b.input("logits", Type{DType::F32, {2, 4, 8}});
  std::string error = "<no error>";
  try {
    models::addOutputs(b, c, logits, std::nullopt);
  } catch (const frontend::DslError &e) {
    error = e.what();
  }
  EXPECT_NE(error.find("tests/models/models_test.cc:"), std::string::npos) << error;
  EXPECT_NE(error.find(": loss: loss=true needs the targets (targetsInput), and none were given"),
            std::string::npos)
      << error;
}

TEST(ModelSettings, UnknownKeysListTheKnownOnes) {
  std::string e = buildError("bert", {{"seq_len", "8"}, {"layers", "2"}});
  EXPECT_EQ(e.rfind("bert: unknown key 'layers': did you mean 'n_layers'? (keys: seq_len, "
                    "n_layers, type_vocab, window, batch, ",
                    0),
            0u)
      << e;
  // A guess only for a slip (at most 2 edits, under half the letters): none for a new word.
  EXPECT_EQ(buildError("gpt", {{"n_layer", "2"}})
                .rfind("gpt: unknown key 'n_layer': did you mean "
                       "'n_layers'? (keys: ",
                       0),
            0u);
  EXPECT_EQ(buildError("gpt", {{"depth", "2"}}).rfind("gpt: unknown key 'depth' (keys: ", 0), 0u);
  EXPECT_EQ(buildError("gpt", {{"src_len", "8"}})
                .rfind("gpt: unknown key 'src_len': did you mean "
                       "'seq_len'? (keys: ",
                       0),
            0u);
  EXPECT_NE(buildError("transformer", {{"seq_len", "8"}}).find("unknown key 'seq_len'"),
            std::string::npos);
  Expected<Setting> bad = models::parseSetting("noequals");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "--set noequals: expected key=value");
}

// A checkpoint holds rope_scaling as shown, and reads it back the same.
TEST(ModelSettings, RopeScalingReadsBackAsItIsShown) {
  std::optional<frontend::nn::RopeScaling> s;
  for (const char *text : {"llama3:32:1:4:8192", "llama3:1.5:0.25:2.125:100", "none",
                           "longrope:32:4096:1,1.0625,2.5:3,4,1e-05", "linear:4", "linear:2.5",
                           "yarn:4:32768:32:1:auto:true", "yarn:32:4096:16:0.5:1.25:false"}) {
    ASSERT_TRUE(models::parseValue(text, s).ok()) << text;
    EXPECT_EQ(models::showValue(s), text);
  }
  ASSERT_TRUE(models::parseValue("llama3:32:1:4:8192", s).ok());
  EXPECT_EQ(s, (frontend::nn::RopeScaling{32, 1, 4, 8192}));
  ASSERT_TRUE(models::parseValue("longrope:0.5:64:1,2:3,4", s).ok());
  EXPECT_EQ(s, (frontend::nn::RopeScaling{.factor = 0.5,
                                          .originalMaxLen = 64,
                                          .kind = frontend::nn::RopeScalingKind::LongRope,
                                          .shortFactor = {1, 2},
                                          .longFactor = {3, 4}}));
  ASSERT_TRUE(models::parseValue("linear:4", s).ok());
  EXPECT_EQ(s->kind, frontend::nn::RopeScalingKind::Linear);
  EXPECT_EQ(s->factor, 4);
  // yarn's short form: transformers' defaults for the rest, shown in full.
  ASSERT_TRUE(models::parseValue("yarn:4:32768", s).ok());
  EXPECT_EQ(s, (frontend::nn::RopeScaling{.factor = 4,
                                          .originalMaxLen = 32768,
                                          .kind = frontend::nn::RopeScalingKind::Yarn}));
  EXPECT_EQ(models::showValue(s), "yarn:4:32768:32:1:auto:true");
  for (const char *bad : {"longrope:32:4096:1,2", "longrope:32:4096:1,,2:3,4,5", "llama3:1:2:3",
                          "linear", "linear:4:8192", "yarn:4", "yarn:4:32768:32:1",
                          "yarn:4:32768:32:1:auto:maybe", "yarn:4:32768:32:1:x:true"})
    EXPECT_FALSE(models::parseValue(bad, s).ok()) << bad;
}

// init only draws fresh weights; a kind of positions' key matters beside that kind alone.
TEST(ModelSettings, WeightsMakeInitAndOtherPositionsKeysMoot) {
  using Config = std::vector<std::pair<std::string, std::string>>;
  const Config learned{{"position", "learned"}}, rope{{"position", "rope"}},
      relative{{"position", "relative"}};
  EXPECT_TRUE(models::mootWithWeights("init", rope));
  EXPECT_TRUE(models::mootWithWeights("rope_theta", learned));
  EXPECT_TRUE(models::mootWithWeights("rope_scaling", learned));
  EXPECT_FALSE(models::mootWithWeights("rope_scaling", rope));
  EXPECT_TRUE(models::mootWithWeights("rope_fraction", learned));
  EXPECT_FALSE(models::mootWithWeights("rope_fraction", rope));
  EXPECT_FALSE(models::mootWithWeights("rope_theta", rope));
  EXPECT_TRUE(models::mootWithWeights("relative_k", rope));
  EXPECT_FALSE(models::mootWithWeights("relative_k", relative));
  EXPECT_FALSE(models::mootWithWeights("max_len", rope)); // (an export's max_position_embeddings)
  EXPECT_FALSE(models::mootWithWeights("max_len", learned));
  for (const char *key : {"d_model", "activation", "position", "norm_kind", "window"})
    EXPECT_FALSE(models::mootWithWeights(key, learned)) << key;
  EXPECT_FALSE(models::mootWithWeights("rope_theta", Config{})); // (a model without positions)
}

TEST(ModelSettings, DescribeShowsEveryKeyWithItsDefault) {
  for (const models::ModelEntry &m : models::allModels()) {
    std::vector<std::string> lines = m.describe();
    auto has = [&](const std::string &prefix) {
      for (const std::string &l : lines)
        if (l.rfind(prefix, 0) == 0)
          return true;
      return false;
    };
    EXPECT_TRUE(has("d_model = 64  (")) << m.name;
    EXPECT_TRUE(has("dtype = f32  (f32|f64|bf16")) << m.name;
    EXPECT_TRUE(has("n_kv_heads = 0  (")) << m.name;
    EXPECT_TRUE(has("norm_eps = auto  (every norm's eps, > 0, or auto: ")) << m.name;
  }
  std::vector<std::string> g = models::findModel("gpt")->describe();
  EXPECT_NE(std::find(g.begin(), g.end(),
                      "norm_eps = auto  (every norm's eps, > 0, or auto: 1e-5 for layernorm "
                      "(PyTorch), 1e-6 for rmsnorm (LLaMA))"),
            g.end());
  std::vector<std::string> bert = models::findModel("bert")->describe();
  EXPECT_NE(std::find(bert.begin(), bert.end(),
                      "norm_eps = auto  (every norm's eps, > 0, or auto: 1e-12 for layernorm "
                      "(BERT), 1e-6 for rmsnorm (LLaMA))"),
            bert.end());
  std::vector<std::string> t5 = models::findModel("t5")->describe();
  EXPECT_NE(std::find(t5.begin(), t5.end(),
                      "norm_eps = auto  (every norm's eps, > 0, or auto: 1e-6 (T5's norms are "
                      "RMSNorm))"),
            t5.end());
  std::vector<std::string> t = models::findModel("transformer")->describe();
  EXPECT_NE(std::find(t.begin(), t.end(),
                      "position = sinusoidal  (sinusoidal|learned|relative|rope|alibi|none)"),
            t.end());
}

} // namespace
} // namespace kiln::models_test
