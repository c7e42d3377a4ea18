// GEMM (see gemm.h), compiled once per SIMD target (Highway's foreach_target) and dispatched at
// run time to the best one the CPU has.
//
// Blocking, after BLIS (Goto's algorithm), with the sizes in support/workspace.h:
//   for jc in N step Nc, pc in K step Kc:
//     pack B[pc:pc+Kc, jc:jc+Nc] into micro-panels of NR columns, shared (L2; the threads
//     pack a strip each)
//     for each block of at most Mc rows (the threads share these):
//       pack A[rows, pc:pc+Kc] into micro-panels of MR rows (L2)
//       for ir, jr: micro-kernel: an MR x NR tile of C += A panel * B panel
// The A micro-panel (14 rows x Kc = 14 KiB) stays in L1 while the B micro-panels (Kc x 32 =
// 32 KiB each, as much as the whole L1) stream past it from L2: measured 3-4% faster on every
// shape than keeping a B micro-panel and streaming the A panels, whose 14 KiB evict part of it.
// Batches of small products (attention's per-head GEMMs) and products of few rows go in few parts
// instead (gemm_columns.inc): by blocks of columns, each part packing its own A and B
// (gemmByColumns), or the threads packing A's one block of k together (gemmSharedA); a weight
// gradient's over many blocks of k by halves of the rows, each packing B (gemmByRows). The threads
// of these never meet between blocks of k. Products of at most 4 rows (decoding) are
// matrix-vector products that read B once, unpacked (gemmFewRows, in gemm_few_rows.inc).
// The micro-kernel holds its MR x NR tile of C in registers for all Kc steps: on AVX-512 (32
// zmm registers) 14 rows x 2 vectors = 28 accumulators + 2 B vectors + 1 broadcast A. Zen 5 has
// two FMA pipes of latency 4, so at least 8 independent accumulators keep both busy; 28 hide the
// loads too (per k: 2 loads + 14 broadcasts for 28 FMAs). On 16-register targets (AVX2, SSE) the
// tile is 6 x 2 vectors (12 accumulators). Packing (gemm_pack.inc) makes every operand layout
// (transposed, strided, batched) one contiguous stream, and zero-pads the edges so the micro-kernel
// never branches; edge tiles of C take micro-kernels of their own rows and vectors, and those with
// columns past a vector go through a small buffer.
// Threads split C by rows (few rows: see above), and every element is summed over
// k = 0..K-1 in one fixed order (within a Kc block in the register, then block after block into
// C), whatever the thread count or the split.
// bf16 products (Gemm::bf16) take the same blocks, packed as pairs of bf16 and multiplied on f32
// FMAs, vdpbf16ps or AMX tiles: gemm_bf16.inc, a per-target fragment of this file. A row-major A
// stored in bf16 is pairs already: vdpbf16ps reads its rows in place (readsARows).
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/kernels/bf16_instructions.h"
#include "runtime/kernels/gemm.h"
#include "runtime/thread_pool.h"
#include "support/bf16.h"
#include "support/workspace.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/gemm.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

// After highway.h (clang-format must not sort it above foreach_target.h).
#include "runtime/kernels/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

#if HWY_TARGET <= HWY_AVX3
constexpr int kMr = 14, kNv = 2;
#elif HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
constexpr int kMr = 4, kNv = 1;
#else
constexpr int kMr = 6, kNv = 2;
#endif

// Products of at most kFewRows rows go by gemmFewRows: rows of C; columns (dot) or vectors
// (rows) a step.
constexpr int64_t kFewRows = 4, kFewCols = 4;

inline int64_t lanes() {
  return static_cast<int64_t>(hn::Lanes(D()));
}

// C[R, kNvUsed lanes] (row stride ldc) (+)= sum over p < kc of A(r, p) * bp[p][c], where
// A(r, p) = ap[p aks + r]: a packed panel (aks = kMr) or R rows of a column-major A read in place
// (aks its k stride); or, kARows, A(r, p) = ap[r kGemmARowStride + p]: R rows of a row-major A
// read in place (the stride a constant, so that each row is a displacement off one register).
// B(p, c) = bp[p bks + c]: a packed panel (bks = nr = kNv lanes, 64-byte aligned), or nr columns
// of a row-major B read in place (bks its row stride). R = kMr, kNvUsed = kNv is the
// micro-kernel; fewer rows or vectors serve the edges (a panel of 2 rows, as T = 1024 leaves in
// attention's blocks of 14-row panels, would otherwise cost a whole panel's FMAs).
template <int R, int kNvUsed, bool kARows>
HWY_ATTR void microKernelOf(int64_t kc, const float *HWY_RESTRICT ap, int64_t aks,
                            const float *HWY_RESTRICT bp, int64_t bks, float *HWY_RESTRICT c,
                            int64_t ldc, bool add) {
  const D d;
  const int64_t n = lanes();
  V acc[R][kNvUsed];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNvUsed; ++v)
      acc[r][v] = hn::Zero(d);
  for (int64_t p = 0; p < kc; ++p) {
    V b[kNvUsed];
#pragma GCC unroll 4
    for (int v = 0; v < kNvUsed; ++v)
      b[v] = hn::LoadU(d, bp + p * bks + v * n);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const V a = hn::Set(d, kARows ? ap[r * workspace::kGemmARowStride + p] : ap[p * aks + r]);
#pragma GCC unroll 4
      for (int v = 0; v < kNvUsed; ++v)
        acc[r][v] = hn::MulAdd(a, b[v], acc[r][v]);
    }
  }
  // Unrolled (the pragmas) and two store loops rather than one with `add ?` inside, so that GCC
  // keeps the accumulators in registers from the zeroing to the stores: otherwise it zero-filled a
  // stack copy of all 28, spilled them there after the k loop and read them back (~84 memory
  // operations a call; 1-4% of a large product, 4% of an attention-sized one).
  if (add) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kNvUsed; ++v) {
        float *to = c + r * ldc + v * n;
        hn::StoreU(hn::Add(hn::LoadU(d, to), acc[r][v]), d, to);
      }
    return;
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < kNvUsed; ++v)
      hn::StoreU(acc[r][v], d, c + r * ldc + v * n);
}

