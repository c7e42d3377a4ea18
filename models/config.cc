// Value parsers for config keys, the checks shared by every model, and the DslError boundary.
#include "models/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::models {

namespace {

template <class E> struct EnumName {
  std::string_view name;
  E value;
};
constexpr EnumName<nn::NormPlacement> kPlacements[] = {{"pre", nn::NormPlacement::Pre},
                                                       {"post", nn::NormPlacement::Post}};
constexpr EnumName<nn::NormKind> kNormKinds[] = {{"layernorm", nn::NormKind::LayerNorm},
                                                 {"rmsnorm", nn::NormKind::RMSNorm}};
constexpr EnumName<nn::PositionKind> kPositions[] = {
    {"sinusoidal", nn::PositionKind::Sinusoidal}, {"learned", nn::PositionKind::Learned},
    {"relative", nn::PositionKind::Relative},     {"rope", nn::PositionKind::Rope},
    {"alibi", nn::PositionKind::Alibi},           {"none", nn::PositionKind::None}};
constexpr EnumName<nn::Activation> kActivations[] = {
    {"relu", nn::Activation::Relu},          {"gelu", nn::Activation::Gelu},
    {"gelu_tanh", nn::Activation::GeluTanh}, {"softplus", nn::Activation::Softplus},
    {"swiglu", nn::Activation::SwiGLU},      {"geglu", nn::Activation::GeGLU}};
constexpr EnumName<WeightInit> kInits[] = {{"normal", WeightInit::Normal},
                                           {"xavier", WeightInit::Xavier}};
constexpr EnumName<ir::DType> kDTypes[] = {
    {"f32", ir::DType::F32}, {"f64", ir::DType::F64}, {"bf16", ir::DType::BF16}};

template <class E, size_t N>
Status parseEnum(std::string_view text, const EnumName<E> (&names)[N], E &out) {
  std::vector<std::string_view> known;
  for (const EnumName<E> &n : names) {
    if (n.name == text) {
      out = n.value;
      return {};
    }
    known.push_back(n.name);
  }
  return makeError("expected one of {}", fmt::join(known, "|"));
}

template <class E, size_t N> std::string showEnum(E v, const EnumName<E> (&names)[N]) {
  for (const EnumName<E> &n : names)
    if (n.value == v)
      return std::string(n.name);
  return "?";
}

} // namespace

Status parseValue(std::string_view text, int64_t &out) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range && end == text.data() + text.size())
    return makeError("out of range: expected an integer from -2^63 to 2^63 - 1");
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    return makeError("expected an integer");
  out = v;
  return {};
}

Status parseValue(std::string_view text, double &out) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(v))
    return makeError("expected a number");
  out = v;
  return {};
}

Status parseValue(std::string_view text, bool &out) {
  if (text != "true" && text != "false")
    return makeError("expected true|false");
  out = text == "true";
  return {};
}

Status parseValue(std::string_view text, ir::DType &out) {
  return parseEnum(text, kDTypes, out);
}
// A norm's placement and kind are two keys: a value of the other says which (norm=rmsnorm was
// "expected one of pre|post", with no word of norm_kind).
Status parseValue(std::string_view text, nn::NormPlacement &out) {
  Status s = parseEnum(text, kPlacements, out);
  nn::NormKind kind;
  if (!s && parseEnum(text, kNormKinds, kind))
    return makeError("{} (the norm's placement; {} is its kind: norm_kind={})", s.error().message,
                     text, text);
  return s;
}
Status parseValue(std::string_view text, nn::NormKind &out) {
  Status s = parseEnum(text, kNormKinds, out);
  nn::NormPlacement placement;
  if (!s && parseEnum(text, kPlacements, placement))
    return makeError("{} (the norm's kind; {} is its placement: norm={})", s.error().message, text,
                     text);
  return s;
}
Status parseValue(std::string_view text, nn::PositionKind &out) {
  return parseEnum(text, kPositions, out);
}
Status parseValue(std::string_view text, nn::Activation &out) {
  return parseEnum(text, kActivations, out);
}
Status parseValue(std::string_view text, WeightInit &out) {
  return parseEnum(text, kInits, out);
}
Status parseValue(std::string_view text, std::optional<int64_t> &out) {
  if (text == "pad_id") {
    out.reset();
    return {};
  }
  int64_t v = 0;
  if (!parseValue(text, v))
    return makeError("expected an integer or pad_id");
  out = v;
  return {};
}

