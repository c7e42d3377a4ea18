// Shared by the fuzz targets (fuzz/*.cc, each a libFuzzer LLVMFuzzerTestOneInput): the input as
// text, the report of a broken property (abort, so libFuzzer keeps the input), and the bounds
// that keep one input's work small (depth and graph size are measured by the tests and the
// compile-time benchmark, not explored here).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ir/graph.h"
#include "models/zoo.h"

namespace kiln::fuzz {

inline std::string_view text(const uint8_t *data, size_t size) {
  return {reinterpret_cast<const char *>(data), size};
}

[[noreturn]] inline void fail(const std::string &what, const std::string &context) {
  std::fprintf(stderr, "fuzz: %s\n%s\n", what.c_str(), context.c_str());
  std::abort();
}

inline constexpr int64_t kMaxNodes = 2000, kMaxLayers = 4;

inline bool smallEnough(const ir::Graph &g) {
  return static_cast<int64_t>(g.nodes().size()) <= kMaxNodes;
}

// At most kMaxLayers layers (n_layers, n_encoder_layers, ...); any other value is fair game.
inline bool smallEnough(const std::vector<models::Setting> &settings) {
  for (const models::Setting &s : settings)
    if (s.key.find("layers") != std::string::npos &&
        (s.value.size() > 2 || std::atoi(s.value.c_str()) > kMaxLayers))
      return false;
  return true;
}

} // namespace kiln::fuzz