// The micro-kernels of one A layout by size: [rows - 1][vectors - 1].
using MicroKernel = void (*)(int64_t, const float *, int64_t, const float *, int64_t, float *,
                             int64_t, bool);
using MicroKernels = std::array<std::array<MicroKernel, kNv>, kMr>;
// The table of a family of micro-kernels: Of<R, Nv>::fn is the one of R rows and Nv vectors.
template <template <int, int> class Of, int R, size_t... Nv>
constexpr std::array<MicroKernel, kNv> kernelsOfRows(std::index_sequence<Nv...>) {
  return {Of<R, static_cast<int>(Nv) + 1>::fn...};
}
template <template <int, int> class Of, size_t... R>
constexpr MicroKernels kernelsOf(std::index_sequence<R...>) {
  return {kernelsOfRows<Of, static_cast<int>(R) + 1>(std::make_index_sequence<kNv>())...};
}
template <template <int, int> class Of> constexpr MicroKernels kernelTable() {
  return kernelsOf<Of>(std::make_index_sequence<kMr>());
}
template <int R, int Nv> struct PanelKernel {
  static constexpr MicroKernel fn = &microKernelOf<R, Nv, false>;
};
template <int R, int Nv> struct RowKernel {
  static constexpr MicroKernel fn = &microKernelOf<R, Nv, true>;
};
constexpr MicroKernels kPanelKernels = kernelTable<PanelKernel>();
constexpr MicroKernels kRowKernels = kernelTable<RowKernel>();

// The f32 packs of A and B into panels, and their 16 x 16 transposes.
#include "runtime/kernels/gemm_pack.inc" // NOLINT(bugprone-suspicious-include): per target

// C[0 : mc, 0 : nc] (row stride ldc) (+)= A-block * B-block: ap holds the packed rows, bp the
// packed columns of one Kc slice, their micro-panels aStride and bStride floats apart, k aks
// floats apart within an A panel (kMr when packed) and bks within a B panel (nr when packed);
// kernels: those of A's layout; `add` says whether C already holds a partial sum.
// The tiles' order: by A's micro-panels (each kept in L1 while B's micro-panels stream past from
// L2), or with columnsOuter by B's (each kept while A's stream past). Every tile is the same
// kernel call either way, so the bits do not depend on it; where each is faster is measured
// (BlockPath::columnsOuter).
// aRowBytes: where any row of A may start a panel (A as rows, or column-major read in place),
// the bytes from one row's start to the next's (aStride is then unused); 0 for packed panels,
// aStride apart. Then a last panel of fewer than half kMr rows shares the rows of the panel
// before it (256 = 17 x 14 + 9 + 9, not 18 x 14 + 4): a micro-kernel of few rows has too few
// independent sums to hide the latency of its FMAs or vdpbf16ps (4 rows by 2 vectors: 8 sums;
// the 4-row panel took 2.4% of 1x256x2304x768's time for 1.6% of its FLOPs). kiln_gemm_bench
// bf16 stored, 4 alternating runs, medians: 64x128x128x64 (9 x 14 + 2 rows) 847 -> 892 GFLOP/s,
// 1x256x2304x768 855 -> 866; in 1x256x768x3072 (perf) the 9-row panels cost what 14-row ones do
// a row, the 4-row one 1.4 times that. Each row's sums are the same whatever its panel's height,
// so the bits are too.
void blockProduct(float *c, int64_t ldc, int64_t mc, int64_t nc, int64_t kc, const float *ap,
                  int64_t aStride, int64_t aks, const float *bp, int64_t bStride, int64_t bks,
                  bool add, const MicroKernels &kernels = kPanelKernels, bool columnsOuter = false,
                  int64_t aRowBytes = 0) {
  const int64_t nr = kNv * lanes();
  alignas(64) float edge[kMr * workspace::kGemmNr];
  // The rows of the panel that starts at row ir.
  auto height = [&](int64_t ir) -> int64_t {
    const int64_t left = mc - ir;
    if (aRowBytes > 0 && left > kMr && left < kMr + kMr / 2)
      return (left + 1) / 2;
    return std::min<int64_t>(kMr, left);
  };
  auto tile = [&](int64_t ir, int64_t rows, int64_t jr) {
    const int64_t cols = std::min(nr, nc - jr);
    const float *apanel =
        aRowBytes > 0
            ? reinterpret_cast<const float *>(reinterpret_cast<const char *>(ap) + ir * aRowBytes)
            : ap + (ir / kMr) * aStride;
    const float *bpanel = bp + (jr / nr) * bStride;
    float *to = c + ir * ldc + jr;
    const MicroKernel kernel = kernels[rows - 1][(cols + lanes() - 1) / lanes() - 1];
    if (cols % lanes() == 0) // whole vectors: straight into C
      return kernel(kc, apanel, aks, bpanel, bks, to, ldc, add);
    kernel(kc, apanel, aks, bpanel, bks, edge, nr, false);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        to[r * ldc + j] = add ? to[r * ldc + j] + edge[r * nr + j] : edge[r * nr + j];
  };
  if (columnsOuter) {
    for (int64_t jr = 0; jr < nc; jr += nr)
      for (int64_t ir = 0, rows; ir < mc; ir += rows)
        tile(ir, rows = height(ir), jr);
    return;
  }
  for (int64_t ir = 0, rows; ir < mc; ir += rows) {
    rows = height(ir);
    for (int64_t jr = 0; jr < nc; jr += nr)
      tile(ir, rows, jr);
  }
}

