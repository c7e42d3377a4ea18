// Optimizer updates as graph builders, separate from autodiff:
//   graph with a loss output and gradient(P) outputs (passes::differentiate)
//     =>  the whole training step: parameters and optimizer state go in, and come out as
//         update(P) and update(S) outputs (named "new.P", "new.S"); the loss and the outputs "lr"
//         (and "grad_norm" when clipping, "update_applied" when guarding) are kept, the
//         gradients consumed.
// Gradient clipping by global norm, the learning-rate schedule (evaluated in the graph from the
// step counter) and SGD (momentum, Nesterov), Adam and AdamW follow torch.optim's update rules
// exactly, so one step matches PyTorch on the same gradients.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"
#include "support/status.h"

namespace kiln::passes {

struct LrSchedule {
  enum class Kind : uint8_t {
    Constant,     // lr
    InverseSqrt,  // Vaswani et al.: lr * d_model^-0.5 * min(t^-0.5, t * warmup^-1.5)
    WarmupCosine, // lr * t / warmup while t < warmup, then
                  // min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,
                  // p = min(1, (t - warmup) / (total - warmup))
  };
  Kind kind = Kind::Constant;
  double lr = 1e-3;
  int64_t warmup = 0;
  int64_t total = 0; // WarmupCosine: the step at which the cosine reaches min_lr
  double minLr = 0;
  int64_t dModel = 0; // InverseSqrt
};

struct OptimizerConfig {
  enum class Kind : uint8_t { Sgd, Adam, AdamW };
  Kind kind = Kind::AdamW;
  LrSchedule schedule = {};
  double momentum = 0;                           // SGD
  bool nesterov = false;                         // SGD (needs momentum > 0)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8; // Adam, AdamW
  double weightDecay = 0; // SGD, Adam: added to the gradient (L2); AdamW: decoupled
  double clipNorm = 0;    // > 0: scale all gradients by min(1, clip / (||g||_2 + 1e-6)) first
  // Guard the update: when the loss or the gradients' global norm is not finite, every
  // parameter and state (the step counter too) comes out as it went in, and the bool output
  // "update_applied" says which happened. Without it one NaN poisons every weight.
  bool guardNonFinite = false;
};

// The state is PyTorch's, under its names: "opt.step" (domain count: the updates made so far,
// which runners read to continue a schedule or a data stream), "opt.exp_avg.P" and
// "opt.exp_avg_sq.P" (domain nonnegative) for Adam, "opt.momentum_buffer.P" for SGD.
// shardRanks > 1: ZeRO stage 1 over that many ranks of a data-parallel run (the gradients come
// unreduced, their reduce-scatter is the update's): each rank keeps the state of its part of the
// parameters alone, "opt.KIND.*" (kShardedParameters), updates that part and gathers the others'.
// Errors: no loss output, a float parameter without its gradient output (or with several), an
// invalid setting (e.g. nesterov without momentum, beta outside [0, 1), a schedule with warmup
// <= 0 where needed), a graph that has updates already; sharded, a parameter or loss not f32.
Expected<ir::Graph> buildTrainingStep(const ir::Graph &withGrads, const OptimizerConfig &config,
                                      int64_t shardRanks = 1);

// An error naming g's first update output, if it has one: a training step already (a dumped
// `--stage=train` graph), which neither autodiff nor an optimizer may take again.
Status refuseTrainingStep(const ir::Graph &g);

} // namespace kiln::passes
