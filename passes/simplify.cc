// Algebraic simplification: local rewrites that remove work without changing a value.
//   x*1, 1*x, x+0, 0+x, x-0, x/1  =>  x        (when the constant's broadcast leaves x's type)
//   neg(neg(x))                   =>  x
//   transpose(transpose(x, p), q) =>  transpose(x, p o q), or x when that is the identity
//   reshape(reshape(x)), broadcast(broadcast(x))  =>  one reshape / broadcast
//   reshape, broadcast, transpose to x's own type =>  x
//   (x*c1)*c2                     =>  x*(c1*c2)
//   x/c                           =>  x*(1/c)
//   attention(q*c, k, ...){s}     =>  attention(q, k, ...){s*c}      (also k*c)
// c, c1, c2 are `constant` nodes (one fill value). Not rewritten: x*0 (NaN*0 is NaN, not 0),
// x-x, anything on bool or with a constant that broadcasts x to a bigger shape or another dtype.
// Exactness: the identities are exact (x+0 turns -0 into +0, as every compiler allows). The scale
// rewrites are done for f32/f64 only and round differently: c1*c2 and 1/c are rounded once, so
// the result is within about one ulp of the original (x*(1/c) equals x/c exactly when c is a
// power of two; bf16, whose ulp is 2^-8, gets only that exact case for x/c). In attention the
// scale multiplies q.k, and s*<q*c, k> = (s*c)*<q, k>.
#include <cassert>
#include <cmath>
#include <optional>
#include <vector>

#include "ir/builder.h"
#include "passes/passes.h"

namespace kiln::passes {
namespace {

using ir::NodeId;
using ir::OpKind;
using ir::ValueId;

// One walk over the graph. `repl` redirects the uses of rewritten nodes; it is applied to each
// node's operands when the walk reaches it, and to everything once more at the end (a rewrite
// can replace a node that the walk appended and has not reached yet).
class Simplifier {
public:
  Simplifier(ir::Graph &g, PassStats &stats) : g_(g), stats_(stats), uses_(g.useCounts()) {}

  bool walk() {
    for (NodeId id = 0; id < static_cast<NodeId>(g_.nodes().size()); ++id) {
      if (g_.node(id).erased)
        continue;
      for (ValueId &v : g_.node(id).operands)
        v = resolve(v);
      if (g_.node(id).op == OpKind::Attention) {
        foldAttentionScale(id);
        continue;
      }
      if (g_.node(id).results.size() != 1)
        continue;
      if (std::optional<ValueId> to = rewrite(id)) {
        setRepl(g_.result(id), *to);
        g_.eraseNode(id, g_.value(*to).def);
      }
    }
    if (!changed_)
      return false;
    for (NodeId id = 0; id < static_cast<NodeId>(g_.nodes().size()); ++id)
      if (!g_.node(id).erased)
        for (ValueId &v : g_.node(id).operands)
          v = resolve(v);
    std::vector<ir::Output> outputs(g_.outputs().begin(), g_.outputs().end());
    for (ir::Output &o : outputs)
      o.value = resolve(o.value);
    g_.setOutputs(std::move(outputs));
    g_.compact();
    return true;
  }

private:
  ValueId resolve(ValueId v) const {
    while (v < static_cast<ValueId>(repl_.size()) && repl_[v] != ir::kNone)
      v = repl_[v];
    return v;
  }
  void setRepl(ValueId from, ValueId to) {
    if (from >= static_cast<ValueId>(repl_.size()))
      repl_.resize(from + 1, ir::kNone);
    repl_[from] = to;
  }
  // A rewrite happened: count it under `what` (its pattern, as in the file comment).
  ValueId done(const char *what, ValueId to) {
    stats_.count(what);
    changed_ = true;
    return to;
  }

  const ir::Node *def(ValueId v) const {
    NodeId d = g_.value(v).def;
    return d == ir::kNone ? nullptr : &g_.node(d);
  }
  const ir::Node *defOf(ValueId v, OpKind op) const {
    const ir::Node *n = def(v);
    return n && n->op == op ? n : nullptr;
  }
  std::optional<double> constant(ValueId v) const {
    if (const ir::Node *n = defOf(v, OpKind::Constant))
      return n->attrs.getFloat("value");
    return std::nullopt;
  }
  bool isConstant(ValueId v, double want) const {
    std::optional<double> c = constant(v);
    return c && *c == want;
  }
  bool scalesFold(ValueId v) const {
    ir::DType t = g_.type(v).dtype;
    return t == ir::DType::F32 || t == ir::DType::F64;
  }
  bool singleUse(ValueId v) const {
    return v < static_cast<ValueId>(uses_.size()) && uses_[v] == 1;
  }

