// Constant folding:  op(constant(a), constant(b), ...)  =>  constant(op(a, b, ...))
// when every operand of a node is a `constant` (one fill value) and every element of the result
// is the same number, e.g. rsqrt(64) = 0.125 or exp(-inf) = 0. Only uniform results fold,
// because a constant is a fill value: tables that vary (iota/tri based, such as sinusoidal
// positions, or dropout, whose mask depends on the element) stay as they are. iota and tri
// themselves take no operands and are left alone.
//
// The evaluation is the op's own reference semantics (OpInfo::ref64) in double precision, so the
// pass has no per-op arithmetic and cannot disagree with the interpreter:
//  * pointwise ops (OpInfo::pointwise) are evaluated on the fill values as [] tensors: numpy
//    broadcasting makes every element of the result that one value;
//  * data movement (OpInfo::movesElements: reshape, transpose, broadcast, slice; concat of equal
//    fills; pad with the fill value) keeps the fill value (both: ir::uniformResult);
//  * any other op is evaluated on its materialised operands when they are small (kMaxEval
//    elements) and folded when the result is uniform, e.g. reduce_sum or softmax of a constant.
// Precision: the folded value is the double result, rounded to bf16 for a bf16 result (as the
// interpreter rounds every bf16 value) and left in double for f32, whose interpreter reads it
// as the nearest float: at most one f32 ulp from computing each step in f32. Integer results
// fold only when the dtype holds them; a data-dependent failure (gather out of range) does not
// fold, so the error stays where it happens.
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

#include "ir/builder.h"
#include "ir/evaluate.h"
#include "ir/ops/ref_util.h"
#include "passes/passes.h"
#include "support/bf16.h"

namespace kiln::passes {
namespace {

using ir::OpKind;
using Tensor = ir::RefTensor<double>;

constexpr int64_t kMaxEval = int64_t{1} << 16;

std::optional<double> constantValue(const ir::Graph &g, ir::ValueId v) {
  ir::NodeId d = g.value(v).def;
  if (d == ir::kNone || g.node(d).op != OpKind::Constant)
    return std::nullopt;
  return g.node(d).attrs.getFloat("value");
}

// The value every element of `t` holds, if they are all the same (and there is at least one).
std::optional<double> uniformValue(const Tensor &t) {
  if (t.size() == 0)
    return std::nullopt;
  for (int64_t k = 1; k < t.size(); ++k) {
    bool same = t.isFloatStorage()
                    ? (t.f[k] == t.f[0] || (std::isnan(t.f[k]) && std::isnan(t.f[0])))
                    : t.i[k] == t.i[0];
    if (!same)
      return std::nullopt;
  }
  if (t.isFloatStorage())
    return t.f[0];
  double v = static_cast<double>(t.i[0]);
  if (static_cast<int64_t>(v) != t.i[0]) // not exactly a double: no fill value can say it
    return std::nullopt;
  return v;
}

// The fill value of each result of `n`, whose operands have fill values `fills`; nullopt where a
// result is not uniform (or cannot be evaluated here).
std::vector<std::optional<double>> foldNode(const ir::Graph &g, ir::NodeId id,
                                            const std::vector<double> &fills) {
  const ir::Node &n = g.node(id);
  std::vector<std::optional<double>> result(n.results.size());
  const ir::OpInfo &op = ir::opInfo(n.op);
  if (op.pointwise || op.movesElements) {
    result[0] = ir::uniformResult(g, n, fills);
    return result;
  }
  std::vector<ir::Type> types;
  for (ir::ValueId r : n.results)
    types.push_back(g.type(r));
  std::vector<Tensor> in;
  for (size_t i = 0; i < fills.size(); ++i) {
    const ir::Type &t = g.type(n.operands[i]);
    if (t.numElements() > kMaxEval)
      return result;
    in.push_back(ir::filledTensor(t, fills[i]));
  }
  for (const ir::Type &t : types)
    if (t.numElements() > kMaxEval)
      return result;
  std::vector<const Tensor *> ptrs;
  for (const Tensor &t : in)
    ptrs.push_back(&t);
  if (Expected<std::vector<Tensor>> out = ir::evaluateNode<double>(g, id, ptrs))
    for (size_t r = 0; r < out->size(); ++r)
      result[r] = uniformValue((*out)[r]);
  return result;
}

// The fill value a constant of dtype t holds for the computed value v, if it can hold it.
std::optional<double> asFill(double v, ir::DType t) {
  if (t == ir::DType::BF16)
    return static_cast<double>(roundToBf16(static_cast<float>(v)));
  // Past the f32 range the interpreter's f32 value is an infinity; so is the fill.
  if (t == ir::DType::F32 && std::isinf(static_cast<float>(v)))
    return static_cast<double>(static_cast<float>(v));
  if (!ir::checkValueFits(v, t))
    return std::nullopt;
  return v;
}

} // namespace

Expected<bool> runFoldConstants(ir::Graph &g, PassStats &stats) {
  int64_t folded = 0;
  // Nodes are visited in order, so a node sees its operands already folded: a folded result's
  // uses read its constant from the node on (repl), and everywhere once at the end
  // (Graph::replaceUses; one walk of the graph, not one per folded node). The constants made here
  // are appended at the end and compact() moves each before its first user.
  std::vector<ir::ValueId> repl(g.numValues(), ir::kNone);
  for (ir::NodeId id = 0; id < static_cast<ir::NodeId>(g.nodes().size()); ++id) {
    if (g.node(id).erased)
      continue;
    for (ir::ValueId &v : g.node(id).operands)
      if (v < static_cast<ir::ValueId>(repl.size()) && repl[v] != ir::kNone)
        v = repl[v];
    const ir::Node &n = g.node(id);
    if (n.operands.empty() || n.op == OpKind::Constant)
      continue;
    std::vector<double> fills;
    for (ir::ValueId v : n.operands)
      if (std::optional<double> c = constantValue(g, v))
        fills.push_back(*c);
    if (fills.size() != n.operands.size())
      continue;
    std::vector<std::optional<double>> values = foldNode(g, id, fills);
    std::vector<std::optional<double>> consts;
    for (size_t r = 0; r < values.size(); ++r)
      consts.push_back(values[r] ? asFill(*values[r], g.type(n.results[r]).dtype) : std::nullopt);
    bool all = true;
    for (const std::optional<double> &c : consts)
      all = all && c.has_value();
    if (!all) // a multi-result node folds whole or not at all
      continue;
    // Copies: emitting nodes below may move `n`.
    std::vector<ir::ValueId> results = n.results;
    ir::Builder b(g, n.loc, n.gradOf);
    for (size_t r = 0; r < results.size(); ++r) {
      ir::Type t = g.type(results[r]);
      repl[results[r]] = b.full(*consts[r], t);
    }
    g.eraseNode(id);
    ++folded;
  }
  if (folded == 0)
    return false;
  g.replaceUses(repl);
  stats.count("folded {} nodes into constants", folded);
  g.compact();
  return true;
}

} // namespace kiln::passes
