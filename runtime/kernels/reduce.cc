// reduceMiddle (see reduce.h). inner > 1: a block of up to kBlock outputs is accumulated row
// after row of the reduced axis, so each pass reads kBlock contiguous floats (the loop the
// compiler vectorizes) and the accumulators stay in L1. inner == 1: one sum per output row.
#include "runtime/kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/thread_pool.h"

namespace kiln::kernels {

namespace {

constexpr int64_t kBlock = 1024;

void block(Reduce kind, const float *x, float *y, int64_t n, int64_t inner, int64_t len) {
  std::fill(y, y + len, reduceInit(kind));
  for (int64_t r = 0; r < n; ++r) {
    const float *row = x + r * inner;
    if (kind == Reduce::Max)
      for (int64_t j = 0; j < len; ++j)
        y[j] = reduceCombine(Reduce::Max, y[j], row[j]);
    else
      for (int64_t j = 0; j < len; ++j)
        y[j] += row[j];
  }
  if (kind == Reduce::Mean)
    for (int64_t j = 0; j < len; ++j)
      y[j] /= static_cast<float>(n);
}

} // namespace

void reduceMiddle(Reduce kind, const float *x, float *y, int64_t outer, int64_t n, int64_t inner,
                  runtime::ThreadPool *pool) {
  if (inner == 1) {
    const int64_t perPart = std::max<int64_t>(1, 65536 / std::max<int64_t>(n, 1));
    const int64_t parts = (outer + perPart - 1) / perPart;
    auto part = [&](int64_t q, int) {
      for (int64_t o = q * perPart; o < std::min(outer, (q + 1) * perPart); ++o)
        block(kind, x + o * n, y + o, n, 1, 1);
    };
    pool->run(parts, part);
    return;
  }
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  pool->run(outer * blocks, [&](int64_t q, int) {
    const int64_t o = q / blocks, j0 = (q % blocks) * kBlock;
    block(kind, x + o * n * inner + j0, y + o * inner + j0, n, inner, std::min(kBlock, inner - j0));
  });
}

} // namespace kiln::kernels
