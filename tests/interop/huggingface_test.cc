// The Hugging Face import and export (interop/huggingface.h): the layouts (GPT-2's Conv1D and
// fused c_attn, Llama's as they are), the dtypes read exactly, and one clear error for each kind
// of bad directory. End-to-end numerics against PyTorch: tests/parity/run_hf_parity.sh.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>
#include <map>

#include "interop/hf_mapping.h"
#include "interop/huggingface.h"
#include "runtime/json_text.h"
#include "runtime/model_description.h"
#include "runtime/safetensors.h"
#include "runtime/tasks.h"
#include "runtime/tokenizer.h"
#include "tests/util/hf_configs.h"
#include "tests/util/temp_dir.h"

namespace kiln::huggingface_test {
namespace {

using runtime::Json;
using runtime::SafetensorsDtype;
using runtime::SafetensorsFile;
using runtime::SafetensorsTensor;
using namespace testing_hf;

// Element k of every tensor below: in f32 `salt + k / 1024` (different per tensor); in f16 and
// bf16 `1 + (k mod 128) / 128`, which both hold exactly (bf16 has 7 mantissa bits).
float valueOf(int64_t k, float salt, SafetensorsDtype dtype) {
  return dtype == SafetensorsDtype::F32 ? salt + static_cast<float>(k) / 1024
                                        : 1 + static_cast<float>(k % 128) / 128;
}

SafetensorsTensor tensorOf(std::string name, std::vector<int64_t> shape, float salt,
                           SafetensorsDtype dtype = SafetensorsDtype::F32) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  SafetensorsTensor t{
      .name = std::move(name), .dtype = dtype, .shape = std::move(shape), .data = {}};
  t.data.resize(static_cast<size_t>(n) * runtime::dtypeSize(dtype));
  for (int64_t k = 0; k < n; ++k) {
    const float v = valueOf(k, salt, dtype);
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    if (dtype == SafetensorsDtype::F32)
      std::memcpy(t.data.data() + 4 * k, &v, 4);
    else if (dtype == SafetensorsDtype::BF16) {
      const uint16_t b = static_cast<uint16_t>(bits >> 16); // exact: the low bits are zero
      std::memcpy(t.data.data() + 2 * k, &b, 2);
    } else { // F16 of a value in [1, 2): biased exponent 15, the top 10 mantissa bits
      const uint16_t h = static_cast<uint16_t>((15u << 10) | ((bits >> 13) & 0x3ff));
      std::memcpy(t.data.data() + 2 * k, &h, 2);
    }
  }
  return t;
}

float at(const SafetensorsTensor &t, int64_t k) {
  float v;
  std::memcpy(&v, t.data.data() + 4 * k, 4);
  return v;
}

// The error of exporting w's model with one more setting, key=value, as `architecture` (""
// lets export pick): a model that layout cannot hold.
std::string exportErrorWith(const interop::DescribedWeights &w, std::string key, std::string value,
                            const std::string &architecture = "") {
  runtime::ModelDescription d = w.description;
  d.settings.emplace_back(std::move(key), std::move(value));
  Expected<interop::HuggingFaceFiles> hf = interop::exportHuggingFace(d, w.weights, architecture);
  EXPECT_FALSE(hf);
  return hf ? "" : hf.error().message;
}

// GPT-2 with d 8, 2 heads, 1 layer, d_ff 16, 6 positions, vocab 10.
Json gpt2Config() {
  return Json{{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", 10},
              {"n_embd", 8},
              {"n_head", 2},
              {"n_layer", 1},
              {"n_positions", 6},
              {"n_inner", nullptr},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5}};
}

std::vector<SafetensorsTensor> gpt2Tensors(SafetensorsDtype dtype = SafetensorsDtype::F32) {
  const int d = 8;
  std::vector<SafetensorsTensor> t = {
      tensorOf("transformer.wte.weight", {10, d}, 1, dtype),
      tensorOf("transformer.wpe.weight", {6, d}, 1.25f, dtype),
      tensorOf("transformer.h.0.ln_1.weight", {d}, 1.5f, dtype),
      tensorOf("transformer.h.0.ln_1.bias", {d}, 1.75f, dtype),
      tensorOf("transformer.h.0.attn.c_attn.weight", {d, 3 * d}, 1, dtype),
      tensorOf("transformer.h.0.attn.c_attn.bias", {3 * d}, 1.5f, dtype),
      tensorOf("transformer.h.0.attn.c_proj.weight", {d, d}, 1.5f, dtype),
      tensorOf("transformer.h.0.attn.c_proj.bias", {d}, 1.25f, dtype),
      tensorOf("transformer.h.0.ln_2.weight", {d}, 1.5f, dtype),
      tensorOf("transformer.h.0.ln_2.bias", {d}, 1.75f, dtype),
      tensorOf("transformer.h.0.mlp.c_fc.weight", {d, 4 * d}, 1, dtype),
      tensorOf("transformer.h.0.mlp.c_fc.bias", {4 * d}, 1.5f, dtype),
      tensorOf("transformer.h.0.mlp.c_proj.weight", {4 * d, d}, 1, dtype),
      tensorOf("transformer.h.0.mlp.c_proj.bias", {d}, 1.5f, dtype),
      tensorOf("transformer.ln_f.weight", {d}, 1.5f, dtype),
      tensorOf("transformer.ln_f.bias", {d}, 1.75f, dtype),
      tensorOf("transformer.h.0.attn.bias", {1, 1, 6, 6}, 1), // the mask buffer: not a weight
  };
  return t;
}

class HuggingFaceImport : public testing_files::TempDirTest {
protected:
  void write(const Json &config, std::vector<SafetensorsTensor> tensors) {
    std::ofstream(dir_ / "config.json") << config.dump();
    SafetensorsFile f;
    f.tensors = std::move(tensors);
    ASSERT_TRUE(runtime::writeSafetensors((dir_ / "model.safetensors").string(), f));
  }
  // The import's error, which must name `config.json` or the weights file.
  std::string importError() {
    Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
    EXPECT_FALSE(w);
    return w ? "" : w.error().message;
  }
};

TEST_F(HuggingFaceImport, Gpt2ConvWeightsAreTransposedAndCAttnSplitIntoQKV) {
  write(gpt2Config(), gpt2Tensors());
  Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(w->description.model, "gpt");
  EXPECT_EQ(w->architecture, "GPT2LMHeadModel");
  const SafetensorsTensor *k = w->weights.find("blocks.0.attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{8, 8}));
  // kiln's k[out o, in i] = c_attn[in i, 8 + o] (the second of the three column blocks).
  for (int o = 0; o < 8; ++o)
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(at(*k, o * 8 + i), 1 + static_cast<float>(i * 24 + 8 + o) / 1024);
  const SafetensorsTensor *vBias = w->weights.find("blocks.0.attn.v_proj.bias");
  ASSERT_NE(vBias, nullptr);
  EXPECT_EQ(at(*vBias, 3), 1.5f + static_cast<float>(16 + 3) / 1024);
  // The head is tied: no lm_head; the mask buffer is passed over.
  EXPECT_EQ(w->weights.find("lm_head.weight"), nullptr);
  EXPECT_EQ(w->weights.tensors.size(), 16u + 4u); // 15 mapped, q/k/v weights and biases: +4
  // The description is in the metadata, and gives GPT-2's settings.
  Expected<std::optional<runtime::ModelDescription>> d =
      runtime::describedBy(w->weights.metadata, "here");
  ASSERT_TRUE(d && *d);
  EXPECT_EQ(**d, w->description);
  auto has = [&](std::string key, std::string value) {
    return std::count(w->description.settings.begin(), w->description.settings.end(),
                      std::pair{key, value}) == 1;
  };
  EXPECT_TRUE(has("d_ff", "32")); // n_inner null: 4 n_embd
  EXPECT_TRUE(has("activation", "gelu_tanh"));
  EXPECT_TRUE(has("seq_len", "6"));
}

TEST_F(HuggingFaceImport, HalfAndBfloatWeightsReadExactly) {
  for (SafetensorsDtype dtype : {SafetensorsDtype::F16, SafetensorsDtype::BF16}) {
    write(gpt2Config(), gpt2Tensors(dtype));
    Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
    ASSERT_TRUE(w) << w.error().message;
    const SafetensorsTensor *wte = w->weights.find("tok_embed.weight");
    ASSERT_NE(wte, nullptr);
    EXPECT_EQ(wte->dtype, SafetensorsDtype::F32);
    for (int64_t k : {0, 1, 37, 79})
      EXPECT_EQ(at(*wte, k), valueOf(k, 0, dtype)) << runtime::dtypeName(dtype);
  }
}

TEST_F(HuggingFaceImport, ExportThenImportGivesTheSameWeights) {
  write(gpt2Config(), gpt2Tensors());
  Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(w) << w.error().message;
  Expected<interop::HuggingFaceFiles> hf = interop::exportHuggingFace(w->description, w->weights);
  ASSERT_TRUE(hf) << hf.error().message;
  EXPECT_EQ(hf->architecture, "GPT2LMHeadModel");
  const SafetensorsTensor *cAttn = hf->model.find("transformer.h.0.attn.c_attn.weight");
  const std::vector<SafetensorsTensor> original = gpt2Tensors();
  ASSERT_NE(cAttn, nullptr);
  EXPECT_EQ(*cAttn, original[4]); // the fused, transposed tensor rebuilt bit for bit
  // The dropout kiln trained with, not transformers' default 0.1 for a fine-tune.
  runtime::ModelDescription dropped = w->description;
  dropped.settings.emplace_back("dropout", "0.25");
  Expected<interop::HuggingFaceFiles> withDropout = interop::exportHuggingFace(dropped, w->weights);
  ASSERT_TRUE(withDropout) << withDropout.error().message;
  const Json config = Json::parse(withDropout->configJson);
  for (const char *key : {"embd_pdrop", "attn_pdrop", "resid_pdrop"})
    EXPECT_EQ(config.value(key, -1.0), 0.25) << key;
  std::filesystem::remove(dir_ / "model.safetensors");
  std::ofstream(dir_ / "config.json") << hf->configJson;
  ASSERT_TRUE(runtime::writeSafetensors((dir_ / "model.safetensors").string(), hf->model));
  Expected<interop::DescribedWeights> again = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->weights, w->weights);
}

// Qwen2's tensors, tinyLlamaConfig's sizes (kv heads 2 of 4 dims: k and v 8 wide) with biases on
// q, k and v, the head tied.
std::vector<SafetensorsTensor> qwen2Tensors() {
  const std::string p = "model.layers.0.";
  return {tensorOf("model.embed_tokens.weight", {10, 8}, 1),
          tensorOf(p + "input_layernorm.weight", {8}, 1.5f),
          tensorOf(p + "self_attn.q_proj.weight", {8, 8}, 1.25f),
          tensorOf(p + "self_attn.q_proj.bias", {8}, 1.75f),
          tensorOf(p + "self_attn.k_proj.weight", {8, 8}, 1.5f),
          tensorOf(p + "self_attn.k_proj.bias", {8}, 1.25f),
          tensorOf(p + "self_attn.v_proj.weight", {8, 8}, 1.75f),
          tensorOf(p + "self_attn.v_proj.bias", {8}, 1.5f),
          tensorOf(p + "self_attn.o_proj.weight", {8, 8}, 1),
          tensorOf(p + "post_attention_layernorm.weight", {8}, 1.25f),
          tensorOf(p + "mlp.gate_proj.weight", {16, 8}, 1.5f),
          tensorOf(p + "mlp.up_proj.weight", {16, 8}, 1.75f),
          tensorOf(p + "mlp.down_proj.weight", {8, 16}, 1),
          tensorOf("model.norm.weight", {8}, 1.5f)};
}

// Qwen2 (and Qwen2.5) is LLaMA's layers with biases on q, k and v: qkv_bias. It exports as itself,
// and back; the biases are required, and refused under a Llama's config; a window on some layers
// only (from max_window_layers) is refused.
TEST_F(HuggingFaceImport, Qwen2IsLlamaWithBiasesOnQKV) {
  Json qwen2 = tinyLlamaConfig();
  qwen2["architectures"] = {"Qwen2ForCausalLM"};
  qwen2["model_type"] = "qwen2";
  qwen2["tie_word_embeddings"] = true;
  qwen2["use_sliding_window"] = false;
  qwen2["sliding_window"] = 4;
  write(qwen2, qwen2Tensors());
  Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(w->architecture, "Qwen2ForCausalLM");
  EXPECT_EQ(runtime::settingIn(w->description, "qkv_bias"), "true");
  EXPECT_EQ(runtime::settingIn(w->description, "bias"), "false");
  EXPECT_EQ(runtime::settingIn(w->description, "window"), std::nullopt);
  ASSERT_NE(w->weights.find("blocks.0.attn.k_proj.bias"), nullptr);
  EXPECT_EQ(w->weights.find("blocks.0.attn.k_proj.bias")->shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(w->weights.find("blocks.0.attn.o_proj.bias"), nullptr);
  Expected<interop::HuggingFaceFiles> hf = interop::exportHuggingFace(w->description, w->weights);
  ASSERT_TRUE(hf) << hf.error().message;
  EXPECT_EQ(hf->architecture, "Qwen2ForCausalLM");
  const Json config = Json::parse(hf->configJson);
  EXPECT_EQ(config["model_type"], "qwen2");
  EXPECT_EQ(config["use_sliding_window"], false);
  EXPECT_FALSE(config.contains("attention_bias"));
  EXPECT_EQ(*hf->model.find("model.layers.0.self_attn.v_proj.bias"), qwen2Tensors()[7]);
  std::ofstream(dir_ / "config.json") << hf->configJson;
  ASSERT_TRUE(runtime::writeSafetensors((dir_ / "model.safetensors").string(), hf->model));
  Expected<interop::DescribedWeights> again = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->weights, w->weights);
  EXPECT_EQ(again->description.settings, w->description.settings);

  std::vector<SafetensorsTensor> unbiased = qwen2Tensors();
  unbiased.erase(unbiased.begin() + 5); // k_proj.bias
  write(qwen2, unbiased);
  EXPECT_NE(importError().find("tensor \"model.layers.0.self_attn.k_proj.bias\" is missing"),
            std::string::npos);
  Json llama = qwen2;
  llama["architectures"] = {"LlamaForCausalLM"};
  llama["model_type"] = "llama";
  write(llama, qwen2Tensors());
  std::string e = importError();
  EXPECT_NE(e.find("_proj.bias\" is not one of LlamaForCausalLM's weights"), std::string::npos)
      << e;
  Json windowed = qwen2;
  windowed["use_sliding_window"] = true;
  windowed["max_window_layers"] = 0;
  write(windowed, qwen2Tensors());
  e = importError();
  EXPECT_NE(e.find("config.json: use_sliding_window: expected false, or max_window_layers >= "
                   "num_hidden_layers = 1"),
            std::string::npos)
      << e;
  windowed["max_window_layers"] = 1; // no layer from 1 on: none windowed
  write(windowed, qwen2Tensors());
  EXPECT_TRUE(interop::importHuggingFace(dir_.string()));
  // A kiln gpt with q, k and v biases and a window, or other biases, has neither layout.
  const std::string refused = exportErrorWith(*w, "window", "4");
  EXPECT_NE(refused.find("not Qwen2ForCausalLM: window=4 (Qwen2 has"), std::string::npos)
      << refused;
  EXPECT_NE(refused.find("not LlamaForCausalLM: qkv_bias=true"), std::string::npos) << refused;
}

// Phi-3's tensors, tinyLlamaConfig's sizes with 1 kv head (k and v 4 wide): q, k, v one after
// another in qkv_proj's 16 rows, gate and up in gate_up_proj's 32, the head untied.
std::vector<SafetensorsTensor> phi3Tensors() {
  const std::string p = "model.layers.0.";
  return {tensorOf("model.embed_tokens.weight", {10, 8}, 1),
          tensorOf(p + "input_layernorm.weight", {8}, 1.5f),
          tensorOf(p + "self_attn.qkv_proj.weight", {16, 8}, 1.25f),
          tensorOf(p + "self_attn.o_proj.weight", {8, 8}, 1),
          tensorOf(p + "post_attention_layernorm.weight", {8}, 1.25f),
          tensorOf(p + "mlp.gate_up_proj.weight", {32, 8}, 1.5f),
          tensorOf(p + "mlp.down_proj.weight", {8, 16}, 1),
          tensorOf("model.norm.weight", {8}, 1.5f),
          tensorOf("lm_head.weight", {10, 8}, 1.75f)};
}

// Phi-3 is LLaMA's layers with q, k, v fused in one tensor and gate, up in another, and Mistral's
// window: each kiln projection is its rows. Export writes the layout the checkpoint came from,
// or the one --architecture names.
TEST_F(HuggingFaceImport, Phi3FusesQKVAndGateUpAndExportsAsItCame) {
  write(phi3Config(), phi3Tensors());
  Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(w->architecture, "Phi3ForCausalLM");
  EXPECT_EQ(w->description.hfArchitecture, "Phi3ForCausalLM");
  EXPECT_EQ(runtime::settingIn(w->description, "window"), "3");
  EXPECT_EQ(runtime::settingIn(w->description, "n_kv_heads"), "1");
  const SafetensorsTensor *k = w->weights.find("blocks.0.attn.k_proj.weight");
  const SafetensorsTensor *v = w->weights.find("blocks.0.attn.v_proj.weight");
  const SafetensorsTensor *up = w->weights.find("blocks.0.mlp.up_proj.weight");
  ASSERT_TRUE(k && v && up);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{4, 8}));
  // Element [o, i] of k is qkv_proj's row 8 + o; of v, row 12 + o; of up, gate_up_proj's 16 + o.
  EXPECT_EQ(at(*k, 0), valueOf(8 * 8, 1.25f, SafetensorsDtype::F32));
  EXPECT_EQ(at(*k, 3 * 8 + 5), valueOf(11 * 8 + 5, 1.25f, SafetensorsDtype::F32));
  EXPECT_EQ(at(*v, 0), valueOf(12 * 8, 1.25f, SafetensorsDtype::F32));
  EXPECT_EQ(at(*up, 15 * 8 + 7), valueOf(31 * 8 + 7, 1.5f, SafetensorsDtype::F32));

  Expected<interop::HuggingFaceFiles> hf = interop::exportHuggingFace(w->description, w->weights);
  ASSERT_TRUE(hf) << hf.error().message;
  EXPECT_EQ(hf->architecture, "Phi3ForCausalLM");
  const Json config = Json::parse(hf->configJson);
  EXPECT_EQ(config["model_type"], "phi3");
  EXPECT_EQ(config["sliding_window"], 3);
  EXPECT_FALSE(config.contains("head_dim"));
  EXPECT_EQ(*hf->model.find("model.layers.0.self_attn.qkv_proj.weight"), phi3Tensors()[2]);
  EXPECT_EQ(*hf->model.find("model.layers.0.mlp.gate_up_proj.weight"), phi3Tensors()[5]);
  std::ofstream(dir_ / "config.json") << hf->configJson;
  ASSERT_TRUE(runtime::writeSafetensors((dir_ / "model.safetensors").string(), hf->model));
  Expected<interop::DescribedWeights> again = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->weights, w->weights);
  EXPECT_EQ(again->description, w->description);

  // Asked for, LLaMA's layout (with a window: Mistral's); without a class to come from, the first
  // that fits.
  Expected<interop::HuggingFaceFiles> apart =
      interop::exportHuggingFace(w->description, w->weights, "LlamaForCausalLM");
  ASSERT_TRUE(apart) << apart.error().message;
  EXPECT_EQ(apart->architecture, "MistralForCausalLM");
  EXPECT_NE(apart->model.find("model.layers.0.self_attn.k_proj.weight"), nullptr);
  runtime::ModelDescription fresh = w->description;
  fresh.hfArchitecture.clear();
  apart = interop::exportHuggingFace(fresh, w->weights);
  ASSERT_TRUE(apart) << apart.error().message;
  EXPECT_EQ(apart->architecture, "MistralForCausalLM");
  Expected<interop::HuggingFaceFiles> bad =
      interop::exportHuggingFace(w->description, w->weights, "FalconForCausalLM");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--architecture FalconForCausalLM: not a class kiln exports (GPT2LMHeadModel, "
            "LlamaForCausalLM, Qwen2ForCausalLM, Phi3ForCausalLM, GemmaForCausalLM)");
  EXPECT_EQ(exportErrorWith(*w, "rope_scaling", "llama3:8:1:4:8192", "Phi3ForCausalLM"),
            "--architecture Phi3ForCausalLM: the checkpoint's gpt does not fit it: "
            "rope_scaling=llama3:... (Phi-3 has pre-norm rmsnorm, rope, swiglu and no biases, "
            "its RoPE scaled as longrope or not)");
  runtime::ModelDescription scaled = w->description;
  scaled.settings.emplace_back("rope_scaling", "llama3:8:1:4:8192");
  // ... and, imported from Phi-3 but no longer fitting it, the first that fits.
  apart = interop::exportHuggingFace(scaled, w->weights);
  ASSERT_TRUE(apart) << apart.error().message;
  EXPECT_EQ(apart->architecture, "MistralForCausalLM");

  // What kiln cannot hold, or a tensor of LLaMA's layout, is named.
  Json partial = phi3Config();
  partial["partial_rotary_factor"] = 0.75; // Phi-4-mini's, which a head of 4 cannot take
  write(partial, phi3Tensors());
  EXPECT_EQ(importError(), dir_.string() + "/config.json: partial_rotary_factor: expected a "
                                           "fraction in (0, 1] that turns an even number of at "
                                           "least 2 of a head's 4 dimensions (int(4 x 0.75) = "
                                           "3), got 0.75");
  std::vector<SafetensorsTensor> wide = phi3Tensors();
  wide[2] = tensorOf("model.layers.0.self_attn.qkv_proj.weight", {24, 8}, 1.25f); // no GQA
  write(phi3Config(), wide);
  std::string e = importError();
  EXPECT_NE(e.find("tensor \"model.layers.0.self_attn.qkv_proj.weight\" is [24,8], expected "
                   "[16,8]"),
            std::string::npos)
      << e;
  write(phi3Config(), qwen2Tensors());
  e = importError();
  EXPECT_NE(e.find("tensor \"model.layers.0.self_attn.qkv_proj.weight\" is missing (kiln's "
                   "\"blocks.0.attn.q_proj.weight\")"),
            std::string::npos)
      << e;
}