// An operand's elements as T: float, or uint16_t where they are bf16 (MatrixRef::bf16).
template <class T> const T *elementsOf(const MatrixRef &m) {
  if constexpr (std::is_same_v<T, float>)
    return m.data;
  else
    return m.bf16;
}
// A vector of floats at p, or of bf16 widened to f32 (exact); and its first count (< lanes)
// elements, the rest zero.
HWY_INLINE HWY_ATTR V loadAsF32(D d, const float *p) {
  return hn::LoadU(d, p);
}
HWY_INLINE HWY_ATTR V loadAsF32(D d, const uint16_t *p) {
  const hn::Rebind<uint16_t, D> d16;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(vm::DU(), hn::LoadU(d16, p))));
}
HWY_INLINE HWY_ATTR V loadFirstAsF32(D d, const float *p, size_t count) {
  return vm::loadFirst(d, p, count);
}
HWY_INLINE HWY_ATTR V loadFirstAsF32(D d, const uint16_t *p, size_t count) {
  HWY_ALIGN uint16_t buf[hn::MaxLanes(D())] = {};
  std::copy_n(p, count, buf);
  return loadAsF32(d, buf);
}

// The bf16 products: pair packing, their micro-kernels, decoding on vdpbf16ps, AMX tiles.
#include "runtime/kernels/gemm_bf16.inc" // NOLINT(bugprone-suspicious-include): per target

// Products of few rows (decoding): matrix-vector products that read B once.
#include "runtime/kernels/gemm_few_rows.inc" // NOLINT(bugprone-suspicious-include): per target

void zeroRows(const Gemm &g, float *c, int64_t i0, int64_t mc) {
  for (int64_t i = i0; i < i0 + mc; ++i)
    std::fill(c + i * g.ldc, c + i * g.ldc + g.n, 0.0f);
}

// bf16 products: the packed panels of `width` rows or columns (panels of w, kc deep) as pairs.
void pairIfBf16(const Gemm &g, float *pack, int64_t width, int64_t w, int64_t kc) {
  if (g.bf16)
    pairPanels(pack, (width + w - 1) / w, kc * w, kc, w);
}
// The steps of a micro-kernel over kc: pairs of k for bf16 products.
int64_t kSteps(const Gemm &g, int64_t kc) {
  return g.bf16 ? (kc + 1) / 2 : kc;
}

// How a product's blocks are packed and multiplied: the micro-kernels (f32, or bf16 pairs on
// vdpbf16ps or f32 FMAs), or bf16 on AMX tiles. bf16 products pack pairs straight from the
// operands (gemm_bf16.inc: by vector instructions where the CPU has vdpbf16ps, else by scalar
// rounding), where B has a unit stride; else f32 packs made pairs after (pairPanels).
// AMX's blocks of k are always 2 Kc (pairs: the floats of Kc), so that each C tile is loaded and
// stored half as often.
// AMX's row blocks are whole 32-row strips of C tiles (at most Mc rows): a block of the micro-
// kernels' kMr-row panels would end inside a strip, whose rows then go through the edge buffer
// and whose tiles are multiplied in full for the rows they hold (147-row blocks took 160 rows of
// tiles and copied 19 rows in and out twice per block of k).
struct BlockPath {
  const MicroKernels *kernels; // those of packed A's layout (panels, or rows: aPackRows)
  bool amx;
  bool pairs;                           // packed straight into pairs
  bool native = false;                  // by vdpbf16ps' instructions
  int64_t kBlock = workspace::kGemmKc;  // k per block
  int64_t ncBlock = workspace::kGemmNc; // columns per block
  bool aRows = false;                   // A read in place as rows of pairs (readsARows)
  bool columnsOuter = false;            // blockProduct's order (gemmByColumns sets it)
  bool aPackRows = false;               // A packed as rows of pairs (pathFor)
  // The floats a block of kc k takes per packed row or column.
  int64_t floatsPerK(int64_t kc) const { return pairs ? (kc + 1) / 2 : kc; }
  // The rows a block of rows is a multiple of, and the most it holds.
  int64_t rowUnit() const { return amx ? 32 : kMr; }
  int64_t mc() const { return workspace::kGemmMc / rowUnit() * rowUnit(); }
};

