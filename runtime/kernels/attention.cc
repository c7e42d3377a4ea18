// Flash attention kernels (see attention.h). Per (batch, head) and block of bq query rows, over
// tiles of bk keys [j0, j0 + cols):
//   forward:  S = q k^T;  x = scale S + bias, -inf where not allowed (rows.h scoreRow)
//             m' = max(m, max_j x_j);  P = exp(x - m');  l = l e^(m - m') + sum_j P_j
//             O = O e^(m - m') + d(P) V          (d: dropout; the sum l is taken before it)
//             at the end out = O / max(l, 1), lse = m + log l (the reference's guards: a row
//             with no allowed key keeps O = 0, l = 0, m = -inf, so out = 0 and lse = -inf)
//   backward: P = exp(x - lse) (rows.h scoreExpRow);  dV += d(P)^T dout;  dP = d(dout v^T)
//             delta = <dout, out>;  dX = P (dP - delta) (= dbias);  dq += scale dX k;
//             dk += scale dX^T q
// The tile products run on the GEMM micro-kernel, single-threaded inside a part, from operands
// packed once each (K^T and V^T for all of a kv head's query blocks, a block's Q and dO as A for
// all its key tiles) or read in place: the tiles P and dS (as A, row- or column-major), and K,
// V, Q and dO as B where their widths are whole micro-panels (else packed too). A tile goes a
// strip of one micro-panel's rows at a time through its scores, row operations and the product
// over its rows (forward O += P V; backward dP, dS, dq += dS k), while the strip is in L1; the
// backward's products over keys (dv, dk) take the whole tile after its strips. The parts
// (forward: (batch, head, row block), or whole heads; backward: (batch, kv head), coarser where
// dbias broadcasts) keep both threads busy and never share an output, so every sum has one
// order whatever the threads. With causal masking a block of rows [i0, i1) reads only keys
// j < i1; with a sliding window of width w only keys (i0 - w, i1 + w - 1) (and, causal, < i1):
// whole tiles outside are skipped, and inside a tile each product starts at the first key (or
// row) that a micro-panel sees.
// bf16 products (Attention::bf16) round every product's operands where they are packed (Q, K,
// V, dO; read in place no more) or written (the tiles P and dS, after their f32 uses), then run
// the same f32 micro-kernel: a product of two bf16 is exact in f32, so the sums are those of
// the bf16 semantics. Where the CPU multiplies bf16 pairs (gemm.h: gemmPairsNative: on AMX's
// tiles, or on vdpbf16ps) the packs are pairs instead, P and dS are packed as pairs (a strip for
// the products over the head dimension, the whole tile transposed for dV and dK), and the
// products run on strips of 32 rows (AMX's tiles) and, for dV and dK, panels of 32 keys, each
// skipping (as the f32 products do) the keys, or rows, that none of its rows, or keys, sees:
// whole pairs of zeros in P and dS, so the same sums.
// Measured (`kiln bench gpt --train --precision bf16`, the benchmark GPT, 4 layers): on a
// Sapphire Rapids-class Xeon's AMX attention 7.3 -> 6.2 ms a step, its backward 15.2 -> 10.9 ms;
// on Zen 5's vdpbf16ps (against rounded operands on f32 FMAs) 2.8 -> 2.2 and 6.2 -> 4.8 ms, the
// step 71.5 -> 68.3 ms. The row operations (exp, the scores) and the packs are then most of it.
// Those products first took whole tiles; skipping as above then took the benchmark GPT's
// attention on Zen 5 from 2.35-2.40 to 2.15-2.27 ms a step and its backward from 4.9-5.0 to
// 4.5-4.7 (3 alternating runs; T = 128 in blocks of 64 rows, where 1/6 of a causal block's
// whole-tile products were zeros). Not measured on AMX, which makes as many calls but for dV and
// dK's (one per run of 32-key panels that see the same rows).
#include "runtime/kernels/attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "runtime/kernels/gemm.h"
#include "runtime/kernels/rows.h"
#include "runtime/thread_pool.h"
#include "support/rng.h"
#include "support/workspace.h"