TEST_F(HuggingFaceImport, Phi3LongRopeIsASettingAndExportsAsPhi3sConfigSaysIt) {
  write(phi3LongRopeConfig(), phi3Tensors());
  Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(runtime::settingIn(w->description, "rope_scaling"), "longrope:32:4096:1,1.5:2,3");
  EXPECT_EQ(runtime::settingIn(w->description, "max_len"), "131072");
  Expected<interop::HuggingFaceFiles> hf = interop::exportHuggingFace(w->description, w->weights);
  ASSERT_TRUE(hf) << hf.error().message;
  const Json config = Json::parse(hf->configJson);
  // (The three keys Phi3Config's validation of transformers 4.4x allows, no more.)
  EXPECT_EQ(config["rope_scaling"], phi3LongRopeConfig()["rope_scaling"]);
  EXPECT_EQ(config["original_max_position_embeddings"], 4096);
  EXPECT_EQ(config["max_position_embeddings"], 131072);
  std::ofstream(dir_ / "config.json") << hf->configJson;
  Expected<interop::DescribedWeights> again = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->description, w->description);

  // LLaMA's layout has no longrope; a max_len that no longer gives the factor is named.
  Expected<interop::HuggingFaceFiles> bad =
      interop::exportHuggingFace(w->description, w->weights, "LlamaForCausalLM");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "--architecture LlamaForCausalLM: the checkpoint's gpt does not fit it: "
            "rope_scaling=longrope:... (LLaMA has pre-norm rmsnorm, rope, swiglu and no biases, "
            "its RoPE scaled as llama3, linearly, as yarn or not)");
  EXPECT_EQ(exportErrorWith(*w, "max_len", "8192", "Phi3ForCausalLM"),
            "--architecture Phi3ForCausalLM: the checkpoint's gpt does not fit it: "
            "rope_scaling=longrope:32:4096:... with max_len=8192 (Phi-3's config takes the factor "
            "as max_position_embeddings / original_max_position_embeddings = 2)");
}

