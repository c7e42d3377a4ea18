// One pointwise op over a run of floats: the Highway backend's loop for each instruction of a
// fusion body (a pointwise op alone is a region of one). Each loop runs the op's formula
// (ir/ops/elementwise.h) on Highway vectors, the same operations the reference runs on scalars
// (exp, tanh and erf being the vector math of runtime/kernels/vmath-inl.h there). The loops are
// compiled once per SIMD target and dispatched at run time: compiled once for the x86-64
// baseline they would run 4 lanes wide on a machine with 16.
#pragma once

#include <cstdint>

#include "ir/op.h"
#include "runtime/kernels/reduce.h"

namespace kiln::codegen {

// d[j] = op(a[j], b[j], c[j]) for j < n (b and c as the op's arity needs; null otherwise). Bool
// values are the floats 0 and 1; `cast`: what a cast does (ir::CastTo). d may be a.
void runPointwise(ir::OpKind op, ir::CastTo cast, float *d, const float *a, const float *b,
                  const float *c, int64_t n);

// The lanes of a row sum (fusion.cc's ReductionMap order): lanes[j mod kSumLanes] += x[j] for
// j < n, each lane adding its elements in order of j.
constexpr int64_t kSumLanes = 16;
void accumulateSum(float *lanes, const float *x, int64_t n);

// A body input read as floats: d[j] = s[j * stride] for j < n, integers (exact while |x| <=
// 2^24) or bools (0 or 1).
void intsToFloats(float *d, const int64_t *s, int64_t stride, int64_t n);
void boolsToFloats(float *d, const uint8_t *s, int64_t stride, int64_t n);
// An output stored in bf16: d[j] = the high half of s[j] for j < n, each already rounded to bf16
// (by the cast that made it, ir::CastTo::Bf16), so the half is its bf16 exactly.
void storeBf16Halves(uint16_t *d, const float *s, int64_t n);

} // namespace kiln::codegen
