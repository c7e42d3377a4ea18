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

// Flash attention: each thread holds a tile of kAttnBq query rows against kAttnBk keys (the
// logits and probabilities), the rows' running max and sum, and the rows' output accumulator;
// the backward also a tile of logit gradients and the rows' dq accumulator. f32 throughout.
inline constexpr int64_t kAttnBq = 64, kAttnBk = 64;
constexpr int64_t attentionBytes(int64_t tq, int64_t tk, int64_t d, int64_t dv, bool backward) {
  int64_t bq = std::min(tq, kAttnBq), bk = std::min(tk, kAttnBk);
  int64_t tile = mulSat(bq, bk), rows = mulSat(bq, addSat(dv, 2));
  int64_t perThread =
      backward ? addSat(addSat(mulSat(2, tile), rows), mulSat(bq, d)) : addSat(tile, rows);
  return mulSat(mulSat(perThread, kThreads), 4);
}

} // namespace kiln::workspace