TEST_F(HuggingFaceImport, ExportRefusesAGptOfNeitherLayoutNamingTheSetting) {
  runtime::ModelDescription d{.model = "gpt",
                              .settings = {{"norm", "post"}},
                              .tokenizerJson = "",
                              .endTokens = {},
                              .task = {},
                              .hfArchitecture = {}};
  Expected<interop::HuggingFaceFiles> hf = interop::exportHuggingFace(d, {});
  ASSERT_FALSE(hf);
  EXPECT_NE(hf.error().message.find("not GPT2LMHeadModel: norm=post"), std::string::npos)
      << hf.error().message;
  d.model = "bert";
  EXPECT_FALSE(interop::exportHuggingFace(d, {}));
}

// The ids generation ends at: generation_config.json's eos_token_id, else config.json's (an id or
// a list), kept in the checkpoint's description and written back by export.
TEST_F(HuggingFaceImport, EndTokensAreTheConfigsEosTokenId) {
  auto endTokens = [&](const Json &config) {
    write(config, gpt2Tensors());
    Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
    EXPECT_TRUE(w) << w.error().message;
    return w ? w->description.endTokens : std::vector<int32_t>{-1};
  };
  Json config = gpt2Config();
  EXPECT_EQ(endTokens(config), std::vector<int32_t>{}); // none: the tokenizer's EOS
  config["eos_token_id"] = nullptr;
  EXPECT_EQ(endTokens(config), std::vector<int32_t>{});
  config["eos_token_id"] = Json::array({3, 9});
  EXPECT_EQ(endTokens(config), (std::vector<int32_t>{3, 9}));
  Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ(runtime::describedBy(w->weights.metadata, "w").value()->endTokens,
            (std::vector<int32_t>{3, 9}));
  Expected<interop::HuggingFaceFiles> hf = interop::exportHuggingFace(w->description, w->weights);
  ASSERT_TRUE(hf) << hf.error().message;
  EXPECT_EQ(Json::parse(hf->configJson)["eos_token_id"], Json::array({3, 9}));
  w->description.endTokens = {4};
  hf = interop::exportHuggingFace(w->description, w->weights);
  ASSERT_TRUE(hf) << hf.error().message;
  EXPECT_EQ(Json::parse(hf->configJson)["eos_token_id"], 4);
  // generation_config.json's, where it names one, is what transformers' generate stops at.
  config["eos_token_id"] = 7;
  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": 5})";
  EXPECT_EQ(endTokens(config), std::vector<int32_t>{5});
  EXPECT_EQ(interop::importHuggingFace(dir_.string())->endTokensFrom, "generation_config.json");
  for (const char *none : {R"({"max_length": 20})", R"({"eos_token_id": []})"}) {
    std::ofstream(dir_ / "generation_config.json") << none;
    EXPECT_EQ(endTokens(config), std::vector<int32_t>{7}) << none;
    EXPECT_EQ(interop::importHuggingFace(dir_.string())->endTokensFrom, "config.json");
  }
  // An id past the vocabulary stays, as transformers keeps it (no generated token is one); what is
  // not an id is named with the file.
  config["eos_token_id"] = 50256;
  std::filesystem::remove(dir_ / "generation_config.json");
  EXPECT_EQ(endTokens(config), std::vector<int32_t>{50256});
  const std::string notIds = (dir_ / "config.json").string() +
                             ": eos_token_id: expected a token id (a whole number from 0) or a "
                             "list of them, got ";
  for (const Json &bad : {Json(-3), Json("2"), Json::array({1, -1}), Json(2.5), Json(1LL << 31)}) {
    config["eos_token_id"] = bad;
    write(config, gpt2Tensors());
    EXPECT_EQ(importError(), notIds + bad.dump());
  }
  config["eos_token_id"] = 7;
  write(config, gpt2Tensors());
  std::ofstream(dir_ / "generation_config.json") << R"({"eos_token_id": [1, "x"]})";
  EXPECT_EQ(importError(), (dir_ / "generation_config.json").string() +
                               ": eos_token_id: expected a token id (a whole number from 0) or a "
                               "list of them, got [1,\"x\"]");
  std::ofstream(dir_ / "generation_config.json") << "[5]";
  EXPECT_EQ(importError(), (dir_ / "generation_config.json").string() + ": expected a JSON object");
}

