// matmul(softmax(matmul(q, k^T) * s + bias, masked), v)  =>  attention(q, k, v, mask, bias){s}
//
// Finds scaled dot-product attention however it is written and replaces it with the fused
// `attention` op (ir/ops/fused.h), so that no softmax and no T x T mask constant remain:
//  - the softmax's operand (over the last axis) is read as a sum of terms with scalar factors
//    (add, sub, neg, mul or div by a constant) under -inf masks; one term is the q k^T matmul,
//    and the factors on it -- on q, on k or on the scores, multiplied or divided -- are `scale`;
//  - masks: select(keep, x, -inf), select(drop, -inf, x), or an added select(keep, 0, -inf) or
//    log(0/1 keep). Their conjunction is split: the lower triangle j <= i (tri, a 1/0 tri != 0,
//    or iota j <= i) becomes `causal`, a band |i - j| < w (two triangles, or one under causal)
//    becomes `window`, the rest (padding, ...) is ANDed into the `mask` operand;
//  - every other term (ALiBi, relative-position logits, float masks) sums into `bias`;
//  - k, v may be given per query head by broadcasting kv heads, or repeated to the query heads
//    (reshape of a broadcast or concat, as LLaMA's repeat_kv): then the un-repeated k, v are
//    passed with kv_heads < q_heads (MQA / GQA).
//  - dropout(p) v (attention dropout) moves into the op's dropout/seed attributes.
// Not attention, left alone: a softmax over another axis, p^T v or v p, a select whose fill is
// not -inf, a bias or mask computed from v; and matmuls marked bf16_products (the stages mark
// after fusing; a marked p v rounds the normalised p, the fused op's bf16 products round it
// before the division, ir/ops/fused.h).
// The probabilities' other uses (an attention map output, Shaw's sum_j p_ij a^V_ij) read
// p = exp(logits - lse), lse being attention's second result, so no softmax remains (divided
// once more by its row sum, 1, for the gradient's sake: see rewrite()).
//
// Layout: the fused op takes [B, H, T, D]. The logits' batch dims [b0, .., bn-1] are read as
// B = b0, H = b1 * .. * bn-1 (rank-3 logits [N, T, S]: B = N, H = 1); q, k, v, mask and bias are
// reshaped to that -- broadcast first where they broadcast in a way the op cannot express -- and
// the output is reshaped back to the p v matmul's shape.
//
// Cost: linear in the graph. A match reads who uses what, and whether v depends on p, from a
// UseIndex (use_index.h) kept current through the rewrites; a walk of the whole graph per softmax
// made the pass quadratic in depth (25 s for a 1000-layer GPT).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "ir/ops/reduce.h"
#include "passes/passes.h"
#include "passes/pattern.h"
#include "passes/use_index.h"