  std::optional<ValueId> rewrite(NodeId id);
  std::optional<ValueId> identity(const ir::Node &n);
  std::optional<ValueId> movement(const ir::Node &n);
  std::optional<ValueId> scales(NodeId id);
  void foldAttentionScale(NodeId id);

  ir::Graph &g_;
  PassStats &stats_;
  std::vector<int32_t> uses_; // at the start of the walk; only used to avoid duplicating work
  std::vector<ValueId> repl_;
  bool changed_ = false;
};

std::optional<ValueId> Simplifier::rewrite(NodeId id) {
  const ir::Node &n = g_.node(id);
  if (std::optional<ValueId> v = identity(n))
    return v;
  if (std::optional<ValueId> v = movement(n))
    return v;
  return scales(id);
}

// Identities that return an operand unchanged, if it already has the result's type.
std::optional<ValueId> Simplifier::identity(const ir::Node &n) {
  ValueId y = n.results[0];
  auto keeps = [&](ValueId x) { return g_.type(x) == g_.type(y); };
  // x op unit = x, and unit op x = x where the op commutes.
  struct Unit {
    OpKind op;
    double unit;
    const char *rule;
  };
  static constexpr Unit kUnits[] = {{OpKind::Mul, 1, "x*1 => x"},
                                    {OpKind::Add, 0, "x+0 => x"},
                                    {OpKind::Sub, 0, "x-0 => x"},
                                    {OpKind::Div, 1, "x/1 => x"}};
  if (n.operands.size() == 2 && g_.type(y).dtype != ir::DType::Bool)
    for (const Unit &u : kUnits) {
      if (u.op != n.op)
        continue;
      ValueId a = n.operands[0], b = n.operands[1];
      if (isConstant(b, u.unit) && keeps(a))
        return done(u.rule, a);
      if (ir::opInfo(n.op).commutative && isConstant(a, u.unit) && keeps(b))
        return done(u.rule, b);
    }
  if (n.op == OpKind::Neg) // -(-x) = x
    if (const ir::Node *inner = defOf(n.operands[0], OpKind::Neg))
      return done("neg(neg(x)) => x", inner->operands[0]);
  return std::nullopt;
}

// Chains of data movement, and movement that does not move anything.
std::optional<ValueId> Simplifier::movement(const ir::Node &n) {
  if (n.op != OpKind::Reshape && n.op != OpKind::Broadcast && n.op != OpKind::Transpose)
    return std::nullopt;
  ValueId x = n.operands[0], y = n.results[0];
  const ir::Node *inner = defOf(x, n.op);
  ValueId source = inner ? inner->operands[0] : x;
  if (n.op == OpKind::Transpose) {
    // out dim i = mid dim q[i] = source dim p[q[i]]
    const std::vector<int64_t> &q = n.attrs.getInts("perm");
    std::vector<int64_t> perm = q;
    if (inner) {
      const std::vector<int64_t> &p = inner->attrs.getInts("perm");
      for (size_t i = 0; i < q.size(); ++i)
        perm[i] = p[q[i]];
    }
    bool identityPerm = true;
    for (size_t i = 0; i < perm.size(); ++i)
      identityPerm = identityPerm && perm[i] == static_cast<int64_t>(i);
    if (identityPerm)
      return done(inner ? "transpose(transpose(x)) => x" : "transpose(x){identity} => x", source);
    if (!inner)
      return std::nullopt;
    ir::Builder b(g_, n.loc, n.gradOf);
    return done("transpose(transpose(x)) => transpose(x)",
                b.emit(OpKind::Transpose, {source}, {{"perm", perm}}));
  }
  // reshape and broadcast: the result's type is all that matters, whatever came between.
  if (g_.type(source) == g_.type(y))
    return done(n.op == OpKind::Reshape ? "reshape(x) to x's type => x"
                                        : "broadcast(x) to x's type => x",
                source);
  if (!inner)
    return std::nullopt;
  // Copies first: emitting moves the graph's nodes and values.
  OpKind op = n.op;
  ir::Shape shape = g_.type(y).shape;
  ir::Builder b(g_, n.loc, n.gradOf);
  ValueId merged = b.emit(op, {source}, {{"shape", shape}});
  return done(op == OpKind::Reshape ? "reshape(reshape(x)) => reshape(x)"
                                    : "broadcast(broadcast(x)) => broadcast(x)",
              merged);
}

// (x*c1)*c2 => x*(c1*c2) and x/c => x*(1/c).
std::optional<ValueId> Simplifier::scales(NodeId id) {
  const ir::Node &n = g_.node(id);
  if ((n.op != OpKind::Mul && n.op != OpKind::Div) || !ir::isFloat(g_.type(n.results[0]).dtype))
    return std::nullopt;
  ValueId a = n.operands[0], b = n.operands[1];
  ir::Builder bld(g_, n.loc, n.gradOf);
  if (n.op == OpKind::Div) {
    std::optional<double> c = constant(b);
    if (!c || *c == 0 || !std::isfinite(*c))
      return std::nullopt;
    double inv = 1 / *c;
    int exp = 0;
    bool powerOfTwo = std::frexp(std::abs(*c), &exp) == 0.5;
    ir::DType t = g_.type(b).dtype;
    bool normal = t == ir::DType::F64 ? std::isnormal(inv) : std::isnormal(static_cast<float>(inv));
    if (!normal || !(powerOfTwo || scalesFold(b)))
      return std::nullopt;
    ir::Type ct = g_.type(b);
    return done("x/c => x*(1/c)", bld.mul(a, bld.full(inv, ct)));
  }
  if (!scalesFold(a))
    return std::nullopt;
  // One operand a constant c2, the other a single-use x*c1.
  for (auto [inner, c2] : {std::pair{a, b}, std::pair{b, a}}) {
    std::optional<double> v2 = constant(c2);
    const ir::Node *m = defOf(inner, OpKind::Mul);
    if (!v2 || !m || !singleUse(inner))
      continue;
    for (auto [x, c1] :
         {std::pair{m->operands[0], m->operands[1]}, std::pair{m->operands[1], m->operands[0]}}) {
      std::optional<double> v1 = constant(c1);
      if (!v1 || constant(x))
        continue;
      // The combined constant has the shape both broadcast to (broadcasting is associative).
      ir::Type ct{g_.type(c1).dtype, *ir::broadcastShapes(g_.type(c1).shape, g_.type(c2).shape)};
      ValueId xv = x;
      return done("(x*c1)*c2 => x*(c1*c2)", bld.mul(xv, bld.full(*v1 * *v2, ct)));
    }
  }
  return std::nullopt;
}

// attention(q*c, ...){scale = s} => attention(q, ...){scale = s*c}, likewise for k: the logits
// are s*<q, k>. Only for a scalar-like c (q*c has q's type) and a product used nowhere else; not
// under bf16 products, which round q*c (r(q c) is not c r(q) unless c is a power of two).
void Simplifier::foldAttentionScale(NodeId id) {
  if (g_.node(id).attrs.getBool("bf16_products"))
    return;
  for (size_t slot : {size_t{0}, size_t{1}}) {
    ir::Node &n = g_.node(id);
    ValueId qc = n.operands[slot];
    const ir::Node *m = defOf(qc, OpKind::Mul);
    if (!m || !singleUse(qc) || !scalesFold(qc))
      continue;
    for (auto [x, c] :
         {std::pair{m->operands[0], m->operands[1]}, std::pair{m->operands[1], m->operands[0]}}) {
      std::optional<double> v = constant(c);
      if (!v || !std::isfinite(*v) || g_.type(x) != g_.type(qc))
        continue;
      n.operands[slot] = x;
      [[maybe_unused]] Status s = n.attrs.set("scale", n.attrs.getFloat("scale") * *v);
      assert(s.ok());
      done("attention(q*c){s} => attention(q){s*c}", x);
      break;
    }
  }
}

} // namespace

Expected<bool> runSimplify(ir::Graph &g, PassStats &stats) {
  // Each walk sees the previous one's results in order; a few walks reach the fixed point of any
  // chain in practice, and the bound keeps a pathological graph from looping.
  bool changed = false;
  for (int round = 0; round < 16; ++round) {
    Simplifier s(g, stats);
    if (!s.walk())
      break;
    changed = true;
  }
  return changed;
}

} // namespace kiln::passes
