// Flash attention kernels (see attention.h). Per (batch, head) and block of bq query rows, over
// tiles of bk keys [j0, j0 + cols):
//   forward:  S = q k^T;  x = scale S + bias, -inf where not allowed (rows.h scoreRow)
//             m' = max(m, max_j x_j);  P = exp(x - m');  l = l e^(m - m') + sum_j P_j
//             O = O e^(m - m') + d(P) V          (d: dropout; the sum l is taken before it)
//             at the end out = O / max(l, 1), lse = m + log l (the reference's guards: a row
//             with no allowed key keeps O = 0, l = 0, m = -inf, so out = 0 and lse = -inf)
//   backward: P = exp(x - lse);  dV += d(P)^T dout;  dP = d(dout v^T);  delta = <dout, out>
//             dX = P (dP - delta) (= dbias);  dq += scale dX k;  dk += scale dX^T q
// The tile products run on the GEMM kernel, single-threaded inside a part; the parts (forward:
// (batch, head, row block); backward: (batch, kv head), coarser where dbias broadcasts) keep both
// threads busy and never share an output, so every sum has one order whatever the threads.
// With causal masking a block of rows [i0, i1) reads only keys j < i1.
#include "runtime/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/kernels/gemm.h"
#include "runtime/kernels/rows.h"
#include "runtime/thread_pool.h"
#include "support/rng.h"
#include "support/workspace.h"

