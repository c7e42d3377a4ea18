// Small helpers shared by the reference semantics of all op families: the argument lists of a
// RefFn, numpy-broadcast index maps, and the checks of a shape attribute and of a fill value
// against a dtype. Written for obviousness, not speed: the reference interpreter is the oracle.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ir/attrs.h"
#include "ir/ref_tensor.h"
#include "ir/types.h"
#include "support/status.h"

namespace kiln::ir {

// The RefFn signature for a function `name` templated on the precision F:
//   template <class F> KILN_REF_FN(refCast);
#define KILN_REF_FN(name)                                                                          \
  Status name(const Attrs &attrs, std::span<const RefTensor<F> *const> in,                         \
              std::span<RefTensor<F>> out)

// Instantiates `name<float>` and `name<double>` in the .cc that defines it.
#define KILN_REF_INSTANTIATE(name)                                                                 \
  template Status name<float>(const Attrs &, std::span<const RefTensor<float> *const>,             \
                              std::span<RefTensor<float>>);                                        \
  template Status name<double>(const Attrs &, std::span<const RefTensor<double> *const>,           \
                               std::span<RefTensor<double>>)

// A shape attribute: every dimension >= 0 (the IR has no -1; the DSL resolves it). The Error:
// "shape [2,-1] has a negative dimension (-1 at index 1)".
Status checkShapeDims(std::span<const int64_t> shape);

// Whether `v` is a value of dtype t (a fill value of constant or pad): NaN, an infinity or a
// finite number within the dtype's range for floats, an integer in range for i32/i64, 0 or 1 for
// bool. The Error says which.
Status checkValueFits(double v, DType t);

// For each element of `to` (row-major), the flat index of the element of `from` that numpy
// broadcasting reads there. `from` must broadcast to `to`.
std::vector<int64_t> broadcastIndexMap(std::span<const int64_t> from, std::span<const int64_t> to);

// Calls fn(multiIndex) for every index of `shape` in row-major order.
template <class Fn> void forEachIndex(std::span<const int64_t> shape, Fn &&fn) {
  std::vector<int64_t> idx(shape.size(), 0);
  int64_t n = numElements(shape);
  for (int64_t k = 0; k < n; ++k) {
    fn(std::span<const int64_t>(idx));
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d])
        break;
      idx[d] = 0;
    }
  }
}

} // namespace kiln::ir