// Whether the vdpbf16ps micro-kernels read a bf16 A in place, its rows as they are, instead of
// packing its blocks: a row-major A of bf16 elements holds k = 2q and 2q + 1 side by side, which
// is a pair as the instruction takes it (kBf16NativeHalvesKernels), wherever a block of k is a
// whole number of pairs; an odd last block (odd k) is packed (readsInPlace). The micro-kernel then
// reads kMr rows' runs instead of one panel: rows whose starts fall into few L1 sets (a stride
// near a multiple of 4 KiB) would evict each other, and those keep the pack. The same pairs in
// the same order as packed: the same bits. The pack it saves is a transpose of 16 x 16 pairs per
// 32 k of 14 rows, done per block and, by columns, per part: kiln_gemm_bench bf16 from bf16
// operands, medians of 4 alternating runs, GFLOP/s: 64x128x128x64 612 -> 699, 64x128x64x128_bT
// 632 -> 673, 1x2048x256x256 742 -> 779, 1x256x768x3072_bT 716 -> 728, 1x2048x256x768_bT
// 765 -> 781.
bool readsARows(const Gemm &g) {
  if (!g.a.bf16 || g.a.colStride != 1)
    return false;
  // The L1 set (64 of 64 bytes on Zen 5, 12 ways; 4 KiB apart share one) of each panel row's
  // start: at most 7 rows to a set (strides of 2 or 6 KiB: two sets of 7) leave ways for B's
  // panel streaming past; those measured 1-3% faster read in place than packed (1x2048x1024x256,
  // 1x256x3072x768, 1x1024x1024x1024; 3 alternating runs against at most 4).
  std::array<int, 64> rowsInSet{};
  for (int64_t r = 0; r < kMr; ++r)
    if (++rowsInSet[static_cast<size_t>(r * 2 * g.a.rowStride % 4096 / 64)] > 7)
      return false;
  return true;
}

BlockPath pathFor(const Gemm &g, bool bf16Native, bool amx) {
  (void)amx;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (g.bf16 && bf16Native && amx && (g.a.colStride == 1 || g.a.rowStride == 1) &&
      (g.b.colStride == 1 || g.b.rowStride == 1))
    return {&kBf16NativeKernels, true, true, true, 2 * workspace::kGemmKc};
#endif
  const bool native = nativeBf16(bf16Native);
  if (!g.bf16 || (g.b.colStride != 1 && g.b.rowStride != 1))
    return {&kernelsFor(g, native, false), false, false};
  // Pairs take half the floats of f32 per k, so a block of the f32 scratch holds twice the k or
  // twice the columns: 2 Kc where k is deeper than Kc (C read and written, and the threads met,
  // half as often: kiln_gemm_bench 1x256x2048x256_aT +17%), else 2 Nc (a product of up to 2 Nc
  // columns packs its f32 A once, which the packs read from memory: 6% of the benchmark GPT's
  // bf16 step for A with 1024 columns packed twice); the scratch holds 2 Nc from k = 8 on:
  // ceil(kc / 2) 2 Nc <= kc (Nc + Nr). The f32 FMAs' fallback takes the same blocks, so that the
  // two give the same bits.
  // A row-major A packed (not read in place) on vdpbf16ps is packed as rows of pairs, each row's
  // run rounded and stored as it is, for the micro-kernels that read rows (kBf16NativeRowsKernels,
  // as A read in place), instead of panels, which took a 16 x 16 transpose of pairs per 32 k of
  // 14 rows: the same pairs summed in the same order, the same bits. Rows kc2 pairs apart (at most
  // 1 KiB) put at most 4 of a panel's 14 rows in one L1 set (readsARows). kiln_gemm_bench bf16
  // from f32 operands, 3-5 alternating runs: 64x128x128x64 +3% (the pack 19 -> 15% of its time),
  // 1x256x768x2304_bT +3%, 1x1024x1024x1024 +1-4%, the other shapes within noise.
  const bool deep = g.k > workspace::kGemmKc, packsRows = native && g.a.colStride == 1;
  return {&kernelsFor(g, native, packsRows),
          false,
          true,
          native,
          deep ? 2 * workspace::kGemmKc : workspace::kGemmKc,
          !deep && g.k >= 8 ? 2 * workspace::kGemmNc : workspace::kGemmNc,
          native && readsARows(g),
          false,
          packsRows};
}