namespace kiln::passes {
using namespace kiln::ir;
namespace pt = pattern;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- Reading the logits ----

// An additive term coef * v of the logits; `unit` is a value of the graph equal to coef * v if
// the model computed one (so that `relative * s` is reused rather than rebuilt).
struct LogitTerm {
  ValueId v;
  double coef;
  ValueId unit;
};

// One literal of the conjunction saying where a query may attend a key: v (bool), or !v.
// `negation` is a node that already computes !v.
struct MaskLit {
  ValueId v;
  bool positive;
  ValueId negation = kNone;
};

struct Logits {
  std::vector<LogitTerm> terms;
  std::vector<MaskLit> masks;
};

// An added term that is 0 where a key is allowed and -inf elsewhere.
std::optional<MaskLit> additiveMask(const Graph &g, ValueId v) {
  // Broadcasting or float-casting a 0 / -inf term keeps it one.
  for (const Node *n = pt::defOf(g, v); n; n = pt::defOf(g, v)) {
    bool floatCast = n->op == OpKind::Cast && isFloat(g.type(n->operands[0]).dtype);
    if (n->op != OpKind::Broadcast && !floatCast)
      break;
    v = n->operands[0];
  }
  const Node *n = pt::defOf(g, v);
  if (n && n->op == OpKind::Select) {
    // select(keep, 0, -inf) = 0 where keep, -inf elsewhere.
    ValueId m = n->operands[0], a = n->operands[1], b = n->operands[2];
    if (pt::isUniform(g, a, 0) && pt::isUniform(g, b, -kInf))
      return MaskLit{m, true};
    if (pt::isUniform(g, a, -kInf) && pt::isUniform(g, b, 0))
      return MaskLit{m, false};
  }
  if (n && n->op == OpKind::Log) {
    // log(keep as 1/0) = 0 where keep, -inf elsewhere.
    ValueId x = n->operands[0];
    const Node *d = pt::defOf(g, x);
    if (d && d->op == OpKind::Cast && g.type(d->operands[0]).dtype == DType::Bool)
      return MaskLit{d->operands[0], true};
    if (d && d->op == OpKind::Tri)
      return MaskLit{x, true};
  }
  return std::nullopt;
}

// logits = sum_i coef_i term_i where every mask allows, -inf elsewhere. False if a scalar factor
// is zero or infinite (then it is not attention's softmax).
bool parseLogits(const Graph &g, ValueId v, double coef, ValueId unit, Logits &out) {
  if (coef == 0 || !std::isfinite(coef))
    return false;
  if (coef == 1)
    unit = v;
  if (std::optional<MaskLit> m = additiveMask(g, v); m && coef > 0) {
    out.masks.push_back(*m);
    return true;
  }
  if (const Node *n = pt::defOf(g, v)) {
    const std::vector<ValueId> &x = n->operands;
    if (n->op == OpKind::Add) // (a + b) c = a c + b c
      return parseLogits(g, x[0], coef, kNone, out) && parseLogits(g, x[1], coef, kNone, out);
    if (n->op == OpKind::Sub) // (a - b) c = a c + b (-c)
      return parseLogits(g, x[0], coef, kNone, out) && parseLogits(g, x[1], -coef, kNone, out);
    if (n->op == OpKind::Select) {
      // select(keep, a, -inf) c = select(keep, a c, -inf) for c > 0 (and +inf for c < 0).
      double fill = coef > 0 ? -kInf : kInf;
      if (pt::isUniform(g, x[2], fill)) {
        out.masks.push_back({x[0], true});
        return parseLogits(g, x[1], coef, kNone, out);
      }
      if (pt::isUniform(g, x[1], fill)) {
        out.masks.push_back({x[0], false});
        return parseLogits(g, x[2], coef, kNone, out);
      }
    } else { // (a k) c = a (k c), (a / k) c = a (c / k), (-a) c = a (-c)
      double factor = 1;
      if (std::optional<ValueId> inner = pt::peelScalar(g, v, factor))
        return parseLogits(g, *inner, coef * factor, unit, out);
    }
  }
  if (!pt::isUniform(g, v, 0)) // adding 0 changes nothing
    out.terms.push_back({v, coef, unit});
  return true;
}

// ---- Masks ----

// The index a value holds along the logits [.., Tq, Tk]: 0 = the query i, 1 = the key j.
std::optional<int> positionIndex(const Graph &g, ValueId v, int64_t tq, int64_t tk) {
  const Node *n = pt::defIs(g, v, OpKind::Iota);
  const Shape &s = g.type(v).shape;
  int64_t r = static_cast<int64_t>(s.size());
  if (!n || r < 1)
    return std::nullopt;
  int64_t axis = *normalizeAxis(n->attrs.getInt("axis"), r);
  if (axis == r - 1 && s[r - 1] == tk && (r < 2 || s[r - 2] == 1 || s[r - 2] == tq))
    return 1;
  if (r >= 2 && axis == r - 2 && s[r - 2] == tq && (s[r - 1] == 1 || s[r - 1] == tk))
    return 0;
  return std::nullopt;
}

// Whether m (or, if !positive, its negation) is exactly "key j <= query i" on [.., Tq, Tk].
bool isCausal(const Graph &g, ValueId m, bool positive, int64_t tq, int64_t tk) {
  const Node *n = pt::defOf(g, m);
  const Shape &s = g.type(m).shape;
  if (!n || s.size() < 2 || s[s.size() - 2] != tq || s.back() != tk)
    return false;
  if (n->op == OpKind::Tri) {
    // tri lower 0 is j - i <= 0; tri upper 1 is j - i >= 1, its complement.
    bool lower = n->attrs.getBool("lower");
    int64_t diagonal = n->attrs.getInt("diagonal");
    return positive ? lower && diagonal == 0 : !lower && diagonal == 1;
  }
  if (n->operands.size() != 2)
    return false;
  std::optional<int> a = positionIndex(g, n->operands[0], tq, tk);
  std::optional<int> b = positionIndex(g, n->operands[1], tq, tk);
  if (!a || !b || *a == *b)
    return false;
  const bool jFirst = *a == 1; // cmp(j, i) rather than cmp(i, j)
  // The comparisons that say "j <= i", and those that say its complement (to be negated).
  struct Causal {
    OpKind op;
    bool positive, jFirst;
  };
  static constexpr Causal kCausal[] = {{OpKind::Le, true, true},    // j <= i
                                       {OpKind::Ge, true, false},   // i >= j
                                       {OpKind::Gt, false, true},   // j > i, the complement
                                       {OpKind::Lt, false, false}}; // i < j
  for (const Causal &c : kCausal)
    if (c.op == n->op)
      return c.positive == positive && c.jFirst == jFirst;
  return false;
}

// One edge of a sliding window (a band of the diagonal): "i - j < width" (below: keys at most
// width - 1 back) or "j - i < width"; `lit` the literal that says it.
struct Band {
  MaskLit lit;
  bool below;
  int64_t width;
};

struct MaskSplit {
  bool causal = false;
  std::vector<MaskLit> lits;
  std::vector<Band> bands; // until settleWindow
  int64_t window = 0;      // attention's window: |i - j| < window
};

// Whether `tri` (or its complement, if !positive) is a band edge over [.., Tq, Tk]:
// tri upper d <= 0 is j - i >= d, i.e. i - j < 1 - d; tri lower d >= 1 is j - i < d + 1 (lower 0
// is the causal triangle). !tri(lower, d) = tri(upper, d + 1) and !tri(upper, d) = tri(lower,
// d - 1).
std::optional<Band> bandOf(const Graph &g, ValueId tri, bool positive, int64_t tq, int64_t tk,
                           MaskLit lit) {
  const Node *n = pt::defIs(g, tri, OpKind::Tri);
  const Shape &s = g.type(tri).shape;
  if (!n || s.size() < 2 || s[s.size() - 2] != tq || s.back() != tk)
    return std::nullopt;
  bool lower = n->attrs.getBool("lower");
  int64_t d = n->attrs.getInt("diagonal");
  if (!positive) {
    if (d == (lower ? INT64_MAX : INT64_MIN))
      return std::nullopt;
    d += lower ? 1 : -1;
    lower = !lower;
  }
  if (!lower && d <= 0 && d > INT64_MIN)
    return Band{lit, true, 1 - d};
  if (lower && d >= 1 && d < INT64_MAX)
    return Band{lit, false, d + 1};
  return std::nullopt;
}

// The bands found become attention's window where they are one: under causal masking the lower
// edge alone (the upper is j <= i), else both edges of one width; the tightest edge of each side
// counts. Otherwise they stay mask literals.
void settleWindow(MaskSplit &m) {
  int64_t below = 0, above = 0;
  for (const Band &b : m.bands) {
    int64_t &side = b.below ? below : above;
    side = side == 0 ? b.width : std::min(side, b.width);
  }
  if (below > 0 && (m.causal || below == above))
    m.window = below;
  else
    for (const Band &b : m.bands)
      if (std::none_of(m.lits.begin(), m.lits.end(), [&](const MaskLit &l) {
            return l.v == b.lit.v && l.positive == b.lit.positive;
          }))
        m.lits.push_back(b.lit);
  m.bands.clear();
}

// Splits a conjunction of masks into the causal triangle and the other literals:
// and(a, b) = a & b;  !or(a, b) = !a & !b;  !!a = a;  cast(t) = (t != 0) = t and (t == 0) = !t
// for a triangle t of 1/0.
void splitMask(const Graph &g, MaskLit m, int64_t tq, int64_t tk, MaskSplit &out) {
  if (isCausal(g, m.v, m.positive, tq, tk)) {
    out.causal = true;
    return;
  }
  if (std::optional<Band> band = bandOf(g, m.v, m.positive, tq, tk, m)) {
    out.bands.push_back(*band);
    return;
  }
  const Node *n = pt::defOf(g, m.v);
  OpKind conjunction = m.positive ? OpKind::LogicalAnd : OpKind::LogicalOr;
  if (n && n->op == conjunction) {
    splitMask(g, {n->operands[0], m.positive}, tq, tk, out);
    splitMask(g, {n->operands[1], m.positive}, tq, tk, out);
    return;
  }
  if (n && n->op == OpKind::LogicalNot) {
    splitMask(g, {n->operands[0], !m.positive, m.positive ? m.v : kNone}, tq, tk, out);
    return;
  }
  // A 1/0 triangle read as bool: cast(t), t != 0 (and t == 0, its complement).
  ValueId tri = kNone;
  bool same = true;
  if (n && n->op == OpKind::Cast)
    tri = n->operands[0];
  if (n && (n->op == OpKind::Ne || n->op == OpKind::Eq) && pt::isUniform(g, n->operands[1], 0)) {
    tri = n->operands[0];
    same = n->op == OpKind::Ne;
  }
  if (tri != kNone && pt::defIs(g, tri, OpKind::Tri) &&
      isCausal(g, tri, same == m.positive, tq, tk)) {
    out.causal = true;
    return;
  }
  if (tri != kNone)
    if (std::optional<Band> band = bandOf(g, tri, same == m.positive, tq, tk, m)) {
      out.bands.push_back(*band);
      return;
    }
  for (const MaskLit &l : out.lits)
    if (l.v == m.v && l.positive == m.positive)
      return;
  out.lits.push_back(m);
}

// ---- Operands ----

// An operand as found: a value, read with its last two dims swapped if `swap`.
struct View {
  ValueId v;
  bool swap = false;
};

// Looks through what does not change the matrices an operand stands for: transposes of the last
// two dims, broadcasts of batch dims (matmul broadcasts them anyway; a concat of copies of a size-1
// axis is one) and, if `scale` is given, scalar factors (multiplied into *scale).
View orient(const Graph &g, ValueId v, bool swap, double *scale) {
  for (;;) {
    if (scale)
      if (std::optional<ValueId> inner = pt::peelScalar(g, v, *scale)) {
        v = *inner;
        continue;
      }
    const Node *n = pt::defOf(g, v);
    const Shape &s = g.type(v).shape;
    if (n && n->op == OpKind::Transpose && n->attrs.getInts("perm") == pt::swapLastTwo(s.size())) {
      v = n->operands[0];
      swap = !swap;
      continue;
    }
    if (n && n->op == OpKind::Broadcast) {
      const Shape &in = g.type(n->operands[0]).shape;
      if (in.size() >= 2 && std::equal(in.end() - 2, in.end(), s.end() - 2)) {
        v = n->operands[0];
        continue;
      }
    }
    if (n && n->op == OpKind::Concat) { // copies of x along a batch axis where x has size 1
      ValueId x = n->operands[0];
      int64_t axis = *normalizeAxis(n->attrs.getInt("axis"), s.size());
      bool copies = axis + 2 < int64_t(s.size()) && g.type(x).shape[axis] == 1;
      for (ValueId o : n->operands)
        copies = copies && o == x;
      if (copies) {
        v = x;
        continue;
      }
    }
    return {v, swap};
  }
}

// k or v repeated to the query heads along batch axis `axis` from x, whose axis + 1 is 1: copy r
// of kv head c lands at c * group + r (repeat_interleave, LLaMA's repeat_kv):
//   reshape(broadcast(x, [.., C, G, ..]), [.., C G, ..])  or  reshape(concat(x, .., x), ..).
struct Repeat {
  ValueId x;
  int64_t axis;
  int64_t group;
};

std::optional<Repeat> peelRepeat(const Graph &g, ValueId v) {
  const Node *rs = pt::defIs(g, v, OpKind::Reshape);
  if (!rs)
    return std::nullopt;
  const Shape &out = g.type(v).shape, &in = g.type(rs->operands[0]).shape;
  if (in.size() != out.size() + 1 || out.size() < 3)
    return std::nullopt;
  size_t a = 0; // the merged axis: in = out[:a] + [C, G] + out[a+1:]
  while (a < out.size() && in[a] == out[a])
    ++a;
  if (a + 2 >= out.size() || in[a] * in[a + 1] != out[a] || in[a + 1] < 2 ||
      !std::equal(in.begin() + a + 2, in.end(), out.begin() + a + 1))
    return std::nullopt;
  const Node *rep = pt::defOf(g, rs->operands[0]);
  if (!rep)
    return std::nullopt;
  ValueId x = rep->operands[0];
  const Shape &xs = g.type(x).shape;
  if (xs.size() != in.size() || xs[a + 1] != 1)
    return std::nullopt;
  bool repeated = rep->op == OpKind::Broadcast;
  if (rep->op == OpKind::Concat) {
    repeated = *normalizeAxis(rep->attrs.getInt("axis"), in.size()) == int64_t(a + 1);
    for (ValueId o : rep->operands)
      repeated = repeated && o == x;
  }
  if (!repeated)
    return std::nullopt;
  return Repeat{x, int64_t(a), in[a + 1]};
}

int64_t product(std::span<const int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

// The logits' batch dims as the fused op sees them: dims[:split] make B, dims[split:] make H.
// A kv repeat splits orig[axis] into [orig[axis] / group, group].
struct Space {
  Shape orig;
  int64_t axis = -1, group = 1;
  Shape dims;
  size_t split = 0;
  int64_t b = 1, h = 1;
};

Space makeSpace(const Shape &orig, int64_t axis = -1, int64_t group = 1) {
  Space s{orig, axis, group, {}, 0, 1, 1};
  for (int64_t i = 0; i < int64_t(orig.size()); ++i) {
    if (i != axis) {
      s.dims.push_back(orig[i]);
      continue;
    }
    s.dims.push_back(orig[i] / group);
    s.dims.push_back(group);
  }
  s.split = std::min<size_t>(1, s.dims.size());
  s.b = product(std::span(s.dims).first(s.split));
  s.h = product(std::span(s.dims).subspan(s.split));
  return s;
}

// The batch dims of an operand of shape `shape` (its last two dims are the matrix; fewer than
// two: the leading ones broadcast), right-aligned to the space's, or nullopt if they do not
// broadcast into them. `split`: the operand is already in split coordinates (a peeled repeat).
std::optional<Shape> alignBatch(const Space &sp, const Shape &shape, bool split) {
  Shape batch(shape.begin(), shape.end() - std::min<size_t>(2, shape.size()));
  const Shape &ref = split ? sp.dims : sp.orig;
  if (batch.size() > ref.size())
    return std::nullopt;
  batch.insert(batch.begin(), ref.size() - batch.size(), 1);
  for (size_t i = 0; i < ref.size(); ++i)
    if (batch[i] != 1 && batch[i] != ref[i])
      return std::nullopt;
  if (split || sp.axis < 0)
    return batch;
  Shape out;
  for (int64_t i = 0; i < int64_t(batch.size()); ++i) {
    if (i != sp.axis)
      out.push_back(batch[i]);
    else if (batch[i] == 1)
      out.insert(out.end(), {1, 1});
    else
      out.insert(out.end(), {batch[i] / sp.group, sp.group});
  }
  return out;
}

enum class Role { Query, KeyValue, Extra };

// How an operand's batch dims map onto [B, H] without copying: ok, and its own b and h.
struct Fit {
  bool ok;
  int64_t b, h;
};

Fit fitOf(const Space &sp, const Shape &xb, Role role) {
  size_t n = sp.dims.size();
  auto ones = [&](size_t from, size_t to) {
    return std::all_of(xb.begin() + from, xb.begin() + to, [](int64_t d) { return d == 1; });
  };
  bool bFull = std::equal(xb.begin(), xb.begin() + sp.split, sp.dims.begin());
  bool bOnes = ones(0, sp.split);
  size_t p = sp.split; // H dims: a full prefix, then ones (kv heads read by groups of q heads)
  while (p < n && xb[p] == sp.dims[p])
    ++p;
  bool hOnes = ones(sp.split, n);
  switch (role) {
  case Role::Query:
    return {bFull && p == n, sp.b, sp.h};
  case Role::KeyValue:
    return {bFull && ones(p, n), sp.b, product(std::span(sp.dims).subspan(sp.split, p - sp.split))};
  case Role::Extra:
    return {(bFull || bOnes) && (p == n || hOnes), bFull ? sp.b : 1, p == n ? sp.h : 1};
  }
  return {false, 0, 0};
}

// One operand on its way into the fused op.
struct Operand {
  View view{kNone};
  Shape batch; // in space coordinates
  bool split = false;
  Fit fit{false, 0, 0};
};

// Emits `x` as [b, h, rows, cols]: transposed if viewed so, broadcast to the logits' batch dims
// if it does not fit, reshaped.
ValueId emitOperand(Builder &b, const Space &sp, const Operand &x) {
  ValueId v = x.view.v;
  if (x.view.swap)
    v = pt::transposed(b, v, pt::swapLastTwo(b.type(v).rank()));
  Shape s = b.type(v).shape;
  int64_t rows = s.size() >= 2 ? s[s.size() - 2] : 1, cols = s.empty() ? 1 : s.back();
  Fit f = x.fit;
  if (!f.ok) {
    Shape target = sp.orig;
    target.insert(target.end(), {rows, cols});
    v = pt::broadcastTo(b, v, target);
    f = {true, sp.b, sp.h};
  }
  return pt::reshapeTo(b, v, {f.b, f.h, rows, cols});
}

// ---- The rewrite ----

struct Match {
  NodeId softmax = kNone, pv = kNone;
  NodeId dropout = kNone; // dropout(p) read by the p v matmul, if any
  ValueId logits = kNone, probs = kNone;
  Space space;
  Operand q, k, v;
  double scale = 1;
  MaskSplit mask;
  std::vector<LogitTerm> bias; // the terms other than q k^T
};

// The p v matmul: p (not transposed) on the left of a value that is not computed from p.
std::optional<NodeId> findPv(const Graph &g, ValueId p, UseIndex &index) {
  for (NodeId u : index.users(p)) {
    const Node &n = g.node(u);
    if (n.op == OpKind::Matmul && n.operands[0] == p && n.operands[1] != p &&
        !n.attrs.getBool("transpose_a") && !n.attrs.getBool("bf16_products") &&
        !index.dependsOn(n.operands[1], p))
      return u;
  }
  return std::nullopt;
}

// dropout(p) and the p v matmul that reads it, if that is dropout(p)'s only use.
std::optional<std::pair<NodeId, NodeId>> findDroppedPv(const Graph &g, ValueId p, UseIndex &index) {
  for (NodeId u : index.users(p)) {
    const Node &d = g.node(u);
    if (d.op != OpKind::Dropout)
      continue;
    ValueId dp = d.results[0];
    if (index.users(dp).size() != 1 || index.isOutput(dp))
      continue;
    std::optional<NodeId> pv = findPv(g, dp, index);
    if (pv && !index.dependsOn(g.node(*pv).operands[1], p))
      return std::pair{u, *pv};
  }
  return std::nullopt;
}

// k and v repeated to the query heads the same way (GQA spelled out): the match takes them
// un-repeated, in a space whose head axis splits into kv heads and their groups.
void passUnrepeated(const Graph &g, const Shape &orig, Match &m) {
  std::optional<Repeat> rk = peelRepeat(g, m.k.view.v), rv = peelRepeat(g, m.v.view.v);
  int64_t kShift = int64_t(orig.size()) - (g.type(m.k.view.v).rank() - 2);
  int64_t vShift = int64_t(orig.size()) - (g.type(m.v.view.v).rank() - 2);
  if (rk && rv && rk->group == rv->group && rk->axis + kShift == rv->axis + vShift &&
      rk->axis + kShift >= 0) {
    Space sp = makeSpace(orig, rk->axis + kShift, rk->group);
    std::optional<Shape> kb = alignBatch(sp, g.type(rk->x).shape, true);
    std::optional<Shape> vb = alignBatch(sp, g.type(rv->x).shape, true);
    if (kb && vb) {
      Fit fk = fitOf(sp, *kb, Role::KeyValue), fv = fitOf(sp, *vb, Role::KeyValue);
      if (fk.ok && fv.ok && fk.h == fv.h) {
        m.space = sp;
        m.k = {{rk->x, m.k.view.swap}, *kb, true, fk};
        m.v = {{rv->x, m.v.view.swap}, *vb, true, fv};
      }
    }
  }
}

// Whether a bias term or a mask literal is computed from v (then it is not attention's).
bool biasOrMaskFrom(const Match &m, ValueId v, UseIndex &index) {
  for (const LogitTerm &t : m.bias)
    if (index.dependsOn(t.v, v))
      return true;
  for (const MaskLit &l : m.mask.lits)
    if (index.dependsOn(l.v, v))
      return true;
  return false;
}

std::optional<Match> match(const Graph &g, NodeId id, UseIndex &index) {
  const Node &sm = g.node(id);
  ValueId logits = sm.operands[0], probs = sm.results[0];
  const Shape &ls = g.type(logits).shape;
  int64_t rank = static_cast<int64_t>(ls.size());
  if (rank < 2 || *normalizeAxis(sm.attrs.getInt("axis"), rank) != rank - 1)
    return std::nullopt; // attention normalises over the keys, the last axis
  std::optional<NodeId> pv = findPv(g, probs, index);
  NodeId dropout = kNone;
  if (!pv) {
    // Attention dropout: p v reads dropout(p), which nothing else reads. Its mask is drawn over
    // the probabilities' own layout, which is the fused op's [B, Hq, Tq, Tk] in row-major order
    // (B and H only merge or split the logits' batch dims), so the fused op redraws the same bits.
    std::optional<std::pair<NodeId, NodeId>> found = findDroppedPv(g, probs, index);
    if (!found)
      return std::nullopt;
    dropout = found->first;
    pv = found->second;
  }
  const Node &pvNode = g.node(*pv);
  int64_t tq = ls[rank - 2], tk = ls[rank - 1];
  Shape orig(ls.begin(), ls.end() - 2);
  Shape outShape = g.type(pvNode.results[0]).shape;
  if (!std::equal(orig.begin(), orig.end(), outShape.begin(), outShape.end() - 2))
    return std::nullopt; // v's batch dims would broadcast the output beyond the logits'

  Logits parsed;
  if (!parseLogits(g, logits, 1, kNone, parsed))
    return std::nullopt;
  // The q k^T term: the first matmul term of the logits' [Tq, Tk].
  size_t qk = parsed.terms.size();
  for (size_t i = 0; i < parsed.terms.size() && qk == parsed.terms.size(); ++i) {
    const Shape &s = g.type(parsed.terms[i].v).shape;
    if (pt::defIs(g, parsed.terms[i].v, OpKind::Matmul) && s[s.size() - 2] == tq && s.back() == tk)
      qk = i;
  }
  if (qk == parsed.terms.size() || pt::defOf(g, parsed.terms[qk].v)->attrs.getBool("bf16_products"))
    return std::nullopt;

  Match m;
  m.softmax = id;
  m.pv = *pv;
  m.dropout = dropout;
  m.logits = logits;
  m.probs = probs;
  m.space = makeSpace(orig);
  m.scale = parsed.terms[qk].coef;
  const Node &mm = *pt::defOf(g, parsed.terms[qk].v);
  m.q.view = orient(g, mm.operands[0], mm.attrs.getBool("transpose_a"), &m.scale);
  m.k.view = orient(g, mm.operands[1], !mm.attrs.getBool("transpose_b"), &m.scale);
  m.v.view = orient(g, pvNode.operands[1], pvNode.attrs.getBool("transpose_b"), nullptr);
  if (!std::isfinite(m.scale) || m.scale == 0)
    return std::nullopt;
  for (size_t i = 0; i < parsed.terms.size(); ++i)
    if (i != qk)
      m.bias.push_back(parsed.terms[i]);
  for (const MaskLit &lit : parsed.masks)
    splitMask(g, lit, tq, tk, m.mask);
  settleWindow(m.mask);

  if (biasOrMaskFrom(m, pvNode.operands[1], index))
    return std::nullopt;

  passUnrepeated(g, orig, m);
  for (auto [x, role] :
       {std::pair{&m.q, Role::Query}, {&m.k, Role::KeyValue}, {&m.v, Role::KeyValue}}) {
    if (x->split)
      continue;
    std::optional<Shape> xb = alignBatch(m.space, g.type(x->view.v).shape, false);
    if (!xb)
      return std::nullopt;
    x->batch = *xb;
    x->fit = fitOf(m.space, *xb, role);
  }
  if (!m.k.fit.ok || !m.v.fit.ok || m.k.fit.h != m.v.fit.h)
    m.k.fit.ok = m.v.fit.ok = false; // both broadcast to every query head
  return m;
}

// The literals' conjunction as one bool value.
ValueId maskValue(Builder &b, const std::vector<MaskLit> &lits) {
  ValueId all = kNone;
  for (const MaskLit &l : lits) {
    ValueId v = l.v;
    if (b.type(v).dtype != DType::Bool) // a 1/0 float triangle read through log()
      v = b.cast(v, DType::Bool);
    if (!l.positive)
      v = l.negation != kNone ? l.negation : b.emit(OpKind::LogicalNot, {v});
    all = all == kNone ? v : b.emit(OpKind::LogicalAnd, {all, v});
  }
  return all;
}

// sum_i coef_i term_i, reusing the model's own scaled values where it has them.
ValueId biasValue(Builder &b, const std::vector<LogitTerm> &terms) {
  ValueId sum = kNone;
  for (const LogitTerm &t : terms) {
    ValueId v = t.unit != kNone ? t.unit : b.mul(t.v, b.scalar(t.coef, b.type(t.v).dtype));
    sum = sum == kNone ? v : b.add(sum, v);
  }
  return sum;
}

Operand extraOperand(const Graph &g, const Space &sp, ValueId v) {
  Operand x{{v, false}, {}, false, {false, 0, 0}};
  if (std::optional<Shape> xb = alignBatch(sp, g.type(v).shape, false)) {
    x.batch = *xb;
    x.fit = fitOf(sp, *xb, Role::Extra);
  }
  return x;
}

Expected<bool> rewrite(Graph &g, UseIndex &index, Match &m, PassStats &stats) {
  const Node sm = g.node(m.softmax); // a copy: emitting grows the node list
  Builder b(g, sm.loc);
  const Space &sp = m.space;
  ValueId q = emitOperand(b, sp, m.q), k = emitOperand(b, sp, m.k), v = emitOperand(b, sp, m.v);
  std::vector<ValueId> ops{q, k, v};
  bool hasMask = !m.mask.lits.empty(), hasBias = !m.bias.empty();
  if (hasMask)
    ops.push_back(emitOperand(b, sp, extraOperand(g, sp, maskValue(b, m.mask.lits))));
  if (hasBias)
    ops.push_back(emitOperand(b, sp, extraOperand(g, sp, biasValue(b, m.bias))));
  // A dropout drawn at a training step's count (dropout(p, step)) draws it so inside attention.
  const bool hasStep = m.dropout != kNone && g.node(m.dropout).operands.size() == 2;
  if (hasStep)
    ops.push_back(g.node(m.dropout).operands[1]);
  int64_t kvHeads = g.type(k).shape[1];
  Attrs attrs(opInfo(OpKind::Attention).attrs);
  for (auto [name, value] : std::initializer_list<AttrInit>{{"scale", m.scale},
                                                            {"causal", m.mask.causal},
                                                            {"window", m.mask.window},
                                                            {"q_heads", sp.h},
                                                            {"kv_heads", kvHeads},
                                                            {"has_mask", hasMask},
                                                            {"has_bias", hasBias},
                                                            {"has_step", hasStep}})
    if (Status s = attrs.set(name, value); !s)
      return s.error();
  if (m.dropout != kNone) {
    const Node &d = g.node(m.dropout);
    for (const AttrInit &a : std::initializer_list<AttrInit>{{"dropout", d.attrs.getFloat("p")},
                                                             {"seed", d.attrs.getInt("seed")}})
      if (Status s = attrs.set(a.first, a.second); !s)
        return s.error();
  }
  Expected<NodeId> att = g.addNode(OpKind::Attention, ops, std::move(attrs), sm.loc);
  if (!att)
    return makeError("fuse-attention: {}: attention: {}", placeOf(sm, m.softmax),
                     att.error().message);
  ValueId out = g.node(*att).results[0], lse = g.node(*att).results[1];

  ValueId pvOut = g.node(m.pv).results[0];
  Shape outShape = g.type(pvOut).shape;
  index.replaceAllUses(pvOut, pt::reshapeTo(b, out, outShape));
  // Other uses of p read e = exp(logits - lse) (lse = log sum_j exp(logits_j), as [.., Tq, 1]),
  // divided by sum_j e_j. That sum is 1 -- p = e -- but attention's backward treats lse as a
  // constant (no gradient may flow into it), so lse enters through stop_gradient and the division
  // gives p the softmax's own gradient: dlogits = p (dp - sum_j p_j dp_j). The guards keep a
  // fully masked row (lse = -inf) zero, as softmax gives it: the shift is 0 there (so e =
  // exp(-inf) = 0, not NaN) and the divisor at least the smallest normal number, which no other
  // row's sum (about 1) comes near.
  int32_t otherUses = index.useCount(m.probs); // besides p v and the dropout, both going away
  for (NodeId u : index.users(m.probs))
    otherUses -= u == m.pv || u == m.dropout;
  if (otherUses > 0) {
    Shape lseShape(outShape.begin(), outShape.end() - 1);
    lseShape.push_back(1);
    DType t = g.type(m.logits).dtype, st = g.type(lse).dtype;
    ValueId shift = b.emit(OpKind::StopGradient, {pt::reshapeTo(b, lse, lseShape)});
    shift = softmaxShift(b, shift);
    ValueId e = b.emit(OpKind::Exp, {b.sub(pt::castTo(b, m.logits, st), shift)});
    ValueId sum = b.emit(OpKind::Max,
                         {b.sum(e, {-1}, true), b.scalar(std::numeric_limits<float>::min(), st)});
    ValueId p = b.div(e, sum);
    index.replaceAllUses(m.probs, pt::castTo(b, p, t));
    stats.count("{} probability maps recomputed from lse");
  }
  std::vector<NodeId> seeds = {m.softmax, m.pv};
  if (m.dropout != kNone)
    seeds.push_back(m.dropout);
  index.eraseDead(seeds);
  stats.count("fused {} attention patterns");
  if (m.mask.causal)
    stats.count("{} causal");
  if (m.mask.window > 0)
    stats.count("{} with a sliding window");
  if (hasMask)
    stats.count("{} with a mask operand");
  if (hasBias)
    stats.count("{} with a bias operand");
  if (kvHeads < sp.h)
    stats.count("{} with shared kv heads");
  if (m.dropout != kNone)
    stats.count("{} with attention dropout");
  return true;
}

} // namespace

Expected<bool> runFuseAttention(Graph &g, PassStats &stats) {
  bool changed = false;
  NodeId count = static_cast<NodeId>(g.nodes().size());
  UseIndex index(g);
  for (NodeId id = 0; id < count; ++id) {
    if (g.node(id).erased || g.node(id).op != OpKind::Softmax)
      continue;
    std::optional<Match> m = match(g, id, index);
    if (!m)
      continue;
    Expected<bool> r = rewrite(g, index, *m, stats);
    if (!r)
      return r.error();
    changed = true;
  }
  g.compact();
  return changed;
}

} // namespace kiln::passes