struct BadConfig {
  const char *key;
  Json value; // null: the key is removed
  const char *message;
};

TEST_F(HuggingFaceImport, EveryBadConfigKeyIsNamed) {
  const BadConfig cases[] = {
      {"n_embd", nullptr, "config.json: n_embd: expected a positive integer, got nothing"},
      {"n_head", "2", "config.json: n_head: expected an integer in [1, 16777216], got \"2\""},
      {"vocab_size", -3, "config.json: vocab_size: expected an integer in [1, 16777216], got -3"},
      {"layer_norm_epsilon", "x", "config.json: layer_norm_epsilon: expected a positive number"},
      {"activation_function", "swish", "config.json: activation_function: expected gelu_new"},
      {"scale_attn_by_inverse_layer_idx", true,
       "config.json: scale_attn_by_inverse_layer_idx: expected false"},
      {"n_head", 3, "config.json: n_head: expected a divisor of n_embd = 8"},
      {"architectures", Json::array({"BertForMaskedLM"}),
       "config.json: architectures: \"BertForMaskedLM\" is not one kiln imports"},
  };
  for (const BadConfig &c : cases) {
    Json config = gpt2Config();
    if (c.value.is_null())
      config.erase(c.key);
    else
      config[c.key] = c.value;
    write(config, gpt2Tensors());
    const std::string e = importError();
    EXPECT_NE(e.find(c.message), std::string::npos) << c.key << ": " << e;
    EXPECT_NE(e.find("config.json"), std::string::npos) << e;
  }
}