// Packs k [p0, p0 + kc) x columns [j0, j0 + nc) of B for `path` at `out`: micro-panels of nr
// columns, path.floatsPerK(kc) * nr floats apart, f32 or bf16 pairs.
void packBlockB(const Gemm &g, const BlockPath &path, int64_t z, int64_t p0, int64_t kc, int64_t j0,
                int64_t nc, float *out) {
  const int64_t nr = kNv * lanes();
  auto *pairs = reinterpret_cast<uint32_t *>(out);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (path.pairs && path.native)
    return g.b.bf16 ? packBPairs<uint16_t>(g.b, z, p0, kc, j0, nc, pairs)
                    : packBPairs<float>(g.b, z, p0, kc, j0, nc, pairs);
#endif
  if (path.pairs)
    return packBPairsScalar(g.b, z, p0, kc, j0, nc, pairs);
  packB(g.b, z, p0, kc, j0, nc, nr, out);
  pairIfBf16(g, out, nc, nr, kc);
}

// Packs rows [i0, i0 + mc) x k [p0, p0 + kc) of A into `ap` for `path`: micro-panels of kMr
// rows (f32, or pairs), or AMX's rows of pairs; either way row i0 + r starts r floatsPerK(kc)
// floats on where r is a multiple of the panel's rows, so that runs of panels packed apart make
// one block.
void packBlockA(const Gemm &g, const BlockPath &path, int64_t z, int64_t i0, int64_t mc, int64_t p0,
                int64_t kc, float *ap) {
  if (path.pairs) {
    auto *pairs = reinterpret_cast<uint32_t *>(ap);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    if (path.amx || path.aPackRows) // AMX's tiles of 16 rows, or the micro-kernels' rows
      return (g.a.bf16 ? packAPairs<uint16_t> : packAPairs<float>)(g.a, z, i0, mc, p0, kc, pairs,
                                                                   (kc + 1) / 2, path.amx ? 16 : 1);
    if (path.native)
      return (g.a.bf16 ? packAPanelPairs<uint16_t> : packAPanelPairs<float>)(g.a, z, i0, mc, p0, kc,
                                                                             pairs);
#endif
    return packAPanelPairsScalar(g.a, z, i0, mc, p0, kc, pairs);
  }
  packA(g.a, z, i0, mc, p0, kc, ap);
  pairIfBf16(g, ap, mc, kMr, kc);
}

// C[0 : mc, 0 : nc] at c (row stride g.ldc) (+)= the packed A block (packBlockA's, mc rows) times
// the packed B block (nc columns), kc deep; adding to C if `add`.
void productBlock(const Gemm &g, const BlockPath &path, int64_t mc, int64_t kc, const float *ap,
                  const float *bp, int64_t nc, float *c, bool add) {
  const int64_t nr = kNv * lanes();
  if (path.pairs) {
    const int64_t kc2 = (kc + 1) / 2;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    if (path.amx)
      return amxProduct(c, g.ldc, mc, nc, kc2, reinterpret_cast<const uint32_t *>(ap), kc2, bp,
                        kc2 * nr, add);
#endif
    // A's pairs kMr apart in a panel, or kc2 apart in rows (path.kernels reads either).
    return blockProduct(c, g.ldc, mc, nc, kc2, ap, kc2 * kMr, path.aPackRows ? kc2 : kMr, bp,
                        kc2 * nr, nr, add, *path.kernels, path.columnsOuter,
                        path.aPackRows ? 4 * kc2 : 0);
  }
  blockProduct(c, g.ldc, mc, nc, kSteps(g, kc), ap, kc * kMr, kMr, bp, kc * nr, nr, add,
               *path.kernels, path.columnsOuter);
}

// Whether a block of kc k of A is read in place (BlockPath::aRows): a whole number of pairs.
bool readsInPlace(const BlockPath &path, int64_t kc) {
  return path.aRows && kc % 2 == 0;
}

// C[0 : mc, 0 : nc] at c (row stride g.ldc) (+)= rows [i0, i0 + mc) x k [p0, p0 + kc) of A, read
// in place (readsInPlace), times the packed B block (nc columns); adding to C if `add`.
void productOfRows(const Gemm &g, const BlockPath &path, int64_t z, int64_t i0, int64_t mc,
                   int64_t p0, int64_t kc, const float *bp, int64_t nc, float *c, bool add) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  const int64_t kc2 = kc / 2, nr = kNv * lanes(), lda = g.a.rowStride;
  const uint16_t *first = g.a.bf16 + z * g.a.batchStride + i0 * lda + p0;
  // A's rows 2 lda bytes apart (blockProduct's aRowBytes; no panel stride). The pointer may be
  // 2 bytes off a float's alignment; the kernels read it as halves.
  blockProduct(c, g.ldc, mc, nc, kc2, reinterpret_cast<const float *>(first), 0, lda, bp, kc2 * nr,
               nr, add, kBf16NativeHalvesKernels, path.columnsOuter, 2 * lda);
