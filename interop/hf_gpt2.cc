// GPT2LMHeadModel <-> kiln's gpt with GPT-2's settings: pre-LN LayerNorm, learned positions,
// tanh-GELU (gelu_new), biases everywhere, the head tied to the token embedding. GPT-2 stores
// its linear layers as Conv1D, weight [in, out], and q, k, v as one c_attn [d, 3d].
#include <fmt/format.h>

#include "interop/hf_mapping.h"

namespace kiln::interop {

namespace {

using runtime::Json;

Expected<ImportedConfig> readGpt2(const Json &config) {
  ConfigReader r{config};
  Expected<int64_t> vocab = r.integer("vocab_size"), d = r.integer("n_embd"),
                    layers = r.integer("n_layer"), heads = r.integer("n_head"),
                    positions = r.integer("n_positions");
  for (const Expected<int64_t> *e : {&vocab, &d, &layers, &heads, &positions})
    if (!*e)
      return e->error();
  if (*d % *heads != 0) // (said in config.json's terms, not kiln's d_model and n_heads)
    return r.error("n_head", fmt::format("a divisor of n_embd = {} (kiln's heads split the model "
                                         "width)",
                                         *d));
  Expected<int64_t> inner = r.integer("n_inner", 4 * *d);
  Expected<double> eps = r.number("layer_norm_epsilon", 1e-5);
  Expected<std::string> act = r.text("activation_function", "gelu_new");
  Expected<bool> tied = r.boolean("tie_word_embeddings", true);
  Expected<bool> scaled = r.boolean("scale_attn_weights", true);
  Expected<bool> byLayer = r.boolean("scale_attn_by_inverse_layer_idx", false);
  Expected<bool> cross = r.boolean("add_cross_attention", false);
  if (!inner)
    return inner.error();
  if (!eps)
    return eps.error();
  if (!act)
    return act.error();
  for (const Expected<bool> *e : {&tied, &scaled, &byLayer, &cross})
    if (!*e)
      return e->error();
  std::string activation;
  if (*act == "gelu_new" || *act == "gelu_pytorch_tanh" || *act == "gelu_fast")
    activation = "gelu_tanh";
  else if (*act == "gelu" || *act == "relu")
    activation = *act;
  else
    return r.error("activation_function",
                   "gelu_new, gelu_pytorch_tanh, gelu_fast, gelu or relu (kiln's activations)");
  if (!*scaled)
    return r.error("scale_attn_weights", "true (kiln's gpt scales the logits by 1/sqrt(head_dim))");
  if (*byLayer)
    return r.error("scale_attn_by_inverse_layer_idx",
                   "false (kiln's gpt scales every layer's logits alike)");
  if (*cross)
    return r.error("add_cross_attention", "false (a decoder-only model)");
  ImportedConfig out;
  out.settings = {setting("vocab", *vocab),
                  setting("d_model", *d),
                  setting("n_heads", *heads),
                  setting("n_layers", *layers),
                  setting("d_ff", *inner),
                  setting("max_len", *positions),
                  setting("seq_len", std::min(*positions, kImportSeqLen)),
                  setting("norm", std::string("pre")),
                  setting("norm_kind", std::string("layernorm")),
                  setting("norm_eps", *eps),
                  setting("position", std::string("learned")),
                  setting("activation", activation),
                  setting("bias", std::string("true")),
                  setting("tie_embeddings", std::string(*tied ? "true" : "false"))};
  return out;
}

Status fitsGpt2(const models::GptConfig &c) {
  namespace nn = frontend::nn;
  auto differs = [](std::string_view what) {
    return makeError("{} (GPT-2 has pre-LN layernorm, learned positions, gelu_tanh, gelu or relu, "
                     "biases and no sliding window or kv heads of its own)",
                     what);
  };
  if (c.norm != nn::NormPlacement::Pre)
    return differs("norm=post");
  if (c.normKind != nn::NormKind::LayerNorm)
    return differs("norm_kind=rmsnorm");
  if (c.position != nn::PositionKind::Learned)
    return differs("position=" + models::showValue(c.position));
  if (nn::isGated(c.activation) || c.activation == nn::Activation::Softplus)
    return differs("activation=" + models::showValue(c.activation));
  if (!c.bias)
    return differs("bias=false");
  if (c.window != 0)
    return differs("window=" + std::to_string(c.window));
  if (c.headDim != 0 && c.headDim * c.nHeads != c.dModel)
    return differs("head_dim=" + std::to_string(c.headDim));
  if (c.nKvHeads != 0 && c.nKvHeads != c.nHeads)
    return differs("n_kv_heads=" + std::to_string(c.nKvHeads));
  return {};
}

Json writeGpt2(const models::GptConfig &c) {
  namespace nn = frontend::nn;
  const char *act = c.activation == nn::Activation::GeluTanh ? "gelu_new"
                    : c.activation == nn::Activation::Gelu   ? "gelu"
                                                             : "relu";
  return Json{{"architectures", Json::array({"GPT2LMHeadModel"})},
              {"model_type", "gpt2"},
              {"vocab_size", c.vocab},
              {"n_positions", c.maxLen},
              {"n_ctx", c.maxLen},
              {"n_embd", c.dModel},
              {"n_layer", c.nLayers},
              {"n_head", c.nHeads},
              {"n_inner", c.dFF},
              {"activation_function", act},
              {"layer_norm_epsilon", c.normEpsilon()},
              {"tie_word_embeddings", c.tieEmbeddings},
              {"scale_attn_weights", true},
              // kiln's dropout (without these transformers takes 0.1 to fine-tune with; kiln
              // also drops the MLP's hidden units, which GPT-2 does not)
              {"embd_pdrop", c.dropout},
              {"attn_pdrop", c.dropout},
              {"resid_pdrop", c.dropout},
              {"torch_dtype", "float32"}};
}

std::vector<TensorRule> gpt2Rules(const models::GptConfig &c) {
  const int64_t d = c.dModel, ff = c.dFF;
  std::vector<TensorRule> rules = {
      {"tok_embed.weight", "transformer.wte.weight", {c.vocab, d}},
      {"pos_embed.weight", "transformer.wpe.weight", {c.maxLen, d}},
  };
  for (int64_t i = 0; i < c.nLayers; ++i) {
    const std::string k = fmt::format("blocks.{}.", i), h = fmt::format("transformer.h.{}.", i);
    auto add = [&](std::string kiln, std::string hf, std::vector<int64_t> shape,
                   bool transposed = false, int64_t offset = 0, int64_t rows = 0) {
      rules.push_back({k + kiln, h + hf, std::move(shape), transposed, offset, rows});
    };
    add("ln1.weight", "ln_1.weight", {d});
    add("ln1.bias", "ln_1.bias", {d});
    const char *qkv[] = {"q_proj", "k_proj", "v_proj"};
    for (int p = 0; p < 3; ++p) {
      add(fmt::format("attn.{}.weight", qkv[p]), "attn.c_attn.weight", {d, d}, true, p * d, 3 * d);
      add(fmt::format("attn.{}.bias", qkv[p]), "attn.c_attn.bias", {d}, false, p * d, 3 * d);
    }
    add("attn.o_proj.weight", "attn.c_proj.weight", {d, d}, true);
    add("attn.o_proj.bias", "attn.c_proj.bias", {d});
    add("ln2.weight", "ln_2.weight", {d});
    add("ln2.bias", "ln_2.bias", {d});
    add("mlp.fc1.weight", "mlp.c_fc.weight", {ff, d}, true);
    add("mlp.fc1.bias", "mlp.c_fc.bias", {ff});
    add("mlp.fc2.weight", "mlp.c_proj.weight", {d, ff}, true);
    add("mlp.fc2.bias", "mlp.c_proj.bias", {d});
  }
  rules.push_back({"ln_f.weight", "transformer.ln_f.weight", {d}});
  rules.push_back({"ln_f.bias", "transformer.ln_f.bias", {d}});
  if (!c.tieEmbeddings)
    rules.push_back({"lm_head.weight", "lm_head.weight", {c.vocab, d}});
  return rules;
}

} // namespace

const Architecture &gpt2Architecture() {
  static const Architecture a{.name = "GPT2LMHeadModel",
                              .modelType = "gpt2",
                              .bodyPrefix = "transformer.",
                              .readConfig = &readGpt2,
                              .fits = &fitsGpt2,
                              .writeConfig = &writeGpt2,
                              .rules = &gpt2Rules,
                              .ignoredSuffixes = {".attn.bias", ".attn.masked_bias"}};
  return a;
}

} // namespace kiln::interop
