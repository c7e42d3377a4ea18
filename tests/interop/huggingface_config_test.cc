// kiln import's reading of config.json alone (interop/hf_*.cc readConfig): RoPE's theta,
// scalings (llama3, longrope, linear, yarn) and partial rotary as transformers reads them, the keys
// it passes over, Mistral's window default. The import of whole directories: huggingface_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "interop/hf_mapping.h"
#include "interop/huggingface.h"
#include "models/config.h"
#include "tests/util/hf_configs.h"

namespace kiln::huggingface_config_test {
namespace {

using namespace testing_hf;

// An import's settings by key.
std::map<std::string, std::string> settingMap(const interop::ImportedConfig &c) {
  std::map<std::string, std::string> settings;
  for (const models::Setting &s : c.settings)
    settings[s.key] = s.value;
  return settings;
}

// longrope's keys as transformers reads them, each bad one named.
TEST(HuggingFaceConfig, LongRopeKeysAreReadAsTransformersReadsThem) {
  auto read = [](const Json &config) { return interop::phi3Architecture().readConfig(config); };
  auto scalingOf = [&](const Json &config) -> std::string {
    Expected<interop::ImportedConfig> c = read(config);
    if (!c)
      return c.error().message;
    for (const models::Setting &s : c->settings)
      if (s.key == "rope_scaling")
        return s.value;
    return "none";
  };
  // A factor beside the top's original length is passed over, with a note; without that length
  // the original is max_position_embeddings and the factor rope_scaling's.
  Json withFactor = phi3LongRopeConfig();
  withFactor["rope_scaling"]["factor"] = 8.0;
  Expected<interop::ImportedConfig> c = read(withFactor);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->notes, std::vector<std::string>{
                          "config.json: rope_scaling.factor: transformers takes longrope's factor "
                          "as max_position_embeddings / original_max_position_embeddings; passed "
                          "over"});
  EXPECT_EQ(scalingOf(withFactor), "longrope:32:4096:1,1.5:2,3");
  withFactor.erase("original_max_position_embeddings");
  EXPECT_EQ(scalingOf(withFactor), "longrope:8:131072:1,1.5:2,3");
  Json bad = phi3LongRopeConfig();
  bad["rope_scaling"]["attention_factor"] = 1.2;
  EXPECT_EQ(scalingOf(bad), "config.json: rope_scaling.attention_factor: expected absent (kiln "
                            "scales cos and sin by longrope's own sqrt(1 + ln(factor) / "
                            "ln(original length))), got 1.2");
  bad = phi3LongRopeConfig();
  bad["rope_scaling"]["short_factor"] = {1.0, 1.5, 2.0};
  bad["rope_scaling"]["long_factor"] = {1.0, 1.5, 2.0};
  EXPECT_EQ(scalingOf(bad), "config.json: rope_scaling.short_factor: expected 2 factors, one per "
                            "frequency of a head of 4, got [1.0,1.5,2.0]");
  bad["rope_scaling"]["long_factor"] = {1.0, 1.5};
  EXPECT_EQ(scalingOf(bad), "config.json: rope_scaling.long_factor: expected as many factors as "
                            "short_factor, 3, got [1.0,1.5]");
  bad["rope_scaling"]["long_factor"] = {1.0, -1.5, 1.0};
  EXPECT_EQ(scalingOf(bad), "config.json: rope_scaling.long_factor: expected a list of positive "
                            "numbers, one per frequency of a head, got [1.0,-1.5,1.0]");
  bad["rope_scaling"].erase("long_factor");
  EXPECT_EQ(scalingOf(bad), "config.json: rope_scaling.long_factor: expected a list of positive "
                            "numbers, one per frequency of a head, got nothing");
  // Another model's config: longrope is Phi-3's.
  Json llama = phi3LongRopeConfig();
  llama["architectures"] = {"LlamaForCausalLM"};
  llama["model_type"] = "llama";
  llama.erase("sliding_window");
  Expected<interop::ImportedConfig> refused = interop::llamaArchitecture().readConfig(llama);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            "config.json: rope_scaling.type: expected \"default\", \"llama3\", \"linear\" or "
            "\"yarn\" (kiln's RoPE scales its frequencies as Llama 3.1 or YaRN does, linearly, "
            "or not at all; longrope is Phi-3's), got \"longrope\"");
}

