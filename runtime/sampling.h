// Choosing the next token from a model's logits: greedy, or sampled (temperature, top-k, top-p)
// with a uniform number the caller draws from its seeded stream, so generation is reproducible.
#pragma once

#include <cstdint>
#include <span>

namespace kiln::runtime {

// The next token from `logits` (the first `vocab` of them are candidates): the most likely with
// `greedy` (the lowest id among equals), else drawn with uniform number `u` in [0, 1) from the
// softmax of logits / temperature kept to the top_k most likely (0: all) and then to the fewest
// most likely whose probabilities sum to top_p.
int32_t sampleToken(std::span<const float> logits, int64_t vocab, bool greedy, double temperature,
                    int64_t topK, double topP, double u);

} // namespace kiln::runtime
