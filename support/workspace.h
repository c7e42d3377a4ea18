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

// Flash attention (runtime/kernels/attention.cc): each thread holds the logits, then the
// probabilities, of a tile of kAttnBq query rows against kAttnBk keys (the backward a second tile
// for their gradients), three numbers per row (running max, running sum, delta), a bias row and a
// mask row gathered from strided operands, and the packing of the tile products' GEMMs. Why these
// sizes: every product's rows and columns are then whole micro-tiles of the GEMM (14 x 32: 112 =
// 8 x 14, 224 = 16 x 14 = 7 x 32), so no tile goes through the GEMM's edge path; a 112 x 224
// tile is 98 KiB, in L2 with the K and V tiles (224 x 64 x 4 B = 56 KiB each). Measured at
// T = 512 ... 4096 (bench/attention_bench.cc): 5-10% faster than 64 x 128 tiles.
inline constexpr int64_t kAttnBq = 112, kAttnBk = 224;
struct AttentionLayout { // floats per thread, each part rounded up to 16 (64 bytes)
  int64_t bq, bk, tile, rows, gathered, gemm, perThread;
};
constexpr int64_t roundUp16(int64_t n) {
  return addSat(n, 15) / 16 * 16;
}
constexpr AttentionLayout attentionLayout(int64_t tq, int64_t tk, int64_t d, int64_t dv,
                                          bool backward) {
  AttentionLayout l{};
  l.bq = std::max<int64_t>(1, std::min(tq, kAttnBq));
  l.bk = std::max<int64_t>(1, std::min(tk, kAttnBk));
  l.tile = roundUp16(mulSat(l.bq, l.bk));
  l.rows = roundUp16(mulSat(3, l.bq));
  l.gathered = roundUp16(mulSat(2, l.bk));
  // The tile products: S = Q K^T and O += P V; backward also dV += P^T dO, dP = dO V^T,
  // dQ += dS K and dK += dS^T Q. One thread's share of gemmBytes, the largest of them.
  int64_t g = std::max(gemmBytes(l.bq, l.bk, d), gemmBytes(l.bq, dv, l.bk));
  if (backward)
    g = std::max({g, gemmBytes(l.bk, dv, l.bq), gemmBytes(l.bq, l.bk, dv), gemmBytes(l.bq, d, l.bk),
                  gemmBytes(l.bk, d, l.bq)});
  l.gemm = roundUp16(g / 4 / kThreads);
  l.perThread =
      addSat(addSat(mulSat(backward ? 2 : 1, l.tile), addSat(l.rows, l.gathered)), l.gemm);
  return l;
}
constexpr int64_t attentionBytes(int64_t tq, int64_t tk, int64_t d, int64_t dv, bool backward) {
  return mulSat(mulSat(attentionLayout(tq, tk, d, dv, backward).perThread, kThreads), 4);
}

} // namespace kiln::workspace
