// Graphviz export of an IR graph, for pictures of what the DSL built and what passes did:
// `kiln dump --format=dot MODEL | dot -Tsvg`. Deterministic, like the text form.
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::ir {

// A `digraph`: inputs and parameters as ellipses (parameters shaded) labelled with their name
// and type, nodes as boxes labelled with mnemonic and result type(s) (backward nodes shaded),
// outputs as double octagons, and an edge from each value's producer to each user. An edge from
// result k > 0 of a multi-result node is labelled "#k".
std::string toDot(const Graph &g);

} // namespace kiln::ir
