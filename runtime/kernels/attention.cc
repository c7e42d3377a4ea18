// Attention kernels (see attention.h). Per (batch, head) and block of kRows query rows:
//   forward:  S = scale q k^T (+ mask, causal) -> row softmax P (lse saved) -> out = P v
//   backward: P = exp(S - lse);  dv += P^T dout;  dP = dout v^T;  delta_i = <dout_i, out_i>;
//             dS = P (dP - delta);  dq = scale dS k;  dk += scale dS^T q
// exp is the vectorized one of vmath.h (1 ulp). The products run on the GEMM kernel
// (single-threaded inside a part: the parts are the (batch, head) pairs, which keep both threads
// busy). With causal masking a block of rows [i0, i1) reads only keys j < i1. Threads never share
// an output: the backward's parts are the (batch, kv head) pairs, so a kv head's dk and dv sum its
// query heads in a fixed order.
#include "runtime/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/kernels/gemm.h"
#include "runtime/kernels/vmath.h"
#include "runtime/thread_pool.h"

namespace kiln::kernels {

namespace {

constexpr int64_t kRows = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Per-thread working memory: the score block and the GEMM's packing.
struct Work {
  std::vector<float> s, ds, pack;
  float *packFor(const Gemm &g) {
    size_t need = static_cast<size_t>(gemmScratchFloats(g, 1) + 64);
    if (pack.size() < need)
      pack.resize(need);
    return pack.data();
  }
};

Work &work() {
  thread_local Work w;
  return w;
}

// C[m, n] (+)= A B with A, B as strided views; single-threaded.
void product(int64_t m, int64_t n, int64_t k, MatrixRef a, MatrixRef b, float *c, int64_t ldc,
             bool accumulate) {
  Gemm g;
  g.m = m, g.n = n, g.k = k, g.a = a, g.b = b, g.c = c, g.ldc = ldc, g.accumulate = accumulate;
  gemm(g, nullptr, work().packFor(g));
}

// Scores of rows [i0, i0 + rows) of (batch z, head h) against keys [0, keys): scaled, masked.
void scores(const Attention &a, int64_t z, int64_t h, int64_t i0, int64_t rows, int64_t keys,
            float *s) {
  const int64_t g = a.hq / a.hkv;
  const float *q = a.q + ((z * a.hq + h) * a.tq + i0) * a.d;
  const float *k = a.k + (z * a.hkv + h / g) * a.tk * a.d;
  product(rows, keys, a.d, MatrixRef{q, a.d, 1, 0}, MatrixRef{k, 1, a.d, 0}, s, keys, false);
  for (int64_t r = 0; r < rows; ++r) {
    float *row = s + r * keys;
    const int64_t i = i0 + r;
    for (int64_t j = 0; j < keys; ++j)
      row[j] *= a.scale;
    if (a.causal)
      for (int64_t j = std::min(keys, i + 1); j < keys; ++j)
        row[j] = kNegInf;
    if (a.mask) {
      const uint8_t *m =
          a.mask + z * a.maskStrides[0] + h * a.maskStrides[1] + i * a.maskStrides[2];
      for (int64_t j = 0; j < keys; ++j)
        if (!m[j * a.maskStrides[3]])
          row[j] = kNegInf;
    }
  }
}

int64_t keysFor(const Attention &a, int64_t i1) {
  return a.causal ? std::min(a.tk, i1) : a.tk;
}

} // namespace

void attentionForward(const Attention &a, float *out, float *lse, runtime::ThreadPool *pool) {
  const int64_t blocks = (a.tq + kRows - 1) / kRows, g = a.hq / a.hkv;
  pool->run(a.batch * a.hq * blocks, [&](int64_t part, int) {
    const int64_t zh = part / blocks, z = zh / a.hq, h = zh % a.hq;
    const int64_t i0 = (part % blocks) * kRows, rows = std::min(kRows, a.tq - i0);
    const int64_t keys = keysFor(a, i0 + rows);
    float *o = out + (zh * a.tq + i0) * a.dv;
    float *l = lse + zh * a.tq + i0;
    if (keys == 0) {
      std::fill(o, o + rows * a.dv, 0.0f);
      std::fill(l, l + rows, kNegInf);
      return;
    }
    std::vector<float> &s = work().s;
    s.resize(static_cast<size_t>(rows * keys));
    scores(a, z, h, i0, rows, keys, s.data());
    for (int64_t r = 0; r < rows; ++r) {
      float *row = s.data() + r * keys;
      float m = kNegInf;
      for (int64_t j = 0; j < keys; ++j)
        m = std::max(m, row[j]);
      if (m == kNegInf) { // no allowed key: p = 0, lse = -inf
        std::fill(row, row + keys, 0.0f);
        l[r] = kNegInf;
        continue;
      }
      for (int64_t j = 0; j < keys; ++j)
        row[j] -= m;
      mathFn(MathFn::Exp, row, row, keys);
      float sum = 0;
      for (int64_t j = 0; j < keys; ++j)
        sum += row[j];
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < keys; ++j)
        row[j] *= inv;
      l[r] = m + std::log(sum);
    }
    const float *v = a.v + (z * a.hkv + h / g) * a.tk * a.dv;
    product(rows, a.dv, keys, MatrixRef{s.data(), keys, 1, 0}, MatrixRef{v, a.dv, 1, 0}, o, a.dv,
            false);
  });
}

