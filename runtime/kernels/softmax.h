// log_softmax over the last axis of f32 rows (the semantics of ir/ops/reduce.h):
//   m = max_j x_j (NaN if any x_j is NaN);  y_j = (x_j - m) - log(sum_k exp(x_k - m))
// the exponentials through the vectorized math (runtime/kernels/vmath.h). Rows are independent:
// the threads split them, and each row is summed in one fixed order.
#pragma once

#include <cstdint>

namespace kiln::runtime {
class ThreadPool;
}

namespace kiln::kernels {

void logSoftmaxRows(const float *x, float *y, int64_t rows, int64_t n, runtime::ThreadPool *pool);

} // namespace kiln::kernels
