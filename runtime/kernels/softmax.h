// softmax, log_softmax and cross_entropy over the last axis of f32 rows (the semantics of
// ir/ops/reduce.h):
//   softmax:     m' = (m == -inf ? 0 : m),  y_j = exp(x_j - m') / max(sum_k exp(x_k - m'), 1)
//   log_softmax: y_j = (x_j - m) - log(sum_k exp(x_k - m))
// with m = max_j x_j (NaN if any x_j is NaN): a row of all -inf (fully masked) gives softmax 0,
// a NaN or +inf gives NaN. The row loops are rows.h's. Rows are independent: the threads split
// them, and each row is summed in one fixed order.
#pragma once

#include <cstdint>

namespace kiln::runtime {
class ThreadPool;
}

namespace kiln::kernels {

void softmaxRows(const float *x, float *y, int64_t rows, int64_t n, runtime::ThreadPool *pool);
void logSoftmaxRows(const float *x, float *y, int64_t rows, int64_t n, runtime::ThreadPool *pool);

// cross_entropy (ir/ops/reduce.h) of rows of n f32 logits x and their class ids (targets: one a
// row, int32_t where targetsI32, else int64_t): loss[r] and lse[r], label smoothing `smoothing`.
// Row r's max and exponentials' sum are log_softmax's (the same bits as its logsumexp).
void crossEntropyRows(const float *x, const void *targets, bool targetsI32, float *loss, float *lse,
                      int64_t rows, int64_t n, float smoothing, runtime::ThreadPool *pool);

} // namespace kiln::kernels
