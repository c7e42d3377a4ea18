// Model configuration: the knobs every zoo model shares (CommonConfig) and the machinery that
// sets a config struct from `key=value` strings through a per-model key table (name, member,
// parser, description), with errors that name the key and what was expected.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/nn.h"
#include "ir/graph.h"
#include "models/zoo.h"
#include "support/status.h"

namespace kiln::models {

namespace nn = frontend::nn;

// How weight matrices (linear layers, attention projections, untied output heads) start:
// normal(0, 0.02) as in GPT-2 and BERT, or Xavier/Glorot uniform with gain 1 as in the
// Annotated Transformer. Embeddings, biases and norm gains are the same under both.
enum class WeightInit : uint8_t { Normal, Xavier };

struct CommonConfig {
  int64_t batch = 2;
  int64_t vocab = 256;
  int64_t dModel = 64;
  int64_t nHeads = 4;
  int64_t nKvHeads = 0; // 0 = n_heads
  int64_t headDim = 0;  // 0 = d_model / n_heads
  int64_t dFF = 256;
  nn::NormPlacement norm = nn::NormPlacement::Pre;
  nn::NormKind normKind = nn::NormKind::LayerNorm;
  // Every norm's eps; nullopt ("auto") = the model's usual value for norm_kind: RMSNorm's 1e-6,
  // and for LayerNorm autoLayerNormEps.
  std::optional<double> normEps = std::nullopt;
  // What norm_eps=auto means for LayerNorm: PyTorch's 1e-5, or a model's own (BERT: 1e-12).
  // Set by a model's config constructor; not a key.
  double autoLayerNormEps = nn::defaultNormEps(nn::NormKind::LayerNorm);
  nn::PositionKind position = nn::PositionKind::Learned;
  int64_t relativeK = 8;
  // RoPE's base: θ_i = rope_theta^(-2i/D) (LLaMA 1/2: 10000; Llama 3: 500000).
  double ropeTheta = 10000;
  // Llama 3.1's, Phi-3's or linear scaling of those frequencies (nn::RopeScaling); nullopt = none.
  std::optional<nn::RopeScaling> ropeScaling = std::nullopt;
  // The fraction of each head RoPE turns (nn::Rope::fraction; Phi-4-mini: 0.75), D then the
  // nn::rotatedDims it turns.
  double ropeFraction = 1;
  // Sliding-window (local) self-attention: each query attends keys within distance < window
  // (nn::windowMask); 0 = all. A key of gpt and bert only.
  int64_t window = 0;
  int64_t maxLen = 512;
  nn::Activation activation = nn::Activation::Gelu;
  bool tieEmbeddings = true;
  bool bias = true;
  bool qkvBias = false; // biases on attention's q, k and v where bias=false too (Qwen2)
  double dropout = 0;
  int64_t seed = 0;
  int64_t padId = 0;
  ir::DType dtype = ir::DType::F32;
  WeightInit init = WeightInit::Normal;
  // Training mode: an input "targets" i64 [B, T] and a scalar output "loss", the mean
  // cross-entropy of the logits against the targets (see nn::crossEntropy).
  bool loss = false;
  // Not a key: every probe of the model (its attention maps, "<module>.probs") is an output of
  // the same name (kiln attention).
  bool probes = false;
  double labelSmoothing = 0;
  // Targets equal to this id are not scored; nullopt = pad_id.
  std::optional<int64_t> ignoreIndex = -100;

