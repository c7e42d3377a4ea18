// The reference backend as a runtime::Executable, the first one: it runs every node with its op's
// reference semantics (the oracle), but on values that live inside the planned memory regions --
// each node reads its operands from their slots and writes its results into theirs -- and it
// poisons bytes as soon as the plan says nothing reads them any more (NaN for floats, 0xA5 for
// integers; the whole arena before each run). So a wrong offset, an overlap of two live values or
// a lifetime that ends too early turns into a wrong number here, in the slow, obvious backend,
// before any fast backend trusts the plan.
//
// Precision: f32 mode computes in float and stores every value in its dtype's own bytes, exactly
// as the plan lays them out, so it equals the plain evaluator (ir::evaluate) bit for bit. f64 mode
// computes in double and keeps each element as 8 bytes: every offset and size of the plan is
// scaled by 8, which maps each byte of the plan to 8 bytes and keeps every overlap and sharing of
// the plan as it is.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "runtime/executable.h"
#include "runtime/host_tensor.h"
#include "support/status.h"

namespace kiln::reference {

struct Options {
  bool f64 = false;   // compute in double (else float)
  bool poison = true; // poison dead bytes and, before each run, the arena
  bool verify = true; // refuse a plan that does not verify (tests turn it off to see what a
                      // broken plan computes; its offsets must still lie inside its regions)
};

class ReferenceExecutable final : public runtime::Executable {
public:
  // `g` must carry a memory plan that verifies (codegen::withMemoryPlan). Computes the load-time
  // constants. Errors: a plan that does not verify, a constant that fails to compute.
  static Expected<std::unique_ptr<ReferenceExecutable>> create(const ir::Graph &g,
                                                               Options options = {});

  const runtime::Program &program() const override { return program_; }
  std::string_view backend() const override { return "reference"; }
  Status run() override;
  int64_t memoryBytes() const override;

  // The bytes create() would allocate for `g` (planned) plus the largest node's working copies.
  static int64_t estimateBytes(const ir::Graph &g, Options options);

protected:
  void store(const runtime::Symbol &s, const runtime::HostTensor &t) override;
  runtime::HostTensor load(const runtime::Symbol &s) const override;

private:
  ReferenceExecutable(ir::Graph g, Options o);
  template <class F> Status runNode(ir::NodeId n);
  template <class F> Status runAll();
  // Element k of value v: its bytes in the regions (the plan's offset, scaled in f64 mode).
  uint8_t *at(ir::ValueId v, int64_t k) const;
  DType storedAs(ir::ValueId v) const;
  double get(ir::ValueId v, int64_t k) const;
  void set(ir::ValueId v, int64_t k, double x);
  int64_t getInt(ir::ValueId v, int64_t k) const;
  void setInt(ir::ValueId v, int64_t k, int64_t x);
  void poisonValue(ir::ValueId v);

  ir::Graph g_;
  Options options_;
  int64_t scale_; // bytes of storage per byte of the plan: 1, or 8 in f64 mode
  runtime::Program program_;
  std::vector<runtime::AlignedBytes> regions_;  // by MemRegion
  std::vector<bool> atLoad_;                    // per node: a constant, computed at create
  std::vector<std::vector<ir::ValueId>> dying_; // per node: values whose bytes die after it
  std::vector<ir::ValueId> arenaRoots_;         // values that open an arena buffer
  std::vector<ir::UpdateCopy> copies_;
};

} // namespace kiln::reference
