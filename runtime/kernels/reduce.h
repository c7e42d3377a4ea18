// Reductions of a row-major f32 tensor viewed as x[outer, n, inner] over its middle axis into
// y[outer, inner]: every reduce_sum / reduce_mean / reduce_max whose reduced axes are adjacent
// (bias gradients sum [B, T, C] over B and T: outer 1, inner C; a row sum: inner 1).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::runtime {
class ThreadPool;
}

namespace kiln::kernels {

enum class Reduce : uint8_t { Sum, Mean, Max };

// A reduction's starting value and its step, in float, as the reference: max propagates NaN
// (every kernel that reduces uses these two).
inline float reduceInit(Reduce kind) {
  return kind == Reduce::Max ? -std::numeric_limits<float>::infinity() : 0.0f;
}
inline float reduceCombine(Reduce kind, float acc, float x) {
  if (kind != Reduce::Max)
    return acc + x;
  return (std::isnan(x) || x > acc) ? x : acc;
}

// One step of a reduction along rows: y_j = reduceCombine(kind, y_j, x_j) for j < n (a sum's or
// a mean's: y_j + x_j), on the SIMD target's vectors: the reduce kernel's rows, a fusion region's
// columns, scatter_add's rows.
void combineRow(Reduce kind, const float *x, float *y, int64_t n);

// Each output element is reduced over r = 0..n-1 in order (sum and mean in float, as the
// reference; mean divides the sum by n; max propagates NaN), or, where the outputs are too few to
// keep the threads busy (a bias gradient), over fixed chunks of r in order, then chunk after
// chunk: an order that depends on the shape alone, never on the threads.
void reduceMiddle(Reduce kind, const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                  runtime::ThreadPool *pool);

} // namespace kiln::kernels
