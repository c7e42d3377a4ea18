// One pointwise op over a run of floats: the Highway backend's loop for each instruction of a
// fusion body (a pointwise op alone is a region of one). Each loop calls the op's own scalar
// function (ir/ops/elementwise.h), so an element is computed exactly as the reference computes
// it (exp, log, tanh, erf and the activations built on them excepted: they go to the vectorized
// math of runtime/kernels/vmath.h). The loops are compiled once per SIMD target, where the
// compiler vectorizes them for that target, and dispatched at run time: compiled once for the
// x86-64 baseline they would run 4 lanes wide on a machine with 16.
#pragma once

#include <cstdint>

#include "ir/op.h"

namespace kiln::highway {

// d[j] = op(a[j], b[j], c[j]) for j < n (b and c as the op's arity needs; null otherwise). Bool
// values are the floats 0 and 1; toBool says a cast converts to bool (x != 0). d may be a.
void runPointwise(ir::OpKind op, bool toBool, float *d, const float *a, const float *b,
                  const float *c, int64_t n);

} // namespace kiln::highway
