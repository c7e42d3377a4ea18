// Matcher and rewriting helpers of the fusion passes (see pattern.h).
#include "passes/pattern.h"

#include <cassert>
#include <cmath>
#include <deque>
#include <numeric>

#include "ir/evaluate.h"
#include "support/bf16.h"

namespace kiln::passes::pattern {
using namespace kiln::ir;

const Node *defOf(const Graph &g, ValueId v) {
  NodeId d = g.value(v).def;
  if (d == kNone || g.node(d).erased)
    return nullptr;
  return &g.node(d);
}

const Node *defIs(const Graph &g, ValueId v, OpKind op) {
  const Node *n = defOf(g, v);
  return n && n->op == op ? n : nullptr;
}

namespace {

// A number as a value of dtype t holds it.
double asHeld(double x, DType t) {
  if (t == DType::BF16)
    return roundToBf16(static_cast<float>(x));
  return x;
}

std::optional<double> uniformAt(const Graph &g, ValueId v, int depth) {
  const Node *n = defOf(g, v);
  if (!n || depth > 16)
    return std::nullopt;
  DType t = g.type(v).dtype;
  if (n->op == OpKind::Constant)
    return asHeld(n->attrs.getFloat("value"), t);
  // Anything else whose operands are uniform and whose traits make its result uniform (pointwise
  // math, data movement), evaluated with the op's own reference semantics (ir::uniformResult).
  // Only float results: the numbers the passes need are scales and fills.
  if (!isFloat(t) || n->results.size() != 1)
    return std::nullopt;
  std::vector<double> fills;
  for (ValueId o : n->operands) {
    std::optional<double> x = uniformAt(g, o, depth + 1);
    if (!x)
      return std::nullopt;
    fills.push_back(*x);
  }
  std::optional<double> r = uniformResult(g, *n, fills);
  return r ? std::optional<double>(asHeld(*r, t)) : std::nullopt;
}

} // namespace

std::optional<double> uniformValue(const Graph &g, ValueId v) {
  return uniformAt(g, v, 0);
}

bool isUniform(const Graph &g, ValueId v, double value) {
  std::optional<double> u = uniformValue(g, v);
  return u && (*u == value || (std::isnan(value) && std::isnan(*u)));
}

bool broadcastsInto(std::span<const int64_t> small, std::span<const int64_t> shape) {
  Expected<Shape> s = broadcastShapes(small, shape);
  return s.ok() && std::equal(s->begin(), s->end(), shape.begin(), shape.end());
}

std::optional<ValueId> peelScalar(const Graph &g, ValueId v, double &factor) {
  const Node *n = defOf(g, v);
  if (!n || !isFloat(g.type(v).dtype))
    return std::nullopt;
  const Shape &shape = g.type(v).shape;
  // The non-constant operand must already have v's shape: the constant only scales it.
  auto scaled = [&](ValueId x, ValueId c, bool divide) -> std::optional<ValueId> {
    std::optional<double> k = uniformValue(g, c);
    if (!k || !std::isfinite(*k) || *k == 0 || g.type(x).shape != shape)
      return std::nullopt;
    factor *= divide ? 1 / *k : *k;
    return x;
  };
  if (n->op == OpKind::Neg) {
    factor = -factor;
    return n->operands[0];
  }
  if (n->op == OpKind::Mul) {
    if (auto x = scaled(n->operands[0], n->operands[1], false))
      return x;
    return scaled(n->operands[1], n->operands[0], false);
  }
  if (n->op == OpKind::Div)
    return scaled(n->operands[0], n->operands[1], true);
  return std::nullopt;
}

bool reducesLastAxis(const Graph &g, const Node &n) {
  int64_t rank = g.type(n.operands[0]).rank();
  const std::vector<int64_t> &axes = n.attrs.getInts("axes");
  if (rank == 0)
    return false;
  if (axes.empty())
    return rank == 1;
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

std::vector<Factor> productFactors(const Graph &g, ValueId v, ValueId stop) {
  std::vector<Factor> out;
  DType t = g.type(v).dtype;
  std::vector<Factor> stack{{v, 1}};
  while (!stack.empty()) {
    Factor f = stack.back();
    stack.pop_back();
    const Node *n = defOf(g, f.v);
    if (n && f.v != stop && g.type(f.v).dtype == t &&
        (n->op == OpKind::Mul || n->op == OpKind::Div)) {
      // Pushed in reverse so factors come out left to right.
      stack.push_back({n->operands[1], n->op == OpKind::Div ? -f.exponent : f.exponent});
      stack.push_back({n->operands[0], f.exponent});
      continue;
    }
    out.push_back(f);
  }
  return out;
}

std::vector<Term> sumTerms(const Graph &g, ValueId v) {
  std::vector<Term> out;
  DType t = g.type(v).dtype;
  std::vector<Term> stack{{v, 1}};
  while (!stack.empty()) {
    Term term = stack.back();
    stack.pop_back();
    const Node *n = defOf(g, term.v);
    if (n && g.type(term.v).dtype == t) {
      if (n->op == OpKind::Add || n->op == OpKind::Sub) {
        stack.push_back({n->operands[1], n->op == OpKind::Sub ? -term.coef : term.coef});
        stack.push_back({n->operands[0], term.coef});
        continue;
      }
      if (n->op == OpKind::Neg) {
        stack.push_back({n->operands[0], -term.coef});
        continue;
      }
    }
    out.push_back(term);
  }
  return out;
}

bool fewTermsFail(const Graph &g, ValueId v, int most, const std::function<bool(ValueId)> &keep) {
  DType t = g.type(v).dtype;
  std::deque<ValueId> queue{v};
  int failed = 0;
  while (!queue.empty()) {
    ValueId x = queue.front();
    queue.pop_front();
    // The same reading as sumTerms: through add, sub and neg of v's dtype.
    const Node *n = defOf(g, x);
    if (n && g.type(x).dtype == t &&
        (n->op == OpKind::Add || n->op == OpKind::Sub || n->op == OpKind::Neg)) {
      queue.insert(queue.end(), n->operands.begin(), n->operands.end());
      continue;
    }
    if (!keep(x) && ++failed > most)
      return false;
  }
  return true;
}

ValueId reshapeTo(Builder &b, ValueId v, const Shape &shape) {
  if (b.type(v).shape == shape)
    return v;
  if (const Node *n = defIs(b.graph, v, OpKind::Reshape)) // reshape(reshape(x)) = reshape(x)
    v = n->operands[0];
  return b.type(v).shape == shape ? v : b.reshape(v, shape);
}

ValueId broadcastTo(Builder &b, ValueId v, const Shape &shape) {
  return b.type(v).shape == shape ? v : b.emit(OpKind::Broadcast, {v}, {{"shape", shape}});
}

ValueId castTo(Builder &b, ValueId v, DType dtype) {
  return b.type(v).dtype == dtype ? v : b.cast(v, dtype);
}

ValueId transposed(Builder &b, ValueId v, std::vector<int64_t> perm) {
  if (const Node *n = defIs(b.graph, v, OpKind::Transpose)) {
    // transpose(transpose(x, p), q) = transpose(x, p o q): result dim i is x dim p[q[i]].
    const std::vector<int64_t> &inner = n->attrs.getInts("perm");
    for (int64_t &d : perm)
      d = inner[d];
    v = n->operands[0];
  }
  std::vector<int64_t> identity(perm.size());
  std::iota(identity.begin(), identity.end(), 0);
  if (perm == identity)
    return v;
  return b.emit(OpKind::Transpose, {v}, {{"perm", std::move(perm)}});
}

std::vector<int64_t> swapLastTwo(int64_t rank) {
  assert(rank >= 2);
  std::vector<int64_t> perm(rank);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[rank - 1], perm[rank - 2]);
  return perm;
}

std::vector<ValueId> emitMulti(Builder &b, OpKind op, std::span<const ValueId> ops,
                               std::initializer_list<AttrInit> attrs, const SourceLoc &loc) {
  Attrs a(opInfo(op).attrs);
  for (const AttrInit &init : attrs) {
    [[maybe_unused]] Status s = a.set(init.first, init.second);
    assert(s.ok() && "a fusion pass set a bad attribute");
  }
  Expected<NodeId> n = b.graph.addNode(op, ops, std::move(a), loc);
  assert(n.ok() && "a fusion pass built an ill-typed node");
  if (!n.ok())
    return {};
  return b.graph.node(*n).results;
}

} // namespace kiln::passes::pattern