TEST_F(HuggingFaceImport, LlamaKeysKilnCannotExpressAreRefused) {
  Json llama = tinyLlamaConfig();
  const BadConfig cases[] = {
      {"rope_scaling", Json{{"type", "dynamic"}, {"factor", 2.0}},
       "config.json: rope_scaling.type: expected \"default\", \"llama3\", \"linear\" or "
       "\"yarn\""},
      {"rope_scaling", Json{{"type", "linear"}, {"factor", 0.5}},
       "config.json: rope_scaling: expected a finite factor >= 1, got 0.5"},
      {"rope_scaling", Json{{"type", "linear"}},
       "config.json: rope_scaling.factor: expected a number >= 1 (transformers' linear scaling "
       "needs it), got nothing"},
      {"rope_scaling", Json{{"factor", 2.0}},
       "config.json: rope_scaling.rope_type: expected \"default\", \"llama3\", \"linear\" or "
       "\"yarn\", got nothing"},
      {"rope_scaling", Json{{"rope_type", "llama3"}, {"factor", 8.0}},
       "config.json: rope_scaling.low_freq_factor: expected a positive number"},
      {"rope_scaling",
       Json{{"rope_type", "llama3"},
            {"factor", 0.5},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192}},
       "config.json: rope_scaling: expected a finite factor >= 1, got 0.5"},
      {"rope_scaling",
       Json{{"rope_type", "llama3"},
            {"factor", 8.0},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192.5}},
       "config.json: rope_scaling.original_max_position_embeddings: expected an integer"},
      {"rope_scaling",
       Json{{"rope_type", "llama3"},
            {"factor", 0},
            {"low_freq_factor", 1.0},
            {"high_freq_factor", 4.0},
            {"original_max_position_embeddings", 8192}},
       "config.json: rope_scaling: expected a finite factor >= 1, got 0"},
      {"rope_scaling", Json{{"rope_type", "llama3"}, {"type", "default"}},
       "config.json: rope_scaling.type: expected the same as rope_type, or nothing"},
      {"rope_scaling", "default", "rope_scaling: expected null or an object"},
      {"rope_parameters", Json{{"rope_type", "dynamic"}, {"rope_theta", 5e5}},
       "config.json: rope_parameters.rope_type: expected \"default\", \"llama3\", \"linear\" or "
       "\"yarn\""},
      {"rope_parameters", Json{{"rope_type", "yarn"}, {"rope_theta", 5e5}},
       "config.json: rope_parameters.factor: expected a number >= 1 (transformers' yarn scaling "
       "needs it), got nothing"},
      {"rope_parameters", Json{{"rope_type", "llama3"}, {"rope_theta", 5e5}},
       "config.json: rope_parameters.factor: expected a positive number"},
      {"rope_parameters", 5e5, "rope_parameters: expected an object"},
      {"hidden_act", "gelu", "hidden_act: expected silu"},
      {"attention_bias", true, "attention_bias: expected false"},
      {"head_dim", -1, "config.json: head_dim: expected"},
      {"num_attention_heads", 3, "num_attention_heads: expected a divisor of hidden_size = 8"},
      {"num_key_value_heads", 3,
       "config.json: num_key_value_heads: expected a divisor of num_attention_heads = 2"},
  };
  for (const BadConfig &c : cases) {
    Json config = llama;
    config[c.key] = c.value;
    write(config, {});
    const std::string e = importError();
    EXPECT_NE(e.find(c.message), std::string::npos) << c.key << ": " << e;
  }
}