Status parseValue(std::string_view text, std::optional<double> &out) {
  if (text == "auto") {
    out.reset();
    return {};
  }
  double v = 0;
  if (!parseValue(text, v))
    return makeError("expected a number or auto");
  out = v;
  return {};
}

namespace {
std::vector<std::string_view> splitAt(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t at = text.find(separator, start);
    parts.push_back(text.substr(start, at - start));
    if (at == std::string_view::npos)
      return parts;
    start = at + 1;
  }
}

bool parseList(std::string_view text, std::vector<double> &out) {
  out.clear();
  for (std::string_view item : splitAt(text, ','))
    if (!parseValue(item, out.emplace_back()))
      return false;
  return true;
}

std::string showList(const std::vector<double> &v) {
  std::string out;
  for (double x : v)
    out += (out.empty() ? "" : ",") + showValue(x);
  return out;
}
} // namespace

Status parseValue(std::string_view text, std::optional<nn::RopeScaling> &out) {
  if (text == "none") {
    out.reset();
    return {};
  }
  // llama3:FACTOR:LOW:HIGH:ORIGINAL_LEN, longrope:FACTOR:ORIGINAL_LEN:SHORT,...:LONG,... or
  // linear:FACTOR
  std::vector<std::string_view> parts = splitAt(text, ':');
  nn::RopeScaling s;
  if (parts.size() == 5 && parts[0] == "llama3" && parseValue(parts[1], s.factor) &&
      parseValue(parts[2], s.lowFreqFactor) && parseValue(parts[3], s.highFreqFactor) &&
      parseValue(parts[4], s.originalMaxLen)) {
    out = s;
    return {};
  }
  if (parts.size() == 2 && parts[0] == "linear" && parseValue(parts[1], s.factor)) {
    s.kind = nn::RopeScalingKind::Linear;
    out = s;
    return {};
  }
  s.kind = nn::RopeScalingKind::LongRope;
  if (parts.size() == 5 && parts[0] == "longrope" && parseValue(parts[1], s.factor) &&
      parseValue(parts[2], s.originalMaxLen) && parseList(parts[3], s.shortFactor) &&
      parseList(parts[4], s.longFactor)) {
    out = s;
    return {};
  }
  // yarn:FACTOR:ORIGINAL_LEN, the rest as transformers defaults them, or all of
  // yarn:FACTOR:ORIGINAL_LEN:BETA_FAST:BETA_SLOW:ATTENTION_FACTOR|auto:TRUNCATE, as shown.
  s = nn::RopeScaling{.kind = nn::RopeScalingKind::Yarn};
  const bool full = parts.size() == 7;
  if ((parts.size() == 3 || full) && parts[0] == "yarn" && parseValue(parts[1], s.factor) &&
      parseValue(parts[2], s.originalMaxLen) &&
      (!full || (parseValue(parts[3], s.betaFast) && parseValue(parts[4], s.betaSlow) &&
                 (parts[5] == "auto" || parseValue(parts[5], s.attentionFactor)) &&
                 parseValue(parts[6], s.truncate)))) {
    out = s;
    return {};
  }
  return makeError("expected none, llama3:FACTOR:LOW:HIGH:ORIGINAL_LEN (e.g. llama3:8:1:4:8192), "
                   "longrope:FACTOR:ORIGINAL_LEN:SHORT_FACTORS:LONG_FACTORS (the factors "
                   "comma-separated, one per frequency), linear:FACTOR, or "
                   "yarn:FACTOR:ORIGINAL_LEN[:BETA_FAST:BETA_SLOW:ATTENTION_FACTOR:TRUNCATE] (e.g. "
                   "yarn:4:32768 or yarn:4:32768:32:1:auto:true)");
}