namespace kiln::kernels {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One thread's slice of the scratch, in workspace::attentionLayout's order: the score tile (the
// backward's second tile for their gradients), per-row numbers, gathered rows, GEMM packing.
struct Tiles {
  float *s, *ds, *rowMax, *rowSum, *delta, *bias, *gemm;
  uint8_t *mask;
  Tiles(const workspace::AttentionLayout &l, bool backward, float *scratch, int worker) {
    float *p = scratch + worker * l.perThread;
    s = p, p += l.tile;
    ds = backward ? p : nullptr, p += backward ? l.tile : 0;
    rowMax = p, rowSum = p + l.bq, delta = p + 2 * l.bq, p += l.rows;
    bias = p, mask = reinterpret_cast<uint8_t *>(p + l.bk), p += l.gathered;
    gemm = p;
  }
};

// C[m, n] (+)= A B with A, B as strided views; single-threaded, packing in `pack`.
void product(int64_t m, int64_t n, int64_t k, MatrixRef a, MatrixRef b, float *c, int64_t ldc,
             bool accumulate, float *pack) {
  Gemm g;
  g.m = m, g.n = n, g.k = k, g.a = a, g.b = b, g.c = c, g.ldc = ldc, g.accumulate = accumulate;
  gemm(g, nullptr, pack);
}

struct Kernel {
  const Attention &a;
  workspace::AttentionLayout l;
  int64_t group;
  float keepScale;

  Kernel(const Attention &at, bool backward)
      : a(at), l(workspace::attentionLayout(at.tq, at.tk, at.d, at.dv, backward)),
        group(at.hq / at.hkv), keepScale(1.0f / static_cast<float>(1 - at.dropout)) {}

  int64_t keysFor(int64_t i1) const { return a.causal ? std::min(a.tk, i1) : a.tk; }
  static int64_t at(const std::array<int64_t, 4> &s, int64_t b, int64_t h, int64_t i, int64_t j) {
    return b * s[0] + h * s[1] + i * s[2] + j * s[3];
  }

  // Rows [i0, i0 + rows) of (batch z, head h) against keys [j0, j0 + cols): the tile's logits
  // into t.s (row stride cols), scaled, biased and masked, and each row's max into maxes[r]
  // (if not null).
  void scores(Tiles &t, int64_t z, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
              float *maxes) const {
    const float *q = a.q + ((z * a.hq + h) * a.tq + i0) * a.d;
    const float *k = a.k + ((z * a.hkv + h / group) * a.tk + j0) * a.d;
    product(rows, cols, a.d, MatrixRef{q, a.d, 1, 0}, MatrixRef{k, 1, a.d, 0}, t.s, cols, false,
            t.gemm);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      const float *bias = nullptr;
      if (a.bias) {
        const float *b0 = a.bias + at(a.biasStrides, z, h, i, j0);
        if (a.biasStrides[3] == 1)
          bias = b0;
        else {
          for (int64_t j = 0; j < cols; ++j)
            t.bias[j] = b0[j * a.biasStrides[3]];
          bias = t.bias;
        }
      }
      const uint8_t *mask = nullptr;
      if (a.mask) {
        const uint8_t *m0 = a.mask + at(a.maskStrides, z, h, i, j0);
        if (a.maskStrides[3] == 1)
          mask = m0;
        else {
          for (int64_t j = 0; j < cols; ++j)
            t.mask[j] = m0[j * a.maskStrides[3]];
          mask = t.mask;
        }
      }
      const int64_t allowed = a.causal ? i - j0 + 1 : cols;
      const float m = scoreRow(t.s + r * cols, cols, a.scale, bias, mask, allowed);
      if (maxes)
        maxes[r] = m;
    }
  }

  // p *= the dropout factors of row i, keys [j0, j0 + cols).
  void drop(float *p, int64_t z, int64_t h, int64_t i, int64_t j0, int64_t cols) const {
    const uint64_t base = static_cast<uint64_t>(((z * a.hq + h) * a.tq + i) * a.tk + j0);
    for (int64_t j = 0; j < cols; ++j)
      p[j] *= rng::uniform(a.seed, base + static_cast<uint64_t>(j)) >= a.dropout ? keepScale : 0;
  }

  void forward(int64_t z, int64_t h, int64_t i0, float *out, float *lse, Tiles &t) const {
    const int64_t zh = z * a.hq + h, rows = std::min(l.bq, a.tq - i0), keys = keysFor(i0 + rows);
    float *o = out + (zh * a.tq + i0) * a.dv, *lr = lse + zh * a.tq + i0;
    std::fill(o, o + rows * a.dv, 0.0f);
    std::fill(t.rowMax, t.rowMax + rows, kNegInf);
    std::fill(t.rowSum, t.rowSum + rows, 0.0f);
    const float *v = a.v + (z * a.hkv + h / group) * a.tk * a.dv;
    for (int64_t j0 = 0; j0 < keys; j0 += l.bk) {
      const int64_t cols = std::min(l.bk, keys - j0);
      scores(t, z, h, i0, rows, j0, cols, t.delta); // delta holds the tile's row maxes here
      for (int64_t r = 0; r < rows; ++r) {
        float *p = t.s + r * cols;
        const float m = t.rowMax[r], tileMax = t.delta[r];
        const float next = (std::isnan(tileMax) || tileMax > m) ? tileMax : m;
        if (next == kNegInf) { // nothing allowed so far: P = 0
          std::fill(p, p + cols, 0.0f);
          continue;
        }
        const float alpha = m == kNegInf ? 0.0f : std::exp(m - next);
        t.rowSum[r] = t.rowSum[r] * alpha + expRow(p, next, p, cols);
        if (alpha != 1.0f)
          affineRow(o + r * a.dv, alpha, 0.0f, o + r * a.dv, a.dv);
        t.rowMax[r] = next;
        if (a.dropout != 0)
          drop(p, z, h, i0 + r, j0, cols);
      }
      product(rows, a.dv, cols, MatrixRef{t.s, cols, 1, 0}, MatrixRef{v + j0 * a.dv, a.dv, 1, 0}, o,
              a.dv, true, t.gemm);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float m = t.rowMax[r], sum = t.rowSum[r];
      if (m == kNegInf) { // no allowed key: out 0, lse -inf
        lr[r] = kNegInf;
        continue;
      }
      const float denom = std::isnan(sum) ? sum : std::max(sum, 1.0f);
      affineRow(o + r * a.dv, 1.0f / denom, 0.0f, o + r * a.dv, a.dv);
      lr[r] = m + std::log(sum);
    }
  }

  // One (batch z, query head h, row block i0) of the backward, adding into dk, dv of h's kv head
  // and into dbias; dq's rows are written.
  void backward(int64_t z, int64_t h, int64_t i0, const float *out, const float *lse,
                const float *dout, float *dq, float *dk, float *dv, float *dbias, Tiles &t) const {
    const int64_t zh = z * a.hq + h, c = z * a.hkv + h / group;
    const int64_t rows = std::min(l.bq, a.tq - i0), keys = keysFor(i0 + rows);
    float *dqb = dq + (zh * a.tq + i0) * a.d;
    std::fill(dqb, dqb + rows * a.d, 0.0f);
    const float *lr = lse + zh * a.tq + i0, *dob = dout + (zh * a.tq + i0) * a.dv;
    const float *ob = out + (zh * a.tq + i0) * a.dv, *qb = a.q + (zh * a.tq + i0) * a.d;
    for (int64_t r = 0; r < rows; ++r)
      t.delta[r] = dotRow(dob + r * a.dv, ob + r * a.dv, a.dv);
    for (int64_t j0 = 0; j0 < keys; j0 += l.bk) {
      const int64_t cols = std::min(l.bk, keys - j0);
      const float *kt = a.k + (c * a.tk + j0) * a.d, *vt = a.v + (c * a.tk + j0) * a.dv;
      float *dkt = dk + (c * a.tk + j0) * a.d, *dvt = dv + (c * a.tk + j0) * a.dv;
      scores(t, z, h, i0, rows, j0, cols, nullptr);
      for (int64_t r = 0; r < rows; ++r) {
        float *p = t.s + r * cols;
        if (lr[r] == kNegInf) // no allowed key: the row adds nothing
          std::fill(p, p + cols, 0.0f);
        else
          expRow(p, lr[r], p, cols);
      }
      // dV += d(P)^T dout (the dropped probabilities staged in ds)
      const float *pd = t.s;
      if (a.dropout != 0) {
        std::memcpy(t.ds, t.s, sizeof(float) * static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r)
          drop(t.ds + r * cols, z, h, i0 + r, j0, cols);
        pd = t.ds;
      }
      product(cols, a.dv, rows, MatrixRef{pd, 1, cols, 0}, MatrixRef{dob, a.dv, 1, 0}, dvt, a.dv,
              true, t.gemm);
      // dP = d(dout v^T); dX = P (dP - delta), into ds
      product(rows, cols, a.dv, MatrixRef{dob, a.dv, 1, 0}, MatrixRef{vt, 1, a.dv, 0}, t.ds, cols,
              false, t.gemm);
      for (int64_t r = 0; r < rows; ++r) {
        float *dx = t.ds + r * cols;
        if (a.dropout != 0)
          drop(dx, z, h, i0 + r, j0, cols);
        softmaxGradRow(t.s + r * cols, t.delta[r], dx, cols);
        if (dbias) {
          float *db = dbias + at(a.biasStrides, z, h, i0 + r, j0);
          for (int64_t j = 0; j < cols; ++j)
            db[j * a.biasStrides[3]] += dx[j];
        }
        affineRow(dx, a.scale, 0.0f, dx, cols);
      }
      // dq += dS k;  dk += dS^T q
      product(rows, a.d, cols, MatrixRef{t.ds, cols, 1, 0}, MatrixRef{kt, a.d, 1, 0}, dqb, a.d,
              true, t.gemm);
      product(cols, a.d, rows, MatrixRef{t.ds, 1, cols, 0}, MatrixRef{qb, a.d, 1, 0}, dkt, a.d,
              true, t.gemm);
    }
  }
};

} // namespace