void attentionBackward(const Attention &a, const float *out, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv, runtime::ThreadPool *pool) {
  const int64_t g = a.hq / a.hkv;
  pool->run(a.batch * a.hkv, [&](int64_t part, int) {
    const int64_t z = part / a.hkv, c = part % a.hkv;
    float *dkc = dk + part * a.tk * a.d, *dvc = dv + part * a.tk * a.dv;
    std::fill(dkc, dkc + a.tk * a.d, 0.0f);
    std::fill(dvc, dvc + a.tk * a.dv, 0.0f);
    const float *k = a.k + part * a.tk * a.d, *v = a.v + part * a.tk * a.dv;
    std::vector<float> &s = work().s, &ds = work().ds;
    for (int64_t h = c * g; h < (c + 1) * g; ++h) {
      const int64_t zh = z * a.hq + h;
      for (int64_t i0 = 0; i0 < a.tq; i0 += kRows) {
        const int64_t rows = std::min(kRows, a.tq - i0), keys = keysFor(a, i0 + rows);
        float *dqb = dq + (zh * a.tq + i0) * a.d;
        std::fill(dqb, dqb + rows * a.d, 0.0f);
        if (keys == 0)
          continue;
        s.resize(static_cast<size_t>(rows * keys));
        ds.resize(static_cast<size_t>(rows * keys));
        scores(a, z, h, i0, rows, keys, s.data());
        const float *l = lse + zh * a.tq + i0;
        for (int64_t r = 0; r < rows; ++r) {
          float *row = s.data() + r * keys;
          if (l[r] == kNegInf) { // no allowed key
            std::fill(row, row + keys, 0.0f);
            continue;
          }
          for (int64_t j = 0; j < keys; ++j)
            row[j] -= l[r];
          mathFn(MathFn::Exp, row, row, keys);
        }
        const float *dob = dout + (zh * a.tq + i0) * a.dv, *ob = out + (zh * a.tq + i0) * a.dv;
        // dv += P^T dout
        product(keys, a.dv, rows, MatrixRef{s.data(), 1, keys, 0}, MatrixRef{dob, a.dv, 1, 0}, dvc,
                a.dv, true);
        // dP = dout v^T, then dS = P (dP - delta) scale
        product(rows, keys, a.dv, MatrixRef{dob, a.dv, 1, 0}, MatrixRef{v, 1, a.dv, 0}, ds.data(),
                keys, false);
        for (int64_t r = 0; r < rows; ++r) {
          float delta = 0;
          for (int64_t e = 0; e < a.dv; ++e)
            delta += dob[r * a.dv + e] * ob[r * a.dv + e];
          float *p = s.data() + r * keys, *dp = ds.data() + r * keys;
          for (int64_t j = 0; j < keys; ++j)
            dp[j] = p[j] * (dp[j] - delta) * a.scale;
        }
        // dq = dS k;  dk += dS^T q
        const float *qb = a.q + (zh * a.tq + i0) * a.d;
        product(rows, a.d, keys, MatrixRef{ds.data(), keys, 1, 0}, MatrixRef{k, a.d, 1, 0}, dqb,
                a.d, false);
        product(keys, a.d, rows, MatrixRef{ds.data(), 1, keys, 0}, MatrixRef{qb, a.d, 1, 0}, dkc,
                a.d, true);
      }
    }
  });
}

} // namespace kiln::kernels