// LongChat's and Vicuna-16k's rope_scaling {"type": "linear", "factor": 4}: position
// interpolation, rope_scaling=linear:4, exported as it came (both type names).
TEST(HuggingFaceConfig, LinearRopeScalingIsASetting) {
  Json vicuna = tinyLlamaConfig();
  vicuna["max_position_embeddings"] = 4096; // (below llama3's 8192: linear has no original length)
  vicuna["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  const interop::Architecture &llama = interop::llamaArchitecture();
  Expected<interop::ImportedConfig> c = llama.readConfig(vicuna);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(settingMap(*c)["rope_scaling"], "linear:4");
  EXPECT_TRUE(c->notes.empty());
  Expected<models::GptConfig> model = models::gptConfig(c->settings);
  ASSERT_TRUE(model) << model.error().message;
  ASSERT_TRUE(llama.fits(*model));
  const Json written = llama.writeConfig(*model);
  EXPECT_EQ(written["rope_scaling"],
            (Json{{"rope_type", "linear"}, {"type", "linear"}, {"factor", 4.0}}));
  Expected<interop::ImportedConfig> again = llama.readConfig(written);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(settingMap(*again), settingMap(*c));
  // Keys linear scaling does not use are passed over with a note; Phi-3's layout has none.
  vicuna["rope_scaling"]["original_max_position_embeddings"] = 4096;
  c = llama.readConfig(vicuna);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->notes, std::vector<std::string>{"config.json: rope_scaling."
                                               "original_max_position_embeddings: not used by "
                                               "linear scaling; passed over"});
  const Status phi3 = interop::phi3Architecture().fits(*model);
  ASSERT_FALSE(phi3);
  EXPECT_EQ(phi3.error().message, "rope_scaling=linear:... (Phi-3 has pre-norm rmsnorm, rope, "
                                  "swiglu and no biases, its RoPE scaled as longrope or not)");
}

