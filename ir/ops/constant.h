// Values made from attributes alone: a filled constant, iota (arange along an axis), and the
// triangular mask that causal attention is built from.
#pragma once

#include "ir/op.h"
#include "ir/ops/ref_util.h"

namespace kiln::ir {

// constant: every element is `value` (integral for integer dtypes, 0 or 1 for bool).
inline constexpr AttrSpec kConstantAttrs[] = {{"value", AttrKind::Float, true},
                                              {"shape", AttrKind::Ints},
                                              {"dtype", AttrKind::DType, false, 0, DType::F32}};
// iota: element at index (..., j along `axis`, ...) is j.
inline constexpr AttrSpec kIotaAttrs[] = {{"shape", AttrKind::Ints, true},
                                          {"axis", AttrKind::Int, true},
                                          {"dtype", AttrKind::DType, false, 0, DType::I64}};
// tri: over the last two dims (row r, column c): lower ? c - r <= diagonal : c - r >= diagonal,
// as 1/0. lower with diagonal 0 is the causal "may attend" mask.
inline constexpr AttrSpec kTriAttrs[] = {{"shape", AttrKind::Ints, true},
                                         {"diagonal", AttrKind::Int, false, 0},
                                         {"lower", AttrKind::Bool, false, 1},
                                         {"dtype", AttrKind::DType, false, 0, DType::Bool}};

Expected<std::vector<Type>> inferConstant(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferIota(std::span<const Type> in, const Attrs &attrs);
Expected<std::vector<Type>> inferTri(std::span<const Type> in, const Attrs &attrs);

template <class F> KILN_REF_FN(refConstant);
template <class F> KILN_REF_FN(refIota);
template <class F> KILN_REF_FN(refTri);

inline constexpr OpInfo kConstantOp{.kind = OpKind::Constant, .mnemonic = "constant",
                                    .summary = "a tensor filled with `value`",
                                    .attrs = kConstantAttrs, .infer = &inferConstant,
                                    .ref32 = &refConstant<float>, .ref64 = &refConstant<double>,
                                    .differentiable = Differentiable::No,
                                    // One value everywhere: a pointwise member of a loop nest.
                                    .regionRole = RegionRole::Pointwise};
inline constexpr OpInfo kIotaOp{.kind = OpKind::Iota, .mnemonic = "iota",
                                .summary = "the index along `axis` (arange)",
                                .attrs = kIotaAttrs, .infer = &inferIota,
                                .ref32 = &refIota<float>, .ref64 = &refIota<double>,
                                .differentiable = Differentiable::No};
inline constexpr OpInfo kTriOp{.kind = OpKind::Tri, .mnemonic = "tri",
                               .summary = "triangular 0/1 mask over the last two dims",
                               .attrs = kTriAttrs, .infer = &inferTri, .ref32 = &refTri<float>,
                               .ref64 = &refTri<double>, .differentiable = Differentiable::No};

} // namespace kiln::ir
