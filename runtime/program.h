// A compiled program as the runtime sees it, with no IR in it: the sizes of the memory regions a
// backend allocates (support/memory_region.h), and a symbol table of every named tensor -- inputs,
// parameters, optimizer state and outputs -- with its dtype, shape and place (region, offset).
// A standalone executable's header carries the same table; codegen builds it from the memory plan.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/dtype.h"
#include "support/memory_region.h"
#include "support/param_init.h"
#include "support/status.h"

namespace kiln::runtime {

struct Symbol {
  enum class Kind : uint8_t { Input, Param, State, Output };
  // What an output is (ir::OutputRole): a value, the loss, the gradient of an argument, or the
  // update of one (which the program writes back over the argument by the end of a run).
  enum class Role : uint8_t { Value, Loss, Gradient, Update };
  std::string name;
  Kind kind = Kind::Input;
  Role role = Role::Value; // outputs only
  int32_t of = -1;         // Gradient, Update: the index of the argument's symbol
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  MemRegion region = MemRegion::IO;
  int64_t offset = 0, bytes = 0;
  ParamInit init;               // parameters and state: how fresh weights start
  Domain domain = Domain::Real; // parameters and state: what a checkpoint may hold
  int64_t range = 0;            // integer inputs: values in [0, range); 0 = unstated

  bool isArgument() const { return kind != Kind::Output; }
  // A parameter's bf16 copy (kBf16CopyPrefix): state that Executable::write derives from the
  // parameter, never initialized, written, restored or saved on its own.
  bool isBf16Copy() const { return kind == Kind::State && !bf16CopySource(name).empty(); }
  // Parameters and state but bf16 copies: what fresh weights initialize and a step carries on.
  bool isWeight() const { return (kind == Kind::Param || kind == Kind::State) && !isBf16Copy(); }
  // What a checkpoint holds: the weights, but not a KV cache (kCacheStatePrefix).
  bool inCheckpoint() const {
    return isWeight() &&
           !(kind == Kind::State && std::string_view(name).starts_with(kCacheStatePrefix));
  }
  // A weight stored in bf16 for inference (passes/bf16_weights.cc): it takes an f32 tensor,
  // rounded (Executable::write, loadCheckpoint), since checkpoints and training weights stay f32.
  bool roundsF32() const { return kind == Kind::Param && dtype == DType::BF16; }
  // An f32 parameter: it takes a bf16 tensor too (an inference bundle's weights file), widened,
  // which is exact.
  bool widensBf16() const { return kind == Kind::Param && dtype == DType::F32; }
  int64_t numElements() const;
};
std::string_view symbolKindName(Symbol::Kind k); // "input", "param", "state", "output"

struct Program {
  std::string name;
  std::array<int64_t, kNumMemRegions> regionBytes{};
  std::vector<Symbol> symbols; // the arguments in order, then the outputs in order
  // The ranks its collectives run over (a data-parallel step: kiln compile --ranks N); 1 where it
  // has none. A run needs a communicator of that many ranks.
  int64_t ranks = 1;

  int64_t bytes(MemRegion r) const { return regionBytes[static_cast<int>(r)]; }
  int64_t totalBytes() const;
  // The argument (input, parameter or state) or the output named `name`; nullptr if none.
  const Symbol *argument(std::string_view name) const;
  const Symbol *output(std::string_view name) const;
  // The loss output; the step counter (the state of domain count, which an optimizer keeps as
  // the number of updates made). nullptr if there is none.
  const Symbol *loss() const;
  const Symbol *stepCounter() const;
  // Whether it is a training step: it updates its parameters (outputs of role Update). A forward
  // program may have a loss too (an IR file with a loss compiled without --train): it evaluates.
  bool trains() const;
  // The bf16 copy of parameter `param`, or nullptr.
  const Symbol *bf16CopyOf(const Symbol &param) const;
  // Each bf16 copy is bf16 of an f32 parameter's shape (the Error names the first that is not):
  // a copy that no parameter writes would hold zeros.
  Status checkBf16Copies() const;
  int32_t indexOf(const Symbol &s) const { return static_cast<int32_t>(&s - symbols.data()); }
};

} // namespace kiln::runtime
