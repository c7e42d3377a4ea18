// reduceMiddle (see reduce.h), compiled per SIMD target and dispatched at run time. inner > 1: a
// block of up to kBlock outputs is accumulated row after row of the reduced axis, a vector of
// columns at a time, so each pass reads kBlock contiguous floats and the accumulators stay in L1;
// every output still sums its rows in order (the vectors run across columns, never rows).
// Left to the compiler, the loop stayed scalar (GCC 12 at -O2: the accumulators may alias the
// rows): a bias gradient of [2048, 1024] in cache took 174-181 us, on AVX-512 vectors 72 us (from
// memory both about 250 us, one thread's bandwidth). Splitting the rows over the threads (fixed
// chunks, partial sums) measured no faster in the benchmark GPT's step and would change the sums'
// order, so a reduction keeps one thread per block of outputs. inner == 1: one sum per output row,
// in order.
#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernels/reduce.h"
#include "runtime/thread_pool.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/reduce.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kBlock = 1024;

// y[j] = the reduction of x[r * inner + j] over r = 0..n-1, j < len.
HWY_ATTR void block(Reduce kind, const float *x, float *y, int64_t n, int64_t inner, int64_t len) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  std::fill(y, y + len, reduceInit(kind));
  for (int64_t r = 0; r < n; ++r) {
    const float *row = x + r * inner;
    int64_t j = 0;
    if (kind == Reduce::Max) {
      for (; j + N <= len; j += N) { // reduceCombine's max: x where it is NaN or above
        const auto acc = hn::LoadU(d, y + j), v = hn::LoadU(d, row + j);
        hn::StoreU(hn::IfThenElse(hn::Or(hn::IsNaN(v), hn::Gt(v, acc)), v, acc), d, y + j);
      }
    } else {
      for (; j + N <= len; j += N)
        hn::StoreU(hn::Add(hn::LoadU(d, y + j), hn::LoadU(d, row + j)), d, y + j);
    }
    for (; j < len; ++j)
      y[j] = reduceCombine(kind, y[j], row[j]);
  }
  if (kind == Reduce::Mean)
    for (int64_t j = 0; j < len; ++j)
      y[j] /= static_cast<float>(n);
}

HWY_ATTR void reduceMiddleRun(Reduce kind, const float *x, float *y, int64_t outer, int64_t n,
                              int64_t inner, runtime::ThreadPool *pool) {
  if (inner == 1) {
    const int64_t perPart = std::max<int64_t>(1, 65536 / std::max<int64_t>(n, 1));
    const int64_t parts = (outer + perPart - 1) / perPart;
    pool->run(parts, [&](int64_t q, int) {
      for (int64_t o = q * perPart; o < std::min(outer, (q + 1) * perPart); ++o) {
        float acc = reduceInit(kind);
        for (int64_t r = 0; r < n; ++r)
          acc = reduceCombine(kind, acc, x[o * n + r]);
        y[o] = kind == Reduce::Mean ? acc / static_cast<float>(n) : acc;
      }
    });
    return;
  }
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  pool->run(outer * blocks, [&](int64_t q, int) {
    const int64_t o = q / blocks, j0 = (q % blocks) * kBlock;
    block(kind, x + o * n * inner + j0, y + o * inner + j0, n, inner, std::min(kBlock, inner - j0));
  });
}

} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::kernels {

HWY_EXPORT(reduceMiddleRun);

void reduceMiddle(Reduce kind, const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                  runtime::ThreadPool *pool) {
  HWY_DYNAMIC_DISPATCH(reduceMiddleRun)(kind, x, y, outer, n, inner, pool);
}

} // namespace kiln::kernels
#endif // HWY_ONCE
