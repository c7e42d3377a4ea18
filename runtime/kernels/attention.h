// Attention forward and backward on f32 [B, H, T, D] tensors, flash-style (the semantics of
// ir/ops/fused.h): q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv] (or each [B, T, H, D]:
// bthd, read and written in place through the row stride H D); query head h reads kv
// head h / (Hq/Hkv) in place (GQA, MQA: no copy of kv heads). Blocks of query rows walk tiles of
// keys with an online softmax; causal tiles past a block's last row are skipped; the row
// log-sum-exp is saved and the backward recomputes each tile's probabilities from it; with a
// sliding window, tiles outside a block's band are skipped too. Working
// memory is the caller's scratch (support/workspace.h: attentionLayout), a few tiles per thread:
// O(1) in T, never T x T. Their oracle is the reference (tests/runtime/attention_test.cc).
#pragma once

#include <array>
#include <cstdint>

namespace kiln::runtime {
class ThreadPool;
}

namespace kiln::kernels {

struct Attention {
  int64_t batch = 0, hq = 0, hkv = 0, tq = 0, tk = 0, d = 0, dv = 0;
  float scale = 1;
  bool causal = false; // key j allowed for query i only if j <= i
  // Sliding window (the IR's window): key j allowed for query i only if |i - j| < band; 0: none.
  // Key tiles outside every row's band are skipped, so time and reads are O(T band), not O(T^2).
  int64_t band = 0;
  // q, k, v, out and their gradients are [B, T, H, D] (the IR's bthd) instead of [B, H, T, D].
  bool bthd = false;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  // Optional, read at logits index [b, h, i, j] through element strides (0: broadcast).
  const uint8_t *mask = nullptr; // bool: 0 = not allowed
  std::array<int64_t, 4> maskStrides{};
  const float *bias = nullptr; // added to the scaled logits
  std::array<int64_t, 4> biasStrides{};
  // Attention dropout: probability (b, h, i, j) is kept, scaled by 1 / (1 - dropout), iff
  // rng::uniform(seed, ((b' Hq + h) Tq + i) Tk + j) >= dropout -- the dropout op's bits -- where
  // b' = firstBatch + b: a data-parallel rank's rows draw the global batch's masks.
  double dropout = 0;
  uint64_t seed = 0;
  int64_t firstBatch = 0;
  // bf16 products (the IR's bf16_products, mixed precision): q, k, v, dout and the tiles P and dS
  // are rounded to bf16 where they are packed or written, and the products, exact in f32, sum in
  // f32 on the f32 micro-kernel; the softmax, its sums and lse stay f32. P is rounded as
  // exp(x - running max), before the division by the row sum (the reference's order, with the
  // row's max: where the max rises past a row's first key tile, earlier tiles' P are rounded,
  // then rescaled).
  bool bf16 = false;
  // Keys packed at a time (rounded down to whole tiles); 0: as many as the workspace holds. The
  // results do not depend on it; tests make it small to cover several windows.
  int64_t windowKeys = 0;
};

// out [B, Hq, Tq, Dv] (or [B, Tq, Hq, Dv]), lse [B, Hq, Tq]. A row with no allowed key gives out 0
// and lse -inf.
void attentionForward(const Attention &a, float *out, float *lse, float *scratch,
                      runtime::ThreadPool *pool);

// dq, dk, dv (and dbias, of `biasElements` floats in bias's own shape, if a.bias) of the loss
// given dout, from out and lse of the forward. Rows with lse -inf add nothing. Each output element
// sums its terms in one fixed order (a kv head's dk, dv over its query heads and rows; dbias over
// what it broadcasts), whatever the threads.
void attentionBackward(const Attention &a, const float *out, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv, float *dbias, int64_t biasElements,
                       float *scratch, runtime::ThreadPool *pool);

} // namespace kiln::kernels
