// Checkpoints of the reference interpreter's tensors: parameters and optimizer state of a graph
// saved to and loaded from safetensors files under their PyTorch-style names, with the dtype and
// shape of every tensor checked against the graph.
#pragma once

#include <span>
#include <string>

#include "ir/graph.h"
#include "ir/ref_tensor.h"
#include "runtime/safetensors.h"
#include "support/status.h"

namespace kiln::reference {

// One tensor in the file's format: f32, f64, bf16 (rounded, stored as its 16 bits), i32, i64,
// bool (one byte each).
template <class F>
runtime::SafetensorsTensor toSafetensors(std::string name, const ir::RefTensor<F> &t);
// The tensor as `expected`; Error if the file's dtype or shape differs.
template <class F>
Expected<ir::RefTensor<F>> fromSafetensors(const runtime::SafetensorsTensor &t, const ir::Type &expected);

// Saves every parameter and state argument of `g` (values `args`, in g.args() order).
template <class F>
Status saveCheckpoint(const std::string &path, const ir::Graph &g, std::span<const ir::RefTensor<F>> args);

// Loads parameters and state of `g` into `args` (g.args() order). Every parameter must be in the
// file; state may be missing (a weights-only file: the optimizer starts fresh). A tensor the graph
// does not have is an error: it means the file belongs to another model configuration. Returns
// how many tensors were loaded.
template <class F>
Expected<int> loadCheckpoint(const std::string &path, const ir::Graph &g, std::span<ir::RefTensor<F>> args);

} // namespace kiln::reference