TEST_F(HuggingFaceImport, BadTensorsAreNamed) {
  struct Case {
    std::function<void(std::vector<SafetensorsTensor> &)> change;
    const char *message;
  };
  const Case cases[] = {
      {[](auto &t) { t.erase(t.begin() + 6); },
       "tensor \"transformer.h.0.attn.c_proj.weight\" is missing (kiln's "
       "\"blocks.0.attn.o_proj.weight\")"},
      {[](auto &t) {
         t[4] = tensorOf(t[4].name, {8, 16}, 1);
       },
       "tensor \"transformer.h.0.attn.c_attn.weight\" is [8,16], expected [8,24]"},
      {[](auto &t) {
         t[2] = tensorOf(t[2].name, {8}, 1, SafetensorsDtype::F32),
         t[2].dtype = SafetensorsDtype::I32;
       },
       "tensor \"transformer.h.0.ln_1.weight\" is I32, expected a float dtype"},
      {[](auto &t) { t.push_back(tensorOf("transformer.h.1.ln_1.weight", {8}, 1)); },
       "tensor \"transformer.h.1.ln_1.weight\" is not one of GPT2LMHeadModel's weights"},
      {[](auto &t) {
         const float nan = std::numeric_limits<float>::quiet_NaN();
         std::memcpy(t[2].data.data() + 4 * 3, &nan, 4);
       },
       "tensor \"transformer.h.0.ln_1.weight\": element 3 is not a finite number"},
      // An F64 value beyond f32's range is finite: it overflows (it was called not finite).
      {[](auto &t) {
         std::vector<uint8_t> wide(8 * 8);
         for (int k = 0; k < 8; ++k) {
           const double v = k == 3 ? 1e39 : 1.5;
           std::memcpy(wide.data() + 8 * k, &v, 8);
         }
         t[2].dtype = SafetensorsDtype::F64, t[2].data = wide;
       },
       "tensor \"transformer.h.0.ln_1.weight\": element 3 = 1e+39 is beyond f32's range"},
  };
  for (const Case &c : cases) {
    std::vector<SafetensorsTensor> tensors = gpt2Tensors();
    c.change(tensors);
    write(gpt2Config(), tensors);
    const std::string e = importError();
    EXPECT_NE(e.find(c.message), std::string::npos) << e;
    EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  }
}