std::string showValue(int64_t v) {
  return std::to_string(v);
}
std::string showValue(double v) {
  return fmt::format("{}", v);
}
std::string showValue(bool v) {
  return v ? "true" : "false";
}
std::string showValue(ir::DType v) {
  return showEnum(v, kDTypes);
}
std::string showValue(nn::NormPlacement v) {
  return showEnum(v, kPlacements);
}
std::string showValue(nn::NormKind v) {
  return showEnum(v, kNormKinds);
}
std::string showValue(nn::PositionKind v) {
  return showEnum(v, kPositions);
}
std::string showValue(nn::Activation v) {
  return showEnum(v, kActivations);
}
std::string showValue(WeightInit v) {
  return showEnum(v, kInits);
}
std::string showValue(const std::optional<int64_t> &v) {
  return v ? std::to_string(*v) : "pad_id";
}
std::string showValue(const std::optional<double> &v) {
  return v ? showValue(*v) : "auto";
}
std::string showValue(const std::optional<nn::RopeScaling> &v) {
  if (!v)
    return "none";
  if (v->kind == nn::RopeScalingKind::Linear)
    return "linear:" + showValue(v->factor);
  if (v->kind == nn::RopeScalingKind::LongRope)
    return fmt::format("longrope:{}:{}:{}:{}", showValue(v->factor), showValue(v->originalMaxLen),
                       showList(v->shortFactor), showList(v->longFactor));
  if (v->kind == nn::RopeScalingKind::Yarn)
    return fmt::format("yarn:{}:{}:{}:{}:{}:{}", showValue(v->factor), showValue(v->originalMaxLen),
                       showValue(v->betaFast), showValue(v->betaSlow),
                       v->attentionFactor == 0 ? "auto" : showValue(v->attentionFactor),
                       showValue(v->truncate));
  return fmt::format("llama3:{}:{}:{}:{}", showValue(v->factor), showValue(v->lowFreqFactor),
                     showValue(v->highFreqFactor), showValue(v->originalMaxLen));
}

nn::BlockOptions CommonConfig::block(bool causal, int64_t context) const {
  return nn::BlockOptions{.dModel = dModel,
                          .nHeads = nHeads,
                          .nKvHeads = nKvHeads,
                          .dFF = dFF,
                          .headDim = headDim,
                          .norm = norm,
                          .normKind = normKind,
                          .normEps = normEpsilon(),
                          .activation = activation,
                          .bias = bias,
                          .qkvBias = qkvBias,
                          .weightInit = weightInit(),
                          .dropout = dropout,
                          .position = position,
                          .relativeK = relativeK,
                          .rope = {ropeTheta, ropeScaling, context, ropeFraction},
                          .causal = causal};
}

ir::ParamInit CommonConfig::weightInit() const {
  return init == WeightInit::Xavier ? nn::xavierInit(1.0) : nn::normalInit(0.02);
}

nn::CrossEntropyOptions CommonConfig::lossOptions() const {
  return nn::CrossEntropyOptions{.ignoreIndex = ignoreId(), .labelSmoothing = labelSmoothing};
}

double CommonConfig::normEpsilon() const {
  if (normEps)
    return *normEps;
  return normKind == nn::NormKind::LayerNorm ? autoLayerNormEps : nn::defaultNormEps(normKind);
}

frontend::Tensor targetsInput(frontend::Builder &b, const CommonConfig &c, int64_t length) {
  int64_t ignore = c.ignoreId();
  int64_t range = ignore >= 0 && ignore < c.vocab ? c.vocab : 0;
  return b.input("targets", {ir::DType::I64, {c.batch, length}}, range);
}

void addOutputs(frontend::Builder &b, const CommonConfig &c, const frontend::Tensor &logits,
                const std::optional<frontend::Tensor> &targets, std::source_location loc) {
  b.output("logits", logits, loc);
  if (!c.loss)
    return;
  if (!targets) // (a model of one's own that made no targetsInput: it was dereferenced)
    b.fail("loss", loc, "loss=true needs the targets (targetsInput), and none were given");
  b.loss("loss", nn::crossEntropy(logits, *targets, c.lossOptions(), loc), loc);
}

namespace {

// Levenshtein distance: the fewest one-character insertions, deletions and substitutions.
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

} // namespace

