// Training on the reference interpreter: runs a training-step graph (passes::buildTrainingStep)
// again and again, feeding each step's update(X) outputs back as argument X. Deterministic: the
// same graph, seed and batches give the same losses bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/ref_tensor.h"
#include "runtime/tasks.h"
#include "support/status.h"

namespace kiln::reference {

template <class F> class Trainer {
public:
  // Parameters and optimizer state start from their inits (makeArgs with `seed`). Error if the
  // graph has no loss output or a parameter/state without its update output.
  static Expected<Trainer> create(const ir::Graph &step, uint64_t seed);

  // One step on `batch`, which must hold every input of the graph by name with its exact shape.
  // Returns the loss before the update.
  Expected<double> step(const runtime::Batch &batch);

  // Current arguments, in graph argument order (inputs hold the last batch).
  std::span<const ir::RefTensor<F>> args() const { return args_; }
  const ir::Graph &graph() const { return *graph_; }
  // Updates made so far: the step counter, the state of domain count (continues across a
  // checkpoint); 0 if there is none.
  int64_t stepsDone() const;
  // Checkpoints of the parameters and optimizer state (codegen/reference/checkpoint.h).
  Status save(const std::string &path) const;
  Expected<int> load(const std::string &path); // returns how many tensors were loaded

private:
  Trainer(const ir::Graph &g) : graph_(&g) {}
  const ir::Graph *graph_;
  std::vector<ir::RefTensor<F>> args_;
  int lossOutput_ = -1;
  std::vector<std::pair<int, int>> feedback_; // (output index, argument index) of update(X) -> X
};

} // namespace kiln::reference
