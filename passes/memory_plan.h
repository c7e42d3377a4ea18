// Memory planning:
//   graph  =>  the same graph with an ir::MemoryPlan: every node result gets a byte offset in one
//   arena, from liveness (a value dies after its last use; outputs live to the end), with buffer
//   reuse (best fit over lifetimes), in-place updates and reshape views.
// Graph arguments (inputs, parameters, optimizer state) are caller-owned and not in the arena. The
// plan is part of the IR (printed as mem(...), checked by ir::verify) and the report below reads
// what a training step will need from it, before anything runs.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace kiln::passes {

struct PlanOptions {
  // An elementwise result may take the buffer of an operand with its element count and bytes
  // that dies at that node (no later use, not an output, no live view of it).
  bool inPlace = true;
  // A reshape of a node result may share its operand's bytes instead of copying them.
  bool views = true;
};

// Plans `g`, which must have no erased nodes (Graph::compact). Offsets are multiples of
// ir::kArenaAlignment. Deterministic: the same graph always gets the same plan.
ir::MemoryPlan planMemory(const ir::Graph &g, const PlanOptions &options = {});

// What `kiln dump --memory` reports, in bytes, from the graph alone. Parameters, state and
// inputs are caller-owned; gradients and saved activations are node results, so in the arena.
struct MemoryStats {
  int64_t paramBytes = 0, stateBytes = 0, inputBytes = 0;
  int32_t params = 0, states = 0, inputs = 0;
  // Gradient outputs, and the backward values the optimizer nodes read to make the updates.
  int64_t gradBytes = 0;
  int32_t grads = 0;
  // Forward node results (gradOf == kNone) that a backward node (gradOf != kNone) reads.
  int64_t savedBytes = 0;
  int32_t saved = 0;
  int64_t arenaBytes = 0;  // the planned peak
  int64_t bufferBytes = 0; // every node result in its own buffer (64-byte aligned): no reuse
  int32_t buffers = 0;
  int64_t liveBound = 0; // the most bytes live at one node: no plan of these buffers does better
  int32_t inPlace = 0, views = 0;
};

// Uses g's plan, or plans a copy of g if it has none.
MemoryStats memoryStats(const ir::Graph &g);

// The stats as a table; for `kiln dump --memory`:
//   memory of @gpt (bytes, planned before any run)
//     parameters            106,240  (103.8 KiB, 18 tensors)   caller-owned
//     ...
//     planned peak        1,283,712  (1.2 MiB, arena_bytes)
//     sum of all buffers  9,999,360  (9.5 MiB, 1,234 node results, no reuse)
//     saving              8,715,648  (87.2%)
std::string memoryReport(const ir::Graph &g);

} // namespace kiln::passes