#else
  (void)g, (void)path, (void)z, (void)i0, (void)mc, (void)p0, (void)kc, (void)bp, (void)nc, (void)c,
      (void)add;
  HWY_ASSERT(false); // aRows is native only
#endif
}

// C[0 : mc, 0 : nc] at c (+)= rows [i0, i0 + mc) x k [p0, p0 + kc) of A times the packed B block:
// A read in place where readsInPlace, else from its packed block at ap (packBlockA's).
void productOfA(const Gemm &g, const BlockPath &path, int64_t z, int64_t i0, int64_t mc, int64_t p0,
                int64_t kc, const float *ap, const float *bp, int64_t nc, float *c, bool add) {
  if (readsInPlace(path, kc))
    return productOfRows(g, path, z, i0, mc, p0, kc, bp, nc, c, add);
  productBlock(g, path, mc, kc, ap, bp, nc, c, add);
}

// Packs rows [i0, i0 + mc) x k [p0, p0 + kc) of A into `ap` (unless read in place) and multiplies
// them by the packed B block (nc columns) into C at c (row stride g.ldc), adding to it if `add`.
void multiplyBlock(const Gemm &g, const BlockPath &path, int64_t z, int64_t i0, int64_t mc,
                   int64_t p0, int64_t kc, float *ap, const float *bp, int64_t nc, float *c,
                   bool add) {
  if (!readsInPlace(path, kc))
    packBlockA(g, path, z, i0, mc, p0, kc, ap);
  productOfA(g, path, z, i0, mc, p0, kc, ap, bp, nc, c, add);
}

// Scratch: one B block, then one A block per worker (sizes as support/workspace.h bounds them).
struct Scratch {
  float *b;
  float *a0;
  int64_t aFloats;
  Scratch(const Gemm &g, float *scratch) {
    const int64_t rows =
        std::min(g.m + workspace::kGemmMr, workspace::kGemmMc + workspace::kGemmMr);
    b = workspace::alignUp64(scratch);
    aFloats = (rows * std::min(g.k, workspace::kGemmKc) + 15) / 16 * 16;
    a0 = workspace::alignUp64(b + bFloats(g));
  }
  // The floats of one B block.
  static int64_t bFloats(const Gemm &g) {
    return std::min(g.k, workspace::kGemmKc) *
           std::min(g.n + workspace::kGemmNr, workspace::kGemmNc + workspace::kGemmNr);
  }
  float *a(int worker) const { return a0 + worker * aFloats; }
};

// Batches of small products, and few rows with many columns: by blocks of columns.
#include "runtime/kernels/gemm_columns.inc" // NOLINT(bugprone-suspicious-include): per target

