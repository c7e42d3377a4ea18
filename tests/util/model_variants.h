// Model variants the tests sweep, and how a test names one in its trace ("gpt norm=post").
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "models/zoo.h"

namespace kiln::test_util {

inline std::string label(std::string_view model, const std::vector<models::Setting> &s) {
  std::string out(model);
  for (const models::Setting &kv : s)
    out += " " + kv.key + "=" + kv.value;
  return out;
}

// What a backend must get right on every model family: norm placement and kind, every position
// scheme, MHA/MQA/GQA, every activation, bf16, dropout, and the loss with label smoothing.
inline std::vector<std::vector<models::Setting>> backendVariants() {
  return {{},
          {{"norm", "post"}},
          {{"norm_kind", "rmsnorm"}},
          {{"position", "sinusoidal"}},
          {{"position", "relative"}},
          {{"position", "rope"}},
          {{"position", "alibi"}},
          {{"position", "none"}},
          {{"n_kv_heads", "1"}, {"activation", "softplus"}},
          {{"n_kv_heads", "2"}, {"activation", "swiglu"}},
          {{"activation", "relu"}, {"tie_embeddings", "false"}},
          {{"activation", "gelu"}},
          {{"dtype", "bf16"}},
          {{"dropout", "0.1"}},
          {{"loss", "true"}, {"label_smoothing", "0.1"}}};
}

// The variants above that `model` takes: those whose every key is one of its keys (t5 fixes its
// norm, positions and biases, so it takes fewer).
inline std::vector<std::vector<models::Setting>> backendVariants(std::string_view model) {
  const models::ModelEntry *m = models::findModel(model);
  std::vector<std::vector<models::Setting>> out;
  for (const std::vector<models::Setting> &v : backendVariants()) {
    bool takes = m != nullptr;
    for (const models::Setting &kv : v)
      if (takes) {
        const std::vector<std::string> keys = m->describe();
        takes = std::any_of(keys.begin(), keys.end(), [&](const std::string &line) {
          return line.starts_with(kv.key + " =");
        });
      }
    if (takes)
      out.push_back(v);
  }
  return out;
}

} // namespace kiln::test_util
