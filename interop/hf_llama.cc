// LlamaForCausalLM (and MistralForCausalLM, the same with a sliding window; Qwen2ForCausalLM, the
// same with biases on q, k and v: qkv_bias; Phi3ForCausalLM, the same with q, k, v in one tensor
// and gate, up in another, its RoPE on a part of each head where partial_rotary_factor says:
// rope_fraction; GemmaForCausalLM, the same with GeGLU, the embeddings scaled by sqrt(d_model):
// scale_embeddings, and RMSNorms that scale by 1 + their weight, kiln's gains 1 + it) <-> kiln's
// gpt with LLaMA's settings: pre-norm RMSNorm, rotate-half RoPE of base rope_theta (its
// frequencies scaled where rope_scaling says: Llama 3.1's "llama3", "linear", "yarn", Phi-3's
// "longrope"), SwiGLU, no biases, n_kv_heads key/value heads (GQA), the head untied (or tied:
// SmolLM, Gemma). Hugging Face keeps its q and k weights in rotate-half order already
// (convert_llama_weights_to_hf.py permutes Meta's interleaved ones), which is kiln's RoPE: the
// tensors map as they are, [out, in] both sides.
#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "interop/hf_mapping.h"

namespace kiln::interop {

namespace {

using runtime::Json;

// transformers' MistralConfig default sliding_window.
constexpr int64_t kMistralWindow = 4096;

// Whether config.json is of this architecture: the one it names first, else its model_type.
bool names(const Json &config, std::string_view architecture, std::string_view modelType) {
  auto archs = config.find("architectures"), type = config.find("model_type");
  if (archs != config.end() && archs->is_array() && !archs->empty())
    return (*archs)[0] == architecture;
  return type != config.end() && *type == modelType;
}
bool namesMistral(const Json &config) {
  return names(config, "MistralForCausalLM", "mistral");
}
// Qwen2 and Qwen2.5: LLaMA's layers with biases on q, k and v.
bool namesQwen2(const Json &config) {
  return names(config, "Qwen2ForCausalLM", "qwen2");
}
// Phi-3-mini and -medium (Phi-3-small is another class): LLaMA's layers, their projections fused,
// Mistral's window.
bool namesPhi3(const Json &config) {
  return names(config, "Phi3ForCausalLM", "phi3");
}
// Gemma (1): LLaMA's layers with a GELU-gated feed-forward, the embeddings scaled by
// sqrt(hidden_size) on the way in, RMSNorms that scale by 1 + their weight, the head tied.
bool namesGemma(const Json &config) {
  return names(config, "GemmaForCausalLM", "gemma");
}

// YaRN's keys (nn::RopeScaling) as transformers' _compute_yarn_parameters reads them: factor
// required; the original length rope_scaling's (absent: 0, which readLlama makes
// max_position_embeddings, as transformers 4 did); beta_fast and beta_slow 32 and 1 where absent;
// the attention factor attention_factor, or where absent and DeepSeek's mscale and mscale_all_dim
// both given, m(mscale) / m(mscale_all_dim) with m(s) = 0.1 s ln(factor) + 1, or else the paper's
// (kiln's auto, 0); truncate true where absent.
Expected<std::optional<models::nn::RopeScaling>> readYarn(const ConfigReader &r) {
  namespace nn = models::nn;
  if (!r.present("factor") || !r.config.at("factor").is_number())
    return r.error("factor", "a number >= 1 (transformers' yarn scaling needs it)");
  nn::RopeScaling s{.factor = r.config.at("factor").get<double>(),
                    .kind = nn::RopeScalingKind::Yarn};
  Expected<int64_t> original = r.integer("original_max_position_embeddings", 0);
  Expected<double> fast = r.number("beta_fast", 32), slow = r.number("beta_slow", 1),
                   attention = r.number("attention_factor", 0), mscale = r.number("mscale", 0),
                   mscaleAll = r.number("mscale_all_dim", 0);
  Expected<bool> truncate = r.boolean("truncate", true);
  if (!original)
    return original.error();
  for (const Expected<double> *e : {&fast, &slow, &attention, &mscale, &mscaleAll})
    if (!*e)
      return e->error();
  if (!truncate)
    return truncate.error();
  s.originalMaxLen = *original, s.betaFast = *fast, s.betaSlow = *slow;
  s.attentionFactor = *attention, s.truncate = *truncate;
  if (s.attentionFactor == 0 && *mscale != 0 && *mscaleAll != 0 && s.factor > 1) {
    auto m = [&](double scale) { return 0.1 * scale * std::log(s.factor) + 1; };
    s.attentionFactor = m(*mscale) / m(*mscaleAll);
  }
  nn::RopeScaling checked = s;
  checked.originalMaxLen = std::max<int64_t>(s.originalMaxLen, 1); // (0: readLlama completes it)
  if (std::string fault = nn::ropeScalingFault(checked); !fault.empty())
    return makeError("config.json: {}: {}", r.where.substr(0, r.where.size() - 1), fault);
  return std::optional(s);
}

// A rope_scaling object (r.where "rope_scaling.") or transformers 5's rope_parameters: its
// rope_type (or, older, type; required in rope_scaling, as transformers requires it) "default"
// scales nothing, "llama3" is Llama 3.1's scaling (nn::RopeScaling) of four required keys,
// "linear" position interpolation by its factor, "longrope" Phi-3's (where longRope allows it) of
// two lists, whose factor and original length readLlama completes from the config's top, "yarn"
// YaRN's (readYarn; not Phi-3's). Other keys the type does not use (a factor beside "default",
// yarn's attention_factor beside "llama3") are passed over with a note, as transformers does.
Expected<std::optional<models::nn::RopeScaling>> readRopeScaling(const ConfigReader &r,
                                                                 bool typeRequired, bool longRope,
                                                                 std::vector<std::string> &notes) {
  namespace nn = models::nn;
  const std::string_view typeKey =
      r.present("rope_type") || !r.present("type") ? "rope_type" : "type";
  // (transformers 4 copies type over rope_type, 5 reads rope_type: two that differ are refused.)
  if (r.present("rope_type") && r.present("type") &&
      r.config.at("rope_type") != r.config.at("type"))
    return r.error("type", "the same as rope_type, or nothing (transformers 4 reads type, 5 "
                           "rope_type)");
  const std::string types = longRope ? "\"default\", \"llama3\", \"linear\" or \"longrope\""
                                     : "\"default\", \"llama3\", \"linear\" or \"yarn\"";
  if (typeRequired && !r.present(typeKey))
    return r.error("rope_type", types);
  Expected<std::string> type = r.text(typeKey, "default");
  if (!type)
    return type.error();
  if (*type != "default" && *type != "llama3" && *type != "linear" &&
      (*type != "longrope" || !longRope) && (*type != "yarn" || longRope))
    return r.error(typeKey, types + (longRope ? " (kiln's RoPE scales Phi-3's frequencies as "
                                                "Llama 3.1 or Phi-3 does, linearly, or not at all)"
                                              : " (kiln's RoPE scales its frequencies as Llama "
                                                "3.1 or YaRN does, linearly, or not at all; "
                                                "longrope is Phi-3's)"));
  static constexpr std::string_view kLlama3[] = {"factor", "low_freq_factor", "high_freq_factor",
                                                 "original_max_position_embeddings"};
  static constexpr std::string_view kLongRope[] = {"short_factor", "long_factor", "factor",
                                                   "original_max_position_embeddings"};
  static constexpr std::string_view kLinear[] = {"factor"};
  static constexpr std::string_view kYarn[] = {
      "factor",           "original_max_position_embeddings",
      "beta_fast",        "beta_slow",
      "attention_factor", "mscale",
      "mscale_all_dim",   "truncate"};
  const std::span<const std::string_view> used = *type == "llama3"     ? kLlama3
                                                 : *type == "longrope" ? kLongRope
                                                 : *type == "linear"   ? kLinear
                                                 : *type == "yarn"
                                                     ? kYarn
                                                     : std::span<const std::string_view>();
  // (longrope's attention_factor, which transformers takes over its own a, kiln does not hold.)
  if (*type == "longrope" && r.present("attention_factor"))
    return r.error("attention_factor", "absent (kiln scales cos and sin by longrope's own "
                                       "sqrt(1 + ln(factor) / ln(original length)))");
  for (const auto &[key, value] : r.config.items())
    if (key != "rope_type" && key != "type" && key != "rope_theta" &&
        std::find(used.begin(), used.end(), key) == used.end())
      notes.push_back(fmt::format("config.json: {}{}: not used by {} scaling; passed over", r.where,
                                  key, *type));
  if (*type == "default")
    return std::optional<nn::RopeScaling>();
  if (*type == "longrope") {
    constexpr std::string_view kList = "a list of positive numbers, one per frequency of a head";
    Expected<std::vector<double>> shortFactor = r.numbers("short_factor", kList),
                                  longFactor = r.numbers("long_factor", kList);
    if (!shortFactor)
      return shortFactor.error();
    if (!longFactor)
      return longFactor.error();
    if (longFactor->size() != shortFactor->size())
      return r.error("long_factor",
                     fmt::format("as many factors as short_factor, {}", shortFactor->size()));
    Expected<double> factor = r.number("factor", 1);
    Expected<int64_t> original = r.integer("original_max_position_embeddings", 0);
    if (!factor)
      return factor.error();
    if (!original)
      return original.error();
    return std::optional(nn::RopeScaling{.factor = *factor,
                                         .originalMaxLen = *original,
                                         .kind = nn::RopeScalingKind::LongRope,
                                         .shortFactor = std::move(*shortFactor),
                                         .longFactor = std::move(*longFactor)});
  }
  if (*type == "yarn")
    return readYarn(r);
  if (*type == "linear") { // (transformers needs the factor, a number >= 1)
    if (!r.present("factor") || !r.config.at("factor").is_number())
      return r.error("factor", "a number >= 1 (transformers' linear scaling needs it)");
    const nn::RopeScaling s{.factor = r.config.at("factor").get<double>(),
                            .kind = nn::RopeScalingKind::Linear};
    if (std::string fault = nn::ropeScalingFault(s); !fault.empty())
      return makeError("config.json: {}: {}", r.where.substr(0, r.where.size() - 1), fault);
    return std::optional(s);
  }
  for (std::string_view key : {"factor", "low_freq_factor", "high_freq_factor"})
    if (!r.present(key))
      return r.error(key, "a positive number (transformers' llama3 scaling needs it)");
  // (factor: any number, which ropeScalingFault checks is >= 1, as it does a --set's.)
  if (!r.config.at("factor").is_number())
    return r.error("factor", "a number >= 1");
  const double factor = r.config.at("factor").get<double>();
  Expected<double> low = r.number("low_freq_factor", 0), high = r.number("high_freq_factor", 0);
  Expected<int64_t> original = r.integer("original_max_position_embeddings");
  for (const Expected<double> *e : {&low, &high})
    if (!*e)
      return e->error();
  if (!original)
    return original.error();
  const nn::RopeScaling s{.factor = factor,
                          .lowFreqFactor = *low,
                          .highFreqFactor = *high,
                          .originalMaxLen = *original};
  if (std::string fault = nn::ropeScalingFault(s); !fault.empty())
    return makeError("config.json: {}: {}", r.where.substr(0, r.where.size() - 1), fault);
  return std::optional(s);
}

Expected<ImportedConfig> readLlama(const Json &config) {
  ConfigReader r{config};
  // (The LLaMA family's members that read a key their own way, named once.)
  const bool phi3 = namesPhi3(config), gemma = namesGemma(config), qwen2 = namesQwen2(config);
  Expected<int64_t> vocab = r.integer("vocab_size"), d = r.integer("hidden_size"),
                    layers = r.integer("num_hidden_layers"),
                    heads = r.integer("num_attention_heads"), ff = r.integer("intermediate_size");
  for (const Expected<int64_t> *e : {&vocab, &d, &layers, &heads, &ff})
    if (!*e)
      return e->error();
  Expected<int64_t> kvHeads = r.integer("num_key_value_heads", *heads);
  Expected<int64_t> positions = r.integer("max_position_embeddings", 2048);
  Expected<int64_t> headDim = r.integer("head_dim", *d / *heads);
  // Only Mistral's and Phi-3's attention have a window: transformers' Llama ignores a
  // sliding_window key. MistralConfig's window is 4096 where the key is absent, Phi3Config's none;
  // both none where it is null. (Phi-3-mini's 2047 is past an import's seq_len of 1024: moot
  // unless --set seq_len raises it.)
  Expected<int64_t> window = 0;
  if (namesMistral(config))
    window = config.contains("sliding_window") ? r.integer("sliding_window", 0)
                                               : Expected<int64_t>(kMistralWindow);
  else if (phi3)
    window = r.integer("sliding_window", 0);
  for (const Expected<int64_t> *e : {&kvHeads, &positions, &headDim, &window})
    if (!*e)
      return e->error();
  Expected<double> eps = r.number("rms_norm_eps", 1e-6), theta = r.number("rope_theta", 10000);
  if (!eps)
    return eps.error();
  if (!theta)
    return theta.error();
  // Gemma's feed-forward gates by hidden_activation (transformers ignores its hidden_act), the
  // tanh GELU where absent.
  Expected<std::string> act =
      gemma ? r.text("hidden_activation", "gelu_pytorch_tanh") : r.text("hidden_act", "silu");
  if (!act)
    return act.error();
  Expected<bool> tied = r.boolean("tie_word_embeddings", gemma);
  Expected<bool> attnBias = r.boolean("attention_bias", false);
  Expected<bool> mlpBias = r.boolean("mlp_bias", false);
  for (const Expected<bool> *e : {&tied, &attnBias, &mlpBias})
    if (!*e)
      return e->error();
  if (gemma && *act != "gelu_pytorch_tanh" && *act != "gelu_new") // (both the tanh GELU)
    return r.error("hidden_activation", "gelu_pytorch_tanh (kiln's geglu gates with the tanh "
                                        "GELU)");
  std::vector<std::string> notes;
  if (gemma && !r.present("hidden_activation") && r.present("hidden_act") &&
      config.at("hidden_act") != "gelu_pytorch_tanh")
    notes.push_back(fmt::format("config.json: hidden_act: {} passed over (transformers' Gemma "
                                "gates with hidden_activation, gelu_pytorch_tanh where absent)",
                                config.at("hidden_act").dump()));
  if (!gemma && *act != "silu" && *act != "swish") // (transformers' ACT2FN: "swish" is SiLU too)
    return r.error("hidden_act", "silu (kiln's swiglu gates with SiLU)");
  // (Said in config.json's terms, not kiln's d_model, n_heads and n_kv_heads.) Each head's width
  // is head_dim where given (Gemma-7B's 256 over a width of 3072 and 16 heads, Mistral-Nemo's 128
  // over 5120 and 32: kiln's head_dim), else hidden_size / num_attention_heads, which must
  // divide. Phi-3's heads split the width (Phi3Config has no head_dim).
  if (*d % *heads != 0 && (!r.present("head_dim") || phi3))
    return r.error("num_attention_heads", fmt::format("a divisor of hidden_size = {} (the heads "
                                                      "split the model width where head_dim is "
                                                      "not given{})",
                                                      *d, phi3 ? ", as Phi-3's always do" : ""));
  if (phi3 && *headDim != *d / *heads)
    return r.error("head_dim", fmt::format("hidden_size / num_attention_heads = {} / {} (Phi-3's "
                                           "heads split the model width)",
                                           *d, *heads));
  const bool ownHeadDim = *d % *heads != 0 || *headDim != *d / *heads;
  if (*kvHeads <= 0 || *heads % *kvHeads != 0)
    return r.error("num_key_value_heads",
                   fmt::format("a divisor of num_attention_heads = {} (grouped-query attention "
                               "shares each key-value head among as many query heads)",
                               *heads));
  // The scaling of RoPE's frequencies: rope_scaling, or transformers 5's rope_parameters, which
  // holds the theta too (read at the top only, a Llama 3's 500000 became 10000, silently).
  std::optional<models::nn::RopeScaling> scaling;
  if (r.present("rope_scaling")) {
    if (!config.at("rope_scaling").is_object())
      return r.error("rope_scaling", "null or an object of rope_type and its parameters");
    Expected<std::optional<models::nn::RopeScaling>> read = readRopeScaling(
        {config.at("rope_scaling"), "rope_scaling."}, /*typeRequired=*/true, phi3, notes);
    if (!read)
      return read.error();
    scaling = *read;
  }
  if (r.present("rope_parameters")) {
    const Json &p = config.at("rope_parameters");
    if (!p.is_object())
      return r.error("rope_parameters", "an object of rope_type and rope_theta");
    const ConfigReader rope{p, "rope_parameters."};
    Expected<std::optional<models::nn::RopeScaling>> read =
        readRopeScaling(rope, false, phi3, notes);
    if (!read)
      return read.error();
    Expected<double> inner = rope.number("rope_theta", *theta);
    if (!inner)
      return inner.error();
    // (transformers 5 takes rope_scaling over rope_parameters, 4 reads only rope_scaling and the
    // top-level rope_theta: where they disagree, no reading is the model's for sure.)
    if ((r.present("rope_scaling") && *read != scaling) ||
        (r.present("rope_theta") && *inner != *theta))
      return r.error("rope_parameters",
                     fmt::format("the same scaling and rope_theta as rope_scaling and rope_theta "
                                 "say (rope_scaling {}, rope_theta {})",
                                 models::showValue(scaling), *theta));
    scaling = *read;
    theta = inner;
  }
  // RoPE on a part of each head: Phi-3's attention turns the first int(head_dim ×
  // partial_rotary_factor) dimensions (Phi-4-mini: 0.75). transformers reads the key for any model,
  // but Llama's, Mistral's and Qwen2's attention would then apply that part's frequencies to whole
  // heads and fail: there only 1 is a model.
  Expected<double> fraction = r.number("partial_rotary_factor", 1);
  if (!fraction)
    return fraction.error();
  if (*fraction != 1 && !phi3)
    return r.error("partial_rotary_factor", "1 (transformers' Llama, Mistral and Qwen2 turn whole "
                                            "heads; Phi-3's attention turns a part)");
  if (!models::nn::ropeTurnsEvenPart(*headDim, *fraction))
    return r.error(
        "partial_rotary_factor",
        fmt::format("a fraction in (0, 1] that turns an even number of at least 2 of a head's {} "
                    "dimensions{}",
                    *headDim,
                    models::nn::ropeFractionInRange(*fraction)
                        ? fmt::format(" (int({} x {}) = {})", *headDim, *fraction,
                                      models::nn::rotatedDims(*headDim, *fraction))
                        : ""));
  const int64_t turned = models::nn::rotatedDims(*headDim, *fraction);
  // longrope's original length and factor: Phi3Config's original_max_position_embeddings, from
  // which transformers derives the factor as max_position_embeddings / it (a factor in
  // rope_scaling passed over); without it, rope_scaling's original length (or
  // max_position_embeddings) and factor.
  if (scaling && scaling->kind == models::nn::RopeScalingKind::LongRope) {
    const bool inScaling = r.present("rope_scaling");
    const ConfigReader rope{config.at(inScaling ? "rope_scaling" : "rope_parameters"),
                            inScaling ? "rope_scaling." : "rope_parameters."};
    if (r.present("original_max_position_embeddings")) {
      Expected<int64_t> original = r.integer("original_max_position_embeddings");
      if (!original)
        return original.error();
      if (rope.present("factor"))
        notes.push_back(fmt::format("config.json: {}factor: transformers takes longrope's factor "
                                    "as max_position_embeddings / "
                                    "original_max_position_embeddings; passed over",
                                    rope.where));
      scaling->originalMaxLen = *original;
      scaling->factor = double(*positions) / double(*original);
    } else if (scaling->originalMaxLen == 0) {
      scaling->originalMaxLen = *positions;
    }
    if (int64_t(scaling->shortFactor.size()) * 2 != turned)
      return rope.error(
          "short_factor",
          turned == *headDim
              ? fmt::format("{} factors, one per frequency of a head of {}", turned / 2, turned)
              : fmt::format("{} factors, one per frequency of the {} dimensions "
                            "RoPE turns of a head of {}",
                            turned / 2, turned, *headDim));
    if (std::string fault = models::nn::ropeScalingFault(*scaling); !fault.empty())
      return makeError("config.json: {}: {}", rope.where.substr(0, rope.where.size() - 1), fault);
  }
  // (yarn without an original length: max_position_embeddings, as transformers 4 took it.)
  if (scaling && scaling->kind == models::nn::RopeScalingKind::Yarn && scaling->originalMaxLen == 0)
    scaling->originalMaxLen = *positions;
  if (*attnBias || *mlpBias)
    return r.error(*attnBias ? "attention_bias" : "mlp_bias",
                   "false (kiln's bias key puts biases on every linear layer or none)");
  // Mistral's sliding_window; Qwen2-style configs gate it with use_sliding_window.
  Expected<bool> useWindow = r.boolean("use_sliding_window", true);
  if (!useWindow)
    return useWindow.error();
  // Qwen2's attention windows only its layers from max_window_layers on (transformers' Qwen2);
  // kiln's window is every layer's, so a Qwen2 config that windows some layers is refused. Its
  // released configs window none (use_sliding_window false).
  if (qwen2 && *useWindow) {
    // (0: every layer windowed, which integer(), for sizes, refuses.)
    Expected<int64_t> from = r.present("max_window_layers") && config.at("max_window_layers") == 0
                                 ? Expected<int64_t>(0)
                                 : r.integer("max_window_layers", 28);
    if (!from)
      return from.error();
    if (*from < *layers)
      return r.error("use_sliding_window",
                     fmt::format("false, or max_window_layers >= num_hidden_layers = {} (Qwen2 "
                                 "windows the layers from max_window_layers on; kiln's window is "
                                 "every layer's)",
                                 *layers));
  }
  if (scaling && scaling->kind != models::nn::RopeScalingKind::Linear && // (it has none)
      scaling->originalMaxLen > *positions)
    notes.push_back(
        fmt::format("config.json: the original context of rope_scaling, {}, is longer than "
                    "max_position_embeddings, {} (transformers warns of it too); imported as it is",
                    scaling->originalMaxLen, *positions));
  // (Past longrope's original length transformers turns to long_factor for the whole sequence,
  // kiln for a model whose seq_len passes it: an import stays within it, where both use
  // short_factor for every sequence.)
  int64_t seqLen = std::min(*positions, kImportSeqLen);
  if (scaling && scaling->kind == models::nn::RopeScalingKind::LongRope)
    seqLen = std::min(seqLen, scaling->originalMaxLen);
  ImportedConfig out;
  out.notes = std::move(notes);
  out.settings = {setting("vocab", *vocab),
                  setting("d_model", *d),
                  setting("n_heads", *heads),
                  setting("n_layers", *layers),
                  setting("d_ff", *ff),
                  setting("max_len", *positions),
                  setting("seq_len", seqLen),
                  setting("norm", std::string("pre")),
                  setting("norm_kind", std::string("rmsnorm")),
                  setting("norm_eps", *eps),
                  setting("position", std::string("rope")),
                  setting("rope_theta", *theta),
                  setting("activation", std::string(gemma ? "geglu" : "swiglu")),
                  setting("bias", std::string("false")),
                  setting("tie_embeddings", std::string(*tied ? "true" : "false"))};
  if (gemma)
    out.settings.push_back(setting("scale_embeddings", std::string("true")));
  // (Only grouped-query attention's: kiln's n_kv_heads=0 means n_heads, as a model trained in
  // kiln and an executable compiled from it say, which then take its export's import.)
  if (ownHeadDim)
    out.settings.insert(out.settings.begin() + 3, setting("head_dim", *headDim));
  if (*kvHeads != *heads)
    out.settings.insert(out.settings.begin() + 3, setting("n_kv_heads", *kvHeads));
  if (qwen2)
    out.settings.push_back(setting("qkv_bias", std::string("true")));
  if (scaling)
    out.settings.push_back(setting("rope_scaling", models::showValue(scaling)));
  if (*fraction != 1)
    out.settings.push_back(setting("rope_fraction", *fraction));
  if (*useWindow && *window > 0)
    out.settings.push_back(setting("window", *window));
  return out;
}

// The LLaMA family's layouts, apart in what each can hold.
enum class Layout : uint8_t {
  Llama, // (Mistral's too: LLaMA's with a window)
  Qwen2, // biases on q, k and v alone, without a window
  Phi3,  // q, k, v fused and gate, up fused; RoPE scaled as longrope or not at all
  Gemma, // geglu, the embeddings scaled, norms of 1 + weight, without a window
};

Status fitsLlamaLayout(const models::GptConfig &c, Layout layout) {
  namespace nn = frontend::nn;
  const bool qwen2 = layout == Layout::Qwen2, gemma = layout == Layout::Gemma;
  auto differs = [&](std::string_view what) {
    return makeError("{} ({} has pre-norm rmsnorm, rope, {} and {})", what,
                     qwen2                    ? "Qwen2"
                     : layout == Layout::Phi3 ? "Phi-3"
                     : gemma                  ? "Gemma"
                                              : "LLaMA",
                     gemma ? "geglu" : "swiglu",
                     qwen2                    ? "biases on q, k and v alone, without a window"
                     : layout == Layout::Phi3 ? "no biases, its RoPE scaled as longrope or not"
                     : gemma ? "its embeddings scaled by sqrt(d_model), no biases, no window"
                             : "no biases, its RoPE scaled as llama3, linearly, as yarn or not");
  };
  if (c.norm != nn::NormPlacement::Pre)
    return differs("norm=post");
  if (c.normKind != nn::NormKind::RMSNorm)
    return differs("norm_kind=layernorm");
  if (c.position != nn::PositionKind::Rope)
    return differs("position=" + models::showValue(c.position));
  if (c.activation != (gemma ? nn::Activation::GeGLU : nn::Activation::SwiGLU))
    return differs("activation=" + models::showValue(c.activation));
  if (c.scaleEmbeddings != gemma)
    return differs(gemma ? "scale_embeddings=false" : "scale_embeddings=true");
  if (c.bias)
    return differs("bias=true");
  if (c.qkvBias != qwen2)
    return differs(qwen2 ? "qkv_bias=false" : "qkv_bias=true");
  if ((qwen2 || gemma) && c.window != 0)
    return differs(fmt::format("window={}", c.window));
  if (layout == Layout::Phi3 && c.headDim != 0 && c.headDim * c.nHeads != c.dModel)
    return differs(fmt::format("head_dim={}", c.headDim));
  if (c.ropeFraction != 1 && layout != Layout::Phi3)
    return makeError("rope_fraction={} ({} turns whole heads; Phi-3's layout turns a part)",
                     models::showValue(c.ropeFraction),
                     qwen2   ? "Qwen2"
                     : gemma ? "Gemma"
                             : "LLaMA");
  // (Phi-3's RoPE scales as longrope or not at all, LLaMA's and Qwen2's as llama3, linearly, as
  // yarn or not at all.)
  const bool longRope = c.ropeScaling && c.ropeScaling->kind == nn::RopeScalingKind::LongRope;
  if (c.ropeScaling && longRope != (layout == Layout::Phi3)) {
    const std::string shown = models::showValue(c.ropeScaling);
    return differs("rope_scaling=" + shown.substr(0, shown.find(':')) + ":...");
  }
  // Phi3Config derives longrope's factor from max_position_embeddings (max_len): it must say it.
  if (longRope && double(c.maxLen) / double(c.ropeScaling->originalMaxLen) != c.ropeScaling->factor)
    return makeError("rope_scaling=longrope:{}:{}:... with max_len={} (Phi-3's config takes the "
                     "factor as max_position_embeddings / original_max_position_embeddings = {})",
                     models::showValue(c.ropeScaling->factor), c.ropeScaling->originalMaxLen,
                     c.maxLen, double(c.maxLen) / double(c.ropeScaling->originalMaxLen));
  return {};
}
Status fitsLlama(const models::GptConfig &c) {
  return fitsLlamaLayout(c, Layout::Llama);
}
Status fitsQwen2(const models::GptConfig &c) {
  return fitsLlamaLayout(c, Layout::Qwen2);
}
Status fitsPhi3(const models::GptConfig &c) {
  return fitsLlamaLayout(c, Layout::Phi3);
}
Status fitsGemma(const models::GptConfig &c) {
  return fitsLlamaLayout(c, Layout::Gemma);
}

// LLaMA's rope_scaling: llama3's, linear's (its type under both names: transformers before 4.42
// reads type, later ones rope_type), or yarn's (its attention factor where not the paper's, its
// truncate where false: what readYarn reads back); writePhi3 writes longrope's.
Json llamaRopeScaling(const models::GptConfig &c) {
  if (!c.ropeScaling)
    return Json(nullptr);
  const frontend::nn::RopeScaling &s = *c.ropeScaling;
  if (s.kind == frontend::nn::RopeScalingKind::Linear)
    return Json{{"rope_type", "linear"}, {"type", "linear"}, {"factor", s.factor}};
  if (s.kind == frontend::nn::RopeScalingKind::Yarn) {
    Json j{{"rope_type", "yarn"},
           {"factor", s.factor},
           {"original_max_position_embeddings", s.originalMaxLen},
           {"beta_fast", s.betaFast},
           {"beta_slow", s.betaSlow}};
    if (s.attentionFactor != 0)
      j["attention_factor"] = s.attentionFactor;
    if (!s.truncate)
      j["truncate"] = false;
    return j;
  }
  return Json{{"rope_type", "llama3"},
              {"factor", s.factor},
              {"low_freq_factor", s.lowFreqFactor},
              {"high_freq_factor", s.highFreqFactor},
              {"original_max_position_embeddings", s.originalMaxLen}};
}

Json writeLlama(const models::GptConfig &c) {
  const bool mistral = c.window != 0;
  Json j{{"architectures", Json::array({mistral ? "MistralForCausalLM" : "LlamaForCausalLM"})},
         {"model_type", mistral ? "mistral" : "llama"},
         {"vocab_size", c.vocab},
         {"hidden_size", c.dModel},
         {"intermediate_size", c.dFF},
         {"num_hidden_layers", c.nLayers},
         {"num_attention_heads", c.nHeads},
         {"num_key_value_heads", c.nKvHeads == 0 ? c.nHeads : c.nKvHeads},
         {"head_dim", c.headDimension()},
         {"hidden_act", "silu"},
         {"max_position_embeddings", c.maxLen},
         {"rms_norm_eps", c.normEpsilon()},
         {"rope_theta", c.ropeTheta},
         {"rope_scaling", llamaRopeScaling(c)},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"tie_word_embeddings", c.tieEmbeddings},
         // kiln's dropout (kiln also drops the embeddings and residual branches: Llama has no
         // key for those)
         {"attention_dropout", c.dropout},
         {"torch_dtype", "float32"}};
  if (mistral)
    j["sliding_window"] = c.window;
  return j;
}

// Qwen2's config.json: LLaMA's keys but the biases' (Qwen2's are fixed: q, k and v), its window
// off.
Json writeQwen2(const models::GptConfig &c) {
  Json j = writeLlama(c);
  j["architectures"] = Json::array({"Qwen2ForCausalLM"});
  j["model_type"] = "qwen2";
  j.erase("attention_bias");
  j.erase("mlp_bias");
  j["use_sliding_window"] = false;
  return j;
}

// Phi3Config's keys: LLaMA's but the biases' and head_dim (Phi-3 has none, and its heads split
// the width), its window (Mistral's, or null), and partial_rotary_factor where RoPE turns a part
// of each head (written as read: transformers' int(head_dim * it) is nn::rotatedDims).
Json writePhi3(const models::GptConfig &c) {
  Json j = writeLlama(c);
  j["architectures"] = Json::array({"Phi3ForCausalLM"});
  j["model_type"] = "phi3";
  for (const char *key : {"attention_bias", "mlp_bias", "head_dim"})
    j.erase(key);
  j["sliding_window"] = c.window != 0 ? Json(c.window) : Json(nullptr);
  if (c.ropeScaling) { // longrope (fitsPhi3): the three keys Phi3Config validates
    j["rope_scaling"] = Json{{"type", "longrope"},
                             {"short_factor", c.ropeScaling->shortFactor},
                             {"long_factor", c.ropeScaling->longFactor}};
    j["original_max_position_embeddings"] = c.ropeScaling->originalMaxLen;
  }
  if (c.ropeFraction != 1)
    j["partial_rotary_factor"] = c.ropeFraction;
  return j;
}

// GemmaConfig's keys: LLaMA's but the biases', its activation under the name its MLP reads
// (hidden_activation; hidden_act too, which older transformers read), the head tied or not.
Json writeGemma(const models::GptConfig &c) {
  Json j = writeLlama(c);
  j["architectures"] = Json::array({"GemmaForCausalLM"});
  j["model_type"] = "gemma";
  j.erase("mlp_bias");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["hidden_act"] = "gelu_pytorch_tanh";
  return j;
}

// fused: Phi-3's, whose qkv_proj holds q, k and v one after another along its output axis (k and
// v of GQA's kv heads), and gate_up_proj gate and then up. normPlus: what kiln's norm gains add
// to the HF weights (Gemma's 1).
std::vector<TensorRule> llamaFamilyRules(const models::GptConfig &c, bool fused,
                                         float normPlus = 0) {
  const int64_t d = c.dModel, ff = c.dFF, q = c.nHeads * c.headDimension();
  const int64_t kv = (c.nKvHeads == 0 ? c.nHeads : c.nKvHeads) * c.headDimension();
  std::vector<TensorRule> rules = {{"tok_embed.weight", "model.embed_tokens.weight", {c.vocab, d}}};
  for (int64_t i = 0; i < c.nLayers; ++i) {
    const std::string k = fmt::format("blocks.{}.", i), h = fmt::format("model.layers.{}.", i);
    auto add = [&](std::string kiln, std::string hf, std::vector<int64_t> shape, int64_t offset = 0,
                   int64_t rows = 0, float plus = 0) {
      rules.push_back({k + kiln, h + hf, std::move(shape), false, offset, rows, plus});
    };
    add("ln1.weight", "input_layernorm.weight", {d}, 0, 0, normPlus);
    if (fused) {
      add("attn.q_proj.weight", "self_attn.qkv_proj.weight", {q, d}, 0, q + 2 * kv);
      add("attn.k_proj.weight", "self_attn.qkv_proj.weight", {kv, d}, q, q + 2 * kv);
      add("attn.v_proj.weight", "self_attn.qkv_proj.weight", {kv, d}, q + kv, q + 2 * kv);
    } else {
      add("attn.q_proj.weight", "self_attn.q_proj.weight", {q, d});
      add("attn.k_proj.weight", "self_attn.k_proj.weight", {kv, d});
      add("attn.v_proj.weight", "self_attn.v_proj.weight", {kv, d});
    }
    add("attn.o_proj.weight", "self_attn.o_proj.weight", {d, q});
    if (c.qkvBias) { // Qwen2
      add("attn.q_proj.bias", "self_attn.q_proj.bias", {q});
      add("attn.k_proj.bias", "self_attn.k_proj.bias", {kv});
      add("attn.v_proj.bias", "self_attn.v_proj.bias", {kv});
    }
    add("ln2.weight", "post_attention_layernorm.weight", {d}, 0, 0, normPlus);
    if (fused) {
      add("mlp.gate_proj.weight", "mlp.gate_up_proj.weight", {ff, d}, 0, 2 * ff);
      add("mlp.up_proj.weight", "mlp.gate_up_proj.weight", {ff, d}, ff, 2 * ff);
    } else {
      add("mlp.gate_proj.weight", "mlp.gate_proj.weight", {ff, d});
      add("mlp.up_proj.weight", "mlp.up_proj.weight", {ff, d});
    }
    add("mlp.down_proj.weight", "mlp.down_proj.weight", {d, ff});
  }
  rules.push_back({"ln_f.weight", "model.norm.weight", {d}, false, 0, 0, normPlus});
  if (!c.tieEmbeddings)
    rules.push_back({"lm_head.weight", "lm_head.weight", {c.vocab, d}});
  return rules;
}
std::vector<TensorRule> llamaRules(const models::GptConfig &c) {
  return llamaFamilyRules(c, false);
}
std::vector<TensorRule> phi3Rules(const models::GptConfig &c) {
  return llamaFamilyRules(c, true);
}
std::vector<TensorRule> gemmaRules(const models::GptConfig &c) {
  return llamaFamilyRules(c, false, 1);
}

} // namespace

