// The compilation stages of a model, as the CLI (`kiln dump --stage`, `kiln train`) and tests use
// them, assembled from the named pipelines of registry.cc:
//   optimized forward:  default (attention/norm fusion)  ->  [bf16-products]  ->  lower (regions,
//                       memory plan)
//   training step:      default  ->  autodiff  ->  optimizer update  ->  cleanup  ->
//                       [bf16-products]  ->  lower
// Fusing before autodiff gives the fused backward ops; lowering after it fuses the backward and
// the optimizer update too, and plans the memory of the whole step. The same stages are passes
// and pipelines for `kiln opt` (autodiff, adamw; `train` = default, autodiff, adamw, cleanup,
// lower), so that --print-ir-after=all shows every step of a training step's compilation.
#pragma once

#include <string_view>

#include "ir/graph.h"
#include "passes/optimizer.h"
#include "passes/passes.h"
#include "support/status.h"

namespace kiln::passes {

struct PipelineReport;

// Each function below appends what it ran to `report`, if given: the pass manager's run of every
// pass (name, wall time, statistics), and a training step's differentiation and optimizer update
// as runs of their own ("autodiff", "optimizer"). `kiln bench --compile` prints them.

// Runs a comma-separated list of passes and pipelines (see resolvePasses) on g.
Expected<ir::Graph> runPipeline(ir::Graph g, std::string_view spec,
                                PipelineReport *report = nullptr);

// The precision of a compiled graph's products (`--precision`): f32, or mixed precision, where
// every matmul and attention multiplies bf16-rounded operands and sums in f32 (the bf16-products
// pass, run after the other passes and before lowering, so that it sees the backward's products
// too); for inference the weights only those products read are then stored in bf16
// (bf16-weights), for training they read a bf16 copy that the update writes beside each master
// weight (bf16-weight-copies).
enum class Precision { F32, Bf16 };

// The forward graph as the backends compile it for inference.
Expected<ir::Graph> optimizedForward(ir::Graph forward, PipelineReport *report = nullptr,
                                     Precision precision = Precision::F32);

// The programs of one model (a translation's encoder and decoding step, a decoder's prefill and
// decoding step) as optimizedForward compiles each, except that under bf16 they store the same
// weights in bf16: each one, where it reads it only by products and lookups, that any of them
// stores so (see passes/bf16_weights.cc), so that a weight means one thing in all of them.
Expected<std::vector<ir::Graph>> optimizedForwards(std::vector<ir::Graph> programs,
                                                   Precision precision = Precision::F32,
                                                   PipelineReport *report = nullptr);

// The forward graph with a loss as a training run evaluates it between steps (its validation
// loss): without dropout (no-dropout), with the training step's numerics, so that the two losses
// compare -- under bf16 the products' marks, but the weights left in f32 as the step keeps its
// master weights (the bf16-weights pass would round a tied embedding's lookup too, which the step
// reads in f32).
Expected<ir::Graph> validationForward(ir::Graph forward, PipelineReport *report = nullptr,
                                      Precision precision = Precision::F32);

// One whole training step (loss, gradients, optimizer update) from a forward graph with a
// "loss" output, as the backends compile it for training. dp.ranks > 1: the step of one of that
// many data-parallel ranks, whose gradients and loss are averaged over them before the optimizer
// (passes/data_parallel.cc), each bucket's reduction started as soon as its gradients are made.
Expected<ir::Graph> trainingStep(ir::Graph forward, const OptimizerConfig &optimizer,
                                 PipelineReport *report = nullptr,
                                 Precision precision = Precision::F32, const DataParallel &dp = {});

} // namespace kiln::passes
