// Next-token choice (see sampling.h).
#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace kiln::runtime {

int32_t sampleToken(std::span<const float> logits, int64_t vocab, bool greedy, double temperature,
                    int64_t topK, double topP, double u) {
  if (vocab <= 0)
    return 0;
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; equal logits by id, so the choice never depends on the sort; NaN as the
  // least likely (a strict weak order whatever the logits).
  auto key = [&](int32_t t) {
    return std::isnan(logits[t]) ? -std::numeric_limits<float>::infinity() : logits[t];
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return key(a) > key(b); });
  if (greedy)
    return order[0];
  const size_t kept =
      topK > 0 ? std::min<size_t>(order.size(), static_cast<size_t>(topK)) : order.size();
  std::vector<double> p(kept);
  const double top = logits[order[0]];
  for (size_t k = 0; k < kept; ++k)
    p[k] = std::exp((logits[order[k]] - top) / temperature);
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  // Nucleus: the fewest most likely tokens whose probabilities reach top_p.
  size_t nucleus = 0;
  double mass = 0;
  while (nucleus < kept && (nucleus == 0 || mass < topP * total))
    mass += p[nucleus++];
  double x = u * mass;
  for (size_t k = 0; k < nucleus; ++k) {
    if (x < p[k])
      return order[k];
    x -= p[k];
  }
  return order[nucleus - 1];
}

} // namespace kiln::runtime
