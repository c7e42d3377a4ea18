// Counter-based random numbers: value i of stream `seed` is a pure function of (seed, i).
// Dropout, weight initialisation and the reference interpreter all draw from here, so every
// backend (reference, Highway, LLVM, standalone executables) can reproduce the same bits
// without sharing generator state, and any element can be computed independently in parallel.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace kiln::rng {

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijective avalanche mix of 64 bits.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The i-th 64-bit draw of stream `seed`. Mixing the seed first keeps streams of nearby seeds
// (0, 1, 2, ...) uncorrelated.
constexpr uint64_t bits(uint64_t seed, uint64_t i) {
  return mix64(mix64(seed + 0x9e3779b97f4a7c15ull) + i * 0x9e3779b97f4a7c15ull);
}

// The stream of a dropout mask drawn at training step `step` (the optimizer's step counter, which
// a dropout reads as its `step` operand): a fresh mask every step, the same again on resuming
// from a checkpoint of that step. Step 0 (and a dropout without the operand) is the seed's own
// stream. Distinct (seed, step) give distinct streams while the seeds of one graph lie within
// 2^32 of each other (they count up from the model's seed), as bits() decorrelates them.
constexpr uint64_t stepSeed(uint64_t seed, uint64_t step) {
  return seed + step * 0xd1b54a32d192ed03ull;
}

// A step operand's value as a count (a float counter holds whole numbers; NaN or negative: 0).
inline uint64_t stepCount(double value) {
  return value >= 1 ? static_cast<uint64_t>(std::min(value, 0x1.0p63)) : 0;
}

// Uniform in [0, 1) with 53 random mantissa bits.
inline double uniform(uint64_t seed, uint64_t i) {
  return static_cast<double>(bits(seed, i) >> 11) * 0x1.0p-53;
}

// Standard normal by Box-Muller on draws 2i and 2i+1 (one normal per pair: simple, stateless).
inline double normal(uint64_t seed, uint64_t i) {
  double u1 = 1.0 - uniform(seed, 2 * i); // (0, 1]: log is finite
  double u2 = uniform(seed, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

} // namespace kiln::rng
