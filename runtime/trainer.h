// The training loop's step on any Executable of a training step (passes::buildTrainingStep):
// write a batch's inputs, run, read the loss. The program itself writes each update back over its
// parameter or state, so nothing is copied between steps. Deterministic: the same program, seed
// and batches give the same losses bit for bit on the same backend.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/executable.h"
#include "runtime/tasks.h"
#include "support/status.h"

namespace kiln::runtime {

// Writes every input of exe's program from `batch` (by name, with its exact shape).
Status writeBatch(Executable &exe, const Batch &batch);

class Trainer {
public:
  // Error if the program has no loss output, or a parameter or state without an update output
  // (it would never change, or never carry over to the next step).
  static Expected<Trainer> create(Executable &exe);

  // One step on `batch`, which must hold every input of the program by name with its exact shape.
  // Returns the loss (computed before the update).
  Expected<double> step(const Batch &batch);

  // Whether the last step's update was applied: false when the program guards its update
  // (passes::OptimizerConfig::guardNonFinite) and the loss or gradient norm was not finite, so
  // every parameter and state kept its value.
  bool lastUpdateApplied() const;
  // Whether the program guards its update so (a training step kiln builds does; one an IR file
  // holds may not).
  bool guarded() const { return applied_ != nullptr; }

  // Updates made so far: the step counter's value (it continues across a checkpoint); 0 if the
  // program keeps none.
  int64_t stepsDone() const;

  Executable &executable() { return *exe_; }

private:
  explicit Trainer(Executable &exe) : exe_(&exe) {}
  Executable *exe_;
  const Symbol *loss_ = nullptr;
  const Symbol *applied_ = nullptr; // the "update_applied" output, if the program has one
};

} // namespace kiln::runtime
