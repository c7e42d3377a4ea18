// Saturating arithmetic for sizes (element counts, bytes, offsets). Sizes come from user input
// (IR text, --set keys, checkpoint headers), so a product or sum may not fit in int64; here it
// becomes kSaturated instead of wrapping (undefined behaviour), and the limit check that always
// follows rejects it with a message. Operands are non-negative sizes.
#pragma once

#include <cstdint>
#include <limits>

namespace kiln {

inline constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

// a * b, or kSaturated if it does not fit (a, b >= 0).
constexpr int64_t mulSat(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}

// a + b, or kSaturated if it does not fit (a, b >= 0).
constexpr int64_t addSat(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}

} // namespace kiln