void attentionForward(const Attention &a, float *out, float *lse, float *scratch,
                      runtime::ThreadPool *pool) {
  const Kernel kern(a, false);
  const int64_t blocks = (a.tq + kern.l.bq - 1) / kern.l.bq;
  runtime::runParts(pool, a.batch * a.hq * blocks, [&](int64_t part, int worker) {
    Tiles t(kern.l, false, scratch, worker);
    const int64_t zh = part / blocks;
    kern.forward(zh / a.hq, zh % a.hq, (part % blocks) * kern.l.bq, out, lse, t);
  });
}

void attentionBackward(const Attention &a, const float *out, const float *lse, const float *dout,
                       float *dq, float *dk, float *dv, float *dbias, int64_t biasElements,
                       float *scratch, runtime::ThreadPool *pool) {
  const Kernel kern(a, true);
  if (!a.bias)
    dbias = nullptr;
  if (dbias)
    std::fill(dbias, dbias + biasElements, 0.0f);
  // A part owns whole kv heads of whole batch elements; where dbias broadcasts over the batch (or
  // the heads) one part takes them all, so that each dbias element has a single writer.
  const bool allBatches = dbias && a.biasStrides[0] == 0;
  const bool allHeads = dbias && a.biasStrides[1] == 0;
  const int64_t zParts = allBatches ? 1 : a.batch, cParts = allHeads ? 1 : a.hkv;
  const int64_t g = kern.group;
  runtime::runParts(pool, zParts * cParts, [&](int64_t part, int worker) {
    Tiles t(kern.l, true, scratch, worker);
    const int64_t zBegin = allBatches ? 0 : part / cParts, zEnd = allBatches ? a.batch : zBegin + 1;
    const int64_t cBegin = allHeads ? 0 : part % cParts, cEnd = allHeads ? a.hkv : cBegin + 1;
    for (int64_t z = zBegin; z < zEnd; ++z)
      for (int64_t c = cBegin; c < cEnd; ++c) {
        float *dkc = dk + (z * a.hkv + c) * a.tk * a.d, *dvc = dv + (z * a.hkv + c) * a.tk * a.dv;
        std::fill(dkc, dkc + a.tk * a.d, 0.0f);
        std::fill(dvc, dvc + a.tk * a.dv, 0.0f);
        for (int64_t h = c * g; h < (c + 1) * g; ++h)
          for (int64_t i0 = 0; i0 < a.tq; i0 += kern.l.bq)
            kern.backward(z, h, i0, out, lse, dout, dq, dk, dv, dbias, t);
      }
  });
}

} // namespace kiln::kernels
