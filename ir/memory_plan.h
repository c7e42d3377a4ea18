// The memory plan: where every value a step touches lives, in named regions (support/
// memory_region.h). Part of the IR (printed as `mem(...)`, see ir/printer.h) so that a backend
// bakes it in and a dump shows it before any run; passes/memory_plan.h makes it, ir::verify checks
// it, and the reference backend runs inside it (poisoning dead bytes), so a plan bug becomes a
// wrong number there first.
//
// Where values go:
//   - parameters and state: their own slots in `weights`, live across steps; the update of an
//     argument is written over its slot (in place) once nothing reads the old value any more, or
//     else computed elsewhere and copied back at the end of the step (updateCopies);
//   - inputs, and node results that are outputs: `io`;
//   - node results computable from attributes alone (constant, iota, tri and what follows from
//     them only): `constants`, filled once at load;
//   - every other node result: `arena`, whose bytes are reused as values die (in place over a
//     dying operand, or a view of a reshaped one);
//   - a node's kernel workspace (OpInfo::scratchBytes): the start of `scratch`, while it runs.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "support/memory_region.h"

namespace kiln::ir {

using ValueId = int32_t;
using NodeId = int32_t;

struct MemorySlot {
  // How a value gets its bytes: its own, its operand's (written over an operand that dies at this
  // node, element for element), or its operand's as a view (reshape: the same bytes, no copy).
  enum class Share : uint8_t { None, InPlace, View };
  MemRegion region = MemRegion::Arena;
  int64_t offset = -1; // within the region
  int64_t bytes = 0;   // Type::bytes() of the value
  Share share = Share::None;
  ValueId of = -1; // InPlace / View: the operand whose bytes (same region and offset) it takes
  bool operator==(const MemorySlot &) const = default;
};

struct MemoryPlan {
  std::array<int64_t, kNumMemRegions> regionBytes{}; // each a multiple of kMemAlignment
  std::vector<MemorySlot> slots;                     // one per value, indexed by ValueId
  std::vector<int64_t> scratch;                      // one per node: its workspace bytes
  int64_t bytes(MemRegion r) const { return regionBytes[static_cast<int>(r)]; }
  int64_t &bytes(MemRegion r) { return regionBytes[static_cast<int>(r)]; }
  bool operator==(const MemoryPlan &) const = default;
};

} // namespace kiln::ir
