// The Highway backend's lowering: a planned graph becomes a runtime program of steps (kernel
// calls over resolved places), one per node, chosen from one table indexed by op kind
// (lowering.cc). Ops without a kernel of their own yet run their reference semantics on the
// node's bytes in place (lowerReference): slower, but every graph the reference runs, this
// backend runs, and the table says which ops are which. Pointwise ops need no entry: their
// formula lowers them (a new activation runs here the moment its record exists).
#pragma once

#include <memory>
#include <optional>

#include "ir/graph.h"
#include "ir/memory_plan.h"
#include "runtime/executor.h"
#include "runtime/kernel_abi.h"
#include "runtime/kernels/gemm.h"
#include "runtime/kernels/reduce.h"

namespace kiln::codegen {

// Where a value lives: the plan's region and offset.
struct Place {
  MemRegion region = MemRegion::Arena;
  int64_t offset = 0;
};

struct TileProgram; // tile_program.h

// A place as the kernel ABI takes it; an absent one (region -1) for nullopt.
inline kiln_place abiPlace(Place p) {
  return {static_cast<int64_t>(p.region), p.offset};
}
inline kiln_place abiPlace(const std::optional<Place> &p) {
  return p ? abiPlace(*p) : kiln_place{-1, 0};
}
// The step `kind` that calls `fn` (C name `symbol`) with `args`.
template <class Args>
runtime::Step kernelStep(std::string kind, kiln_kernel fn, const char *symbol, const Args &args) {
  runtime::Step s;
  s.kind = std::move(kind);
  s.calls.push_back(runtime::KernelCall::of(fn, symbol, args));
  return s;
}

struct Lowering {
  std::shared_ptr<const ir::Graph> g;
  const ir::MemoryPlan *plan = nullptr;
  // Where lowerFusion hands each region program to a backend that compiles them (codegen/llvm);
  // null: they are interpreted.
  std::vector<std::shared_ptr<TileProgram>> *programs = nullptr;
  Place place(ir::ValueId v) const {
    const ir::MemorySlot &s = plan->slots[v];
    return {s.region, s.offset};
  }
  const ir::Type &type(ir::ValueId v) const { return g->type(v); }
};

using LowerFn = runtime::Step (*)(const Lowering &l, ir::NodeId n);

// The table's entry for an op kind: its own lowering, or its traits' (whole by construction).
LowerFn lowering(ir::OpKind kind);
// Whether an op kind has a kernel of its own here (else it runs by reference).
bool hasKernel(ir::OpKind kind);

// Each op's reference semantics on f32 (bf16 values widened), reading operands from their
// places and writing results to theirs.
runtime::Step lowerReference(const Lowering &l, ir::NodeId n);
// The reduce kernels' name for reduce_sum / reduce_mean / reduce_max.
kernels::Reduce reduceKind(ir::OpKind op);
runtime::Step lowerMatmul(const Lowering &l, ir::NodeId n);
runtime::Step lowerFusion(const Lowering &l, ir::NodeId n);
// A region's step kind as profiles and errors name it: "fusion{matmul add gelu}", its body's ops
// but constants.
std::string regionKind(const ir::Node &region);
// A pointwise op alone, as a one-op region (fusion.cc).
runtime::Step lowerPointwise(const Lowering &l, ir::NodeId n);
runtime::Step lowerAttention(const Lowering &l, ir::NodeId n);
runtime::Step lowerNorm(const Lowering &l, ir::NodeId n);  // lower_norm.cc
runtime::Step lowerIndex(const Lowering &l, ir::NodeId n); // lower_index.cc: gather, scatter_add
runtime::Step lowerUpdateSlice(const Lowering &l, ir::NodeId n); // lower_index.cc
// lower_copy.cc: data movement as strided copies
runtime::Step lowerStopGradient(const Lowering &l, ir::NodeId n);
runtime::Step lowerBroadcast(const Lowering &l, ir::NodeId n);
runtime::Step lowerSlice(const Lowering &l, ir::NodeId n);
runtime::Step lowerPad(const Lowering &l, ir::NodeId n);
runtime::Step lowerConcat(const Lowering &l, ir::NodeId n);

} // namespace kiln::codegen

namespace kiln::codegen {

// Strides (in elements) of a row-major value of shape t read broadcast to `space` (numpy rules),
// per axis of space: 0 where t has size 1 or lacks the axis.
std::vector<int64_t> broadcastStrides(const ir::Shape &t, const ir::Shape &space);

// Matmul node `mm` of graph g as one (batched) GEMM (its transposes, its bf16 products): sizes
// and strides with null data pointers, filled in at run time from the operands' places. nullopt
// for a dtype other than f32 (but an operand of bf16 products may be bf16: a weight or an
// activation stored in bf16), or where the batch dimensions do not flatten to one stride per
// operand (a partly broadcast batch): such a matmul runs by reference.
std::optional<kernels::Gemm> gemmOf(const ir::Graph &g, const ir::Node &mm);
// That GEMM's kernel-ABI arguments with its operands at a, b and its product at c (no epilogue).
// aBf16, bBf16: the operand's elements are bf16 (passes/bf16_weights.cc, bf16_activations.cc).
kiln_gemm_args gemmArgs(const kernels::Gemm &shape, Place a, Place b, Place c, bool aBf16,
                        bool bBf16);

} // namespace kiln::codegen
