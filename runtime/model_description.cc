// A checkpoint's description of itself (see model_description.h).
#include "runtime/model_description.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "runtime/json_text.h"
#include "runtime/safetensors.h"
#include "runtime/tasks.h"

namespace kiln::runtime {

namespace {
constexpr const char *kModelKey = "kiln.model";
constexpr const char *kSettingsKey = "kiln.settings";
constexpr const char *kTokenizerKey = "kiln.tokenizer";
constexpr const char *kTaskKey = "kiln.task";
constexpr const char *kEndTokensKey = "kiln.end_tokens";
constexpr const char *kHfArchitectureKey = "kiln.hf_architecture";
} // namespace

void describeIn(const ModelDescription &d, std::map<std::string, std::string> &metadata) {
  // An array of [key, value] pairs keeps the order settings apply in (an object's need not).
  Json settings = Json::array();
  for (const auto &[key, value] : d.settings)
    settings.push_back(Json::array({key, value}));
  metadata[kModelKey] = d.model;
  metadata[kSettingsKey] = settings.dump();
  if (!d.tokenizerJson.empty())
    metadata[kTokenizerKey] = d.tokenizerJson;
  else
    metadata.erase(kTokenizerKey);
  if (!d.task.empty())
    metadata[kTaskKey] = d.task;
  else
    metadata.erase(kTaskKey);
  if (!d.endTokens.empty())
    metadata[kEndTokensKey] = Json(d.endTokens).dump();
  else
    metadata.erase(kEndTokensKey);
  if (!d.hfArchitecture.empty())
    metadata[kHfArchitectureKey] = d.hfArchitecture;
  else
    metadata.erase(kHfArchitectureKey);
}

Expected<std::optional<ModelDescription>>
describedBy(const std::map<std::string, std::string> &metadata, const std::string &where) {
  auto model = metadata.find(kModelKey);
  if (model == metadata.end())
    return std::optional<ModelDescription>();
  ModelDescription d;
  d.model = model->second;
  if (d.model.empty())
    return makeError("{}: metadata \"{}\" is empty: expected a model name", where, kModelKey);
  auto settings = metadata.find(kSettingsKey);
  if (settings != metadata.end()) {
    Expected<JsonText> json = readJson(settings->second, {.what = kSettingsKey});
    if (!json)
      return makeError("{}: metadata {}", where, json.error().message);
    auto bad = [&] {
      return makeError("{}: metadata \"{}\" is not an array of [key, value] text pairs", where,
                       kSettingsKey);
    };
    if (!json->value.is_array())
      return bad();
    for (const Json &pair : json->value) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string() ||
          pair[0].get_ref<const std::string &>().empty())
        return bad();
      const std::string &key = pair[0].get_ref<const std::string &>();
      for (const auto &[k, v] : d.settings)
        if (k == key) // (a --set would say "given twice" of a flag no one gave)
          return makeError("{}: metadata \"{}\" sets {} twice", where, kSettingsKey, key);
      d.settings.emplace_back(key, pair[1].get<std::string>());
    }
  }
  if (auto t = metadata.find(kTokenizerKey); t != metadata.end()) {
    // (kiln writes no such key for byte tokens: an empty one would silently read as them)
    if (t->second.empty())
      return makeError("{}: metadata \"{}\" is empty: expected a tokenizer.json (a model of byte "
                       "tokens has no such key)",
                       where, kTokenizerKey);
    d.tokenizerJson = t->second;
  }
  // (Checked where a run continues it, runtime/tasks.h continuedTask: one this kiln does not
  // know leaves the weights readable.)
  if (auto t = metadata.find(kTaskKey); t != metadata.end())
    d.task = t->second;
  if (auto t = metadata.find(kEndTokensKey); t != metadata.end()) {
    Expected<JsonText> json = readJson(t->second, {.what = kEndTokensKey});
    if (!json)
      return makeError("{}: metadata {}", where, json.error().message);
    const Json &ids = json->value;
    const bool good = ids.is_array() && !ids.empty() &&
                      std::all_of(ids.begin(), ids.end(),
                                  [](const Json &id) { return tokenIdIn(id).has_value(); });
    if (!good)
      return makeError("{}: metadata \"{}\" is {}: expected a non-empty array of token ids "
                       "(whole numbers from 0)",
                       where, kEndTokensKey, t->second);
    d.endTokens = ids.get<std::vector<int32_t>>();
  }
  // (Any name: export checks it against the classes it writes.)
  if (auto t = metadata.find(kHfArchitectureKey); t != metadata.end())
    d.hfArchitecture = t->second;
  return std::optional<ModelDescription>(std::move(d));
}

