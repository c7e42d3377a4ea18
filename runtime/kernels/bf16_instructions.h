// Which of the CPU's bf16 instructions the bf16 products may use (gemm.h: gemmBf16Engine names
// the engine they then run on): what the CPU has (AVX512_BF16's vdpbf16ps, AMX-BF16's tiles), what
// Linux grants (AMX's tile data), and what the process forbids (KILN_BF16_INSTRUCTIONS, tests).
#pragma once

#include "support/status.h"

namespace kiln::kernels {

// Tests: run bf16 products with f32 FMAs even where the CPU has the instructions, or without AMX
// (false undoes either).
void forbidBf16Instructions(bool forbid);
void forbidAmx(bool forbid);
// The environment's KILN_BF16_INSTRUCTIONS, which bf16 instructions of the CPU the products may
// use: all (the default: AMX, else vdpbf16ps), no-amx (vdpbf16ps) or none (f32 FMAs, as on a CPU
// without them), applied; an error names any other value. kiln and compiled executables read it
// at their start.
Status useBf16InstructionsVariable();
// Whether KILN_BF16_INSTRUCTIONS (or a test) keeps the products off instructions the CPU has.
bool bf16InstructionsForbidden();

// Whether the products may use vdpbf16ps (the CPU has AVX512_BF16, not forbidden), and AMX's tiles
// (the CPU has AMX-BF16 and AMX-TILE, Linux grants the tile data, neither forbidden). The GEMM's
// dispatch then says whether the SIMD target can (AVX3 or later).
bool bf16Allowed();
bool amxAllowed();

} // namespace kiln::kernels
