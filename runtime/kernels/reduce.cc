// reduceMiddle (see reduce.h), compiled per SIMD target and dispatched at run time. inner > 1: a
// block of up to kBlock outputs is accumulated row after row of the reduced axis, a vector of
// columns at a time, so each pass reads kBlock contiguous floats and the accumulators stay in L1
// (the vectors run across columns, never rows). Left to the compiler, the loop stayed scalar
// (GCC 12 at -O2: the accumulators may alias the rows): a bias gradient of [2048, 1024] in cache
// took 174-181 us, on AVX-512 vectors 72 us.
// Where the blocks are too few to keep the threads busy (a bias gradient: outer 1, one block),
// the rows split too, into chunks fixed by the shape (chunksOf): each chunk reduces its rows in
// order into partial results, which then combine chunk after chunk. The pool gives each thread a
// contiguous share of the chunks, the rows its share of the producing kernel wrote, so each reads
// from its own caches: the benchmark GPT's 26 bias-gradient sums 1.54-1.66 -> 0.96-1.11 ms a step
// (3 alternating runs; one thread read half the rows from the other core's caches). inner == 1:
// one sum per output row, in order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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

HWY_ATTR void CombineRow(Reduce kind, const float *x, float *y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  if (kind == Reduce::Max) {
    for (; j + N <= n; j += N) { // reduceCombine's max: x where it is NaN or above
      const auto acc = hn::LoadU(d, y + j), v = hn::LoadU(d, x + j);
      hn::StoreU(hn::IfThenElse(hn::Or(hn::IsNaN(v), hn::Gt(v, acc)), v, acc), d, y + j);
    }
  } else {
    for (; j + N <= n; j += N)
      hn::StoreU(hn::Add(hn::LoadU(d, y + j), hn::LoadU(d, x + j)), d, y + j);
  }
  for (; j < n; ++j)
    y[j] = reduceCombine(kind, y[j], x[j]);
}

// y[j] = the reduction of x[r * inner + j] over r = 0..n-1, j < len.
HWY_ATTR void block(Reduce kind, const float *x, float *y, int64_t n, int64_t inner, int64_t len) {
  std::fill(y, y + len, reduceInit(kind));
  for (int64_t r = 0; r < n; ++r)
    CombineRow(kind, x + r * inner, y, len);
  if (kind == Reduce::Mean)
    for (int64_t j = 0; j < len; ++j)
      y[j] /= static_cast<float>(n);
}

// Chunks of rows for `parts` blocks of outputs: one where the blocks alone are parts enough,
// else chunks of at least kChunkFloats (256 KiB), at most kMaxChunks. By shape alone, so that no
// sum depends on the threads.
constexpr int64_t kBusyParts = 16, kChunkFloats = 65536, kMaxChunks = 64;
int64_t chunksOf(int64_t parts, int64_t n, int64_t inner) {
  if (parts >= kBusyParts)
    return 1;
  return std::clamp<int64_t>(n * inner / kChunkFloats, 1, std::min(n, kMaxChunks));
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
  const int64_t chunks = chunksOf(outer * blocks, n, inner);
  if (chunks == 1) {
    pool->run(outer * blocks, [&](int64_t q, int) {
      const int64_t o = q / blocks, j0 = (q % blocks) * kBlock;
      block(kind, x + o * n * inner + j0, y + o * inner + j0, n, inner,
            std::min(kBlock, inner - j0));
    });
    return;
  }
  const Reduce partial = kind == Reduce::Mean ? Reduce::Sum : kind;
  std::vector<float> partials(static_cast<size_t>(outer * chunks * inner));
  pool->run(outer * chunks * blocks, [&](int64_t q, int) {
    const int64_t o = q / (blocks * chunks), c = q / blocks % chunks, j0 = q % blocks * kBlock;
    const int64_t r0 = n * c / chunks, rows = n * (c + 1) / chunks - r0; // chunks <= n
    block(partial, x + (o * n + r0) * inner + j0,
          &partials[static_cast<size_t>((o * chunks + c) * inner + j0)], rows, inner,
          std::min(kBlock, inner - j0));
  });
  for (int64_t o = 0; o < outer; ++o) {
    float *out = y + o * inner;
    std::fill(out, out + inner, reduceInit(kind));
    for (int64_t c = 0; c < chunks; ++c)
      CombineRow(kind, &partials[static_cast<size_t>((o * chunks + c) * inner)], out, inner);
    if (kind == Reduce::Mean)
      for (int64_t j = 0; j < inner; ++j)
        out[j] /= static_cast<float>(n);
  }
}

} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::kernels {

HWY_EXPORT(reduceMiddleRun);
HWY_EXPORT(CombineRow);

void combineRow(Reduce kind, const float *x, float *y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(CombineRow)(kind, x, y, n);
}

void reduceMiddle(Reduce kind, const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                  runtime::ThreadPool *pool) {
  HWY_DYNAMIC_DISPATCH(reduceMiddleRun)(kind, x, y, outer, n, inner, pool);
}

} // namespace kiln::kernels
#endif // HWY_ONCE