Error unknownKeyError(std::string_view model, std::string_view key,
                      std::span<const std::string_view> known) {
  // The nearest key, if it is a slip away (at most 2 edits, and fewer than half the key's
  // letters: 'n_layer' -> n_layers, but no guess for 'depth').
  std::string_view nearest;
  size_t best = 3;
  for (std::string_view k : known)
    if (size_t d = editDistance(key, k); d < best && 2 * d < std::max(key.size(), k.size()))
      best = d, nearest = k;
  return makeError("{}: unknown key '{}'{} (keys: {})", model, key,
                   nearest.empty() ? "" : fmt::format(": did you mean '{}'?", nearest),
                   fmt::join(known, ", "));
}

Status requirePositive(std::string_view model, std::string_view key, int64_t value, int64_t limit) {
  if (value < 1)
    return makeError("{}: {}: expected a positive integer, got {}", model, key, value);
  if (value > limit)
    return makeError("{}: {}: {} is over the limit of {}", model, key, value, limit);
  return {};
}

namespace {
// Each check: a condition that must hold, and the key and explanation when it does not.
struct Check {
  bool ok;
  std::string_view key;
  std::string what;
};
} // namespace

namespace {

// A tensor the model will make, as a product of config keys.
struct SizeFactor {
  std::string_view key;
  int64_t value;
};
struct TensorSize {
  std::string_view what;
  std::vector<SizeFactor> factors;
};

// The model's largest tensors must each fit ir::kMaxTensorBytes; the Error names the keys whose
// product is too large. The keys themselves are already within kMaxDimension.
Status checkTensorSizes(std::string_view model, const CommonConfig &c,
                        std::span<const LengthKey> lengths) {
  SizeFactor longest{"", 1};
  for (const LengthKey &l : lengths)
    if (l.value > longest.value)
      longest = {l.key, l.value};
  SizeFactor batch{"batch", c.batch}, vocab{"vocab", c.vocab}, width{"d_model", c.dModel};
  std::vector<TensorSize> sizes = {
      {"the token embedding", {vocab, width}},
      {"an attention projection",
       c.headDim == 0
           ? std::vector<SizeFactor>{width, width}
           : std::vector<SizeFactor>{width, {"n_heads", c.nHeads}, {"head_dim", c.headDim}}},
      {"a feed-forward weight", {width, {"d_ff", c.dFF}}},
      {"the activations", {batch, longest, width}},
      {"the feed-forward activations", {batch, longest, {"d_ff", c.dFF}}},
      {"the logits", {batch, longest, vocab}},
      {"the attention scores", {batch, {"n_heads", c.nHeads}, longest, longest}},
  };
  if (c.position == nn::PositionKind::Learned)
    sizes.push_back({"the position table", {{"max_len", c.maxLen}, width}});
  for (const TensorSize &t : sizes) {
    ir::Type type{c.dtype, {}};
    std::string product;
    for (const SizeFactor &f : t.factors) {
      type.shape.push_back(f.value);
      product += fmt::format("{}{} {}", product.empty() ? "" : " x ", f.key, f.value);
    }
    if (Status s = ir::checkType(type); !s)
      return makeError("{}: {} ({} {} elements): {}", model, t.what, product,
                       ir::dtypeName(c.dtype), s.error().message);
  }
  return {};
}

} // namespace

void fitMaxLen(CommonConfig &c, std::span<const Setting> settings,
               std::span<const LengthKey> lengths) {
  for (const Setting &s : settings)
    if (s.key == "max_len")
      return;
  for (const LengthKey &l : lengths) // a length over the limit is validateCommon's to name
    c.maxLen = std::max(c.maxLen, std::min(l.value, kMaxDimension));
}