// bf16Native: the CPU has vdpbf16ps and may use it (nativeBf16 says whether this target can);
// amx: it has AMX's bf16 tiles and the OS lets this process use them.
void gemmRun(const Gemm &g, runtime::ThreadPool *pool, float *scratch, bool bf16Native, bool amx) {
  if (fewRows(g))
    return g.a.bf16 ? gemmFewRowsWidened(g, pool, bf16Native) : gemmFewRows(g, pool, bf16Native);
  const BlockPath path = pathFor(g, bf16Native, amx);
  const int64_t threads = pool ? pool->threads() : 1;
  if (g.m <= workspace::kGemmMc && (g.batch >= threads || g.m <= kMr))
    return gemmByColumns(g, pool, scratch, 1, path);
  const int64_t nr = kNv * lanes();
  if (threads > 1 && g.m <= workspace::kGemmMc * threads && g.n >= 2 * nr * threads) {
    if (splitsRows(g, path))
      return gemmByRows(g, *pool, scratch, path);
    return sharesA(g, path) ? gemmSharedA(g, *pool, scratch, path)
                            : gemmByColumns(g, pool, scratch, threads, path);
  }
  // Row blocks of at most Mc rows, as many as a multiple of the threads, the micro-panels of kMr
  // rows dealt out evenly (block q starts at panel q P / blocks): every thread gets the same
  // number of panels give or take one (the split by rows changes no element's sum, so it may
  // depend on the threads).
  const int64_t unit = path.rowUnit(), panels = (g.m + unit - 1) / unit;
  const int64_t mcPanels = path.mc() / unit;
  const int64_t rounds = (panels + mcPanels * threads - 1) / (mcPanels * threads);
  const int64_t blocks = std::min(panels, rounds * threads);
  auto blockStart = [&](int64_t q) { return std::min(g.m, q * panels / blocks * unit); };
  Scratch s(g, scratch);
  // Each B block is packed once, by all threads (a strip each), then shared by all row blocks.
  // The epilogue runs once per block of rows, over whole rows, after the last block of columns
  // (gemmByRows does the same): a weight gradient's epilogue is its AdamW update, which streams
  // the weight, its two moments and its bf16 copy at C's shape, and on the segments of rows a
  // block of columns leaves it ran slower. GPT-2's fc2 weight gradient (C 768 x 3072 in blocks
  // of 1024 columns), bf16, 3 alternating runs: 12 products with their updates 41.8 / 38.7 /
  // 40.2 -> 33.8 / 32.4 / 33.4 ms a step. The rows' earlier blocks are then read back from L3,
  // which no other epilogue measured minded (the benchmark GPT's f32 step, whose bias-and-GELU
  // epilogues take 2 blocks of columns: 154.6 / 160.3 / 153.0 -> 152.6 / 148.1 / 147.3 ms).
  // Requesting the update's weight and moments from memory while the block is multiplied, so that
  // the update finds them in cache, did not pay (GPT-2's bf16 step, its 72 products with updates,
  // alternating runs: the products alone 47-53 ms, with the updates after them 74-88; the
  // products with every line requested by prefetcht1 from the micro-kernel's loop 63-65, every
  // fourth line 52-54; with the updates on 14-row pieces after such products 77-90), and an update
  // over data already in cache still takes ~14 ms (2 divisions and a square root an element).
  // Requesting the next block of B so slowed the micro-kernel alike (1x256x50257x768 bf16 from
  // f32, perf: the pack 18 -> 6% of the samples, the micro-kernel 60 -> 67%, GFLOP/s within
  // noise). Our reading, not measured: misses in flight hold the L1 miss buffers that the
  // micro-kernel's stream of B panels needs.
  for (int64_t z = 0; z < g.batch; ++z) {
    float *c = g.c + z * g.cBatchStride;
    if (g.k == 0 && !g.accumulate)
      zeroRows(g, c, 0, g.m);
    for (int64_t j0 = 0; j0 < g.n; j0 += path.ncBlock) {
      const int64_t nc = std::min(path.ncBlock, g.n - j0);
      // The threads pack B in runs of whole micro-panels, one run each.
      const int64_t strips = (nc + nr - 1) / nr, run = (strips + threads - 1) / threads;
      for (int64_t p0 = 0; p0 < g.k; p0 += path.kBlock) {
        const int64_t kc = std::min(path.kBlock, g.k - p0);
        runtime::runParts(pool, (strips + run - 1) / run, [&](int64_t q, int) {
          const int64_t from = q * run * nr, width = std::min(run * nr, nc - from);
          packBlockB(g, path, z, p0, kc, j0 + from, width, s.b + from * path.floatsPerK(kc));
        });
        const bool last = p0 + kc == g.k && j0 + nc == g.n;
        runtime::runParts(pool, blocks, [&](int64_t q, int worker) {
          const int64_t i0 = blockStart(q), mc = blockStart(q + 1) - i0;
          multiplyBlock(g, path, z, i0, mc, p0, kc, s.a(worker), s.b, nc, c + i0 * g.ldc + j0,
                        g.accumulate || p0 > 0);
          if (last) // whole rows (above)
            epilogueOn(g, path, z, i0, i0 + mc, 0, g.n);
        });
      }
    }
    if (g.k == 0)
      epilogueOn(g, path, z, 0, g.m, 0, g.n);
  }
}

int64_t panelRows() {
  return kMr;
}
int64_t panelCols() {
  return kNv * lanes();
}
int64_t vectorCols() {
  return lanes();
}
void packWholeA(const MatrixRef &a, int64_t m, int64_t k, float *out) {
  packA(a, 0, 0, m, 0, k, out);
}
void packWholeB(const MatrixRef &b, int64_t k, int64_t n, float *out) {
  packB(b, 0, 0, k, 0, n, kNv * lanes(), out);
}
// Pair operands (gemm.h: gemmPairsNative), which exist from AVX3 on; below it none is called.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
bool pairsNative(bool bf16) {
  return bf16;
}
void packWholeAPairs(const MatrixRef &a, int64_t m, int64_t k, uint32_t *out) {
  (a.bf16 ? packAPairs<uint16_t> : packAPairs<float>)(a, 0, 0, m, 0, k, out, (k + 1) / 2, 16);
}
void packWholeBPairs(const MatrixRef &b, int64_t k, int64_t n, uint32_t *out) {
  packBPairs<float>(b, 0, 0, k, 0, n, out);
}
// On AMX's tiles, or on vdpbf16ps by the micro-kernels that read A's rows of pairs (panels of kMr
// rows, kMr strides apart).
void productPairs(int64_t m, int64_t n, int64_t k2, PairOperand a, PairOperand b, float *c,
                  int64_t ldc, bool accumulate, bool amx) {
  const auto *bp = reinterpret_cast<const float *>(b.data);
  if (amx)
    return amxProduct(c, ldc, m, n, k2, a.data, a.stride, bp, b.stride, accumulate);
  blockProduct(c, ldc, m, n, k2, reinterpret_cast<const float *>(a.data), kMr * a.stride, a.stride,
               bp, b.stride, kNv * lanes(), accumulate, kBf16NativeRowsKernels, false,
               4 * a.stride);
}
#else
bool pairsNative(bool) {
  return false;
}
void packWholeAPairs(const MatrixRef &, int64_t, int64_t, uint32_t *) {
  HWY_ASSERT(false);
}
void packWholeBPairs(const MatrixRef &, int64_t, int64_t, uint32_t *) {
  HWY_ASSERT(false);
}
void productPairs(int64_t, int64_t, int64_t, PairOperand, PairOperand, float *, int64_t, bool,
                  bool) {
  HWY_ASSERT(false);
}
#endif