// YaRN's rope_scaling as transformers' _compute_yarn_parameters reads it (Qwen2.5's long-context
// setting {"type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}): the
// defaults of beta_fast, beta_slow and truncate, DeepSeek's mscale pair for the attention factor,
// an original length from max_position_embeddings where rope_scaling has none; exported as it
// came. Phi-3's layout scales as longrope only.
TEST(HuggingFaceConfig, YarnRopeScalingIsASetting) {
  const interop::Architecture &llama = interop::llamaArchitecture();
  Json qwen = tinyLlamaConfig();
  qwen["max_position_embeddings"] = 32768;
  qwen["rope_scaling"] = {
      {"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  Expected<interop::ImportedConfig> c = llama.readConfig(qwen);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(settingMap(*c)["rope_scaling"], "yarn:4:32768:32:1:auto:true");
  EXPECT_TRUE(c->notes.empty());
  Expected<models::GptConfig> model = models::gptConfig(c->settings);
  ASSERT_TRUE(model) << model.error().message;
  ASSERT_TRUE(llama.fits(*model));
  Json written = llama.writeConfig(*model);
  EXPECT_EQ(written["rope_scaling"], (Json{{"rope_type", "yarn"},
                                           {"factor", 4.0},
                                           {"original_max_position_embeddings", 32768},
                                           {"beta_fast", 32.0},
                                           {"beta_slow", 1.0}}));
  Expected<interop::ImportedConfig> again = llama.readConfig(written);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(settingMap(*again), settingMap(*c));

  // Every key given; truncate false and the attention factor are written back.
  qwen["rope_scaling"] = {{"rope_type", "yarn"},
                          {"factor", 8.0},
                          {"beta_fast", 16.0},
                          {"beta_slow", 2.0},
                          {"attention_factor", 1.5},
                          {"truncate", false},
                          {"original_max_position_embeddings", 4096}};
  c = llama.readConfig(qwen);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(settingMap(*c)["rope_scaling"], "yarn:8:4096:16:2:1.5:false");
  model = models::gptConfig(c->settings);
  ASSERT_TRUE(model) << model.error().message;
  written = llama.writeConfig(*model);
  EXPECT_EQ(written["rope_scaling"]["attention_factor"], 1.5);
  EXPECT_EQ(written["rope_scaling"]["truncate"], false);
  again = llama.readConfig(written);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(settingMap(*again), settingMap(*c));

  // DeepSeek's mscale and mscale_all_dim, without attention_factor: m(mscale) / m(all), m(s) =
  // 0.1 s ln(factor) + 1; with one of them only, the paper's (auto). No original length: the
  // model's max_position_embeddings, as transformers 4 took it.
  qwen["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 40.0}, {"mscale", 1.0}, {"mscale_all_dim", 0.707}};
  c = llama.readConfig(qwen);
  ASSERT_TRUE(c) << c.error().message;
  std::optional<models::nn::RopeScaling> yarn;
  ASSERT_TRUE(models::parseValue(settingMap(*c)["rope_scaling"], yarn).ok());
  const double m1 = 0.1 * std::log(40.0) + 1, m707 = 0.1 * 0.707 * std::log(40.0) + 1;
  EXPECT_DOUBLE_EQ(yarn->attentionFactor, m1 / m707);
  EXPECT_EQ(yarn->originalMaxLen, 32768);
  qwen["rope_scaling"].erase("mscale_all_dim");
  c = llama.readConfig(qwen);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(settingMap(*c)["rope_scaling"], "yarn:40:32768:32:1:auto:true");

  // Bad keys, each named.
  auto refusal = [&](Json scaling) {
    Json bad = qwen;
    bad["rope_scaling"] = std::move(scaling);
    Expected<interop::ImportedConfig> r = llama.readConfig(bad);
    return r ? std::string("read") : r.error().message;
  };
  EXPECT_EQ(refusal({{"rope_type", "yarn"}}),
            "config.json: rope_scaling.factor: expected a number >= 1 (transformers' yarn "
            "scaling needs it), got nothing");
  EXPECT_EQ(refusal({{"rope_type", "yarn"}, {"factor", 0.5}}),
            "config.json: rope_scaling: expected a finite factor >= 1, got 0.5");
  EXPECT_EQ(refusal({{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 0.5}}),
            "config.json: rope_scaling: expected finite turns beta_fast >= beta_slow > 0, got "
            "beta_fast 0.5 and beta_slow 1");
  EXPECT_NE(refusal({{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", "yes"}})
                .find("config.json: rope_scaling.truncate: expected"),
            std::string::npos);
  EXPECT_NE(refusal({{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", -1.0}})
                .find("config.json: rope_scaling.attention_factor: expected a positive number"),
            std::string::npos);
  Json phi3 = phi3Config();
  phi3["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  Expected<interop::ImportedConfig> refused = interop::phi3Architecture().readConfig(phi3);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("config.json: rope_scaling.rope_type: expected "
                                         "\"default\", \"llama3\", \"linear\" or \"longrope\""),
            std::string::npos)
      << refused.error().message;
}

// Gemma-2B's config as first released: LLaMA's keys with hidden_act "gelu", which transformers'
// Gemma passes over for hidden_activation (the tanh GELU where absent), a tied head by default;
// kiln's geglu and scale_embeddings, written back under both activation names. The other
// layouts refuse a Gemma model, and Gemma's a LLaMA one.
TEST(HuggingFaceConfig, GemmaIsGegluWithScaledEmbeddings) {
  const interop::Architecture &gemma = interop::gemmaArchitecture();
  Json config = tinyLlamaConfig();
  config["architectures"] = {"GemmaForCausalLM"};
  config["model_type"] = "gemma";
  config["hidden_act"] = "gelu";
  config.erase("tie_word_embeddings");
  Expected<interop::ImportedConfig> c = gemma.readConfig(config);
  ASSERT_TRUE(c) << c.error().message;
  std::map<std::string, std::string> settings = settingMap(*c);
  EXPECT_EQ(settings["activation"], "geglu");
  EXPECT_EQ(settings["scale_embeddings"], "true");
  EXPECT_EQ(settings["tie_embeddings"], "true");
  EXPECT_EQ(c->notes, std::vector<std::string>{"config.json: hidden_act: \"gelu\" passed over "
                                               "(transformers' Gemma gates with "
                                               "hidden_activation, gelu_pytorch_tanh where "
                                               "absent)"});
  Expected<models::GptConfig> model = models::gptConfig(c->settings);
  ASSERT_TRUE(model) << model.error().message;
  ASSERT_TRUE(gemma.fits(*model));
  const Json written = gemma.writeConfig(*model);
  EXPECT_EQ(written["architectures"], Json::array({"GemmaForCausalLM"}));
  EXPECT_EQ(written["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_EQ(written["hidden_act"], "gelu_pytorch_tanh");
  Expected<interop::ImportedConfig> again = gemma.readConfig(written);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(settingMap(*again), settings);
  EXPECT_TRUE(again->notes.empty());

  // Only the tanh GELU gates: an exact one is refused by name.
  config["hidden_activation"] = "gelu";
  Expected<interop::ImportedConfig> exact = gemma.readConfig(config);
  ASSERT_FALSE(exact);
  EXPECT_EQ(exact.error().message, "config.json: hidden_activation: expected gelu_pytorch_tanh "
                                   "(kiln's geglu gates with the tanh GELU), got \"gelu\"");

  // A Gemma model fits no other layout, a LLaMA model not Gemma's.
  const Status llama = interop::llamaArchitecture().fits(*model);
  ASSERT_FALSE(llama);
  EXPECT_EQ(llama.error().message, "activation=geglu (LLaMA has pre-norm rmsnorm, rope, swiglu "
                                   "and no biases, its RoPE scaled as llama3, linearly, as yarn "
                                   "or not)");
  EXPECT_FALSE(interop::gpt2Architecture().fits(*model));
  models::GptConfig unscaled = *model;
  unscaled.scaleEmbeddings = false;
  const Status notGemma = gemma.fits(unscaled);
  ASSERT_FALSE(notGemma);
  EXPECT_EQ(notGemma.error().message,
            "scale_embeddings=false (Gemma has pre-norm rmsnorm, rope, geglu and its embeddings "
            "scaled by sqrt(d_model), no biases, no window)");
  unscaled.activation = models::nn::Activation::SwiGLU;
  EXPECT_EQ(interop::llamaArchitecture().fits(unscaled).ok(), true);
  models::GptConfig scaledLlama = unscaled;
  scaledLlama.scaleEmbeddings = true;
  const Status scaled = interop::llamaArchitecture().fits(scaledLlama);
  ASSERT_FALSE(scaled);
  EXPECT_EQ(scaled.error().message.substr(0, 22), "scale_embeddings=true ");
}

// head_dim where the heads are wider (or narrower) than the width over their count (Gemma-7B's
// 16 heads of 256 over 3072, Mistral-Nemo's 32 of 128 over 5120): kiln's head_dim, written back;
// a width the heads do not divide takes one. Phi-3's heads split the width.
TEST(HuggingFaceConfig, HeadDimIsASettingWhereTheHeadsDoNotSplitTheWidth) {
  const interop::Architecture &llama = interop::llamaArchitecture();
  Json nemo = tinyLlamaConfig(); // hidden 8, 2 heads
  nemo["head_dim"] = 6;
  Expected<interop::ImportedConfig> c = llama.readConfig(nemo);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(settingMap(*c)["head_dim"], "6");
  Expected<models::GptConfig> model = models::gptConfig(c->settings);
  ASSERT_TRUE(model) << model.error().message;
  ASSERT_TRUE(llama.fits(*model));
  const Json written = llama.writeConfig(*model);
  EXPECT_EQ(written["head_dim"], 6);
  Expected<interop::ImportedConfig> again = llama.readConfig(written);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(settingMap(*again), settingMap(*c));
  // Where it is the width over the heads, no setting (as before).
  nemo["head_dim"] = 4;
  c = llama.readConfig(nemo);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_FALSE(settingMap(*c).contains("head_dim"));
  // Three heads do not split 8, but heads of 4 make 12.
  nemo["num_attention_heads"] = 3;
  nemo["num_key_value_heads"] = 1;
  c = llama.readConfig(nemo);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(settingMap(*c)["head_dim"], "4");
  nemo.erase("head_dim");
  Expected<interop::ImportedConfig> refused = llama.readConfig(nemo);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            "config.json: num_attention_heads: expected a divisor of hidden_size = 8 (the heads "
            "split the model width where head_dim is not given), got 3");
  // Phi-3's heads split the width, and its layout holds no other head_dim.
  Json phi3 = phi3Config();
  phi3["head_dim"] = 6;
  refused = interop::phi3Architecture().readConfig(phi3);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("config.json: head_dim: expected hidden_size / "
                                         "num_attention_heads"),
            std::string::npos)
      << refused.error().message;
  const Status phi3Fits = interop::phi3Architecture().fits(*model);
  ASSERT_FALSE(phi3Fits);
  EXPECT_EQ(phi3Fits.error().message.substr(0, 11), "head_dim=6 ");
  EXPECT_FALSE(interop::gpt2Architecture().fits(*model));
}

// Phi-4-mini's partial_rotary_factor: Phi-3's attention turns the first int(head_dim × it)
// dimensions of each head, which is rope_fraction, longrope's lists one factor a turned
// frequency; export writes it back. Llama, Mistral and Qwen2 turn whole heads.
TEST(HuggingFaceConfig, PartialRotaryFactorIsPhi3sRopeFraction) {
  const interop::Architecture &phi3 = interop::phi3Architecture();
  Json phi4 = phi3LongRopeConfig();
  phi4["num_attention_heads"] = 1; // a head of 8, of which 0.75 turns 6: 3 frequencies
  phi4["num_key_value_heads"] = 1;
  phi4["partial_rotary_factor"] = 0.75;
  phi4["rope_scaling"]["short_factor"] = {1.0, 1.5, 2.0};
  phi4["rope_scaling"]["long_factor"] = {2.0, 3.0, 4.0};
  Expected<interop::ImportedConfig> c = phi3.readConfig(phi4);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(settingMap(*c)["rope_fraction"], "0.75");
  EXPECT_EQ(settingMap(*c)["rope_scaling"], "longrope:32:4096:1,1.5,2:2,3,4");
  Expected<models::GptConfig> model = models::gptConfig(c->settings);
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->ropeFraction, 0.75);
  ASSERT_TRUE(phi3.fits(*model));
  const Json written = phi3.writeConfig(*model);
  EXPECT_EQ(written["partial_rotary_factor"], 0.75);
  // (A whole-head model's config has no such key, as Phi-3-mini's has 1 or none.)
  Expected<interop::ImportedConfig> whole = phi3.readConfig(phi3Config());
  ASSERT_TRUE(whole) << whole.error().message;
  EXPECT_EQ(settingMap(*whole).count("rope_fraction"), 0u);
  Expected<models::GptConfig> wholeModel = models::gptConfig(whole->settings);
  ASSERT_TRUE(wholeModel) << wholeModel.error().message;
  EXPECT_FALSE(phi3.writeConfig(*wholeModel).contains("partial_rotary_factor"));
  const Status llamaFits = interop::llamaArchitecture().fits(*model);
  ASSERT_FALSE(llamaFits);
  EXPECT_EQ(llamaFits.error().message,
            "rope_fraction=0.75 (LLaMA turns whole heads; Phi-3's layout turns a part)");

  auto errorOf = [](const interop::Architecture &a, const Json &config) -> std::string {
    Expected<interop::ImportedConfig> read = a.readConfig(config);
    return read ? "<read>" : read.error().message;
  };
  Json bad = phi4;
  bad["rope_scaling"]["short_factor"] = {1.0, 1.5, 2.0, 3.0};
  bad["rope_scaling"]["long_factor"] = {1.0, 1.5, 2.0, 3.0};
  EXPECT_EQ(errorOf(phi3, bad), "config.json: rope_scaling.short_factor: expected 3 factors, one "
                                "per frequency of the 6 dimensions RoPE turns of a head of 8, got "
                                "[1.0,1.5,2.0,3.0]");
  bad = phi3Config(); // heads of 4: 0.75 turns 3
  bad["partial_rotary_factor"] = 0.75;
  EXPECT_EQ(errorOf(phi3, bad), "config.json: partial_rotary_factor: expected a fraction in (0, 1] "
                                "that turns an even number of at least 2 of a head's 4 dimensions "
                                "(int(4 x 0.75) = 3), got 0.75");
  bad["partial_rotary_factor"] = 1.5;
  EXPECT_EQ(errorOf(phi3, bad), "config.json: partial_rotary_factor: expected a fraction in (0, 1] "
                                "that turns an even number of at least 2 of a head's 4 dimensions, "
                                "got 1.5");
  bad["partial_rotary_factor"] = 1e300; // (int(4 x 1e300) would not fit: never computed)
  EXPECT_EQ(errorOf(phi3, bad), "config.json: partial_rotary_factor: expected a fraction in (0, 1] "
                                "that turns an even number of at least 2 of a head's 4 dimensions, "
                                "got 1e+300");
  Json llama = tinyLlamaConfig();
  llama["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(errorOf(interop::llamaArchitecture(), llama), "<read>");
  llama["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(errorOf(interop::llamaArchitecture(), llama),
            "config.json: partial_rotary_factor: expected 1 (transformers' Llama, Mistral and "
            "Qwen2 turn whole heads; Phi-3's attention turns a part), got 0.5");
}

// transformers 5's rope_parameters carry the theta (read at the top only, 500000 became 10000).
TEST(HuggingFaceConfig, RopeThetaFromRopeParameters) {
  Json llama = tinyLlamaConfig();
  llama["rope_parameters"] = Json{{"rope_type", "default"}, {"rope_theta", 500000.0}};
  Expected<interop::ImportedConfig> c = interop::llamaArchitecture().readConfig(llama);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(settingMap(*c)["rope_theta"], "500000");
}

// What transformers reads as kiln's model in other words: hidden_act "swish" (SiLU in its ACT2FN)
// and a rope_scaling of rope_type, or type, "default" (no scaling). Both were refused.
TEST(HuggingFaceConfig, SwishAndADefaultRopeScalingAreLlamas) {
  const Json base = tinyLlamaConfig();
  auto settingsOf = [](const Json &config) {
    Expected<interop::ImportedConfig> c = interop::llamaArchitecture().readConfig(config);
    std::vector<std::string> out;
    if (!c)
      return std::vector<std::string>{c.error().message};
    for (const models::Setting &s : c->settings)
      out.push_back(s.key + "=" + s.value);
    return out;
  };
  const std::vector<std::string> plain = settingsOf(base);
  ASSERT_GT(plain.size(), 1u) << plain.front();
  for (const auto &[key, value] : {std::pair<std::string, Json>{"hidden_act", "swish"},
                                   {"rope_scaling", Json{{"rope_type", "default"}}},
                                   {"rope_scaling", Json{{"type", "default"}, {"factor", 1.0}}}}) {
    Json config = base;
    config[key] = value;
    EXPECT_EQ(settingsOf(config), plain) << key;
  }
}

// What transformers passes over or warns of in a rope_scaling imports as it does, with a note
// naming the key: keys the type does not use, an original context past max_position_embeddings.
TEST(HuggingFaceConfig, RopeKeysPassedOverAreNoted) {
  Json llama = tinyLlamaConfig();
  llama["max_position_embeddings"] = 131072;
  llama["rope_scaling"] = llama3Scaling();
  auto notesOf = [](const Json &config) {
    Expected<interop::ImportedConfig> c = interop::llamaArchitecture().readConfig(config);
    EXPECT_TRUE(c) << c.error().message;
    return c ? c->notes : std::vector<std::string>{"(refused)"};
  };
  EXPECT_EQ(notesOf(llama), std::vector<std::string>{});
  Json extra = llama;
  extra["rope_scaling"]["attention_factor"] = 1.0;
  EXPECT_EQ(notesOf(extra),
            std::vector<std::string>{"config.json: rope_scaling.attention_factor: not used by "
                                     "llama3 scaling; passed over"});
  Json plain = llama;
  plain["rope_scaling"] = Json{{"type", "default"}, {"factor", 1.0}};
  EXPECT_EQ(notesOf(plain), std::vector<std::string>{"config.json: rope_scaling.factor: not used "
                                                     "by default scaling; passed over"});
  Json shorter = llama;
  shorter["max_position_embeddings"] = 4096;
  EXPECT_EQ(notesOf(shorter),
            std::vector<std::string>{
                "config.json: the original context of rope_scaling, 8192, is longer than "
                "max_position_embeddings, 4096 (transformers warns of it too); imported as it is"});
}

// Llama 3.1's and 3.2's rope_scaling (rope_type "llama3"), and the same in transformers 5's
// rope_parameters, are the setting rope_scaling=llama3:FACTOR:LOW:HIGH:ORIGINAL_LEN.
TEST(HuggingFaceConfig, Llama3RopeScalingIsASetting) {
  const Json scaling = llama3Scaling();
  Json llama32 = tinyLlamaConfig();
  llama32["rope_theta"] = 500000.0;
  llama32["rope_scaling"] = scaling;
  Json v5 = llama32;
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = scaling;
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  // Both, agreeing (as transformers 5 may write them), or not: refused, naming what each says.
  Json both = llama32;
  both["rope_parameters"] = v5["rope_parameters"];
  Json disagree = both;
  disagree["rope_parameters"]["factor"] = 16.0;
  Expected<interop::ImportedConfig> refused = interop::llamaArchitecture().readConfig(disagree);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find(
                "config.json: rope_parameters: expected the same scaling and rope_theta as "
                "rope_scaling and rope_theta say (rope_scaling llama3:32:1:4:8192, rope_theta "
                "500000)"),
            std::string::npos)
      << refused.error().message;
  disagree = both;
  disagree["rope_parameters"]["rope_theta"] = 10000.0;
  EXPECT_FALSE(interop::llamaArchitecture().readConfig(disagree));
  for (const Json &config : {llama32, v5, both}) {
    Expected<interop::ImportedConfig> c = interop::llamaArchitecture().readConfig(config);
    ASSERT_TRUE(c) << c.error().message;
    EXPECT_EQ(settingMap(*c)["rope_scaling"], "llama3:32:1:4:8192");
    EXPECT_EQ(settingMap(*c)["rope_theta"], "500000");
  }
}

// A Mistral's window as transformers' MistralConfig reads it: the key's value, none where it is
// null, 4096 where it is absent (the config was imported without a window); a Llama has none.
TEST(HuggingFaceConfig, MistralWindowDefaultsAsTransformersDoes) {
  const Json mistral{{"architectures", {"MistralForCausalLM"}},
                     {"vocab_size", 10},
                     {"hidden_size", 8},
                     {"num_hidden_layers", 1},
                     {"num_attention_heads", 2},
                     {"intermediate_size", 16}};
  auto windowOf = [](const Json &config) -> std::string {
    Expected<interop::ImportedConfig> c = interop::llamaArchitecture().readConfig(config);
    EXPECT_TRUE(c) << (c ? "" : c.error().message);
    if (c)
      for (const models::Setting &s : c->settings)
        if (s.key == "window")
          return s.value;
    return "none";
  };
  EXPECT_EQ(windowOf(mistral), "4096");
  Json config = mistral;
  config["sliding_window"] = 16;
  EXPECT_EQ(windowOf(config), "16");
  config["sliding_window"] = nullptr;
  EXPECT_EQ(windowOf(config), "none");
  config = mistral;
  config["architectures"] = {"LlamaForCausalLM"};
  config["sliding_window"] = 16;
  EXPECT_EQ(windowOf(config), "none");
}

} // namespace
} // namespace kiln::huggingface_config_test
