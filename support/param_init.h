// How a parameter or state tensor starts (its initializer) and which values it may hold (its
// domain). Shared by the IR, which records them on graph arguments, and the runtime, which
// initializes weights from them and checks loaded checkpoints against them.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

// How a parameter is initialised when a runner makes fresh weights.
struct ParamInit {
  enum class Kind : uint8_t { Zeros, Ones, Normal, Uniform, XavierUniform };
  Kind kind = Kind::Zeros;
  double scale = 0; // Normal: std; Uniform: bound b of U(-b, b); XavierUniform: gain
  bool operator==(const ParamInit &) const = default;
};

// The names of optimizer state start with this (passes/optimizer.cc: opt.step, opt.exp_avg.NAME,
// ...), so that a program without an optimizer can tell a training checkpoint's state apart.
inline constexpr std::string_view kOptimizerStatePrefix = "opt.";
// The sharded optimizer's (ZeRO stage 1) state is "opt.KIND.*": of the float parameters, all f32,
// flattened in argument order into one vector of n elements and zero-padded to N C (N ranks,
// C = ceil(n / N)), this rank's part [rC, (r+1)C) of KIND. A checkpoint holds the whole of each
// parameter's "opt.KIND.NAME" (runtime/checkpoint.cc gathers and splits), as one process saves it.
inline constexpr std::string_view kShardedParameters = "*";
// A training step in mixed precision keeps a bf16 copy of each weight that its bf16 products read,
// as the state "bf16_copy.NAME" (passes/bf16_weight_copies.cc): the products read half the bytes
// and round nothing. It is derived, not learned: the step's update writes it beside the
// parameter, and the runtime writes it whenever the parameter is written (Executable::write), so
// it always holds the parameter rounded to bf16. It is neither initialized nor saved on its own.
inline constexpr std::string_view kBf16CopyPrefix = "bf16_copy.";
// The name of the parameter that the state named `name` is the bf16 copy of; empty if it is none.
constexpr std::string_view bf16CopySource(std::string_view name) {
  return name.starts_with(kBf16CopyPrefix) ? name.substr(kBf16CopyPrefix.size())
                                           : std::string_view{};
}
// The names of a generation program's KV caches (models::buildGptCached, buildTransformerCached)
// start with this: state that lives for one generation and is never part of a checkpoint.
inline constexpr std::string_view kCacheStatePrefix = "cache.";

// Which values a parameter or state argument may hold: a loaded checkpoint is checked against
// it, because a negative second moment or a step counter of 1e30 would corrupt training without
// a word. Every float value must also be finite.
enum class Domain : uint8_t {
  Real,        // any finite number
  NonNegative, // finite, >= 0 (Adam's second moment)
  Count,       // a whole number >= 0 that the dtype holds exactly (the step counter)
};

constexpr std::string_view domainName(Domain d) {
  switch (d) {
  case Domain::Real:
    return "real";
  case Domain::NonNegative:
    return "nonnegative";
  case Domain::Count:
    return "count";
  }
  return "?";
}

} // namespace kiln
