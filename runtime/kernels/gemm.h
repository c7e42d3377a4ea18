// GEMM, the kernel that carries most of a Transformer's FLOPs: batched C = op(A) op(B) (+ C), f32,
// or with bf16 products (Gemm::bf16: mixed precision).
// Operands are strided views: element (b, i, j) of a logical matrix is at
// data[b * batchStride + i * rowStride + j * colStride], so a transposed operand (a Linear
// weight [N, K], a head-major [B, H, T, D] tensor read as [B*H] x [T, D]) is a stride choice,
// never a copy: packing absorbs every layout. See gemm.cc for the blocking and its reasons.
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/kernels/bf16_instructions.h"
#include "support/bf16.h"

namespace kiln::runtime {
class ThreadPool;
}

namespace kiln::kernels {

// bf16: the elements are stored as bf16 (their bits, at these strides; data unused), as inference
// weights and the activations that only bf16 products read may be. gemm() reads such an A or B on
// every path, with the bits of an operand of f32 elements holding the same values.
struct MatrixRef {
  const float *data = nullptr;
  int64_t rowStride = 0, colStride = 1, batchStride = 0;
  const uint16_t *bf16 = nullptr;
  float at(int64_t b, int64_t i, int64_t j) const {
    const int64_t e = b * batchStride + i * rowStride + j * colStride;
    return bf16 ? fromBf16Bits(bf16[e]) : data[e];
  }
};

// Called on finished blocks of C (all of K summed): rows [row, row + rows) and columns
// [col, col + cols) of batch `batch`, at c (row stride ldc, columns contiguous). This is where a
// matmul's bias, activation and residual are applied while the block is still in cache.
struct GemmEpilogue {
  void (*fn)(void *ctx, int64_t batch, int64_t row, int64_t col, int64_t rows, int64_t cols,
             float *c, int64_t ldc) = nullptr;
  void *ctx = nullptr;
};

struct Gemm {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  MatrixRef a, b;     // logical [m, k] and [k, n]
  float *c = nullptr; // [m, n], row stride ldc, columns contiguous
  int64_t ldc = 0, cBatchStride = 0;
  bool accumulate = false; // C += A B (gradient accumulation), else C = A B
  // bf16 products: A and B rounded to bf16 (to nearest, ties to even) as they are packed, their
  // products (exact in f32: 8 x 8 significant bits) summed in f32. A and B stay f32 in memory.
  // On AMX tiles, or on vdpbf16ps, which adds the products of k = 2i + 1 and then of k = 2i to its
  // f32 sum, each rounded; elsewhere f32 FMAs in that order give vdpbf16ps's bits (for normal
  // numbers: the instruction flushes values below 2^-126 to zero). See gemmBf16Engine.
  bool bf16 = false;
  GemmEpilogue epilogue;
};

// Workspace floats gemm() needs with `threads` workers (runtime/ scratch, 64-byte aligned).
int64_t gemmScratchFloats(const Gemm &g, int threads);

// Runs g on the pool (null: the calling thread only) with `scratch` of gemmScratchFloats floats.
// The result does not depend on the number of threads: every element of C is summed over K in
// the same order whatever the split. Products of at most 4 rows (decoding) sum in another fixed
// order (dot products in vector lanes), so a row can differ in its last bits from the same row
// of a larger product.
void gemm(const Gemm &g, runtime::ThreadPool *pool, float *scratch);

// The scalar twin: the same contract in three plain loops (k in order), the oracle of the tests.
void gemmScalar(const Gemm &g);

// What runs bf16 products here: "AMX" (tiles, where the CPU has AMX-BF16 and the OS grants it),
// "vdpbf16ps" (AVX512_BF16) or "f32 FMAs" (any other CPU or SIMD target). AMX sums a tile's pairs
// in its own order, so its bits differ from the other two's in the last places.
std::string_view gemmBf16Engine();

// Pre-packed operands (f32 products only), for a caller that multiplies the same operands many
// times on one thread (attention's tiles): pack once with packGemmA / packGemmB, then gemmPacked
// per product. A packed A holds m rows as micro-panels of gemmPanelRows() rows, each [k][rows]; a
// packed B holds n columns as micro-panels of gemmPanelCols() columns, each [k][cols]; the edges
// are zero. The panels follow each other at panelStride floats (k * rows, k * cols as packed). A
// product may use part of a pack: the panels from the one at `data` on (so a slice starts at a
// multiple of the panel size), k from any p0 on (data + p0 * panel size, with the pack's
// panelStride). Buffers are 64-byte aligned; their sizes are workspace::gemmPackAFloats /
// gemmPackBFloats. An A may also be read in place where its rows are contiguous at each k (a
// column-major matrix: the transpose of a row-major one, attention's P^T and dS^T): data its
// element (0, 0), kStride the floats from one k to the next, panelStride = gemmPanelRows(). Or
// where it is row-major with rows workspace::kGemmARowStride floats apart (attention's P and dS
// tiles): rowMajor, data its element (0, 0), panelStride = gemmPanelRows() rows. Read in place,
// only A's m rows and k columns are read. A B may be read in place where it is row-major (keys,
// values, queries as they lie in memory): data its element (0, 0), kStride its row stride,
// panelStride = gemmPanelCols(); n must be a multiple of gemmPanelCols() (whole panels are read).
struct PackedOperand {
  const float *data = nullptr;
  int64_t panelStride = 0;
  int64_t kStride = 0;   // 0 for a pack (the panel's rows or columns)
  bool rowMajor = false; // A only
};
int64_t gemmPanelRows();
int64_t gemmPanelCols();
// The columns of one vector: a product whose columns end at a multiple of it stores them
// straight into C (no edge copy), and computes no wasted column past the last vector.
int64_t gemmVectorCols();
void packGemmA(const MatrixRef &a, int64_t m, int64_t k, float *out);
void packGemmB(const MatrixRef &b, int64_t k, int64_t n, float *out);
// C[m, n] (+)= A B on the calling thread, summed over k in order (for k <= kGemmKc the very sums
// of gemm() of more than 4 rows).
void gemmPacked(int64_t m, int64_t n, int64_t k, PackedOperand a, PackedOperand b, float *c,
                int64_t ldc, bool accumulate);

// Pre-packed bf16 operands, the same use as the above (attention's bf16 products), where
// gemmPairsNative(): the CPU has AVX512_BF16, may use it, and the dispatched target is AVX3 or
// later (else none of the three below may be called). The products run on AMX's tiles where the
// CPU has AMX-BF16 and the OS grants it, else on vdpbf16ps. Packing rounds f32 to bf16 (to
// nearest, ties to even). A packed A holds m rows (zero rows up to a multiple of 16) of
// (k + 1) / 2 pairs: k = 2q in a pair's low half, 2q + 1 in its high, a missing last k zero;
// gemmPairs reads A's rows `stride` uint32 apart, so the rows from r0 on of a pack start at
// r0 (k + 1) / 2, a whole 16 rows where the product has more than 16 (it reads 32 then). A packed
// B holds n columns as panels of 32 (zero past n), each (k + 1) / 2 rows of 32 pairs, a panel's
// stride (k + 1) / 2 * 32 uint32 apart: the columns from j0 (a multiple of 32) on start j0 / 32
// strides on, the pairs from q0 on q0 * 32 further. gemmPairs: C[m, n] (+)= A B over k2 pairs,
// each element summed pair after pair in the same order whatever m, n or the caller's blocking
// (AMX by 32 x 32 tiles of C, vdpbf16ps by the micro-kernels' tiles). Sizes:
// workspace::pairPackAFloats / pairPackBFloats.
struct PairOperand {
  const uint32_t *data = nullptr;
  int64_t stride = 0; // A: between rows; B: between panels of 32 columns
};
bool gemmPairsNative();
void packGemmAPairs(const MatrixRef &a, int64_t m, int64_t k, uint32_t *out);
void packGemmBPairs(const MatrixRef &b, int64_t k, int64_t n, uint32_t *out);
void gemmPairs(int64_t m, int64_t n, int64_t k2, PairOperand a, PairOperand b, float *c,
               int64_t ldc, bool accumulate);

} // namespace kiln::kernels
