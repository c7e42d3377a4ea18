// Running a graph's nodes with each op's reference semantics: the loop at the heart of the
// reference interpreter (codegen/reference), here in ir/ because region ops (ir/ops/region.h)
// evaluate their body graph with it too.
#pragma once

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

} // namespace kiln::ir
