// The model table and the `key=value` setting parser shared by all models.
#include "models/zoo.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "models/bert.h"
#include "models/gpt.h"
#include "models/t5.h"
#include "models/transformer.h"

namespace kiln::models {

Expected<Setting> parseSetting(std::string_view text) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return makeError("--set {}: expected key=value", text);
  return Setting{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

bool isRunSetting(std::string_view key) {
  return std::find(std::begin(kRunSettings), std::end(kRunSettings), key) != std::end(kRunSettings);
}

bool isLengthSetting(std::string_view key) {
  return std::find(std::begin(kLengthSettings), std::end(kLengthSettings), key) !=
         std::end(kLengthSettings);
}

bool isDefaultRunSetting(std::string_view key) {
  return key != "loss" && isRunSetting(key);
}

bool isTrainingSetting(std::string_view key) {
  return std::find(std::begin(kTrainingSettings), std::end(kTrainingSettings), key) !=
         std::end(kTrainingSettings);
}

bool mootWithWeights(std::string_view key,
                     std::span<const std::pair<std::string, std::string>> config) {
  if (key == "init")
    return true;
  // (Not max_len: besides a learned table's length, it is the positions a model is made for,
  // which an exported config says: max_position_embeddings.)
  constexpr std::pair<std::string_view, std::string_view> kPositionKeys[] = {
      {"rope_theta", "rope"},
      {"rope_scaling", "rope"},
      {"rope_fraction", "rope"},
      {"relative_k", "relative"}};
  for (const auto &[positionKey, kind] : kPositionKeys)
    if (key == positionKey)
      for (const auto &[k, value] : config)
        if (k == "position")
          return value != kind;
  return false;
}

namespace {
// One row per built-in model, in the order `kiln --help` lists them.
constexpr ModelEntry kBuiltIn[] = {
    {"gpt", "decoder-only causal language model (GPT-2)", &buildGpt, &describeGpt, "lm",
     &autoValuesOf<GptConfig, &gptConfig>},
    {"bert", "bidirectional encoder with a masked-LM head (BERT)", &buildBert, &describeBert, "mlm",
     &autoValuesOf<BertConfig, &bertConfig>},
    {"transformer", "encoder-decoder with cross-attention (Vaswani et al. 2017)", &buildTransformer,
     &describeTransformer, "copy", &autoValuesOf<TransformerConfig, &transformerConfig>},
    {"t5", "encoder-decoder with bucketed relative position biases (Raffel et al. 2020)", &buildT5,
     &describeT5, "copy", &autoValuesOf<T5Config, &t5Config>},
};

std::vector<ModelEntry> &table() {
  static std::vector<ModelEntry> models(std::begin(kBuiltIn), std::end(kBuiltIn));
  return models;
}
} // namespace

std::span<const ModelEntry> allModels() {
  return table();
}

Status addModels(std::span<const ModelEntry> models) {
  for (size_t i = 0; i < models.size(); ++i) {
    const ModelEntry &m = models[i];
    if (m.name.empty() || !m.build || !m.describe)
      return makeError("model table entry {}: a model needs a name, a builder and a describer", i);
    for (char ch : m.name)
      if (!(std::islower(static_cast<unsigned char>(ch)) ||
            std::isdigit(static_cast<unsigned char>(ch)) || ch == '_'))
        return makeError("model '{}': a model name is made of a-z, 0-9 and _", m.name);
    if (findModel(m.name) ||
        std::any_of(models.begin(), models.begin() + static_cast<std::ptrdiff_t>(i),
                    [&](const ModelEntry &e) { return e.name == m.name; }))
      return makeError("model '{}': the name is taken", m.name);
  }
  table().insert(table().end(), models.begin(), models.end());
  return {};
}

const ModelEntry *findModel(std::string_view name) {
  for (const ModelEntry &m : allModels())
    if (m.name == name)
      return &m;
  return nullptr;
}

Expected<ir::Graph> buildModel(std::string_view name, std::span<const Setting> settings) {
  const ModelEntry *m = findModel(name);
  if (!m) {
    std::vector<std::string_view> names;
    for (const ModelEntry &e : allModels())
      names.push_back(e.name);
    return makeError("unknown model '{}' (known: {})", name, fmt::join(names, ", "));
  }
  return m->build(settings);
}

} // namespace kiln::models
