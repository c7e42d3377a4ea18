// Data movement: reshape, transpose (permute), broadcast, slice and its transpose pad, concat,
// gather (embedding lookup) and its transpose scatter_add. Apart from scatter_add's sums, none
// of them computes; each moves elements of its operands to other positions.
#pragma once

#include "ir/op.h"
#include "ir/ops/ref_util.h"

namespace kiln::ir {

// reshape: `shape` is the exact result shape (no -1 in the IR; the DSL resolves it).
inline constexpr AttrSpec kReshapeAttrs[] = {{"shape", AttrKind::Ints, true}};
// transpose: result dim i is operand dim perm[i].
inline constexpr AttrSpec kTransposeAttrs[] = {{"perm", AttrKind::Ints, true}};
// broadcast: numpy broadcast_to(x, shape).
inline constexpr AttrSpec kBroadcastAttrs[] = {{"shape", AttrKind::Ints, true}};
// slice: elements start, start+step, ... < end of `axis`; 0 <= start <= end <= dim, step >= 1.
inline constexpr AttrSpec kSliceAttrs[] = {{"axis", AttrKind::Int, true},
                                           {"start", AttrKind::Int, true},
                                           {"end", AttrKind::Int, true},
                                           {"step", AttrKind::Int, false, 1}};
// pad (XLA-style, one axis): `low` elements of `value` before, `high` after, `interior` between
// consecutive elements, all >= 0; out dim = low + n + (n-1) * interior + high (low + high if
// n = 0). It is the transpose of slice: slice(pad(x), start = low, step = interior + 1) = x.
inline constexpr AttrSpec kPadAttrs[] = {{"axis", AttrKind::Int, true},
                                         {"low", AttrKind::Int, true},
                                         {"high", AttrKind::Int, true},
                                         {"interior", AttrKind::Int, false, 0},
                                         {"value", AttrKind::Float, false, 0}};
inline constexpr AttrSpec kConcatAttrs[] = {{"axis", AttrKind::Int, true}};
// gather: out = table.shape[:axis] + indices.shape + table.shape[axis+1:];
// out[p, i, s] = table[p, indices[i], s]. Embedding lookup is axis = 0. widen: a bf16 table's
// elements come out f32 (exactly: bf16 is f32's upper half), as an inference weight stored in
// bf16 is looked up (passes/bf16_weights.cc); its gradient is the table's, cast back to bf16.
inline constexpr AttrSpec kGatherAttrs[] = {{"axis", AttrKind::Int, false, 0},
                                            {"widen", AttrKind::Bool, false, 0}};
// scatter_add, the transpose of gather: out = updates.shape[:axis] + [size] +
// updates.shape[axis+indices.rank:], zero-filled, then out[p, indices[i], s] += updates[p, i, s]
// (so repeated indices add up). updates.shape[axis:axis+indices.rank] must be indices.shape.
// With a third operand `base` of the result's type: out = base + that sum. A slice r along `axis`
// that some index names is base[r] + (0 + its updates in order), bit for bit
// add(base, scatter_add(indices, updates)); one no index names is base[r] as it is (the add would
// turn a -0 there into +0). The result may take base's bytes: then only the named slices are
// written, which is what makes a tied embedding's gradient (the lm head's plus the lookup's)
// cost O(tokens) instead of a pass over the whole table.
inline constexpr AttrSpec kScatterAddAttrs[] = {{"axis", AttrKind::Int, false, 0},
                                                {"size", AttrKind::Int, true}};

// update_slice(base, update, index) {axis}: base with, for each i along axis 0, its slice at
// position index[i] along `axis` (>= 1) replaced by update's (update: base's shape with `axis`
// of size 1; index: integers [base's dim 0]); an index outside [0, size) writes nothing, as a
// select of the one-hot position would. A decoding step's write of its key and value into a KV
// cache [B, H, L, D]: the result may take base's bytes, and then only the B x H x D elements of
// the slices are written, where the select read and wrote all of the cache every step (GPT-2
// decoding at its 1024-token context: a third of the step's time on the Highway backend).
inline constexpr AttrSpec kUpdateSliceAttrs[] = {{"axis", AttrKind::Int, true}};

inline constexpr std::string_view kShapeOperands[] = {"x"};
inline constexpr std::string_view kConcatOperands[] = {"xs"};
inline constexpr std::string_view kGatherOperands[] = {"table", "indices"};
inline constexpr std::string_view kScatterAddOperands[] = {"indices", "updates", "base"};
inline constexpr std::string_view kUpdateSliceOperands[] = {"base", "update", "index"};

Expected<std::vector<Type>> inferReshape(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferTranspose(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferBroadcast(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferSlice(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferConcat(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferGather(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferPad(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferScatterAdd(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferUpdateSlice(std::span<const Type> in, const Attrs &attrs);

template <class F> KILN_REF_FN(refReshape);
template <class F> KILN_REF_FN(refTranspose);
template <class F> KILN_REF_FN(refBroadcast);
template <class F> KILN_REF_FN(refSlice);
template <class F> KILN_REF_FN(refConcat);
template <class F> KILN_REF_FN(refGather); // Error on an index outside [0, dim)
template <class F> KILN_REF_FN(refPad);
template <class F> KILN_REF_FN(refScatterAdd); // Error on an index outside [0, size)
template <class F> KILN_REF_FN(refUpdateSlice);

// Gradient rules (shape_grad.cc). Each is the transpose of its op's linear map: reshape and
// transpose invert, broadcast sums, slice pads, pad slices, concat slices, gather scatter-adds,
// scatter_add gathers. Integer operands (indices) get no gradient.
Status gradReshape(GradContext &c);
Status gradTranspose(GradContext &c);
Status gradBroadcast(GradContext &c);
Status gradSlice(GradContext &c);
Status gradPad(GradContext &c);
Status gradConcat(GradContext &c);
Status gradGather(GradContext &c);
Status gradScatterAdd(GradContext &c);
Status gradUpdateSlice(GradContext &c);

// scatter_add's result may overwrite its base (each element is read before it is written);
// update_slice's its base (the slices it replaces are read from update).
bool scatterAddWritesOver(const Node &node, int result, int operand);
bool updateSliceWritesOver(const Node &node, int result, int operand);

inline constexpr OpInfo kReshapeOp{.kind = OpKind::Reshape,
                                   .mnemonic = "reshape",
                                   .summary = "same elements, row-major, new shape",
                                   .operands = kShapeOperands,
                                   .attrs = kReshapeAttrs,
                                   .infer = &inferReshape,
                                   .ref32 = &refReshape<float>,
                                   .ref64 = &refReshape<double>,
                                   .grad = &gradReshape,
                                   .movesElements = true,
                                   .view = true};
inline constexpr OpInfo kTransposeOp{.kind = OpKind::Transpose,
                                     .mnemonic = "transpose",
                                     .summary = "permute dimensions: out dim i = x dim perm[i]",
                                     .operands = kShapeOperands,
                                     .attrs = kTransposeAttrs,
                                     .infer = &inferTranspose,
                                     .ref32 = &refTranspose<float>,
                                     .ref64 = &refTranspose<double>,
                                     .grad = &gradTranspose,
                                     .movesElements = true};
inline constexpr OpInfo kBroadcastOp{.kind = OpKind::Broadcast,
                                     .mnemonic = "broadcast",
                                     .summary = "numpy broadcast_to(x, shape)",
                                     .operands = kShapeOperands,
                                     .attrs = kBroadcastAttrs,
                                     .infer = &inferBroadcast,
                                     .ref32 = &refBroadcast<float>,
                                     .ref64 = &refBroadcast<double>,
                                     .grad = &gradBroadcast,
                                     .movesElements = true,
                                     // In a loop nest, an index map: a pointwise member.
                                     .regionRole = RegionRole::Pointwise};
inline constexpr OpInfo kSliceOp{.kind = OpKind::Slice,
                                 .mnemonic = "slice",
                                 .summary = "x[start:end:step] along `axis`",
                                 .operands = kShapeOperands,
                                 .attrs = kSliceAttrs,
                                 .infer = &inferSlice,
                                 .ref32 = &refSlice<float>,
                                 .ref64 = &refSlice<double>,
                                 .grad = &gradSlice,
                                 .movesElements = true};
inline constexpr OpInfo kConcatOp{.kind = OpKind::Concat,
                                  .mnemonic = "concat",
                                  .summary = "join operands along `axis`",
                                  .operands = kConcatOperands,
                                  .variadic = true,
                                  .attrs = kConcatAttrs,
                                  .infer = &inferConcat,
                                  .ref32 = &refConcat<float>,
                                  .ref64 = &refConcat<double>,
                                  .grad = &gradConcat,
                                  .movesElements = true};
inline constexpr OpInfo kGatherOp{.kind = OpKind::Gather,
                                  .mnemonic = "gather",
                                  .summary =
                                      "table[..., indices, ...] along `axis` (embedding lookup)",
                                  .operands = kGatherOperands,
                                  .attrs = kGatherAttrs,
                                  .infer = &inferGather,
                                  .ref32 = &refGather<float>,
                                  .ref64 = &refGather<double>,
                                  .grad = &gradGather};
inline constexpr OpInfo kPadOp{
    .kind = OpKind::Pad,
    .mnemonic = "pad",
    .summary = "pad `axis` with `value`: low before, high after, interior between",
    .operands = kShapeOperands,
    .attrs = kPadAttrs,
    .infer = &inferPad,
    .ref32 = &refPad<float>,
    .ref64 = &refPad<double>,
    .grad = &gradPad,
    .movesElements = true};
inline constexpr OpInfo kScatterAddOp{
    .kind = OpKind::ScatterAdd,
    .mnemonic = "scatter_add",
    .summary = "out[..., indices, ...] += updates along `axis` (gather's transpose)",
    .operands = kScatterAddOperands,
    .optionalOperands = 1,
    .attrs = kScatterAddAttrs,
    .infer = &inferScatterAdd,
    .ref32 = &refScatterAdd<float>,
    .ref64 = &refScatterAdd<double>,
    .grad = &gradScatterAdd,
    .writesOver = &scatterAddWritesOver};
inline constexpr OpInfo kUpdateSliceOp{
    .kind = OpKind::UpdateSlice,
    .mnemonic = "update_slice",
    .summary = "base with the slice at index[i] along `axis` replaced by update's, per i of axis 0",
    .operands = kUpdateSliceOperands,
    .attrs = kUpdateSliceAttrs,
    .infer = &inferUpdateSlice,
    .ref32 = &refUpdateSlice<float>,
    .ref64 = &refUpdateSlice<double>,
    .grad = &gradUpdateSlice,
    .writesOver = &updateSliceWritesOver};

} // namespace kiln::ir
