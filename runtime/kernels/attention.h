// Attention forward and backward on f32 [B, H, T, D] tensors (the semantics of ir/ops/fused.h):
// q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv]; query head h reads kv head h / (Hq/Hkv)
// in place (GQA, MQA: no copy of kv heads). Blocks of kRows query rows are computed at a time,
// so the working memory is kRows x Tk floats per thread, O(T), never T x T; the backward
// recomputes probabilities from the saved row log-sum-exp.
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
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const uint8_t *mask = nullptr; // bool, optional: strides over [B, Hq, Tq, Tk] (0: broadcast)
  std::array<int64_t, 4> maskStrides{};
};

// out [B, Hq, Tq, Dv], lse [B, Hq, Tq]. A row with no allowed key gives out 0 and lse -inf.
void attentionForward(const Attention &a, float *out, float *lse, runtime::ThreadPool *pool);

// dq, dk, dv of the loss given dout, from out and lse of the forward. Rows with lse -inf add
// nothing. Each kv head's dk, dv sum over its query heads and query rows in one fixed order.
void attentionBackward(const Attention &a, const float *out, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv, runtime::ThreadPool *pool);

} // namespace kiln::kernels
