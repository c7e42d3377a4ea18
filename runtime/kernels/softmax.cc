// logSoftmaxRows (see softmax.h): three passes over a row (max, sum of exponentials, output), the
// exponentials written once into a row buffer of the thread (a vocabulary row of GPT-2 is 200
// KiB: in L2).
#include "runtime/kernels/softmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/reduce.h"
#include "runtime/kernels/vmath.h"
#include "runtime/thread_pool.h"

namespace kiln::kernels {

void logSoftmaxRows(const float *x, float *y, int64_t rows, int64_t n, runtime::ThreadPool *pool) {
  const int64_t perPart = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n));
  runtime::runParts(pool, (rows + perPart - 1) / perPart, [&](int64_t q, int) {
    thread_local std::vector<float> e;
    e.resize(static_cast<size_t>(n));
    for (int64_t r = q * perPart; r < std::min(rows, (q + 1) * perPart); ++r) {
      const float *xr = x + r * n;
      float *yr = y + r * n;
      float m = reduceInit(Reduce::Max);
      for (int64_t j = 0; j < n; ++j)
        m = reduceCombine(Reduce::Max, m, xr[j]);
      for (int64_t j = 0; j < n; ++j)
        e[j] = xr[j] - m;
      mathFn(MathFn::Exp, e.data(), e.data(), n);
      float sum = 0;
      for (int64_t j = 0; j < n; ++j)
        sum += e[j];
      const float logSum = std::log(sum);
      for (int64_t j = 0; j < n; ++j)
        yr[j] = (xr[j] - m) - logSum;
    }
  });
}

} // namespace kiln::kernels
