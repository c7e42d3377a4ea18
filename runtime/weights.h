// Fresh values for a program's tensors, as pure functions of (seed, tensor name, element index),
// so that every backend -- and the reference interpreter's own argument generator -- starts from
// the same bits, and adding a tensor changes no other's values:
//   parameters and state from their ParamInit: zeros, ones, normal(std), uniform(-b, b), Xavier
//   uniform (fan_in = shape[-1], fan_out = shape[-2], as a [.., out, in] weight);
//   inputs (for a forward pass with no data): floats standard normal, integers uniform in
//   [0, range) (range 16 when unstated), bools uniform in {0, 1}.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "runtime/executable.h"
#include "support/param_init.h"

namespace kiln::runtime {

// The random stream of the tensor named `name` under `seed`.
uint64_t streamOf(uint64_t seed, std::string_view name);
// Element k of a parameter or state tensor of `shape` starting from `init`, in double.
double initValue(const ParamInit &init, std::span<const int64_t> shape, uint64_t stream, int64_t k);
// Element k of a random input of dtype t (range: integer inputs' [0, range), 0 = unstated).
double inputValue(DType t, int64_t range, uint64_t stream, int64_t k);

// The tensors themselves, in the symbol's dtype.
HostTensor initialWeight(const Symbol &s, uint64_t seed);
HostTensor randomInput(const Symbol &s, uint64_t seed);

// Writes fresh values into every parameter and state tensor (initWeights) or input
// (randomizeInputs) of `exe`.
Status initWeights(Executable &exe, uint64_t seed);
Status randomizeInputs(Executable &exe, uint64_t seed);

} // namespace kiln::runtime
