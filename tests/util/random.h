// Deterministic random test data: uniform floats in [lo, hi) drawn from the counter-based stream
// of support/rng.h, so a failing case is reproduced by its seed alone.
#pragma once

#include <cstdint>
#include <vector>

#include "support/rng.h"

namespace kiln::test_util {

inline std::vector<float> randomFloats(int64_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] =
        lo + (hi - lo) * static_cast<float>(rng::uniform(seed, static_cast<uint64_t>(i)));
  return v;
}

} // namespace kiln::test_util
