// The reference interpreter: runs any graph, node by node, with each op's reference semantics
// from the op table, computing floats in F = float (f32 mode) or double (f64 mode). Slow and
// obvious on purpose: it is the oracle every optimisation and backend is tested against.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/ref_tensor.h"
#include "support/status.h"

namespace kiln::reference {

// Runs `g` on `args` (one per g.args(), in that order, of exactly the declared types) and
// returns one tensor per g.outputs(). Errors name the argument or the node (its DSL file:line or
// IR line:col) and what went wrong, e.g. a gather index out of range.
template <class F>
Expected<std::vector<ir::RefTensor<F>>> run(const ir::Graph &g, std::span<const ir::RefTensor<F>> args);

// The bytes `run<F>(g, args)` holds at its peak, for a memory budget checked before anything is
// allocated: the arguments twice (the caller's and the interpreter's copies), every node result
// (the interpreter keeps them all), the values of the largest region body, and the outputs once
// more. Floats take sizeof(F) bytes each, integers and bools 8. Saturates instead of overflowing.
template <class F> int64_t runBytes(const ir::Graph &g);

// Fresh arguments for `g`, a pure function of (g's argument names and types, seed):
// parameters from their ParamInit; integer inputs uniform in [0, range) (range 0: [0, 16));
// bool inputs uniform in {0, 1}; float inputs standard normal. Each argument draws from its own
// stream, derived from the seed and its name, so adding an argument does not change the others.
template <class F> std::vector<ir::RefTensor<F>> makeArgs(const ir::Graph &g, uint64_t seed);

// A short fingerprint of a tensor for the CLI: element count, sum, sum of |x|, and the first
// few values.
template <class F> std::string summarize(const ir::RefTensor<F> &t);

} // namespace kiln::reference