namespace kiln::kernels {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// The row stride of the score and gradient tiles (the GEMM reads them in place at this stride).
constexpr int64_t kLd = workspace::kGemmARowStride;

// Keys [begin, begin + keys) of kv head `head` (batch-major index z Hkv + c), packed in a
// thread's Tiles.
struct Window {
  int64_t head = -1, begin = 0, keys = 0;
};

// Zeroes `rows` rows of `width` floats, `stride` apart.
void zeroRows(float *p, int64_t rows, int64_t width, int64_t stride) {
  if (stride == width) {
    std::fill(p, p + rows * width, 0.0f);
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    std::fill(p + r * stride, p + r * stride + width, 0.0f);
}

// One thread's slice of the scratch, in workspace::attentionLayout's order: the score tile (the
// backward's second tile for their gradients), per-row numbers, gathered rows, then the packed
// GEMM operands: the block's (Q as A; backward also dO as A, Q and dO as B), the window's of a kv
// head (K^T and V; backward K^T, V^T and K), the B ones used only where not read in place (see
// Kernel::inPlace). The tiles' rows are kLd floats apart, whatever the
// tile's keys: the GEMM reads P and dS in place at that stride.
struct Tiles {
  float *s, *ds, *rowMax, *rowSum, *delta, *bias;
  uint8_t *mask;
  float *qa, *doa, *qb, *dob, *kt, *v, *kb;
  uint32_t *pairs; // bf16Pairs: a strip or tile of P or dS packed as A
  Tiles(const workspace::AttentionLayout &l, bool backward, float *scratch, int worker) {
    float *p = workspace::alignUp64(scratch + worker * l.perThread);
    auto take = [&p](int64_t floats) { return std::exchange(p, p + floats); };
    s = take(l.tile);
    ds = backward ? take(l.tile) : nullptr;
    rowMax = take(l.rows), rowSum = rowMax + l.bq, delta = rowMax + 2 * l.bq;
    bias = take(l.gathered), mask = reinterpret_cast<uint8_t *>(bias + l.bk);
    qa = take(l.blockA);
    doa = backward ? take(l.blockA) : nullptr;
    qb = backward ? take(l.blockB) : nullptr;
    dob = backward ? take(l.blockB) : nullptr;
    kt = take(l.head), v = take(l.head);
    kb = backward ? take(l.head) : nullptr;
    pairs = l.pairs ? reinterpret_cast<uint32_t *>(take(l.pairs)) : nullptr;
  }
};

struct Kernel {
  const Attention &a;
  workspace::AttentionLayout l;
  int64_t group, mr, nr, vec;
  float keepScale;
  int64_t band; // a.band, 0 where it is wider than any distance (so that no sum overflows)
  // Whether the products read K, V, Q and dO in place as B (their rows are its k), where their
  // widths are whole micro-panels; else from packs (always with bf16 products: packing rounds
  // them). Packing them was 2.3% of fused/1024.
  bool inPlace;
  bool bf16Pairs; // bf16 products from packs of pairs, on AMX or vdpbf16ps (mr: a strip's 32 rows)
  RowKernels rk = rowKernels(); // called row by row

  Kernel(const Attention &at, bool backward)
      : a(at), l(workspace::attentionLayout(at.tq, at.tk, at.d, at.dv, backward, at.bf16)),
        group(at.hq / at.hkv), nr(gemmPanelCols()), vec(gemmVectorCols()),
        keepScale(1.0f / static_cast<float>(1 - at.dropout)),
        band(at.band > 0 && at.band < at.tq + at.tk ? at.band : 0),
        inPlace(!at.bf16 && at.d % nr == 0 && at.dv % nr == 0),
        bf16Pairs(at.bf16 && gemmPairsNative()) {
    mr = bf16Pairs ? workspace::kAttnPairStrip : gemmPanelRows();
    // a key tile starts on a panel of a packed window (of pairs: 32 columns)
    assert(l.bk % (bf16Pairs ? 32 : nr) == 0 || l.bk == a.tk);
    if (at.windowKeys > 0)
      l.window = std::min(l.window, std::max(l.bk, at.windowKeys / l.bk * l.bk));
  }

  // The keys that rows [i0, i1) may see: [keysFrom(i0), keysFor(i1)).
  int64_t keysFor(int64_t i1) const {
    int64_t end = a.causal ? std::min(a.tk, i1) : a.tk;
    return band ? std::clamp<int64_t>(i1 - 1 + band, 0, end) : end;
  }
  int64_t keysFrom(int64_t i0) const { return band ? std::max<int64_t>(0, i0 - band + 1) : 0; }
  static int64_t at(const std::array<int64_t, 4> &s, int64_t b, int64_t h, int64_t i, int64_t j) {
    return b * s[0] + h * s[1] + i * s[2] + j * s[3];
  }

  // With bf16 products, rounds a tile's row or a pack of `floats` (its panels' edges are zeros,
  // which stay zeros) to bf16 in place: every operand of a product goes through one of these, or
  // (bf16Pairs) through a pack of pairs, which rounds.
  void toBf16(float *p, int64_t floats) const {
    if (a.bf16 && !bf16Pairs)
      rk.bf16Row(p, floats);
  }
  void packA(const MatrixRef &m, int64_t rows, int64_t depth, float *out) const {
    if (bf16Pairs)
      return packGemmAPairs(m, rows, depth, reinterpret_cast<uint32_t *>(out));
    packGemmA(m, rows, depth, out);
    toBf16(out, (rows + mr - 1) / mr * mr * depth);
  }
  void packB(const MatrixRef &m, int64_t depth, int64_t cols, float *out) const {
    if (bf16Pairs)
      return packGemmBPairs(m, depth, cols, reinterpret_cast<uint32_t *>(out));
    packGemmB(m, depth, cols, out);
    toBf16(out, (cols + nr - 1) / nr * nr * depth);
  }
  // Rows from r0 on of a block packed as A (depth k).
  const float *packRows(const float *pack, int64_t r0, int64_t depth) const {
    return pack + r0 * (bf16Pairs ? (depth + 1) / 2 : depth);
  }
  // The floats of a pack's panel per k (bf16Pairs: per pair) and its panel width.
  int64_t panelK(int64_t depth) const { return bf16Pairs ? (depth + 1) / 2 : depth; }
  int64_t panelCols() const { return bf16Pairs ? 32 : nr; }

  // Where row [z, h, t] of q-, out-, k- or v-shaped data starts (in [B, H, T, width], or
  // [B, T, H, width] if bthd), and the stride from one position's row to the next.
  int64_t rowAt(int64_t heads, int64_t len, int64_t width, int64_t z, int64_t h, int64_t t) const {
    return (a.bthd ? (z * len + t) * heads + h : (z * heads + h) * len + t) * width;
  }
  int64_t qAt(int64_t z, int64_t h, int64_t i) const { return rowAt(a.hq, a.tq, a.d, z, h, i); }
  int64_t outAt(int64_t z, int64_t h, int64_t i) const { return rowAt(a.hq, a.tq, a.dv, z, h, i); }
  int64_t kAt(int64_t z, int64_t c, int64_t j) const { return rowAt(a.hkv, a.tk, a.d, z, c, j); }
  int64_t vAt(int64_t z, int64_t c, int64_t j) const { return rowAt(a.hkv, a.tk, a.dv, z, c, j); }
  int64_t qStride() const { return a.bthd ? a.hq * a.d : a.d; }
  int64_t outStride() const { return a.bthd ? a.hq * a.dv : a.dv; }
  int64_t kStride() const { return a.bthd ? a.hkv * a.d : a.d; }
  int64_t vStride() const { return a.bthd ? a.hkv * a.dv : a.dv; }

  // The run of `cols` elements from [z, h, i, j0] on of an operand read through strides s: in
  // place where the keys are contiguous, else gathered into buf.
  template <class T>
  static const T *run(const T *base, const std::array<int64_t, 4> &s, int64_t z, int64_t h,
                      int64_t i, int64_t j0, int64_t cols, T *buf) {
    const T *p = base + at(s, z, h, i, j0);
    if (s[3] == 1)
      return p;
    for (int64_t j = 0; j < cols; ++j)
      buf[j] = p[j * s[3]];
    return buf;
  }

  // Keys from j0 on of the window w packed as B, the keys as its columns (K^T, V^T: k = depth)
  // or as its k (K, V; bf16Pairs: j0 - w.begin is even, a whole pair).
  PackedOperand keyColumns(const float *pack, const Window &w, int64_t j0, int64_t depth) const {
    const int64_t panel = panelK(depth) * panelCols();
    return {pack + (j0 - w.begin) / panelCols() * panel, panel};
  }
  PackedOperand keyRows(const float *pack, const Window &w, int64_t j0) const {
    return {pack + (bf16Pairs ? (j0 - w.begin) / 2 : j0 - w.begin) * panelCols(),
            panelK(w.keys) * panelCols()};
  }
  // A pack of pairs as gemmPairs' operand.
  static PairOperand pairs(const float *pack, int64_t stride) {
    return {reinterpret_cast<const uint32_t *>(pack), stride};
  }
  // Rows (keys, values, queries, dO) as B: read in place from `rows` (row stride `stride`) where
  // inPlace, else their pack.
  PackedOperand rowsAsB(const float *rows, int64_t stride, PackedOperand pack) const {
    return inPlace ? PackedOperand{rows, nr, stride} : pack;
  }
  // B from its k-th row on (a pack's or one read in place).
  PackedOperand fromK(PackedOperand b, int64_t k) const {
    if (bf16Pairs) // pairs: k even
      return {b.data + k / 2 * panelCols(), b.panelStride, 0};
    return {b.data + k * (b.kStride ? b.kStride : nr), b.panelStride, b.kStride};
  }
  // The window of kv head c from key `begin` on, packed: K^T into t.kt; V into t.v (forward) or
  // V^T into t.v and K into t.kb (backward); V and K only where they are not read in place.
  Window packWindow(Tiles &t, int64_t c, int64_t begin, bool backward) const {
    const Window w{c, begin, std::min(l.window, a.tk - begin)};
    const int64_t z = c / a.hkv, kv = c % a.hkv, ks = kStride(), vs = vStride();
    const float *k = a.k + kAt(z, kv, begin), *v = a.v + vAt(z, kv, begin);
    packB(MatrixRef{k, 1, ks, 0}, a.d, w.keys, t.kt);
    if (!backward) {
      if (!inPlace)
        packB(MatrixRef{v, vs, 1, 0}, w.keys, a.dv, t.v);
      return w;
    }
    packB(MatrixRef{v, 1, vs, 0}, a.dv, w.keys, t.v);
    if (!inPlace)
      packB(MatrixRef{k, ks, 1, 0}, w.keys, a.d, t.kb);
    return w;
  }

  // Row i of a tile of keys from j0 sees the tile's keys [first(i), seen(i)): causal masking ends
  // them at i, a sliding window keeps them within band of i. The three products below skip what
  // no row of a micro-panel sees (half of a tile on the diagonal), so a tile's entries outside a
  // row's keys may be left unwritten; the row operations work on the seen keys alone and write
  // zeros outside them where a product reads the tile.
  int64_t seen(int64_t i, int64_t j0, int64_t cols) const {
    int64_t end = a.causal ? i + 1 : cols + j0;
    if (band)
      end = std::min(end, i + band);
    return std::clamp<int64_t>(end - j0, 0, cols);
  }
  int64_t first(int64_t i, int64_t j0, int64_t cols) const {
    return band ? std::clamp<int64_t>(i - band + 1 - j0, 0, cols) : 0;
  }

  // out[rows, cols] (row stride kLd) = A B: A the rows from i0 packed (depth k), B the keys from
  // j0 as columns; each micro-panel of rows (bf16Pairs: the strip) gets the key vectors that its
  // last row sees (whole vectors: the product's last panel may be half one).
  void rowsByKeys(int64_t i0, int64_t rows, int64_t j0, int64_t cols, int64_t depth,
                  const float *aPack, PackedOperand b, float *out) const {
    for (int64_t r0 = 0; r0 < rows; r0 += mr) {
      const int64_t m = std::min(mr, rows - r0);
      const int64_t n = std::min(cols, (seen(i0 + r0 + m - 1, j0, cols) + vec - 1) / vec * vec);
      const int64_t c0 = std::min(first(i0 + r0, j0, cols) / panelCols() * panelCols(), n);
      const float *keys = b.data + c0 / panelCols() * b.panelStride;
      if (!bf16Pairs)
        gemmPacked(m, n - c0, depth, {aPack + r0 * depth, depth * mr}, {keys, b.panelStride},
                   out + r0 * kLd + c0, kLd, false);
      else if (n > c0) // rows <= mr: r0 = 0
        gemmPairs(m, n - c0, panelK(depth), pairs(aPack, panelK(depth)), pairs(keys, b.panelStride),
                  out + c0, kLd, false);
    }
  }

  // out[rows, width] (row stride ld) += T B: T the rows x cols tile of rows from i0 and keys from
  // j0 (row stride kLd), read in place as a row-major A (no pack: P's and dS's were 2% of
  // fused/1024); B the keys as its k (V, K); each micro-panel of rows sums the keys its last row
  // sees. bf16Pairs: the strip's seen keys (from a whole pair) packed as pairs into `pairs`.
  void tileByKeys(const float *tile, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                  PackedOperand b, int64_t width, float *out, int64_t ld, uint32_t *pairs) const {
    for (int64_t r0 = 0; r0 < rows; r0 += mr) {
      const int64_t m = std::min(mr, rows - r0);
      const int64_t n = seen(i0 + r0 + m - 1, j0, cols), k0 = std::min(first(i0 + r0, j0, cols), n);
      if (!bf16Pairs) {
        gemmPacked(m, width, n - k0, {tile + r0 * kLd + k0, mr * kLd, 0, true}, fromK(b, k0),
                   out + r0 * ld, ld, true);
        continue;
      }
      const int64_t e0 = k0 - k0 % 2, k2 = (n - e0 + 1) / 2; // from a whole pair
      if (k2 == 0)
        continue;
      packGemmAPairs(MatrixRef{tile + r0 * kLd + e0, kLd, 1, 0}, m, n - e0, pairs);
      gemmPairs(m, width, k2, {pairs, k2}, Kernel::pairs(fromK(b, e0).data, b.panelStride),
                out + r0 * ld, ld, true);
    }
  }

  // out[cols, width] (row stride ld) += T^T B: T as above, read in place as a column-major A
  // (T^T's k is T's row; no pack: two per backward tile were 3% of its time); B the rows as its k
  // (Q, dO packed as B); each micro-panel of keys [jf, jl] sums the rows that see one of them:
  // from jf on (causal; no earlier row sees jf), and within band of them.
  // Consecutive micro-panels that sum the same rows (all of a tile's below the diagonal) go in
  // one product: a call per 14 keys was 3% of such a product's time.
  // bf16Pairs: T^T packed as pairs into `pairs` (all of the tile), micro-panels of 32 keys, their
  // rows from a whole pair.
  void keysByRows(const float *tile, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                  PackedOperand b, int64_t width, float *out, int64_t ld, uint32_t *pairs) const {
    if (bf16Pairs)
      packGemmAPairs(MatrixRef{tile, 1, kLd, 0}, cols, rows, pairs);
    auto rowsOf = [&](int64_t c0) {
      const int64_t jf = j0 + c0, jl = jf + std::min(mr, cols - c0) - 1;
      int64_t p0 = a.causal ? jf - i0 : 0, p1 = rows;
      if (band)
        p0 = std::max(p0, jf - band + 1 - i0), p1 = std::min(p1, jl + band - i0);
      p0 = std::clamp<int64_t>(p0, 0, rows);
      return std::pair{p0, std::clamp<int64_t>(p1, p0, rows)};
    };
    for (int64_t c0 = 0, c1 = 0; c0 < cols; c0 = c1) {
      const auto [p0, p1] = rowsOf(c0);
      for (c1 = c0 + mr; c1 < cols && rowsOf(c1) == std::pair{p0, p1};)
        c1 += mr;
      const int64_t m = std::min(c1, cols) - c0;
      if (!bf16Pairs) {
        gemmPacked(m, width, p1 - p0, {tile + p0 * kLd + c0, mr, kLd}, fromK(b, p0), out + c0 * ld,
                   ld, true);
        continue;
      }
      const int64_t q0 = p0 / 2, q1 = (p1 + 1) / 2, stride = (rows + 1) / 2;
      if (q1 > q0)
        gemmPairs(m, width, q1 - q0, {pairs + c0 * stride + q0, stride},
                  Kernel::pairs(fromK(b, 2 * q0).data, b.panelStride), out + c0 * ld, ld, true);
    }
  }

  // Strip [r0, r0 + m) of the block of rows from i0 of (batch z, head h), packed in t.qa, against
  // keys [j0, j0 + cols) of the window w packed in t.kt: the strip's logits into t.s (row stride
  // kLd), scaled, biased and masked, and each row's max into maxes[r].
  void scores(Tiles &t, const Window &w, int64_t z, int64_t h, int64_t i0, int64_t r0, int64_t m,
              int64_t j0, int64_t cols, float *maxes) const {
    rowsByKeys(i0 + r0, m, j0, cols, a.d, packRows(t.qa, r0, a.d), keyColumns(t.kt, w, j0, a.d),
               t.s + r0 * kLd);
    for (int64_t r = r0; r < r0 + m; ++r) {
      const int64_t i = i0 + r, lo = first(i, j0, cols);
      const float *bias = a.bias ? run(a.bias, a.biasStrides, z, h, i, j0, cols, t.bias) : nullptr;
      const uint8_t *mask =
          a.mask ? run(a.mask, a.maskStrides, z, h, i, j0, cols, t.mask) : nullptr;
      float *x = t.s + r * kLd;
      std::fill(x, x + lo, kNegInf);
      maxes[r] =
          rk.scoreRow(x + lo, cols - lo, a.scale, bias ? bias + lo : nullptr,
                      mask ? mask + lo : nullptr, std::max<int64_t>(0, seen(i, j0, cols) - lo));
    }
  }

  // p *= the dropout factors of row i, keys [j0, j0 + cols).
  void drop(float *p, int64_t z, int64_t h, int64_t i, int64_t j0, int64_t cols) const {
    const uint64_t base =
        static_cast<uint64_t>((((a.firstBatch + z) * a.hq + h) * a.tq + i) * a.tk + j0);
    for (int64_t j = 0; j < cols; ++j)
      p[j] *= rng::uniform(a.seed, base + static_cast<uint64_t>(j)) >= a.dropout ? keepScale : 0;
  }

  // One (batch z, query head h, row block i0) of the forward. w: the window packed in t, which
  // this repacks where the block's keys leave it (the thread's next part usually reuses it).
  void forward(int64_t z, int64_t h, int64_t i0, float *out, float *lse, Tiles &t,
               Window &w) const {
    const int64_t zh = z * a.hq + h, rows = std::min(l.bq, a.tq - i0), keys = keysFor(i0 + rows);
    const int64_t os = outStride();
    float *o = out + outAt(z, h, i0), *lr = lse + zh * a.tq + i0;
    zeroRows(o, rows, a.dv, os);
    std::fill(t.rowMax, t.rowMax + rows, kNegInf);
    std::fill(t.rowSum, t.rowSum + rows, 0.0f);
    packA(MatrixRef{a.q + qAt(z, h, i0), qStride(), 1, 0}, rows, a.d, t.qa);
    const int64_t c = z * a.hkv + h / group;
    for (int64_t j0 = keysFrom(i0) / l.bk * l.bk; j0 < keys; j0 += l.bk) {
      const int64_t cols = std::min(l.bk, keys - j0);
      if (w.head != c || j0 < w.begin || j0 >= w.begin + w.keys)
        w = packWindow(t, c, j0 / l.window * l.window, false);
      const PackedOperand vs = rowsAsB(a.v + vAt(z, h / group, j0), vStride(), keyRows(t.v, w, j0));
      for (int64_t r0 = 0; r0 < rows; r0 += mr) { // a strip of rows at a time, in L1 throughout
        const int64_t strip = std::min(mr, rows - r0);
        scores(t, w, z, h, i0, r0, strip, j0, cols, t.delta); // delta: the strip's row maxes
        for (int64_t r = r0; r < r0 + strip; ++r) {
          float *p = t.s + r * kLd;
          const float m = t.rowMax[r], tileMax = t.delta[r];
          const float next = (std::isnan(tileMax) || tileMax > m) ? tileMax : m;
          if (next == kNegInf) { // nothing allowed so far: P = 0
            std::fill(p, p + cols, 0.0f);
            continue;
          }
          const float alpha = m == kNegInf ? 0.0f : std::exp(m - next);
          const int64_t lo = first(i0 + r, j0, cols), n = std::max(lo, seen(i0 + r, j0, cols));
          t.rowSum[r] = t.rowSum[r] * alpha + rk.expRow(p + lo, next, p + lo, n - lo);
          std::fill(p, p + lo, 0.0f);
          std::fill(p + n, p + cols, 0.0f);
          if (alpha != 1.0f)
            rk.affineRow(o + r * os, alpha, 0.0f, o + r * os, a.dv);
          t.rowMax[r] = next;
          if (a.dropout != 0)
            drop(p, z, h, i0 + r, j0, cols);
          toBf16(p + lo, n - lo); // after the sum: l sums P unrounded
        }
        tileByKeys(t.s + r0 * kLd, i0 + r0, strip, j0, cols, vs, a.dv, o + r0 * os, os, t.pairs);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float m = t.rowMax[r], sum = t.rowSum[r];
      if (m == kNegInf) { // no allowed key: out 0, lse -inf
        lr[r] = kNegInf;
        continue;
      }
      const float denom = std::isnan(sum) ? sum : std::max(sum, 1.0f);
      rk.affineRow(o + r * os, 1.0f / denom, 0.0f, o + r * os, a.dv);
      lr[r] = m + std::log(sum);
    }
  }

  // One (batch z, query head h, row block i0) of the backward against the keys of window w
  // (packed in t), adding into dk, dv of h's kv head and into dbias, and into dq's rows (which
  // the first window writes).
  void backward(int64_t z, int64_t h, int64_t i0, const float *out, const float *lse,
                const float *dout, float *dq, float *dk, float *dv, float *dbias, Tiles &t,
                const Window &w) const {
    const int64_t zh = z * a.hq + h, c = h / group;
    const int64_t rows = std::min(l.bq, a.tq - i0);
    const int64_t keys = std::min(keysFor(i0 + rows), w.begin + w.keys);
    const int64_t qs = qStride(), os = outStride();
    float *dqb = dq + qAt(z, h, i0); // zeroed by attentionBackward
    const float *lr = lse + zh * a.tq + i0, *dob = dout + outAt(z, h, i0);
    const float *ob = out + outAt(z, h, i0), *qb = a.q + qAt(z, h, i0);
    for (int64_t r = 0; r < rows; ++r)
      t.delta[r] = rk.dotRow(dob + r * os, ob + r * os, a.dv);
    packA(MatrixRef{qb, qs, 1, 0}, rows, a.d, t.qa);
    packA(MatrixRef{dob, os, 1, 0}, rows, a.dv, t.doa);
    if (!inPlace) {
      packB(MatrixRef{qb, qs, 1, 0}, rows, a.d, t.qb);
      packB(MatrixRef{dob, os, 1, 0}, rows, a.dv, t.dob);
    }
    const PackedOperand qB = rowsAsB(qb, qs, {t.qb, panelK(rows) * panelCols()});
    const PackedOperand doB = rowsAsB(dob, os, {t.dob, panelK(rows) * panelCols()});
    for (int64_t j0 = std::max(w.begin, keysFrom(i0) / l.bk * l.bk); j0 < keys; j0 += l.bk) {
      const int64_t cols = std::min(l.bk, keys - j0);
      float *dkt = dk + kAt(z, c, j0), *dvt = dv + vAt(z, c, j0);
      const PackedOperand ks = rowsAsB(a.k + kAt(z, c, j0), kStride(), keyRows(t.kb, w, j0));
      for (int64_t r0 = 0; r0 < rows; r0 += mr) { // a strip of rows at a time, in L1 throughout
        const int64_t strip = std::min(mr, rows - r0);
        // P = exp(x - lse), x as in the forward (scores)
        rowsByKeys(i0 + r0, strip, j0, cols, a.d, packRows(t.qa, r0, a.d),
                   keyColumns(t.kt, w, j0, a.d), t.s + r0 * kLd);
        for (int64_t r = r0; r < r0 + strip; ++r) {
          float *p = t.s + r * kLd;
          const int64_t i = i0 + r, lo = first(i, j0, cols);
          const int64_t n = lr[r] == kNegInf ? lo : std::max(lo, seen(i, j0, cols)); // -inf: none
          const float *bias =
              a.bias ? run(a.bias, a.biasStrides, z, h, i, j0, cols, t.bias) : nullptr;
          const uint8_t *mask =
              a.mask ? run(a.mask, a.maskStrides, z, h, i, j0, cols, t.mask) : nullptr;
          rk.scoreExpRow(p + lo, n - lo, a.scale, bias ? bias + lo : nullptr,
                         mask ? mask + lo : nullptr, lr[r]);
          std::fill(p, p + lo, 0.0f);
          std::fill(p + n, p + cols, 0.0f);
        }
        // dP = d(dout v^T); dX = P (dP - delta), into ds (zero past the seen keys: P is)
        rowsByKeys(i0 + r0, strip, j0, cols, a.dv, packRows(t.doa, r0, a.dv),
                   keyColumns(t.v, w, j0, a.dv), t.ds + r0 * kLd);
        for (int64_t r = r0; r < r0 + strip; ++r) {
          float *p = t.s + r * kLd, *dx = t.ds + r * kLd;
          const int64_t lo = first(i0 + r, j0, cols), n = std::max(lo, seen(i0 + r, j0, cols));
          if (a.dropout != 0)
            drop(dx + lo, z, h, i0 + r, j0 + lo, n - lo);
          // dS = scale dX, in the same pass unless dbias takes dX first
          rk.softmaxGradRow(p + lo, t.delta[r], dbias ? 1.0f : a.scale, dx + lo, n - lo);
          if (a.dropout != 0) // P's last use undropped: dV takes d(P)
            drop(p, z, h, i0 + r, j0, cols);
          toBf16(p + lo, n - lo);
          if (dbias) {
            float *db = dbias + at(a.biasStrides, z, h, i0 + r, j0);
            for (int64_t j = lo; j < n; ++j)
              db[j * a.biasStrides[3]] += dx[j];
            rk.affineRow(dx + lo, a.scale, 0.0f, dx + lo, n - lo);
          }
          toBf16(dx + lo, n - lo);
          std::fill(dx, dx + lo, 0.0f);
          std::fill(dx + n, dx + cols, 0.0f);
        }
        // dq += dS k
        tileByKeys(t.ds + r0 * kLd, i0 + r0, strip, j0, cols, ks, a.d, dqb + r0 * qs, qs, t.pairs);
      }
      // dV += d(P)^T dout;  dk += dS^T q
      keysByRows(t.s, i0, rows, j0, cols, doB, a.dv, dvt, vStride(), t.pairs);
      keysByRows(t.ds, i0, rows, j0, cols, qB, a.d, dkt, kStride(), t.pairs);
    }
  }
};

} // namespace

void attentionForward(const Attention &a, float *out, float *lse, float *scratch,
                      runtime::ThreadPool *pool) {
  const Kernel kern(a, false);
  const int64_t blocks = (a.tq + kern.l.bq - 1) / kern.l.bq;
  // Each thread keeps the window it packed last, and a part is a whole head where the heads
  // split evenly over the threads: a thread then packs each of its heads' windows once. Split
  // by row blocks instead (while the heads do not split evenly: a head's blocks differ in cost
  // under causal masking), both threads worked on every head and each packed every window:
  // 1.6% of kiln_attention_bench's fused/1024. (Packing a window costs O(keys D) against the
  // O(rows keys D) of the products that use it.) Parts go batch-major in either layout: the
  // pool gives each thread a contiguous share of them (thread_pool.cc), so the threads never
  // share a head's windows, and each works on the batch elements whose rows its own share of the
  // projections wrote (the benchmark GPT's attention 2.30-2.44 -> 2.22-2.32 ms a step, 3
  // alternating runs). Which blocks a part holds changes no result.
  const int64_t heads = a.batch * a.hq, threads = pool ? pool->threads() : 1;
  const bool wholeHeads = heads % threads == 0;
  std::vector<Window> packed(static_cast<size_t>(threads));
  runtime::runParts(pool, wholeHeads ? heads : heads * blocks, [&](int64_t part, int worker) {
    Tiles t(kern.l, false, scratch, worker);
    if (wholeHeads) {
      for (int64_t block = 0; block < blocks; ++block)
        kern.forward(part / a.hq, part % a.hq, block * kern.l.bq, out, lse, t, packed[worker]);
      return;
    }
    const int64_t zh = part / blocks, block = part % blocks;
    kern.forward(zh / a.hq, zh % a.hq, block * kern.l.bq, out, lse, t, packed[worker]);
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
        zeroRows(dk + kern.kAt(z, c, 0), a.tk, a.d, kern.kStride());
        zeroRows(dv + kern.vAt(z, c, 0), a.tk, a.dv, kern.vStride());
        for (int64_t h = c * g; h < (c + 1) * g; ++h) // the query heads of kv head c
          zeroRows(dq + kern.qAt(z, h, 0), a.tq, a.d, kern.qStride());
        // Window by window, each packed once; the sums keep their order (a dq row sums its
        // tiles key after key; a dk, dv, dbias tile its terms head after head, row after row).
        for (int64_t begin = 0; begin < a.tk; begin += kern.l.window) {
          const Window w = kern.packWindow(t, z * a.hkv + c, begin, true);
          for (int64_t h = c * g; h < (c + 1) * g; ++h)
            for (int64_t i0 = 0; i0 < a.tq; i0 += kern.l.bq)
              if (kern.keysFor(std::min(a.tq, i0 + kern.l.bq)) > begin &&
                  kern.keysFrom(i0) < begin + w.keys)
                kern.backward(z, h, i0, out, lse, dout, dq, dk, dv, dbias, t, w);
        }
      }
  });
}

} // namespace kiln::kernels
