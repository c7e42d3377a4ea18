// The op table: every op the IR knows, listed once in ir/ops.def, each with one constexpr
// record (OpInfo) that holds everything the compiler knows about its meaning: mnemonic,
// operands, typed attributes, shape/dtype inference (which is also its verifier), reference
// semantics in f32 and f64, its gradient rule and an optional decomposition into primitives.
// The records live in ir/ops/<family>.h, next to the code that implements them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attrs.h"
#include "ir/ref_tensor.h"
#include "ir/types.h"
#include "support/status.h"

namespace kiln::ir {

enum class OpKind : uint16_t {
#define KILN_OP(Name, family) Name,
#include "ir/ops.def"
#undef KILN_OP
};
inline constexpr int kNumOps = 0
#define KILN_OP(Name, family) +1
#include "ir/ops.def"
#undef KILN_OP
    ;

class Graph;
struct Node;
struct GradContext; // defined by the autodiff pass

// Result types from operand types and attributes. An Error says what is wrong without the op
// name or the place: callers prefix both ("models/gpt.cc:42: matmul: ...").
using InferFn = Expected<std::vector<Type>> (*)(std::span<const Type> operands, const Attrs &attrs);

// Reference semantics: fills `out` (already typed and sized by the interpreter) from `in`.
// An Error is a data-dependent failure (e.g. a gather index out of range).
template <class F>
using RefFn = Status (*)(const Attrs &attrs, std::span<const RefTensor<F> *const> in,
                         std::span<RefTensor<F>> out);

// Gradient rule: builds, in IR ops, the gradients of a node's operands from the gradients of its
// results. Null where the autodiff issue has not yet provided it; see `differentiable`.
using GradFn = Status (*)(GradContext &ctx);

// Decomposition into primitive ops: appends nodes to `g` computing the same results as `node`
// (whose operands are already in `g`) and returns the result values.
using DecomposeFn = Expected<std::vector<int32_t>> (*)(Graph &g, const Node &node);

// Whether result `result` of `node` may be written over the buffer of operand position `operand`:
// the op reads that operand's element i only to compute element i of that result, and reads it
// before writing it (sizes are the memory planner's check).
using WritesOverFn = bool (*)(const Node &node, int result, int operand);
// Bytes of workspace a kernel needs while running `node` (flash-attention tiles, GEMM packing),
// which the memory plan reserves in its scratch region.
using ScratchFn = int64_t (*)(const Graph &g, const Node &node);

// How an op may take part in a fusion region (ir/ops/region.h): not at all, as a pointwise op of
// its loop nest, as a trailing reduction, or as its one leading matmul.
enum class RegionRole : uint8_t { None, Pointwise, Reduction, Matmul };
// What a cast in a fusion region does to its value (f32 and bool are floats there): nothing (to
// f32), x != 0 (to bool), or round it to the nearest bf16 (to bf16: a result stored in bf16).
enum class CastTo : uint8_t { Same, Bool, Bf16 };

enum class Differentiable : uint8_t {
  Yes, // real-valued outputs that depend smoothly (a.e.) on float operands
  No,  // integer/bool results, or piecewise-constant (compare, iota, constants)
};

struct OpInfo {
  OpKind kind;
  std::string_view mnemonic = {};
  std::string_view summary = {};                   // one line, for --help and docs
  std::span<const std::string_view> operands = {}; // operand names; the last repeats if `variadic`
  bool variadic = false;                           // at least one operand
  int optionalOperands = 0; // the last N operands may be absent (attributes say which are there)
  int numResults = 1;
  int optionalResults = 0;      // the last N results may be absent (as their attributes say)
  bool variadicResults = false; // at least numResults results, as inference says (region ops)
  std::span<const AttrSpec> attrs = {};
  InferFn infer = nullptr;
  RefFn<float> ref32 = nullptr;
  RefFn<double> ref64 = nullptr;
  Differentiable differentiable = Differentiable::Yes;
  GradFn grad = nullptr;
  DecomposeFn decompose = nullptr;

  // ---- Traits: per-op facts that passes and backends ask for, here and nowhere else ----
  // a op b == b op a, bit for bit (two operands; the results broadcast alike either way).
  bool commutative = false;
  // A comparison: two operands of one dtype give a bool (eq, ne, lt, le, gt, ge).
  bool comparison = false;
  // Result element k is the op's scalar function of the operand elements that numpy broadcasting
  // puts at k, and of nothing else (not k itself, not other elements): so it can be evaluated on
  // one value per operand (constant folding, uniform values in patterns).
  bool pointwise = false;
  // Data movement: every result element is a copy of an operand element (pad: or its fill
  // value), so operands that are uniform give a uniform result.
  bool movesElements = false;
  // Result 0 may be a view of operand 0: the same bytes, no copy (reshape of row-major data).
  bool view = false;
  // Which operands a result may overwrite (in place); null: none.
  WritesOverFn writesOver = nullptr;
  RegionRole regionRole = RegionRole::None;
  // On integers, its result is as exact in a float as its operands are (while it stays within
  // 2^24), and it is monotonic in every operand (its extremes over ranges of its operands lie at
  // their corners): a fusion region computes such integers as floats (a sliding window's
  // pos - j < window, a relative position's clipped distance; codegen/common/fusion.cc:
  // exactIntegers).
  bool exactOnIntegers = false;
  // Kernel workspace; null: none.
  ScratchFn scratchBytes = nullptr;
  // A collective (all_reduce): its result is made from every rank's operands, through the run's
  // communicator, so it is computed in each run, never once at load time (even of a constant).
  bool collective = false;
  // The result that the bool attribute bf16_y stores in bf16 (a norm's y, ir/ops/fused.h); -1:
  // the op has no such attribute.
  int bf16YResult = -1;
};

// WritesOverFn of the elementwise ops: their one result reads every operand element for element.
bool writesOverElementwise(const Node &node, int result, int operand);

const OpInfo &opInfo(OpKind kind);
std::span<const OpInfo *const> allOps();
std::optional<OpKind> opByMnemonic(std::string_view mnemonic);
inline std::string_view mnemonic(OpKind k) {
  return opInfo(k).mnemonic;
}

// Whether `n` operands / results fit the op's arity, and the arity in words ("3 to 5 operands").
bool operandCountFits(const OpInfo &op, size_t n);
bool resultCountFits(const OpInfo &op, size_t n);
std::string operandCountText(const OpInfo &op);
std::string resultCountText(const OpInfo &op);

// ---- Operands by name ----
// An op's operands are named in its record (`operands`). Its optional ones (the last
// optionalOperands) are each present iff the node's bool attribute has_<name> is true, or, for an
// op without such attributes (scatter_add's base), iff the node has that many operands; the
// present operands keep the record's order.
// The position of operand `name` among those present under `attrs` (for an op without flags: its
// position, which a node may not reach); nullopt where it is absent or the op has no such operand.
std::optional<size_t> operandIndex(const OpInfo &op, const Attrs &attrs, std::string_view name);
// The names of the operands present under `attrs`, in order (a variadic op's one name, once).
std::vector<std::string_view> presentOperands(const OpInfo &op, const Attrs &attrs);

// Checks operand count and runs the op's inference; the Error is unprefixed.
Expected<std::vector<Type>> inferTypes(OpKind kind, std::span<const Type> operands,
                                       const Attrs &attrs);

} // namespace kiln::ir
