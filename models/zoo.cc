// The model table and the `key=value` setting parser shared by all models.
#include "models/zoo.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "models/bert.h"
#include "models/gpt.h"
#include "models/transformer.h"

namespace kiln::models {

Expected<Setting> parseSetting(std::string_view text) {
  size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return makeError("--set {}: expected key=value", text);
  return Setting{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

namespace {
// One row per model, in the order `kiln --help` lists them.
constexpr ModelEntry kModels[] = {
    {"gpt", "decoder-only causal language model (GPT-2)", &buildGpt, &describeGpt},
    {"bert", "bidirectional encoder with a masked-LM head (BERT)", &buildBert, &describeBert},
    {"transformer", "encoder-decoder with cross-attention (Vaswani et al. 2017)", &buildTransformer,
     &describeTransformer},
};
} // namespace

std::span<const ModelEntry> allModels() {
  return kModels;
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