  // The per-layer options these knobs select, for sequences of at most `context` positions.
  nn::BlockOptions block(bool causal, int64_t context) const;
  ir::ParamInit weightInit() const;
  nn::CrossEntropyOptions lossOptions() const;
  double normEpsilon() const; // norm_eps, with auto resolved
  int64_t headDimension() const { return headDim != 0 ? headDim : dModel / nHeads; }
  int64_t ignoreId() const { return ignoreIndex.value_or(padId); }
};

// ---- Parsing one value into a member ----
Status parseValue(std::string_view text, int64_t &out);
Status parseValue(std::string_view text, double &out);
Status parseValue(std::string_view text, bool &out);
Status parseValue(std::string_view text, ir::DType &out);
Status parseValue(std::string_view text, nn::NormPlacement &out);
Status parseValue(std::string_view text, nn::NormKind &out);
Status parseValue(std::string_view text, nn::PositionKind &out);
Status parseValue(std::string_view text, nn::Activation &out);
Status parseValue(std::string_view text, WeightInit &out);
Status parseValue(std::string_view text, std::optional<int64_t> &out); // integer | pad_id
Status parseValue(std::string_view text, std::optional<double> &out);  // number | auto
// none | llama3:FACTOR:LOW:HIGH:ORIGINAL_LEN | longrope:FACTOR:ORIGINAL_LEN:SHORT,..:LONG,.. |
// linear:FACTOR
Status parseValue(std::string_view text, std::optional<nn::RopeScaling> &out);
std::string showValue(int64_t v);
std::string showValue(double v);
std::string showValue(bool v);
std::string showValue(ir::DType v);
std::string showValue(nn::NormPlacement v);
std::string showValue(nn::NormKind v);
std::string showValue(nn::PositionKind v);
std::string showValue(nn::Activation v);
std::string showValue(WeightInit v);
std::string showValue(const std::optional<int64_t> &v);
std::string showValue(const std::optional<double> &v);
std::string showValue(const std::optional<nn::RopeScaling> &v);

// One row of a model's key table.
template <class C> struct ConfigKey {
  std::string_view name;
  std::string_view help; // allowed values or meaning
  Status (*parse)(C &config, std::string_view text);
  std::string (*show)(const C &config);
};

// A row for member M (possibly of a base class of C).
template <class C, auto M> ConfigKey<C> key(std::string_view name, std::string_view help) {
  return {name, help, [](C &c, std::string_view text) { return parseValue(text, c.*M); },
          [](const C &c) { return showValue(c.*M); }};
}

// The rows for CommonConfig's knobs, for a model config C derived from it.
template <class C> std::vector<ConfigKey<C>> commonKeys() {
  return {
      key<C, &C::batch>("batch", "batch size"),
      key<C, &C::vocab>("vocab", "vocabulary size"),
      key<C, &C::dModel>("d_model", "model width, divisible by n_heads"),
      key<C, &C::nHeads>("n_heads", "attention (query) heads"),
      key<C, &C::nKvHeads>("n_kv_heads",
                           "key/value heads, dividing n_heads (0 = n_heads; 1 = MQA)"),
      key<C, &C::headDim>("head_dim", "each attention head's width (0 = d_model / n_heads; another "
                                      "projects d_model to n_heads x head_dim and back: Gemma-7B, "
                                      "Mistral-Nemo)"),
      key<C, &C::dFF>("d_ff", "feed-forward width"),
      key<C, &C::norm>("norm", "pre|post: norm before the sublayer, or after the residual add"),
      key<C, &C::normKind>("norm_kind", "layernorm|rmsnorm"),
      key<C, &C::normEps>("norm_eps", "every norm's eps, > 0, or auto: 1e-5 for layernorm "
                                      "(PyTorch), 1e-6 for rmsnorm (LLaMA)"),
      key<C, &C::position>("position", "sinusoidal|learned|relative|rope|alibi|none"),
      key<C, &C::relativeK>("relative_k", "relative positions: distances clipped to [-k, k]"),
      key<C, &C::ropeTheta>("rope_theta", "rope: the base of the rotation frequencies, > 1"),
      key<C, &C::ropeScaling>("rope_scaling",
                              "rope: none, Llama 3.1's frequency scaling "
                              "llama3:FACTOR:LOW:HIGH:ORIGINAL_LEN (config.json's factor, "
                              "low_freq_factor, high_freq_factor, "
                              "original_max_position_embeddings; e.g. llama3:8:1:4:8192), or "
                              "Phi-3's longrope:FACTOR:ORIGINAL_LEN:SHORT:LONG (FACTOR = "
                              "max_position_embeddings / ORIGINAL_LEN; SHORT, LONG: "
                              "short_factor and long_factor, comma-separated), position "
                              "interpolation linear:FACTOR (every frequency / FACTOR, >= 1), or "
                              "YaRN yarn:FACTOR:ORIGINAL_LEN[:BETA_FAST:BETA_SLOW:"
                              "ATTENTION_FACTOR:TRUNCATE] (config.json's factor, "
                              "original_max_position_embeddings, beta_fast (32), beta_slow (1), "
                              "attention_factor (auto: 0.1 ln(FACTOR) + 1) and truncate (true))"),
      key<C, &C::ropeFraction>("rope_fraction",
                               "rope: the fraction of each head's dimensions it turns, in (0, 1] "
                               "(config.json's partial_rotary_factor: the first int(head "
                               "dimension x fraction), an even number; the rest pass unchanged)"),
      key<C, &C::maxLen>("max_len", "learned positions: table length (>= sequence lengths; "
                                    "unset: 512, or the longest sequence length if longer)"),
      key<C, &C::activation>("activation", "relu|gelu|gelu_tanh|softplus|swiglu|geglu (swiglu, "
                                           "geglu: silu or gelu_tanh gating a second projection)"),
      key<C, &C::tieEmbeddings>("tie_embeddings",
                                "true|false: the output projection reuses the embedding"),
      key<C, &C::bias>("bias", "true|false: biases on the linear layers"),
      key<C, &C::qkvBias>("qkv_bias", "true|false: biases on attention's q, k and v projections "
                                      "even with bias=false (Qwen2)"),
      key<C, &C::dropout>("dropout", "probability in [0, 1); 0 = no dropout nodes"),
      key<C, &C::seed>("seed", "first dropout rng stream"),
      key<C, &C::padId>("pad_id", "padding token id, in [0, vocab)"),
      key<C, &C::dtype>("dtype", "f32|f64|bf16: parameter and compute dtype (f64: only at "
                                 "--precision f64, on the reference backend)"),
      key<C, &C::init>("init", "normal|xavier: weight matrices from normal(0, 0.02) or Xavier "
                               "uniform (gain 1)"),
      key<C, &C::loss>("loss", "true|false: add the input \"targets\" and the scalar output "
                               "\"loss\" (mean cross-entropy)"),
      key<C, &C::labelSmoothing>(
          "label_smoothing", "loss: e in [0, 1]; the targets become (1 - e) one_hot + e / vocab"),
      key<C, &C::ignoreIndex>("ignore_index",
                              "loss: targets equal to this id are not scored (integer|pad_id)"),
  };
}

// Training mode: the input "targets" i64 [B, length]. Its range is the vocabulary when the
// ignore index lies inside it; otherwise (e.g. -100) the targets hold values outside
// [0, vocab) and the range is left unstated.
frontend::Tensor targetsInput(frontend::Builder &b, const CommonConfig &c, int64_t length);
// Outputs "logits", and in training mode "loss" = crossEntropy(logits, targets); errors name the
// caller's line.
void addOutputs(frontend::Builder &b, const CommonConfig &c, const frontend::Tensor &logits,
                const std::optional<frontend::Tensor> &targets,
                std::source_location loc = std::source_location::current());

// Applies `settings` in order to `config` (a later setting of a key overrides an earlier one, so
// code can compose a base config with variations; the CLI refuses a key given twice, see
// tools/cli_util.h); Error on an unknown key or a bad value.
template <class C>
Status applySettings(std::string_view model, std::span<const ConfigKey<C>> keys,
                     std::span<const Setting> settings, C &config);
// "key = default  (help)" per row, for ModelEntry::describe.
template <class C>
std::vector<std::string> describeKeys(std::span<const ConfigKey<C>> keys, const C &defaults);

// ModelEntry::autoValues of a model whose config C (a CommonConfig) `parse` reads: norm_eps.
template <class C, Expected<C> (*parse)(std::span<const Setting>)>
Expected<std::vector<Setting>> autoValuesOf(std::span<const Setting> settings) {
  Expected<C> c = parse(settings);
  if (!c)
    return c.error();
  c->normEps.reset();
  return std::vector<Setting>{{"norm_eps", showValue(c->normEpsilon())}};
}

// Checks of the common knobs and their combinations; the Error names the offending key.
// `lengths` are the model's sequence lengths, as (key, value) pairs, for max_len.
struct LengthKey {
  std::string_view key;
  int64_t value;
};
Status validateCommon(std::string_view model, const CommonConfig &c,
                      std::span<const LengthKey> lengths);
// Where `settings` leave max_len unset, it grows to the longest of `lengths` (so that
// `--set seq_len=4096` needs no max_len with it); a max_len that is set stays as it is.
void fitMaxLen(CommonConfig &c, std::span<const Setting> settings,
               std::span<const LengthKey> lengths);

// Limits on what a config may ask for, checked before anything is built, so that no size the
// DSL computes from the keys can overflow and no run starts that could never be allocated:
// every dimension key (batch, vocab, widths, heads, lengths, relative_k) is at most
// kMaxDimension (2^24 = 16,777,216: beyond any real vocabulary, width or context length), every
// layer count at most kMaxLayers, and the largest tensors a model makes (embedding table,
// activations, logits, attention scores) must fit ir::kMaxTensorBytes.
inline constexpr int64_t kMaxDimension = int64_t{1} << 24;
inline constexpr int64_t kMaxLayers = 4096;
// Error unless 1 <= value <= limit (kMaxDimension by default).
Status requirePositive(std::string_view model, std::string_view key, int64_t value,
                       int64_t limit = kMaxDimension);

// The keys or values of `length` positions for attention of c's heads: [batch, kv_heads, length,
// head_dim], the shape of a KV cache and of an encoder memory's. Errors: n_heads not dividing
// d_model (a config that did not go through its model's validation).
Expected<ir::Type> kvType(const CommonConfig &c, int64_t length);

// A generation graph's KV caches, one per layer: state "cache.N.k", "cache.N.v" of `type`
// (kCacheStatePrefix), each decoding at positions `pos` (nn::KvCache).
std::vector<nn::KvCache> cacheState(frontend::Builder &b, int64_t layers, const ir::Type &type,
                                    const frontend::Tensor &pos);
// Each cache's value after the step (`after`) as the update of its state (`state`).
void updateCaches(frontend::Builder &b, std::span<const nn::KvCache> state,
                  std::span<const nn::KvCache> after);

// Runs a model body on a fresh Builder of c's dtype and seed, turning a DslError into an Error
// (a zoo model's shapes follow from its config, so one means a combination the validation
// missed).
Expected<ir::Graph> buildGraph(std::string_view name, const CommonConfig &c,
                               const std::function<void(frontend::Builder &)> &body);

// ---- Encoder-decoders (transformer, t5, a program's own sequence-to-sequence model) ----

// The lengths and depths every encoder-decoder has.
struct EncoderDecoderConfig : CommonConfig {
  int64_t srcLen = 16;
  int64_t tgtLen = 16;
  int64_t nEncoderLayers = 2;
  int64_t nDecoderLayers = 2;
};
// Their rows, for a config C derived from EncoderDecoderConfig.
template <class C> std::vector<ConfigKey<C>> encoderDecoderKeys() {
  return {
      key<C, &C::srcLen>("src_len", "source length S"),
      key<C, &C::tgtLen>("tgt_len", "target length T; train, translate, compile, and dump and "
                                    "bench --compile of the model with its loss, take src_len + "
                                    "1 unless it is set"),
      key<C, &C::nEncoderLayers>("n_encoder_layers", "encoder layers"),
      key<C, &C::nDecoderLayers>("n_decoder_layers", "decoder layers"),
  };
}
// validateCommon over src_len and tgt_len, and each layer count in [1, kMaxLayers]; with
// `settings`, max_len first grows to the longer length where they leave it unset (fitMaxLen).
Status validateEncoderDecoder(std::string_view model, EncoderDecoderConfig &c,
                              std::optional<std::span<const Setting>> settings = std::nullopt);

// An encoder-decoder's graph: the inputs "src" i64 [B, srcLen] and "tgt" i64 [B, tgtLen] (tokens
// of the vocabulary) and, in training mode, "targets" [B, tgtLen]; the outputs of addOutputs for
// the logits that `model` computes from them (its layers made on the Builder it is given).
using Seq2SeqBody = std::function<frontend::Tensor(frontend::Builder &, const frontend::Tensor &src,
                                                   const frontend::Tensor &tgt)>;
Expected<ir::Graph> buildSeq2Seq(std::string_view name, const CommonConfig &c, int64_t srcLen,
                                 int64_t tgtLen, const Seq2SeqBody &model);

// ---- Template definitions ----

Error unknownKeyError(std::string_view model, std::string_view key,
                      std::span<const std::string_view> known);

template <class C>
Status applySettings(std::string_view model, std::span<const ConfigKey<C>> keys,
                     std::span<const Setting> settings, C &config) {
  for (const Setting &s : settings) {
    const ConfigKey<C> *row = nullptr;
    for (const ConfigKey<C> &k : keys)
      if (k.name == s.key)
        row = &k;
    if (!row) {
      std::vector<std::string_view> names;
      for (const ConfigKey<C> &k : keys)
        names.push_back(k.name);
      return unknownKeyError(model, s.key, names);
    }
    if (Status st = row->parse(config, s.value); !st)
      return makeError("{}: {}={}: {}", model, s.key, s.value, st.error().message);
  }
  return {};
}

template <class C>
std::vector<std::string> describeKeys(std::span<const ConfigKey<C>> keys, const C &defaults) {
  std::vector<std::string> lines;
  for (const ConfigKey<C> &k : keys)
    lines.push_back(std::string(k.name) + " = " + k.show(defaults) + "  (" + std::string(k.help) +
                    ")");
  return lines;
}

} // namespace kiln::models
