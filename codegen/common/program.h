// The runtime's description of a compiled program (runtime/program.h), read off a graph and its
// memory plan: the region sizes, and a symbol per argument and output with its place. Every
// backend builds its runtime::Program here, so they all name and place tensors alike.
#pragma once

#include "ir/graph.h"
#include "runtime/program.h"
#include "support/status.h"

namespace kiln::codegen {

// `g` must carry a memory plan (passes::planMemory) and verify.
runtime::Program programOf(const ir::Graph &g);

// `g` with a memory plan: as it is if it has one, else compacted and planned.
ir::Graph withMemoryPlan(ir::Graph g);

} // namespace kiln::codegen
