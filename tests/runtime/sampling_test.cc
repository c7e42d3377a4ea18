// Next-token choice (runtime/sampling.h): greedy takes the most likely token (the lowest id among
// equals); sampling follows the softmax of logits / temperature, truncated by top-k and top-p,
// walking the tokens from the most likely as u goes from 0 to 1.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/sampling.h"

namespace kiln::sampling_test {
namespace {

using runtime::sampleToken;

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};

TEST(Sampling, GreedyTakesTheMostLikelyLowestIdFirst) {
  EXPECT_EQ(sampleToken(kLogits, 5, true, 1.0, 0, 1.0, 0.99), 1);
  // Only the first `vocab` logits are candidates.
  EXPECT_EQ(sampleToken(kLogits, 1, true, 1.0, 0, 1.0, 0.5), 0);
}

TEST(Sampling, UWalksTheDistributionFromTheMostLikely) {
  // Probabilities by rank: e^3, e^3, e^2, e^1, e^-1 over their sum.
  const double z = 2 * std::exp(3.0) + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  const double p3 = std::exp(3.0) / z, p2 = std::exp(2.0) / z;
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 0, 1.0, 0.0), 1);
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 0, 1.0, p3 + 1e-6), 3);
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 0, 1.0, 2 * p3 + 1e-6), 2);
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 0, 1.0, 2 * p3 + p2 + 1e-6), 0);
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 0, 1.0, 0.999999), 4);
}

TEST(Sampling, TopKAndTopPTruncate) {
  // top-k 2: only ids 1 and 3, split evenly.
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 2, 1.0, 0.49), 1);
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 2, 1.0, 0.51), 3);
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 2, 1.0, 0.999), 3);
  // top-p small: the most likely alone, whatever u.
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 0, 0.1, 0.999), 1);
  // top-p just past the two most likely: the third joins.
  const double z = 2 * std::exp(3.0) + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1.0, 0, 2 * std::exp(3.0) / z + 0.01, 0.999), 2);
}

TEST(Sampling, NanLogitsAreTheLeastLikely) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 1.0f, nan, 2.0f};
  EXPECT_EQ(sampleToken(logits, 4, true, 1.0, 0, 1.0, 0.5), 3);
  EXPECT_EQ(sampleToken(logits, 4, false, 1.0, 2, 1.0, 0.999), 1);
}

TEST(Sampling, TemperatureSharpensAndFlattens) {
  // Near 0 it is greedy; very high, uniform: u = 0.5 picks the middle rank (id 2).
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1e-3, 0, 1.0, 0.999), 3);
  EXPECT_EQ(sampleToken(kLogits, 5, false, 1e6, 0, 1.0, 0.5), 2);
}

} // namespace
} // namespace kiln::sampling_test
