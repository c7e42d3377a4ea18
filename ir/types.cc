// Type names, shape helpers and the broadcasting rule.
#include "ir/types.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::ir {

std::string_view dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::F64: return "f64";
  case DType::BF16: return "bf16";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  case DType::Bool: return "bool";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view s) {
  for (DType t : kAllDTypes)
    if (dtypeName(t) == s)
      return t;
  return std::nullopt;
}

int64_t dtypeBytes(DType t) {
  switch (t) {
  case DType::F32: return 4;
  case DType::F64: return 8;
  case DType::BF16: return 2;
  case DType::I32: return 4;
  case DType::I64: return 8;
  case DType::Bool: return 1;
  }
  return 0;
}

int64_t numElements(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeString(std::span<const int64_t> shape) {
  return fmt::format("[{}]", fmt::join(shape, ","));
}

std::string typeString(const Type &t) { return fmt::format("{}{}", dtypeName(t.dtype), shapeString(t.shape)); }

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
    acc *= shape[i];
  }
  return s;
}

} // namespace kiln::ir