const Architecture &llamaArchitecture() {
  static const Architecture a{.name = "LlamaForCausalLM",
                              .modelType = "llama",
                              .bodyPrefix = "model.",
                              .readConfig = &readLlama,
                              .fits = &fitsLlama,
                              .writeConfig = &writeLlama,
                              .rules = &llamaRules,
                              .ignoredSuffixes = {".rotary_emb.inv_freq"}};
  return a;
}

const Architecture &qwen2Architecture() {
  static const Architecture a{.name = "Qwen2ForCausalLM",
                              .modelType = "qwen2",
                              .bodyPrefix = "model.",
                              .readConfig = &readLlama,
                              .fits = &fitsQwen2,
                              .writeConfig = &writeQwen2,
                              .rules = &llamaRules,
                              .ignoredSuffixes = {".rotary_emb.inv_freq"}};
  return a;
}

const Architecture &phi3Architecture() {
  static const Architecture a{.name = "Phi3ForCausalLM",
                              .modelType = "phi3",
                              .bodyPrefix = "model.",
                              .readConfig = &readLlama,
                              .fits = &fitsPhi3,
                              .writeConfig = &writePhi3,
                              .rules = &phi3Rules,
                              .ignoredSuffixes = {".rotary_emb.inv_freq"}};
  return a;
}

const Architecture &gemmaArchitecture() {
  static const Architecture a{.name = "GemmaForCausalLM",
                              .modelType = "gemma",
                              .bodyPrefix = "model.",
                              .readConfig = &readLlama,
                              .fits = &fitsGemma,
                              .writeConfig = &writeGemma,
                              .rules = &gemmaRules,
                              .ignoredSuffixes = {".rotary_emb.inv_freq"}};
  return a;
}

} // namespace kiln::interop