Status validateCommon(std::string_view model, const CommonConfig &c,
                      std::span<const LengthKey> lengths) {
  for (auto [key, value] : {std::pair<std::string_view, int64_t>{"batch", c.batch},
                            {"vocab", c.vocab},
                            {"d_model", c.dModel},
                            {"n_heads", c.nHeads},
                            {"d_ff", c.dFF},
                            {"max_len", c.maxLen}})
    if (Status s = requirePositive(model, key, value); !s)
      return s;
  for (const LengthKey &l : lengths)
    if (Status s = requirePositive(model, l.key, l.value); !s)
      return s;
  for (auto [key, value] : {std::pair<std::string_view, int64_t>{"n_kv_heads", c.nKvHeads},
                            {"head_dim", c.headDim},
                            {"relative_k", c.relativeK},
                            {"window", c.window}})
    if (value > kMaxDimension)
      return makeError("{}: {}: {} is over the limit of {}", model, key, value, kMaxDimension);
  if (c.window < 0)
    return makeError("{}: window: expected 0 (attend to every position) or a positive width, got "
                     "{}",
                     model, c.window);
  if (c.headDim < 0)
    return makeError("{}: head_dim: expected 0 (d_model / n_heads) or a positive width, got {}",
                     model, c.headDim);
  if (Status s = checkTensorSizes(model, c, lengths); !s)
    return s;
  int64_t kvHeads = c.nKvHeads == 0 ? c.nHeads : c.nKvHeads;
  const int64_t headDim = c.headDimension();
  const std::string scalingFault = c.ropeScaling ? nn::ropeScalingFault(*c.ropeScaling) : "";
  const bool fractionOk = nn::ropeFractionInRange(c.ropeFraction);
  const int64_t turned = fractionOk ? nn::rotatedDims(headDim, c.ropeFraction) : headDim;
  const std::string turnedDims =
      turned == headDim
          ? fmt::format("the head dimension {}", headDim)
          : fmt::format("the {} dimensions rope turns of a head of {}", turned, headDim);
  std::vector<Check> checks = {
      {c.headDim != 0 || c.dModel % c.nHeads == 0, "n_heads",
       fmt::format("d_model {} is not divisible by n_heads {} (or set head_dim)", c.dModel,
                   c.nHeads)},
      {c.nKvHeads >= 0 && kvHeads <= c.nHeads && c.nHeads % kvHeads == 0, "n_kv_heads",
       fmt::format("expected 0 or a divisor of n_heads {}, got {}", c.nHeads, c.nKvHeads)},
      {c.position != nn::PositionKind::Sinusoidal || c.dModel % 2 == 0, "position",
       fmt::format("sinusoidal positions need an even d_model, got {}", c.dModel)},
      {c.position != nn::PositionKind::Rope || headDim % 2 == 0, "position",
       fmt::format("rope needs an even head dimension (head_dim, or d_model/n_heads), got {}",
                   headDim)},
      // (Checked whatever the positions, as rope_theta is: a value no model takes is a mistake.)
      {c.relativeK >= 1, "relative_k",
       fmt::format("expected a positive integer, got {}", c.relativeK)},
      {c.ropeTheta > 1 && std::isfinite(c.ropeTheta), "rope_theta",
       fmt::format("expected a finite base > 1, got {}", c.ropeTheta)},
      {fractionOk, "rope_fraction",
       fmt::format("expected a fraction in (0, 1], got {}", c.ropeFraction)},
      {!fractionOk || c.ropeFraction == 1 || nn::ropeTurnsEvenPart(headDim, c.ropeFraction),
       "rope_fraction",
       fmt::format("{} turns int({} x {}) = {} of a head's dimensions: expected an even number, "
                   "at least 2",
                   c.ropeFraction, headDim, c.ropeFraction, turned)},
      {scalingFault.empty(), "rope_scaling", scalingFault},
      {!c.ropeScaling || c.ropeScaling->kind != nn::RopeScalingKind::LongRope ||
           int64_t(c.ropeScaling->shortFactor.size()) * 2 == turned,
       "rope_scaling",
       fmt::format("longrope needs one factor a frequency, half {}: {}, got {}", turnedDims,
                   turned / 2, c.ropeScaling ? c.ropeScaling->shortFactor.size() : 0)},
      {!c.ropeScaling || c.ropeScaling->originalMaxLen <= kMaxDimension, "rope_scaling",
       fmt::format("the original length {} is over the limit of {}",
                   c.ropeScaling ? c.ropeScaling->originalMaxLen : 0, kMaxDimension)},
      {c.dropout >= 0 && c.dropout < 1, "dropout",
       fmt::format("expected a probability in [0, 1), got {}", c.dropout)},
      {c.padId >= 0 && c.padId < c.vocab, "pad_id",
       fmt::format("expected a token id in [0, vocab {}), got {}", c.vocab, c.padId)},
      {c.seed >= 0, "seed", fmt::format("expected a non-negative integer, got {}", c.seed)},
      {c.labelSmoothing >= 0 && c.labelSmoothing <= 1, "label_smoothing",
       fmt::format("expected a value in [0, 1], got {}", c.labelSmoothing)},
      // (A norm adds its eps in f32: 1e39 would be inf there, 1e-46 zero.)
      {static_cast<float>(c.normEpsilon()) > 0 &&
           std::isfinite(static_cast<float>(c.normEpsilon())),
       "norm_eps",
       fmt::format("expected a positive number within f32's range, or auto, got {}",
                   c.normEpsilon())},
  };
  for (const LengthKey &l : lengths)
    checks.push_back(
        {c.position != nn::PositionKind::Learned || l.value <= c.maxLen, "max_len",
         fmt::format("learned positions need max_len >= {} {}, got {}", l.key, l.value, c.maxLen)});
  for (const Check &check : checks)
    if (!check.ok)
      return makeError("{}: {}: {}", model, check.key, check.what);
  return {};
}

