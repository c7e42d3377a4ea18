// Kernel workspace: how much scratch memory a runtime kernel needs to run one node, from the
// node's sizes. Shared by the op records (ir/, whose scratchBytes hook the memory plan reserves
// in its scratch region) and the kernels (runtime/, which carve that region up), so the two can
// never disagree. The blocking constants are the kernels' cache blocking; see the kernels for
// the machine reasons behind each.
#pragma once

#include <algorithm>
#include <cstdint>

#include "support/checked.h"

namespace kiln::workspace {

// The most threads a kernel splits one node over; each gets its own slice of the workspace.
inline constexpr int64_t kThreads = 8;

// p rounded up to the next 64-byte boundary (a cache line, one AVX-512 vector): where a kernel
// carves its aligned blocks out of the scratch (the sizes below leave the room).
inline float *alignUp64(float *p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<float *>((u + 63) & ~uintptr_t{63});
}

// GEMM (runtime/kernels/gemm.cc): each thread packs a block of at most kGemmMc rows x kGemmKc
// of A and kGemmKc x kGemmNc of B (rounded up to the micro-kernel's tile, at most kGemmMr rows
// and kGemmNr columns). Why these sizes: the packed A block (168 x 256 x 4 B = 168 KiB) and B
// block (256 x 512 x 4 B = 512 KiB) sit together in the 1 MiB L2 of a Zen 5 core, and one B
// micro-panel (256 x 32 x 4 B = 32 KiB) is what the micro-kernel streams while an A micro-panel
// stays in L1. kGemmMc is a multiple of every micro-kernel's row count (14 and 6).
inline constexpr int64_t kGemmMc = 168, kGemmKc = 256, kGemmNc = 512;
inline constexpr int64_t kGemmMr = 16, kGemmNr = 64; // upper bounds of the micro-tile
// Bytes for one GEMM of these sizes (f32 packing, 64-byte aligned blocks per thread).
constexpr int64_t gemmBytes(int64_t m, int64_t n, int64_t k) {
  int64_t kc = std::min(k, kGemmKc);
  int64_t rows = std::min(addSat(m, kGemmMr), kGemmMc + kGemmMr);
  int64_t cols = std::min(addSat(n, kGemmNr), kGemmNc + kGemmNr);
  int64_t perThread = addSat(addSat(mulSat(rows, kc), mulSat(kc, cols)), 32);
  return mulSat(mulSat(perThread, kThreads), 4);
}
// A matmul region whose results all take inputs' bytes has its GEMM write C into the node's
// scratch, from this offset (past the GEMM's workspace of gemmBytes) for cBytes more bytes.
constexpr int64_t regionBlockOffset(int64_t gemmWorkspaceBytes) {
  return addSat(gemmWorkspaceBytes, 63) / 64 * 64;
}

// Packed GEMM operands (runtime/kernels/gemm.h: packGemmA / packGemmB), on any target: an A of
// m rows in micro-panels of at most kGemmMr rows, a B of n columns in micro-panels of a divisor
// of kGemmNr columns, both k deep, rounded up to 64 bytes.
constexpr int64_t roundUp16(int64_t n) {
  return addSat(n, 15) / 16 * 16;
}
constexpr int64_t gemmPackAFloats(int64_t m, int64_t k) {
  return roundUp16(mulSat(addSat(m, kGemmMr), k));
}
constexpr int64_t gemmPackBFloats(int64_t k, int64_t n) {
  return roundUp16(mulSat(k, addSat(n, kGemmNr - 1) / kGemmNr * kGemmNr));
}
// The same as bf16 pairs (gemm.h: packGemmAPairs / packGemmBPairs): m rows (a multiple of 16) of
// (k + 1) / 2 pairs; n columns in panels of 32, (k + 1) / 2 pairs deep.
constexpr int64_t pairPackAFloats(int64_t m, int64_t k) {
  return roundUp16(mulSat(roundUp16(m), addSat(k, 1) / 2));
}
constexpr int64_t pairPackBFloats(int64_t k, int64_t n) {
  return roundUp16(mulSat(addSat(k, 1) / 2, addSat(n, 31) / 32 * 32));
}

// Flash attention (runtime/kernels/attention.cc): each thread holds the logits, then the
// probabilities, of a tile of kAttnBq query rows against kAttnBk keys (the backward a second tile
// for their gradients), three numbers per row (running max, running sum, delta), a bias row and a
// mask row gathered from strided operands, and the tile products' operands packed for the GEMM
// micro-kernel (those it does not read in place): each packed once and used many times (a kv
// head's keys and values for every query block, a block's queries for every key tile). Why these
// sizes: a whole tile's products are then whole micro-tiles of the GEMM (14 x 32: 112 = 8 x 14,
// 448 = 32 x 14 = 14 x 32); only ragged last blocks and tiles take its edge kernels. The kernels
// work a strip of 14 rows at a time (14 x 448 floats = 25 KiB, in L1 from its product through
// its row operations to the product that reads it); the backward's whole tiles (196 KiB each)
// are read once more from L2 by the products over keys. Measured at T = 512 ... 4096
// (bench/attention_bench.cc, fused/1024, medians of 12 interleaved runs): 448 keys 1.3% faster
// than 224 (fewer tiles a row: fewer rescales, calls and tails), 896 no faster; 112 rows faster
// than 56, 84, 168 or 224. kAttnBk is a multiple of every micro-panel width (<= 32 columns), so
// that a key tile starts on a panel of a packed window. A kv head's keys are packed a window at a
// time, whole tiles of at most kAttnPackFloats (1 MiB) per packed operand: the whole head up to
// 4032 keys of 64, and a workspace that stops growing with T beyond.
// With bf16 products (attention's bf16_products) the packs are as large as either engine's (f32
// micro-panels of rounded values, or pairs for AMX and vdpbf16ps: gemm.h), row blocks are whole
// strips of 32 rows (AMX's 2 x 16-row tiles of C), and `pairs` holds the A operand of pairs packed
// from a tile: a strip of P or dS, or (backward) the whole tile's P^T or dS^T.
inline constexpr int64_t kAttnBq = 112, kAttnBk = 448, kAttnPackFloats = int64_t{1} << 18;
inline constexpr int64_t kAttnPairStrip = 32;
static_assert(kAttnBk % 32 == 0);
// The row stride of attention's score and gradient tiles, which the GEMM reads in place as a
// row-major A (PackedOperand.rowMajor): a constant, so that the micro-kernel reaches each of its
// rows by a displacement.
inline constexpr int64_t kGemmARowStride = kAttnBk;
struct AttentionLayout { // floats per thread, each part rounded up to 16 (64 bytes)
  int64_t bq, bk, tile, rows, gathered;
  int64_t blockA, blockB; // a block of query rows (Q, dO) packed as A, and as B (the backward's)
  int64_t window;         // keys per packed window (a multiple of bk, or tk)
  int64_t head;           // a window of a kv head's keys packed: K^T, V (backward: K^T, V^T, K)
  int64_t pairs;          // bf16 products: a tile's strip (backward: or the tile) as A of pairs
  int64_t perThread;      // all of the above, plus 16 to align the start
};
constexpr AttentionLayout attentionLayout(int64_t tq, int64_t tk, int64_t d, int64_t dv,
                                          bool backward, bool bf16) {
  AttentionLayout l{};
  // Blocks of rows as even as whole AVX-512 micro-panels (14 rows) allow: T = 128 as 70 + 58
  // rows rather than 112 + 16 (the bench GPT's attention backward: 14.1 -> 13.7 ms a step).
  // With bf16 products, as even as whole strips of 32 rows allow (T = 128 as 64 + 64).
  const int64_t rowBlocks = std::max<int64_t>(1, (tq + kAttnBq - 1) / kAttnBq);
  const int64_t strip = bf16 ? kAttnPairStrip : 14;
  l.bq = std::max<int64_t>(
      1, std::min(tq, ((tq + rowBlocks - 1) / rowBlocks + strip - 1) / strip * strip));
  l.bk = std::max<int64_t>(1, std::min(tk, kAttnBk));
  l.tile = roundUp16(mulSat(l.bq, kGemmARowStride)); // rows kGemmARowStride apart
  l.rows = roundUp16(mulSat(3, l.bq));
  l.gathered = roundUp16(mulSat(2, l.bk));
  const int64_t width = std::max(d, dv);
  l.blockA = gemmPackAFloats(l.bq, width);
  l.blockB = gemmPackBFloats(l.bq, width);
  const int64_t fit = std::max<int64_t>(1, kAttnPackFloats / std::max<int64_t>(width, 1) / l.bk);
  l.window = std::min(std::max<int64_t>(tk, 1), mulSat(fit, l.bk));
  l.head = std::max(gemmPackBFloats(width, l.window), gemmPackBFloats(l.window, width));
  if (bf16) {
    l.blockA = std::max(l.blockA, pairPackAFloats(l.bq, width));
    l.blockB = std::max(l.blockB, pairPackBFloats(l.bq, width));
    l.head = std::max({l.head, pairPackBFloats(width, l.window), pairPackBFloats(l.window, width)});
    l.pairs = pairPackAFloats(kAttnPairStrip, l.bk);
    if (backward)
      l.pairs = std::max(l.pairs, pairPackAFloats(l.bk, l.bq));
  }
  // forward: S (then P); Q as A; K^T and V. backward: S (then P) and dS; Q and dO as A and as
  // B; K^T, V^T and K. (The f32 products read P and dS in place as A: no tile is packed.)
  const int64_t blocks = backward ? 2 * (l.blockA + l.blockB) : l.blockA;
  l.perThread =
      addSat(addSat(mulSat(backward ? 2 : 1, l.tile), addSat(l.rows, l.gathered)),
             addSat(addSat(blocks, mulSat(backward ? 3 : 2, l.head)), addSat(l.pairs, 16)));
  return l;
}
constexpr int64_t attentionBytes(int64_t tq, int64_t tk, int64_t d, int64_t dv, bool backward,
                                 bool bf16) {
  return mulSat(mulSat(attentionLayout(tq, tk, d, dv, backward, bf16).perThread, kThreads), 4);
}

} // namespace kiln::workspace
