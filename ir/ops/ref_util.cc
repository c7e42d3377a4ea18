// Broadcast index maps for reference semantics, and the checks of a shape attribute and a fill
// value.
#include "ir/ops/ref_util.h"

#include <cmath>

namespace kiln::ir {

Status checkShapeDims(std::span<const int64_t> shape) {
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < 0)
      return makeError("shape {} has a negative dimension ({} at index {})", shapeString(shape),
                       shape[d], d);
  return {};
}

// The integer bounds are powers of two, so exact in double. A float dtype holds NaN and the
// infinities (masks are -inf) and finite numbers up to its largest; 1e300 is no f32 value, and
// reading it as inf without a word would hide a typo. A number that rounds to the largest (f32's
// 3.4028235e38, as numpy and PyTorch print it: below it by less than half its last place) fits.
Status checkValueFits(double v, DType t) {
  if (isFloat(t) && std::isfinite(v)) {
    const double max = largestFinite(t), halfUlp = t == DType::F32    ? 0x1p103
                                                   : t == DType::BF16 ? 0x1p119
                                                                      : 0;
    if (std::fabs(v) > max && std::fabs(v) >= max + halfUlp)
      return makeError("value {} is outside the finite range of {} (largest {}); write inf for "
                       "an infinity",
                       attrValueString(v), dtypeName(t), attrValueString(max));
  }
  if (t == DType::Bool && v != 0 && v != 1)
    return makeError("value {} is not a bool (expected 0 or 1)", attrValueString(v));
  double lim = t == DType::I32 ? 0x1p31 : 0x1p63;
  if (isInteger(t) && !(std::isfinite(v) && std::trunc(v) == v && v >= -lim && v < lim))
    return makeError("value {} is not an integer that {} can hold", attrValueString(v),
                     dtypeName(t));
  return {};
}

std::vector<int64_t> broadcastIndexMap(std::span<const int64_t> from, std::span<const int64_t> to) {
  // Stride of each output dimension in `from`; 0 where `from` is missing it or has size 1.
  size_t offset = to.size() - from.size();
  std::vector<int64_t> fromStrides = stridesOf(from);
  std::vector<int64_t> strides(to.size(), 0);
  for (size_t d = 0; d < from.size(); ++d)
    strides[offset + d] = from[d] == 1 ? 0 : fromStrides[d];
  std::vector<int64_t> map;
  map.reserve(numElements(to));
  forEachIndex(to, [&](std::span<const int64_t> idx) {
    int64_t k = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      k += idx[d] * strides[d];
    map.push_back(k);
  });
  return map;
}

} // namespace kiln::ir