Expected<std::string> checkpointTask(const std::string &path, bool withData) {
  Expected<std::optional<ModelDescription>> d = readDescription(path);
  if (!d)
    return d.error();
  return *d ? continuedTask((*d)->task, withData, path) : std::string();
}

Expected<std::optional<ModelDescription>> readDescription(const std::string &path) {
  Expected<SafetensorsFile> file = readSafetensors(path, std::vector<std::string>{});
  if (!file)
    return file.error();
  return describedBy(file->metadata, path);
}

std::optional<std::string> settingIn(const ModelDescription &d, const std::string &key) {
  std::optional<std::string> value;
  for (const auto &[k, v] : d.settings)
    if (k == key)
      value = v;
  return value;
}

namespace {
// Two settings' values that say the same: the same text, or the same number in other words
// (n_layers 1 and 01, norm_eps 1e-5 and 1e-05, as an imported checkpoint writes it): integers
// as integers (a double would make 2^53 + 1 and 2^53 one), the others as finite doubles; and a
// value of colon-separated parts (rope_scaling=llama3:8:1:4:8192) part by part.
// (kiln itself compares the models two settings build, tools/cli_util.cc adoptDescription;
// without the model zoo, auto is the number a bundle's defaults say: checkSameModel.)
template <class T> std::optional<T> numberIn(const std::string &text) {
  T v{};
  const char *end = text.data() + text.size();
  auto [at, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || at != end)
    return std::nullopt;
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(v))
      return std::nullopt;
  return v;
}

bool samePart(const std::string &a, const std::string &b) {
  if (a == b)
    return true;
  if (const auto x = numberIn<int64_t>(a), y = numberIn<int64_t>(b); x && y)
    return *x == *y;
  const auto x = numberIn<double>(a), y = numberIn<double>(b);
  return x && y && *x == *y;
}

bool sameValue(const std::string &a, const std::string &b) {
  size_t i = 0, j = 0;
  for (;;) {
    const size_t ai = a.find(':', i), bj = b.find(':', j);
    if (!samePart(a.substr(i, ai - i), b.substr(j, bj - j)))
      return false;
    if (ai == std::string::npos || bj == std::string::npos)
      return ai == bj;
    i = ai + 1, j = bj + 1;
  }
}
} // namespace

Status checkSameModel(const ModelDescription &checkpoint, const ModelDescription &bundle,
                      const std::vector<std::pair<std::string, std::string>> &defaults,
                      const std::string &where, std::string_view runs) {
  if (checkpoint.model != bundle.model)
    return makeError("{}: the checkpoint holds a {} model; {} runs {}", where, checkpoint.model,
                     runs, bundle.model);
  for (const auto &[key, def] : defaults) {
    // A key unset, or auto, means the default, which a bundle writes as the number auto means
    // in its model (tools/compile_command.cc, bundleModel); the other keys are checked alike.
    auto meant = [&](const ModelDescription &d) {
      const std::optional<std::string> v = settingIn(d, key);
      return !v || *v == "auto" ? def : *v;
    };
    const std::string saved = meant(checkpoint), compiled = meant(bundle);
    if (!sameValue(saved, compiled))
      return makeError("{}: the checkpoint was saved with {}={}, which its weights fix; {} was "
                       "compiled with {}={} (compile it with --set {}={}, or kiln compile --load "
                       "{})",
                       where, key, saved, runs, key, compiled, key, saved, where);
  }
  return {};
}

namespace {
// The keys that either description sets and the two give other values (a default counting as
// one), in the order they first appear.
std::vector<std::string> differingKeys(const ModelDescription &checkpoint,
                                       const ModelDescription &bundle) {
  std::vector<std::string> keys, differ;
  for (const ModelDescription *d : {&checkpoint, &bundle})
    for (const auto &[key, value] : d->settings)
      if (std::find(keys.begin(), keys.end(), key) == keys.end())
        keys.push_back(key);
  for (const std::string &key : keys)
    if (settingIn(checkpoint, key) != settingIn(bundle, key))
      differ.push_back(key);
  return differ;
}
} // namespace

