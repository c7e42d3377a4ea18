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

// GEMM: C[M,N] += A[M,K] B[K,N] in blocks of kMc x kKc of A (packed per thread) against
// kKc x kNc of B (packed once, shared by the threads).
inline constexpr int64_t kGemmMc = 192, kGemmKc = 256, kGemmNc = 4096;
// Bytes for one (batch of a) GEMM of these sizes, packing in f32 (4 bytes per element).
constexpr int64_t gemmBytes(int64_t m, int64_t n, int64_t k) {
  int64_t kc = std::min(k, kGemmKc);
  int64_t aPanel = mulSat(std::min(m, kGemmMc), kc), bPanel = mulSat(kc, std::min(n, kGemmNc));
  return mulSat(addSat(mulSat(aPanel, kThreads), bPanel), 4);
}

// Flash attention: each thread holds a tile of kAttnBq query rows against kAttnBk keys (the
// logits and probabilities), the rows' running max and sum, and the rows' output accumulator;
// the backward also a tile of logit gradients and the rows' dq accumulator. f32 throughout.
inline constexpr int64_t kAttnBq = 64, kAttnBk = 64;
constexpr int64_t attentionBytes(int64_t tq, int64_t tk, int64_t d, int64_t dv, bool backward) {
  int64_t bq = std::min(tq, kAttnBq), bk = std::min(tk, kAttnBk);
  int64_t tile = mulSat(bq, bk), rows = mulSat(bq, addSat(dv, 2));
  int64_t perThread = backward ? addSat(addSat(mulSat(2, tile), rows), mulSat(bq, d))
                               : addSat(tile, rows);
  return mulSat(mulSat(perThread, kThreads), 4);
}

} // namespace kiln::workspace
