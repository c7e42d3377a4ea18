// The regions a compiled step's memory is planned in. Shared by the IR's memory plan and the
// runtime's program description, so that a plan's offsets mean the same bytes in every backend.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

enum class MemRegion : uint8_t {
  Constants, // values made from attributes alone: filled once at load, read-only after
  Weights,   // parameters and optimizer state: persistent; updates are written back here
  IO,        // inputs (filled by the caller before a run) and outputs (read after it)
  Arena,     // everything else a run computes: reused as values die
  Scratch,   // kernel workspace, for the node running now
};
inline constexpr int kNumMemRegions = 5;
inline constexpr MemRegion kAllMemRegions[] = {MemRegion::Constants, MemRegion::Weights,
                                               MemRegion::IO, MemRegion::Arena, MemRegion::Scratch};

// Every offset in every region is a multiple of this: a cache line, and any SIMD width.
inline constexpr int64_t kMemAlignment = 64;

constexpr std::string_view memRegionName(MemRegion r) {
  switch (r) {
  case MemRegion::Constants:
    return "constants";
  case MemRegion::Weights:
    return "weights";
  case MemRegion::IO:
    return "io";
  case MemRegion::Arena:
    return "arena";
  case MemRegion::Scratch:
    return "scratch";
  }
  return "?";
}

} // namespace kiln
