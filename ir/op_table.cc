// The op table: ir/ops.def's list, each entry pointing at its record in ir/ops/<family>.h.
// constexpr, so a missing record or a record filed under the wrong OpKind fails to compile.
#include "ir/op.h"

#include "ir/graph.h"

#include <fmt/format.h>

#include "ir/ops/collective.h"
#include "ir/ops/constant.h"
#include "ir/ops/elementwise.h"
#include "ir/ops/fused.h"
#include "ir/ops/matmul.h"
#include "ir/ops/reduce.h"
#include "ir/ops/region.h"
#include "ir/ops/shape.h"

namespace kiln::ir {
namespace {

constexpr const OpInfo *kTable[] = {
#define KILN_OP(Name, family) &k##Name##Op,
#include "ir/ops.def"
#undef KILN_OP
};
static_assert(std::size(kTable) == kNumOps);

constexpr bool recordsMatchKinds() {
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo &op = *kTable[i];
    if (static_cast<int>(op.kind) != i || op.infer == nullptr || op.ref32 == nullptr ||
        op.ref64 == nullptr)
      return false;
    // A gradient rule exactly where the op is differentiable: autodiff calls it for every
    // differentiable node on the path to the loss, and never for the others.
    if ((op.differentiable == Differentiable::Yes) != (op.grad != nullptr))
      return false;
  }
  return true;
}
static_assert(recordsMatchKinds(), "every op record sits at its OpKind and has inference, "
                                   "reference semantics, and a gradient rule iff differentiable");

// The traits' shapes (their meaning is tested against the reference: tests/ir/op_traits_test.cc).
constexpr bool traitsAreWellFormed() {
  for (const OpInfo *op : kTable) {
    if (op->commutative && (op->operands.size() != 2 || op->variadic))
      return false; // only a binary op commutes
    if (op->comparison && !(op->pointwise && op->operands.size() == 2))
      return false; // a comparison is a pointwise binary op
    if (op->view && !(op->movesElements && op->operands.size() == 1 && op->numResults == 1))
      return false; // a view is data movement of its one operand
    if (op->pointwise && (op->writesOver == nullptr || op->regionRole != RegionRole::Pointwise))
      return false; // a pointwise op may run in place and be a region's pointwise member
  }
  return true;
}
static_assert(traitsAreWellFormed(),
              "commutative ops and comparisons are binary, views move their one operand, "
              "pointwise ops run in place and fuse as pointwise members");

// Every pointwise op has a formula (ir/ops/elementwise.h FormulaOf), which is what the backends
// lower it by; cast alone takes its formula from its attribute, and the backends say how.
constexpr bool pointwiseOpsHaveFormulas() {
  return []<size_t... K>(std::index_sequence<K...>) {
    return ((kTable[K]->pointwise ==
             (HasFormula<static_cast<OpKind>(K)> || static_cast<OpKind>(K) == OpKind::Cast)) &&
            ...);
  }
  (std::make_index_sequence<kNumOps>{});
}
static_assert(pointwiseOpsHaveFormulas(), "a pointwise op without a formula (or a formula for an "
                                          "op that is not pointwise)");

constexpr bool hasFlag(const OpInfo &op, std::string_view operand) {
  for (const AttrSpec &a : op.attrs)
    if (a.kind == AttrKind::Bool && a.name.size() == operand.size() + 4 &&
        a.name.starts_with("has_") && a.name.substr(4) == operand)
      return true;
  return false;
}

// An op's optional operands are all switched by bool attributes has_NAME, or none is (then they
// are present by count: scatter_add's base); see operandIndex.
constexpr bool optionalOperandsAreFlaggedAlike() {
  for (const OpInfo *op : kTable) {
    const size_t first = op->operands.size() - op->optionalOperands;
    int flagged = 0;
    for (size_t i = first; i < op->operands.size(); ++i)
      flagged += hasFlag(*op, op->operands[i]);
    if (flagged != 0 && flagged != op->optionalOperands)
      return false;
  }
  return true;
}
static_assert(optionalOperandsAreFlaggedAlike(),
              "an op whose optional operands are partly switched by has_NAME attributes");

} // namespace

const OpInfo &opInfo(OpKind kind) {
  return *kTable[static_cast<int>(kind)];
}
std::span<const OpInfo *const> allOps() {
  return kTable;
}

bool writesOverElementwise(const Node &node, int, int) {
  return node.results.size() == 1;
}

std::optional<OpKind> opByMnemonic(std::string_view m) {
  for (const OpInfo *op : kTable)
    if (op->mnemonic == m)
      return op->kind;
  return std::nullopt;
}

namespace {
std::string countText(size_t lo, size_t hi, bool unbounded, std::string_view what) {
  std::string plural = fmt::format("{}{}", what, hi != 1 ? "s" : "");
  if (unbounded)
    return fmt::format("at least {} {}", lo, plural);
  if (lo == hi)
    return fmt::format("{} {}", lo, plural);
  return fmt::format("{} to {} {}", lo, hi, plural);
}
} // namespace

bool operandCountFits(const OpInfo &op, size_t n) {
  size_t hi = op.operands.size(), lo = hi - op.optionalOperands;
  return op.variadic ? n >= 1 : (n >= lo && n <= hi);
}
bool resultCountFits(const OpInfo &op, size_t n) {
  size_t hi = op.numResults, lo = hi - op.optionalResults;
  return n >= lo && (n <= hi || op.variadicResults);
}
std::string operandCountText(const OpInfo &op) {
  size_t hi = op.operands.size();
  return op.variadic ? countText(1, 1, true, "operand")
                     : countText(hi - op.optionalOperands, hi, false, "operand");
}
std::string resultCountText(const OpInfo &op) {
  return countText(op.numResults - op.optionalResults, op.numResults, op.variadicResults, "result");
}

namespace {
// Whether operand i of the record is present under attrs (by count where the op has no flags).
bool present(const OpInfo &op, const Attrs &attrs, size_t i) {
  if (i + op.optionalOperands < op.operands.size() || !hasFlag(op, op.operands[i]))
    return true;
  return attrs.getBool(fmt::format("has_{}", op.operands[i]));
}
} // namespace

std::optional<size_t> operandIndex(const OpInfo &op, const Attrs &attrs, std::string_view name) {
  size_t at = 0;
  for (size_t i = 0; i < op.operands.size(); ++i) {
    if (!present(op, attrs, i))
      continue;
    if (op.operands[i] == name)
      return at;
    ++at;
  }
  return std::nullopt;
}

std::vector<std::string_view> presentOperands(const OpInfo &op, const Attrs &attrs) {
  std::vector<std::string_view> names;
  for (size_t i = 0; i < op.operands.size(); ++i)
    if (present(op, attrs, i))
      names.push_back(op.operands[i]);
  return names;
}

Expected<std::vector<Type>> inferTypes(OpKind kind, std::span<const Type> operands,
                                       const Attrs &attrs) {
  const OpInfo &op = opInfo(kind);
  if (!operandCountFits(op, operands.size()))
    return makeError("expects {}, got {}", operandCountText(op), operands.size());
  Expected<std::vector<Type>> types = op.infer(operands, attrs);
  if (!types)
    return types;
  // One check for every op: no result too large to describe (ir/types.h kMaxTensorBytes).
  for (size_t i = 0; i < types->size(); ++i)
    if (Status s = checkType((*types)[i]); !s)
      return makeError("result {}: {}", i, s.error().message);
  return types;
}

} // namespace kiln::ir
