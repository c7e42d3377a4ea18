// Type names, shape helpers and the broadcasting rule.
#include "ir/types.h"

#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::ir {

double largestFinite(DType t) {
  switch (t) {
  case DType::F32:
    return static_cast<double>(std::numeric_limits<float>::max());
  case DType::BF16:
    return 0x1.fep127; // sign 0, exponent 254, mantissa 0x7f
  default:
    return std::numeric_limits<double>::max();
  }
}

int64_t numElements(std::span<const int64_t> shape) {
  // A zero anywhere makes an empty tensor, however large the other dimensions are.
  for (int64_t d : shape)
    if (d == 0)
      return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    n = mulSat(n, d);
  return n;
}

std::string shapeString(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

std::string typeString(const Type &t) {
  return fmt::format("{}{}", dtypeName(t.dtype), shapeString(t.shape));
}

Status checkType(const Type &t) {
  for (size_t d = 0; d < t.shape.size(); ++d)
    if (t.shape[d] < 0)
      return makeError("type {} has a negative dimension ({} at index {})", typeString(t),
                       t.shape[d], d);
  if (t.bytes() > kMaxTensorBytes) {
    double bytes = static_cast<double>(dtypeBytes(t.dtype)); // exact enough, and cannot wrap
    for (int64_t d : t.shape)
      bytes *= static_cast<double>(d);
    return makeError("type {} needs {}, over the limit of {} per tensor", typeString(t),
                     bytesString(bytes), bytesString(kMaxTensorBytes));
  }
  return {};
}

Expected<Shape> broadcastShapes(std::span<const int64_t> a, std::span<const int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Dimension i counted from the right; a missing dimension acts as 1.
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      return makeError("shapes {} and {} do not broadcast (dimension {} from the right: {} vs {})",
                       shapeString(a), shapeString(b), i + 1, da, db);
    out[rank - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

Expected<int64_t> normalizeAxis(int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return makeError("axis {} is out of range for rank {}", axis, rank);
  return a;
}

std::vector<int64_t> stridesOf(std::span<const int64_t> shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc = mulSat(acc, shape[i]);
  }
  return s;
}

} // namespace kiln::ir