void productPacked(int64_t m, int64_t n, int64_t k, PackedOperand a, PackedOperand b, float *c,
                   int64_t ldc, bool accumulate) {
  if (k == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i)
        std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  // A read in place: row-major (rows kGemmARowStride floats apart) or column-major (a float).
  const int64_t aRowBytes = a.rowMajor ? 4 * workspace::kGemmARowStride : a.kStride ? 4 : 0;
  blockProduct(c, ldc, m, n, k, a.data, a.panelStride, a.kStride ? a.kStride : kMr, b.data,
               b.panelStride, b.kStride ? b.kStride : kNv * lanes(), accumulate,
               a.rowMajor ? kRowKernels : kPanelKernels, false, aRowBytes);
}

} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::kernels {

HWY_EXPORT(gemmRun);
HWY_EXPORT(nativeBf16);
HWY_EXPORT(panelRows);
HWY_EXPORT(panelCols);
HWY_EXPORT(vectorCols);
HWY_EXPORT(packWholeA);
HWY_EXPORT(packWholeB);
HWY_EXPORT(productPacked);
HWY_EXPORT(pairsNative);
HWY_EXPORT(packWholeAPairs);
HWY_EXPORT(packWholeBPairs);
HWY_EXPORT(productPairs);

int64_t gemmScratchFloats(const Gemm &g, int threads) {
  return workspace::gemmBytes(g.m, g.n, g.k) / 4 / workspace::kThreads * threads;
}

std::string_view gemmBf16Engine() {
  if (!HWY_DYNAMIC_DISPATCH(nativeBf16)(bf16Allowed()))
    return "f32 FMAs";
  return amxAllowed() ? "AMX" : "vdpbf16ps";
}

void gemm(const Gemm &g, runtime::ThreadPool *pool, float *scratch) {
  if (g.m == 0 || g.n == 0 || g.batch == 0)
    return;
  HWY_DYNAMIC_DISPATCH(gemmRun)(g, pool, scratch, g.bf16 && bf16Allowed(), g.bf16 && amxAllowed());
}

int64_t gemmPanelRows() {
  return HWY_DYNAMIC_DISPATCH(panelRows)();
}
int64_t gemmPanelCols() {
  return HWY_DYNAMIC_DISPATCH(panelCols)();
}
int64_t gemmVectorCols() {
  return HWY_DYNAMIC_DISPATCH(vectorCols)();
}
void packGemmA(const MatrixRef &a, int64_t m, int64_t k, float *out) {
  HWY_DYNAMIC_DISPATCH(packWholeA)(a, m, k, out);
}
void packGemmB(const MatrixRef &b, int64_t k, int64_t n, float *out) {
  HWY_DYNAMIC_DISPATCH(packWholeB)(b, k, n, out);
}
void gemmPacked(int64_t m, int64_t n, int64_t k, PackedOperand a, PackedOperand b, float *c,
                int64_t ldc, bool accumulate) {
  if (m > 0 && n > 0)
    HWY_DYNAMIC_DISPATCH(productPacked)(m, n, k, a, b, c, ldc, accumulate);
}

bool gemmPairsNative() {
  return HWY_DYNAMIC_DISPATCH(pairsNative)(bf16Allowed());
}
void packGemmAPairs(const MatrixRef &a, int64_t m, int64_t k, uint32_t *out) {
  HWY_DYNAMIC_DISPATCH(packWholeAPairs)(a, m, k, out);
}
void packGemmBPairs(const MatrixRef &b, int64_t k, int64_t n, uint32_t *out) {
  HWY_DYNAMIC_DISPATCH(packWholeBPairs)(b, k, n, out);
}
void gemmPairs(int64_t m, int64_t n, int64_t k2, PairOperand a, PairOperand b, float *c,
               int64_t ldc, bool accumulate) {
  if (m > 0 && n > 0)
    HWY_DYNAMIC_DISPATCH(productPairs)(m, n, k2, a, b, c, ldc, accumulate, amxAllowed());
}

void gemmScalar(const Gemm &g) {
  auto operand = [&](float x) { return g.bf16 ? roundToBf16(x) : x; };
  for (int64_t z = 0; z < g.batch; ++z) {
    float *c = g.c + z * g.cBatchStride;
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        float sum = 0;
        for (int64_t p = 0; p < g.k; ++p)
          sum += operand(g.a.at(z, i, p)) * operand(g.b.at(z, p, j));
        c[i * g.ldc + j] = g.accumulate ? c[i * g.ldc + j] + sum : sum;
      }
    if (g.epilogue.fn)
      g.epilogue.fn(g.epilogue.ctx, z, 0, 0, g.m, g.n, c, g.ldc);
  }
}

} // namespace kiln::kernels
#endif
