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
#include "runtime/host_tensor.h"
#include "support/status.h"

namespace kiln::reference {

// Runs `g` on `args` (one per g.args(), in that order, of exactly the declared types) and
// returns one tensor per g.outputs(). Errors name the argument or the node (its DSL file:line or
// IR line:col) and what went wrong, e.g. a gather index out of range.
template <class F>
Expected<std::vector<ir::RefTensor<F>>> run(const ir::Graph &g, std::span<const ir::RefTensor<F>> args);

// Fresh arguments for `g`, a pure function of (g's argument names and types, seed):
// parameters from their ParamInit; integer inputs uniform in [0, range) (range 0: [0, 16));
// bool inputs uniform in {0, 1}; float inputs standard normal. Each argument draws from its own
// stream, derived from the seed and its name, so adding an argument does not change the others.
template <class F> std::vector<ir::RefTensor<F>> makeArgs(const ir::Graph &g, uint64_t seed);

// The interpreter's tensors and the runtime's (runtime/host_tensor.h): to host storage (f32 values
// rounded to float), and back into F.
template <class F> runtime::HostTensor toHost(const ir::RefTensor<F> &t);
template <class F> ir::RefTensor<F> fromHost(const runtime::HostTensor &t);

// A short fingerprint of a tensor for the CLI: element count, sum, sum of |x|, and the first
// few values.
std::string summarize(const runtime::HostTensor &t);

} // namespace kiln::reference