TEST_F(HuggingFaceImport, BareBodyNamesAndMissingFilesAndTooLargeTokenizers) {
  // A checkpoint of GPT2Model (no "transformer." prefix) imports too.
  std::vector<SafetensorsTensor> bare = gpt2Tensors();
  for (SafetensorsTensor &t : bare)
    t.name = t.name.substr(std::string("transformer.").size());
  write(gpt2Config(), bare);
  EXPECT_TRUE(interop::importHuggingFace(dir_.string()));
  // A tokenizer of more tokens than the model's vocabulary.
  std::ofstream(dir_ / "tokenizer.json") << runtime::Tokenizer::bytes().toJson();
  const std::string tooLarge = importError();
  EXPECT_NE(tooLarge.find("tokenizer.json: the tokenizer has 256 tokens, more than the model's "
                          "vocab_size 10"),
            std::string::npos)
      << tooLarge;
  // A shard index that says a tensor is in a shard that does not hold it (written for other
  // shards) is refused naming the entry (the tensor was taken from wherever it was).
  std::filesystem::rename(dir_ / "model.safetensors", dir_ / "a.safetensors");
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"weight_map": {"wte.weight": "a.safetensors", "lm_head.weight": "a.safetensors"}})";
  EXPECT_NE(importError().find("model.safetensors.index.json: weight_map.lm_head.weight: "
                               "a.safetensors does not hold the tensor (no shard does)"),
            std::string::npos)
      << importError();
  std::filesystem::remove(dir_ / "a.safetensors");
  // A shard index that names no tensor is named (the missing tensors were blamed on a
  // model.safetensors that does not exist).
  std::ofstream(dir_ / "model.safetensors.index.json") << R"({"weight_map": {}})";
  EXPECT_NE(importError().find("model.safetensors.index.json: weight_map names no tensors"),
            std::string::npos)
      << importError();
  std::filesystem::remove(dir_ / "model.safetensors.index.json");
  std::ofstream(dir_ / "pytorch_model.bin") << "pickle";
  EXPECT_NE(importError().find("no model.safetensors"), std::string::npos);
  EXPECT_NE(importError().find("pytorch_model.bin is a pickle"), std::string::npos);
  std::filesystem::remove(dir_ / "config.json");
  EXPECT_NE(importError().find("config.json: cannot open"), std::string::npos) << importError();
}

