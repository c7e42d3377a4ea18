// bfloat16 is a storage type: 1 sign, 8 exponent, 7 mantissa bits (the top half of an f32).
// Values are computed in f32/f64 and rounded to bf16 when stored, round-to-nearest-even as
// PyTorch and the AVX-512 BF16 conversion instructions do.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kiln {

inline uint16_t toBf16Bits(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x))
    return static_cast<uint16_t>((u >> 16) | 0x40); // keep it a (quiet) NaN
  uint32_t roundingBias = 0x7fff + ((u >> 16) & 1);  // ties to even
  return static_cast<uint16_t>((u + roundingBias) >> 16);
}

inline float fromBf16Bits(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// x rounded to the nearest bf16 value, returned in float.
inline float roundToBf16(float x) { return fromBf16Bits(toBf16Bits(x)); }

} // namespace kiln
