// Model variants the tests sweep, and how a test names one in its trace ("gpt norm=post").
#pragma once

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
          {{"n_kv_heads", "1"}},
          {{"n_kv_heads", "2"}, {"activation", "swiglu"}},
          {{"activation", "relu"}, {"tie_embeddings", "false"}},
          {{"activation", "gelu"}},
          {{"dtype", "bf16"}},
          {{"dropout", "0.1"}},
          {{"loss", "true"}, {"label_smoothing", "0.1"}}};
}

} // namespace kiln::test_util
