// Memory planning:
//   graph  =>  the same graph with an ir::MemoryPlan (ir/memory_plan.h) that places everything a
//   step touches: parameters and state in `weights` (each update written back over its argument
//   in place where nothing reads the old value later, else copied back at the end), inputs and
//   outputs in `io`, load-time constants in `constants`, every other node result in the reused
//   `arena` (liveness: a value dies after its last use; best fit over lifetimes; in place over a
//   dying operand; reshape views), and kernel workspace in `scratch`.
// The plan is part of the IR (printed as mem(...), checked by ir::verify) and the report below
// reads what a step will need from it, before anything runs.
#pragma once

#include <array>
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
// kMemAlignment. Deterministic: the same graph always gets the same plan.
ir::MemoryPlan planMemory(const ir::Graph &g, const PlanOptions &options = {});

// What `kiln dump --memory` reports, in bytes, from the graph alone.
struct MemoryStats {
  std::array<int64_t, kNumMemRegions> regionBytes{}; // the plan's regions
  int64_t totalBytes = 0;                            // their sum: all a step needs
  int64_t paramBytes = 0, stateBytes = 0, inputBytes = 0, outputBytes = 0, constantBytes = 0;
  int32_t params = 0, states = 0, inputs = 0, outputs = 0, constants = 0;
  // State that is the bf16 copy of a weight (kBf16CopyPrefix), not counted in states.
  int64_t copyBytes = 0;
  int32_t copies = 0;
  // Updates written over their argument in place, and those copied back at the end.
  int32_t updatesInPlace = 0, updateCopies = 0;
  // Gradient outputs, and the backward values the optimizer nodes read to make the updates.
  int64_t gradBytes = 0;
  int32_t grads = 0;
  // Forward node results (gradOf == kNone) that a backward node (gradOf != kNone) reads.
  int64_t savedBytes = 0;
  int32_t saved = 0;
  int64_t arenaBytes = 0;  // the planned peak of the arena
  int64_t bufferBytes = 0; // every arena value in its own buffer (64-byte aligned): no reuse
  int32_t buffers = 0;
  int64_t liveBound = 0; // the most arena bytes live at one node: no plan of them does better
  int32_t inPlace = 0, views = 0;
};

// Uses g's plan, or plans a copy of g if it has none.
MemoryStats memoryStats(const ir::Graph &g);

// The stats as a table, one line per region and what it holds; for `kiln dump --memory`.
std::string memoryReport(const ir::Graph &g);

} // namespace kiln::passes