// GPT-2's older directories have vocab.json and merges.txt instead of tokenizer.json: the import
// keeps them as the tokenizer.json they make, "<|endoftext|>" a special token, the EOS (without
// them the checkpoint's ids were read as bytes, and generate wrote garbage, exit 0).
TEST_F(HuggingFaceImport, Gpt2VocabAndMergesAreTheTokenizer) {
  Json config = gpt2Config();
  config["vocab_size"] = 258;
  std::vector<SafetensorsTensor> tensors = gpt2Tensors();
  tensors[0] = tensorOf("transformer.wte.weight", {258, 8}, 1);
  write(config, tensors);
  Expected<interop::DescribedWeights> none = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->description.tokenizerJson.empty());
  Json vocab = Json::parse(runtime::Tokenizer::bytes().toJson())["model"]["vocab"];
  vocab["ab"] = 256;
  vocab["<|endoftext|>"] = 257;
  std::ofstream(dir_ / "vocab.json") << vocab.dump();
  EXPECT_EQ(importError(), dir_.string() + ": no tokenizer.json, and GPT-2's vocab.json comes with "
                                           "merges.txt: merges.txt is missing");
  std::ofstream(dir_ / "merges.txt") << "#version: 0.2\na b\n";
  Expected<interop::DescribedWeights> w = interop::importHuggingFace(dir_.string());
  ASSERT_TRUE(w) << w.error().message;
  Expected<runtime::Tokenizer> t = runtime::Tokenizer::parse(w->description.tokenizerJson, "kept");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->encode("ab<|endoftext|>"), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(t->eosId(), std::optional<int32_t>(257));
}

TEST(ModelDescription, RoundTripsThroughMetadataAndRefusesMalformedSettings) {
  runtime::ModelDescription d{.model = "gpt",
                              .settings = {{"d_model", "64"}, {"seq_len", "32"}},
                              .tokenizerJson = "{}",
                              .endTokens = {128001, 128009},
                              .task = "lm",
                              .hfArchitecture = "Phi3ForCausalLM"};
  std::map<std::string, std::string> metadata{{"format", "pt"}};
  runtime::describeIn(d, metadata);
  Expected<std::optional<runtime::ModelDescription>> back = runtime::describedBy(metadata, "f");
  ASSERT_TRUE(back && *back);
  EXPECT_EQ(**back, d);
  EXPECT_EQ(metadata.at("kiln.task"), "lm");
  EXPECT_EQ(metadata.at("kiln.hf_architecture"), "Phi3ForCausalLM");
  EXPECT_EQ(metadata.at("kiln.end_tokens"), "[128001,128009]");
  for (const char *bad : {"[]", "[-1]", "[1.5]", "[2147483648]", "7", "[\"2\"]", "[1,"}) {
    std::map<std::string, std::string> m = metadata;
    m["kiln.end_tokens"] = bad;
    back = runtime::describedBy(m, "f");
    ASSERT_FALSE(back) << bad;
    EXPECT_TRUE(back.error().message.starts_with("f: metadata ")) << back.error().message;
  }
  back = runtime::describedBy(metadata, "f");
  ASSERT_TRUE(back && *back);
  // A task this kiln does not know leaves the weights readable; a run that would continue it
  // is refused (it would train another task).
  metadata["kiln.task"] = "sort";
  back = runtime::describedBy(metadata, "f");
  ASSERT_TRUE(back && *back);
  EXPECT_EQ(runtime::continuedTask((*back)->task, false, "f").error().message,
            "f: metadata \"kiln.task\": unknown task 'sort' (expected copy, reverse, lm, mlm or "
            "pairs) (give --task)");
  EXPECT_EQ(*runtime::continuedTask("reverse", false, "f"), "reverse");
  EXPECT_EQ(*runtime::continuedTask("reverse", true, "f"), ""); // (text given: its pairs)
  EXPECT_EQ(*runtime::continuedTask("pairs", false, "f"), "pairs");
  metadata.erase("kiln.task");
  metadata["kiln.settings"] = R"({"d_model": "64"})";
  back = runtime::describedBy(metadata, "f");
  ASSERT_FALSE(back);
  EXPECT_EQ(back.error().message,
            "f: metadata \"kiln.settings\" is not an array of [key, value] text pairs");
  // A key set twice names the file's metadata, not a --set that no one gave.
  metadata["kiln.settings"] = R"([["vocab", "64"], ["d_model", "8"], ["vocab", "65"]])";
  back = runtime::describedBy(metadata, "f");
  ASSERT_FALSE(back);
  EXPECT_EQ(back.error().message, "f: metadata \"kiln.settings\" sets vocab twice");
  // An empty tokenizer would silently read as byte tokens (kiln writes none for those).
  metadata["kiln.settings"] = "[]";
  metadata["kiln.tokenizer"] = "";
  back = runtime::describedBy(metadata, "f");
  ASSERT_FALSE(back);
  EXPECT_EQ(back.error().message, "f: metadata \"kiln.tokenizer\" is empty: expected a "
                                  "tokenizer.json (a model of byte tokens has no such key)");
  Expected<std::optional<runtime::ModelDescription>> none =
      runtime::describedBy({{"format", "pt"}}, "f");
  ASSERT_TRUE(none);
  EXPECT_FALSE(*none);
}

} // namespace
} // namespace kiln::huggingface_test
