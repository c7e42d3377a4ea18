// Running a graph's nodes with each op's reference semantics: the loop at the heart of the
// reference interpreter (codegen/reference), here in ir/ because region ops (ir/ops/region.h)
// evaluate their body graph with it too.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "ir/graph.h"
#include "ir/ref_tensor.h"
#include "support/bf16.h"
#include "support/status.h"

namespace kiln::ir {

// Runs every node of `g` in order. `values` has one slot per value of g, the arguments already
// filled in (of their declared types); each node's results are written to their slots, bf16
// results rounded to bf16. An Error names the node (its place, see placeOf) and the op.
// bf16 is a storage type: a bf16 tensor holds the nearest bf16 values, whatever F computed.
template <class F> void roundIfBf16(RefTensor<F> &t) {
  if (t.type.dtype == DType::BF16)
    for (F &x : t.f)
      x = static_cast<F>(roundToBf16(static_cast<float>(x)));
}

template <class F> Status evaluate(const Graph &g, std::vector<RefTensor<F>> &values);

// Node `id` of g on operands `in`: its results, typed and bf16-rounded, or an Error naming the
// node (evaluate's step; constant folding and backends that keep values elsewhere call it node
// by node).
template <class F>
Expected<std::vector<RefTensor<F>>> evaluateNode(const Graph &g, NodeId id,
                                                 std::span<const RefTensor<F> *const> in);

// A tensor of type t holding `v` everywhere (an integer dtype holds v truncated).
RefTensor<double> filledTensor(const Type &t, double v);

// The one value every element of node n's result 0 holds when each operand holds one value
// everywhere (`fills`), if the op's traits make it one value: a pointwise op is evaluated with its
// own reference semantics (f64) on one value per operand; data movement keeps the value when all
// operands (and pad's fill) agree. nullopt for other ops, or if evaluating fails. The value is as
// f64 computes it; rounding to the result's dtype is the caller's.
std::optional<double> uniformResult(const Graph &g, const Node &n, std::span<const double> fills);

} // namespace kiln::ir
