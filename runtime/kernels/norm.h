// layer_norm and rms_norm over the last axis, forward (with the residual add of add_layer_norm /
// add_rms_norm) and backward, on f32 rows of n contiguous elements (the semantics of
// ir/ops/fused.h; y may be stored as bf16, the norms' bf16_y):
//   forward:  s = a + b (or s = a);  mean = sum(s)/n (layer_norm; 0 for rms_norm);
//             rstd = 1/sqrt(sum((s - mean)^2)/n + eps);  y = (s - mean) rstd w + bias
//   backward: xhat = (x - mean) rstd, g = dy w:
//             dx = rstd (g - mean_n(g) - xhat mean_n(g xhat))   (rms_norm: without mean_n(g))
//             dweight = sum over rows of dy xhat
// Rows are independent, so the threads split them; dweight sums fixed parts of rows, each into a
// partial row, then the partial rows in part order: the same bits at any thread count.
#pragma once

#include <cstdint>

namespace kiln::runtime {
class ThreadPool;
}

namespace kiln::kernels {

struct NormForward {
  int64_t rows = 0, n = 0;
  bool centered = true; // layer_norm; else rms_norm
  float eps = 0;
  // Row r of s reads row r % aRows of a and r % bRows of b (b optional: absent = no add), so a
  // [T, C] position table broadcasts over a [B, T, C] batch.
  const float *a = nullptr, *b = nullptr;
  int64_t aRows = 0, bRows = 0;
  const float *weight = nullptr, *bias = nullptr; // [n] each, optional
  float *sum = nullptr;                           // [rows, n], written iff b is given
  float *y = nullptr;                             // [rows, n]
  uint16_t *yBf16 = nullptr; // [rows, n]: y's bf16 bits (to nearest even) instead, where given
  float *mean = nullptr;     // [rows], optional (layer_norm)
  float *rstd = nullptr;     // [rows]
};

struct NormBackward {
  int64_t rows = 0, n = 0;
  const float *x = nullptr, *mean = nullptr, *rstd = nullptr, *dy = nullptr; // mean: layer_norm
  const float *weight = nullptr;                                             // optional
  float *dx = nullptr;
  float *dweight = nullptr; // [n], optional
};

void normForward(const NormForward &f, runtime::ThreadPool *pool);
void normBackward(const NormBackward &b, runtime::ThreadPool *pool);

// The scalar twins: one plain loop per formula, the kernels' test oracle.
void normForwardScalar(const NormForward &f);
void normBackwardScalar(const NormBackward &b);

} // namespace kiln::kernels
