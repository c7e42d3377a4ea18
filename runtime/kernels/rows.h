// Row primitives of the softmax family, compiled per SIMD target and dispatched at run time: the
// inner loops of softmax, log_softmax and the attention kernels. A row is n contiguous floats.
// Sums keep 16-lane accumulators (per target: the lanes of its widest vector) added in one fixed
// order, so a result depends on the row alone, never on the thread that computes it.
#pragma once

#include <cstdint>

namespace kiln::kernels {

// max_j x_j, NaN if any x_j is NaN (the reference's rowMax); -inf for n = 0.
float rowMax(const float *x, int64_t n);

// Attention logits in place: s_j = scale s_j + bias_j (bias may be null), then -inf where
// j >= allowed or mask_j == 0 (mask may be null). Returns the row's max as rowMax does.
float scoreRow(float *s, int64_t n, float scale, const float *bias, const uint8_t *mask,
               int64_t allowed);

// Attention's probabilities from raw scores in place: s_j = exp(scale s_j + bias_j - shift), 0
// where mask_j == 0 (bias, mask may be null): scoreRow with every j allowed, then expRow, in one
// pass and with the same bits (the backward's P from the forward's log-sum-exp).
void scoreExpRow(float *s, int64_t n, float scale, const float *bias, const uint8_t *mask,
                 float shift);

// y_j = exp(x_j - shift) (y may be x, or null: the sum alone); returns sum_j y_j. exp is vmath's
// (1 ulp). shift must be at least every x_j, and NaN if one is (the row's max, or a running max
// above it).
float expRow(const float *x, float shift, float *y, int64_t n);

// y_j = a x_j + b (y may be x).
void affineRow(const float *x, float a, float b, float *y, int64_t n);

// log_softmax's output: y_j = (x_j - max) - logSum, rounded after each subtraction as the
// reference (y may be x).
void logSoftmaxRow(const float *x, float max, float logSum, float *y, int64_t n);

// sum_j a_j b_j.
float dotRow(const float *a, const float *b, int64_t n);

// The softmax gradient of one row, scaled: dp_j = scale (p_j (dp_j - delta)), the product
// rounded before the scale (so scale 1 gives the unscaled gradient, and the bits of scaling it
// after; attention's dS = scale P (dP - delta) in one pass).
void softmaxGradRow(const float *p, float delta, float scale, float *dp, int64_t n);

// The functions above but rowMax, of the SIMD target chosen now, as plain pointers: for loops that
// call them row by row (attention's tiles), where dispatching every call cost 0.7% of
// kiln_attention_bench's fused/1024 and 2% of the bench GPT's attention layer (layout/bthd). Take
// them per kernel call, not once for good: tests choose the target between calls.
struct RowKernels {
  float (*scoreRow)(float *, int64_t, float, const float *, const uint8_t *, int64_t);
  void (*scoreExpRow)(float *, int64_t, float, const float *, const uint8_t *, float);
  float (*expRow)(const float *, float, float *, int64_t);
  void (*affineRow)(const float *, float, float, float *, int64_t);
  float (*dotRow)(const float *, const float *, int64_t);
  void (*softmaxGradRow)(const float *, float, float, float *, int64_t);
  // x_j rounded to bf16 in place (to nearest, ties to even: support/bf16.h's roundToBf16,
  // subnormals included): the operands of attention's bf16 products.
  void (*bf16Row)(float *, int64_t);
};
RowKernels rowKernels();

} // namespace kiln::kernels