Expected<ir::Type> kvType(const CommonConfig &c, int64_t length) {
  if (c.nHeads < 1 || c.dModel % c.nHeads != 0)
    return makeError("n_heads {} does not divide d_model {}", c.nHeads, c.dModel);
  const int64_t kvHeads = c.nKvHeads == 0 ? c.nHeads : c.nKvHeads;
  return ir::Type{c.dtype, {c.batch, kvHeads, length, c.headDimension()}};
}

std::vector<nn::KvCache> cacheState(frontend::Builder &b, int64_t layers, const ir::Type &type,
                                    const frontend::Tensor &pos) {
  std::vector<nn::KvCache> caches(static_cast<size_t>(layers));
  for (size_t i = 0; i < caches.size(); ++i) {
    caches[i].k = b.state(fmt::format("{}{}.k", kCacheStatePrefix, i), type);
    caches[i].v = b.state(fmt::format("{}{}.v", kCacheStatePrefix, i), type);
    caches[i].pos = pos;
  }
  return caches;
}

void updateCaches(frontend::Builder &b, std::span<const nn::KvCache> state,
                  std::span<const nn::KvCache> after) {
  for (size_t i = 0; i < state.size(); ++i) {
    b.update(state[i].k, after[i].k);
    b.update(state[i].v, after[i].v);
  }
}

Expected<ir::Graph> buildGraph(std::string_view name, const CommonConfig &c,
                               const std::function<void(frontend::Builder &)> &body) {
  frontend::Builder b(std::string(name), c.dtype, c.seed);
  b.setProbing(c.probes);
  try {
    body(b);
    for (const auto &[probe, value] : b.probes())
      b.output(probe, frontend::Tensor(b, value));
    return b.finish();
  } catch (const frontend::DslError &e) {
    return Error{e.what()};
  }
}

Status validateEncoderDecoder(std::string_view model, EncoderDecoderConfig &c,
                              std::optional<std::span<const Setting>> settings) {
  const LengthKey lengths[] = {{"src_len", c.srcLen}, {"tgt_len", c.tgtLen}};
  if (settings)
    fitMaxLen(c, *settings, lengths);
  if (Status s = validateCommon(model, c, lengths); !s)
    return s;
  for (auto [key, value] :
       {LengthKey{"n_encoder_layers", c.nEncoderLayers}, {"n_decoder_layers", c.nDecoderLayers}})
    if (Status s = requirePositive(model, key, value, kMaxLayers); !s)
      return s;
  return {};
}

Expected<ir::Graph> buildSeq2Seq(std::string_view name, const CommonConfig &c, int64_t srcLen,
                                 int64_t tgtLen, const Seq2SeqBody &model) {
  return buildGraph(name, c, [&](frontend::Builder &b) {
    frontend::Tensor src = b.input("src", {ir::DType::I64, {c.batch, srcLen}}, c.vocab);
    frontend::Tensor tgt = b.input("tgt", {ir::DType::I64, {c.batch, tgtLen}}, c.vocab);
    std::optional<frontend::Tensor> targets;
    if (c.loss)
      targets = targetsInput(b, c, tgtLen);
    addOutputs(b, c, model(b, src, tgt), targets);
  });
}

} // namespace kiln::models