std::vector<std::string> otherSettings(const ModelDescription &checkpoint,
                                       const ModelDescription &bundle) {
  std::vector<std::string> differ;
  for (const std::string &key : differingKeys(checkpoint, bundle))
    differ.push_back(fmt::format("{}={} (this executable: {})", key,
                                 settingIn(checkpoint, key).value_or("its default"),
                                 settingIn(bundle, key).value_or("its default")));
  return differ;
}

ModelDescription continuedBy(const ModelDescription &checkpoint, const ModelDescription &bundle) {
  ModelDescription d = checkpoint;
  for (const std::string &key : differingKeys(checkpoint, bundle)) {
    const std::optional<std::string> mine = settingIn(bundle, key);
    auto &s = d.settings;
    auto first = std::find_if(s.begin(), s.end(), [&](const auto &kv) { return kv.first == key; });
    if (first == s.end()) { // (the bundle sets it: it differs)
      s.emplace_back(key, *mine);
      continue;
    }
    if (mine)
      (first++)->second = *mine;
    s.erase(std::remove_if(first, s.end(), [&](const auto &kv) { return kv.first == key; }),
            s.end());
  }
  return d;
}

Expected<std::optional<ModelDescription>> bundleDescription(const kiln_bundle &b) {
  // (A bundle of another version has no such fields to read: its load says so.)
  if (b.version != KILN_BUNDLE_VERSION || !b.model || !b.settings)
    return std::optional<ModelDescription>();
  return describedBy({{kModelKey, b.model}, {kSettingsKey, b.settings}}, "the bundle");
}

Status checkCheckpointFits(const kiln_bundle &b, const std::string &path, std::string_view runs) {
  Expected<std::optional<ModelDescription>> bundle = bundleDescription(b);
  if (!bundle)
    return bundle.error();
  if (!*bundle || !b.defaults)
    return {};
  Expected<std::optional<ModelDescription>> defaults =
      describedBy({{kModelKey, b.model}, {kSettingsKey, b.defaults}}, "the bundle");
  if (!defaults)
    return defaults.error();
  // A file that cannot be read is the load's to report; a description that cannot be is ours.
  Expected<SafetensorsFile> file = readSafetensors(path, std::vector<std::string>{});
  if (!file)
    return {};
  Expected<std::optional<ModelDescription>> saved = describedBy(file->metadata, path);
  if (!saved)
    return saved.error();
  if (!*saved)
    return {};
  return checkSameModel(**saved, **bundle, (*defaults)->settings, path, runs);
}

Expected<Tokenizer> chooseTokenizer(const std::string &path, const ModelDescription *checkpoint,
                                    const std::string &where) {
  std::optional<Tokenizer> embedded;
  if (checkpoint && !checkpoint->tokenizerJson.empty()) {
    Expected<Tokenizer> t = Tokenizer::parse(checkpoint->tokenizerJson, where + " (its tokenizer)");
    if (!t)
      return t.error();
    embedded = std::move(*t);
  }
  Expected<Tokenizer> chosen = Tokenizer::bytes();
  if (path.empty()) {
    if (embedded)
      chosen = std::move(*embedded);
  } else {
    // A checkpoint of a training run on text that names no tokenizer was trained on bytes (a run
    // with one writes it; an older kiln's says no task): another tokenizer's ids are not its ids.
    if (const std::string task = checkpoint ? checkpoint->task : "";
        !embedded && (task == "lm" || task == "mlm" || task == "pairs"))
      return makeError("--tokenizer {}: the checkpoint {} was trained on byte tokens (task {}, "
                       "and no tokenizer in its metadata): its ids are bytes, not this "
                       "tokenizer's (leave the flag off)",
                       path, where, task);
    chosen = Tokenizer::load(path);
    if (chosen && embedded && chosen->toJson() != embedded->toJson())
      return makeError("--tokenizer {}: not the tokenizer the checkpoint {} was saved with (leave "
                       "the flag off to use the checkpoint's)",
                       path, where);
  }
  if (chosen && checkpoint)
    chosen->setEndIds(checkpoint->endTokens);
  return chosen;
}

} // namespace kiln::runtime
