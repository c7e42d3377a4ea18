// softmaxRows / logSoftmaxRows / crossEntropyRows (see softmax.h): three passes over a row (max,
// exponentials and their sum, output; cross_entropy's output is two numbers). log_softmax keeps
// only the exponentials' sum and writes y once (a vocabulary row of GPT-2 is 200 KiB: the second
// and third passes read it from L2); softmax writes the exponentials to y and rescales y in place.
#include "runtime/kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/kernels/rows.h"
#include "runtime/thread_pool.h"

namespace kiln::kernels {

namespace {

// Runs fn(row) for every row, split into parts of about 16K elements.
template <class F> void forRows(int64_t rows, int64_t n, runtime::ThreadPool *pool, const F &fn) {
  const int64_t perPart = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
  runtime::runParts(pool, (rows + perPart - 1) / perPart, [&](int64_t q, int) {
    for (int64_t r = q * perPart; r < std::min(rows, (q + 1) * perPart); ++r)
      fn(r);
  });
}

} // namespace

void softmaxRows(const float *x, float *y, int64_t rows, int64_t n, runtime::ThreadPool *pool) {
  forRows(rows, n, pool, [&](int64_t r) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float m = rowMax(xr, n);
    m = m == -std::numeric_limits<float>::infinity() ? 0.0f : m;
    const float sum = expRow(xr, m, yr, n);
    const float denom = std::isnan(sum) ? sum : std::max(sum, 1.0f);
    affineRow(yr, 1.0f / denom, 0.0f, yr, n);
  });
}

void logSoftmaxRows(const float *x, float *y, int64_t rows, int64_t n, runtime::ThreadPool *pool) {
  forRows(rows, n, pool, [&](int64_t r) {
    const float *xr = x + r * n;
    const float m = rowMax(xr, n);
    logSoftmaxRow(xr, m, std::log(expRow(xr, m, nullptr, n)), y + r * n, n);
  });
}

void crossEntropyRows(const float *x, const void *targets, bool targetsI32, float *loss, float *lse,
                      int64_t rows, int64_t n, float smoothing, runtime::ThreadPool *pool) {
  forRows(rows, n, pool, [&](int64_t r) {
    const float *xr = x + r * n;
    const float m = rowMax(xr, n);
    const float logSum = std::log(expRow(xr, m, nullptr, n));
    lse[r] = m + logSum;
    const int64_t c = targetsI32 ? static_cast<const int32_t *>(targets)[r]
                                 : static_cast<const int64_t *>(targets)[r];
    float l = 0;
    if (c >= 0 && c < n)
      l = (1 - smoothing) * (logSum - (xr[c] - m));
    if (smoothing > 0) { // every class's -logp, in the reference's order
      float all = 0;
      for (int64_t j = 0; j < n; ++j)
        all += logSum - (xr[j] - m);
      l += smoothing / static_cast<float>(n) * all;
    }
    loss[r] = l;
  });
}

} // namespace kiln::kernels
