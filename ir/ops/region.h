// Region ops: a node that holds a small graph, its body, as an attribute (ir/attrs.h Region).
// The elementwise-fusion pass (passes/fuse_elementwise.cc) makes them; a backend compiles one as
// a single loop nest, so no intermediate value of the body ever goes to memory.
#pragma once

#include "ir/graph.h"
#include "ir/ops/ref_util.h"

namespace kiln::ir {

// ---- fusion(in...) {body = graph} -> out... ----
// Means exactly its body, inlined: body input i is operand i (same type), result k is body
// output k. The body is a loop nest over one iteration space S (the numpy broadcast of the
// shapes of its non-reduction values), so it obeys:
//   - ops: the elementwise family but dropout (whose random stream is indexed by its own
//     operand's layout), broadcast and constant ("pointwise"); reduce_sum, reduce_mean and
//     reduce_max of an S-shaped value whose result is only a body output ("reductions at the
//     end"); and at most one matmul of two body inputs, with no reduction, which makes the
//     region that matmul plus its epilogue (bias, activation, residual) over its output tiles;
//   - each non-reduction output has shape S; no parameters or state; at least one output.
// In place: a backend reads every input at element i before it writes element i of any result,
// so a result may take the buffer of a dying input that the body reads element for element (of
// the whole space S, not read by the matmul) unless it is a reduction's (fusionWritesOver).
// Gradient: the body is inlined (re-running a matmul it holds) and differentiated with the ops'
// own rules, so a region is exactly as differentiable as what it holds.
inline constexpr std::string_view kFusionOperands[] = {"in"};
inline constexpr AttrSpec kFusionAttrs[] = {{"body", AttrKind::Graph, true}};

// How a body op takes part in a region: its record's trait (None: it may not appear in one).
inline RegionRole regionRole(OpKind op) {
  return opInfo(op).regionRole;
}

// What a backend needs to know about a body, read off it; an Error says which rule it breaks.
struct RegionInfo {
  Shape space;           // S
  NodeId matmul = kNone; // the body's matmul node, if any
  std::vector<NodeId> reductions;
};
Expected<RegionInfo> analyzeRegion(const Graph &body);

// The body of a region node, which a verified node always has.
const Graph &regionBody(const Node &n);

Expected<std::vector<Type>> inferFusion(std::span<const Type> in, const Attrs &attrs);
template <class F> KILN_REF_FN(refFusion);
Status gradFusion(GradContext &ctx);
Expected<std::vector<int32_t>> decomposeFusion(Graph &g, const Node &n);
bool fusionWritesOver(const Node &n, int result, int operand);
// Whether the body's matmul (if any) reads body input `in`: such an input is a GEMM operand, read
// whole, not element for element.
bool matmulReadsInput(const Graph &body, ValueId in);
// The workspace of the body's kernels: its matmul's GEMM packing.
int64_t scratchFusion(const Graph &g, const Node &n);

inline constexpr OpInfo kFusionOp{
    .kind = OpKind::Fusion,
    .mnemonic = "fusion",
    .summary = "a region: its body graph of pointwise ops (+ trailing reductions, or a leading "
               "matmul) as one loop nest",
    .operands = kFusionOperands,
    .variadic = true,
    .numResults = 1,
    .variadicResults = true,
    .attrs = kFusionAttrs,
    .infer = &inferFusion,
    .ref32 = &refFusion<float>,
    .ref64 = &refFusion<double>,
    .grad = &gradFusion,
    .decompose = &decomposeFusion,
    .writesOver = &fusionWritesOver,
    .scratchBytes = &scratchFusion};

} // namespace kiln::ir
