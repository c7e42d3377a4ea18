// Best-fit placement of buffers with lifetimes in one address space: the arena offsets of the
// memory plan (passes/memory_plan.cc). Its own file because the rule is simple and the structure
// that makes it fast is not: the rule is stated here, the structure is best_fit.cc's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kiln::passes {

// A buffer: live over node positions [start, end] (inclusive at both ends), `size` bytes.
struct Lifetime {
  int32_t start, end;
  int64_t size;
};

struct Placement {
  std::vector<int64_t> offsets; // one per buffer, by its index in the input
  int64_t peak = 0;             // the largest offset + size: the bytes the region needs
};

// Places the buffers one by one in `order` (a permutation of their indices). Each goes into the
// smallest gap, at least its size, left between the buffers already placed whose lifetimes
// intersect its own (the first such gap in offset order on ties), or above them all if none fits.
// A buffer of 0 bytes takes no bytes: it conflicts with nothing placed after it. Deterministic.
Placement placeBestFit(std::span<const Lifetime> buffers, std::span<const int32_t> order);

// The memory planner's two orders, of which it keeps the smaller arena. Largest first (ties by
// start) packs the big activations tightly and fits the many small values into their gaps, which
// usually wins on training graphs; by start (ties largest first) follows how lifetimes unfold and
// sometimes wins on chains.
struct Orders {
  std::vector<int32_t> largestFirst, byStart;
};
Orders plannerOrders(std::span<const Lifetime> buffers);

} // namespace kiln::passes
