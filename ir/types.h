// Value types of the IR: an element dtype and a static shape. Also the numpy broadcasting rule,
// which the shape inference of every elementwise op shares.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "support/bytes_string.h"
#include "support/checked.h"
#include "support/dtype.h"
#include "support/status.h"

namespace kiln::ir {

// Element types are support/dtype.h's, shared with the runtime.
using kiln::DType;
using kiln::dtypeBytes;
using kiln::dtypeName;
using kiln::isFloat;
using kiln::isInteger;
using kiln::kAllDTypes;
using kiln::parseDType;

// The largest finite value of a float dtype (f32: 3.4028235e38, bf16: 3.3895314e38).
double largestFinite(DType t);

using Shape = std::vector<int64_t>;

// The product of the dimensions (1 for a scalar), saturating at kSaturated (support/checked.h)
// instead of overflowing: a shape read from text may describe more elements than int64 holds.
int64_t numElements(std::span<const int64_t> shape);
std::string shapeString(std::span<const int64_t> shape); // "[2,16,64]", "[]" for a scalar

struct Type {
  DType dtype = DType::F32;
  Shape shape;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numElements() const { return ir::numElements(shape); }
  int64_t bytes() const { return mulSat(numElements(), dtypeBytes(dtype)); } // saturating
  bool operator==(const Type &) const = default;
};

std::string typeString(const Type &t); // "f32[2,16,64]"

// The largest tensor the IR describes: 1 TiB. Every type in a graph is checked against it (by
// inference and the verifier, the parser and the DSL), so element counts, byte sizes, strides
// and the sums a memory plan makes of them all fit in int64 with room to spare. Whether a graph
// fits the machine is a separate check, against a memory budget, before anything is allocated.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;
// Dimensions non-negative and at most kMaxTensorBytes bytes; the Error shows the type, its size
// and the limit.
Status checkType(const Type &t);
using kiln::bytesString; // "1.5 GiB", "512 B" (support/bytes_string.h)

// numpy broadcasting: align trailing dimensions; each pair must be equal or contain a 1.
Expected<Shape> broadcastShapes(std::span<const int64_t> a, std::span<const int64_t> b);

// Maps a possibly negative axis (-1 = last) into [0, rank); error if out of range.
Expected<int64_t> normalizeAxis(int64_t axis, int64_t rank);

// Row-major strides of a shape, in elements.
std::vector<int64_t> stridesOf(std::span<const int64_t> shape);

} // namespace kiln::ir
