// (x - mean(x)) * rsqrt(var(x) + eps) * w + b  =>  layer_norm(x, w, b){eps}
// x * rsqrt(mean(x^2) + eps) * w                =>  rms_norm(x, w){eps}
// norm(s), s = a + b used elsewhere too         =>  add_layer_norm(a, b, ..) or add_rms_norm(..)
//
// Over the last axis only (the fused ops' axis). Read as y = prod(factors) + sum(bias terms):
//  - mean(x) is reduce_mean over the last axis with keepdims, or reduce_sum / N, or a reduction
//    without keepdims reshaped to [.., 1];
//  - var(x) is mean((x - mean(x))^2) or mean(x^2) - mean(x)^2 (squares as x * x or pow(x, 2));
//  - the scale is rsqrt(var + eps), pow(var + eps, -0.5), or a division by sqrt(var + eps) or
//    pow(var + eps, 0.5); eps (a constant >= 0) may be absent;
//  - weight factors and bias terms are per-feature values ([N], [1, .., N], or one number)
//    computed without x, any number of them (multiplied / summed), or none.
// The residual add's variant fuses a + b in when the sum is needed by the next residual too.
// A use of the chain's mean or rsqrt outside it keeps its own nodes: the fused op's statistics
// are for its backward only (no gradient may flow into them).
// Cost: linear in the graph. Uses come from a UseIndex kept current through the rewrites
// (use_index.h), and a sum is ruled out from its first two full-size terms (pattern.h
// fewTermsFail) before it is read whole: every residual add reads back down the whole stream.
#include <cmath>
#include <optional>
#include <vector>

#include "passes/passes.h"
#include "passes/pattern.h"
#include "passes/use_index.h"

namespace kiln::passes {
using namespace kiln::ir;
namespace pt = pattern;

namespace {

// x, if v = mean(x) over the last axis, shaped [.., 1].
std::optional<ValueId> meanLast(const Graph &g, ValueId v) {
  double factor = 1;
  ValueId inner = pt::peelScalar(g, v, factor).value_or(v); // sum(x) * (1/N) or sum(x) / N
  const Node *n = pt::defOf(g, inner);
  if (n && n->op == OpKind::Reshape) { // reduce(x) without keepdims, then [..] -> [.., 1]
    const Shape &in = g.type(n->operands[0]).shape, &out = g.type(inner).shape;
    Shape kept = in;
    kept.push_back(1);
    if (kept != out)
      return std::nullopt;
    n = pt::defOf(g, n->operands[0]);
    if (!n || n->attrs.indexOf("keepdims") < 0 || n->attrs.getBool("keepdims"))
      return std::nullopt;
  } else if (!n || n->attrs.indexOf("keepdims") < 0 || !n->attrs.getBool("keepdims")) {
    return std::nullopt;
  }
  if ((n->op != OpKind::ReduceMean && n->op != OpKind::ReduceSum) || !pt::reducesLastAxis(g, *n))
    return std::nullopt;
  ValueId x = n->operands[0];
  double count = double(g.type(x).shape.back());
  double want = n->op == OpKind::ReduceMean ? 1 : 1 / count; // mean = sum / N
  if (std::abs(factor - want) > 1e-12 * want)
    return std::nullopt;
  return x;
}

// x, if v = x - mean(x).
std::optional<ValueId> centered(const Graph &g, ValueId v) {
  const Node *n = pt::defIs(g, v, OpKind::Sub);
  if (!n)
    return std::nullopt;
  std::optional<ValueId> x = meanLast(g, n->operands[1]);
  if (!x || *x != n->operands[0])
    return std::nullopt;
  return x;
}

// Whether a and b are the same value: one node, or both x - mean(x) of one x.
bool same(const Graph &g, ValueId a, ValueId b) {
  if (a == b)
    return true;
  std::optional<ValueId> ca = centered(g, a), cb = centered(g, b);
  return ca && cb && *ca == *cb;
}

// z, if v = z * z or pow(z, 2).
std::optional<ValueId> square(const Graph &g, ValueId v) {
  const Node *n = pt::defOf(g, v);
  if (n && n->op == OpKind::Mul && same(g, n->operands[0], n->operands[1]))
    return n->operands[0];
  if (n && n->op == OpKind::Pow && pt::isUniform(g, n->operands[1], 2))
    return n->operands[0];
  return std::nullopt;
}

enum class Kind { Layer, Rms };

struct Statistic {
  Kind kind;
  ValueId src; // Layer: the x whose variance it is; Rms: the z whose mean square it is
};

std::optional<Statistic> statisticOf(const Graph &g, ValueId v) {
  // mean(z^2): the variance of x if z = x - mean(x), else z's mean square.
  if (std::optional<ValueId> m = meanLast(g, v))
    if (std::optional<ValueId> z = square(g, *m)) {
      if (std::optional<ValueId> x = centered(g, *z))
        return Statistic{Kind::Layer, *x};
      return Statistic{Kind::Rms, *z};
    }
  // mean(x^2) - mean(x)^2 = var(x)
  if (const Node *n = pt::defIs(g, v, OpKind::Sub)) {
    ValueId x = kNone, meanOfX = kNone;
    if (std::optional<ValueId> ms = meanLast(g, n->operands[0]))
      x = square(g, *ms).value_or(kNone);
    if (std::optional<ValueId> mu = square(g, n->operands[1]))
      meanOfX = meanLast(g, *mu).value_or(kNone);
    if (x != kNone && x == meanOfX)
      return Statistic{Kind::Layer, x};
  }
  return std::nullopt;
}

// The normalising factor: rsqrt(s + eps)^1, pow(s + eps, -0.5)^1, sqrt(s + eps)^-1 or
// pow(s + eps, 0.5)^-1 of a statistic s.
struct Scale {
  Statistic stat;
  double eps;
};

std::optional<Scale> scaleOf(const Graph &g, const pt::Factor &f) {
  const Node *n = pt::defOf(g, f.v);
  if (!n)
    return std::nullopt;
  std::optional<double> power =
      n->op == OpKind::Pow ? pt::uniformValue(g, n->operands[1]) : std::nullopt;
  bool inverse = (n->op == OpKind::Rsqrt || power == -0.5) && f.exponent == 1;
  bool divide = (n->op == OpKind::Sqrt || power == 0.5) && f.exponent == -1;
  if (!inverse && !divide)
    return std::nullopt;
  ValueId s = n->operands[0];
  double eps = 0;
  if (const Node *add = pt::defIs(g, s, OpKind::Add))
    for (int i : {0, 1})
      if (std::optional<double> e = pt::uniformValue(g, add->operands[i]); e && *e >= 0) {
        eps = *e;
        s = add->operands[1 - i];
        break;
      }
  std::optional<Statistic> stat = statisticOf(g, s);
  if (!stat)
    return std::nullopt;
  return Scale{*stat, eps};
}

// A per-feature value: broadcasts into [.., N] varying at most along the last axis.
bool perFeature(const Graph &g, ValueId v, const Type &y) {
  const Type &t = g.type(v);
  if (t.dtype != y.dtype || t.rank() > y.rank())
    return false;
  for (int64_t d = 0; d + 1 < t.rank(); ++d)
    if (t.shape[d] != 1)
      return false;
  return t.rank() == 0 || t.shape.back() == 1 || t.shape.back() == y.shape.back();
}

struct NormMatch {
  Kind kind;
  ValueId x, top;
  double eps;
  std::vector<ValueId> weights;
  std::vector<pt::Term> biases;
};

// The normalised product: data * scale * weights, data being x - mean(x) (Layer) or x (Rms).
bool matchProduct(const Graph &g, ValueId v, const Type &y, NormMatch &m) {
  for (const pt::Factor &f : pt::productFactors(g, v)) {
    std::optional<Scale> sc = scaleOf(g, f);
    if (!sc)
      continue;
    m = NormMatch{sc->stat.kind, sc->stat.src, kNone, sc->eps, {}, {}};
    bool ok = true, haveScale = false, haveData = false;
    for (const pt::Factor &h : pt::productFactors(g, v, sc->stat.src)) {
      if (h.v == f.v && h.exponent == f.exponent && !haveScale) {
        haveScale = true;
      } else if (h.exponent == 1 && !haveData && g.type(h.v) == y &&
                 (m.kind == Kind::Layer ? centered(g, h.v) == m.x : h.v == m.x)) {
        haveData = true;
      } else if (h.exponent == 1 && perFeature(g, h.v, y)) {
        m.weights.push_back(h.v);
      } else if (!pt::isUniform(g, h.v, 1)) {
        ok = false;
      }
    }
    if (ok && haveScale && haveData && g.type(m.x) == y)
      return true;
  }
  return false;
}

std::optional<NormMatch> matchNorm(const Graph &g, UseIndex &index, ValueId top) {
  const Type &y = g.type(top);
  if (!isFloat(y.dtype) || y.rank() < 1)
    return std::nullopt;
  // Every term but the normalised product is a per-feature bias, so two other terms rule the sum
  // out: checked first without reading the whole sum.
  if (!pt::fewTermsFail(g, top, 1, [&](ValueId v) { return perFeature(g, v, y); }))
    return std::nullopt;
  std::optional<NormMatch> found;
  std::vector<pt::Term> biases;
  for (const pt::Term &t : pt::sumTerms(g, top)) {
    NormMatch m;
    if (!found && t.coef == 1 && matchProduct(g, t.v, y, m))
      found = m;
    else if (perFeature(g, t.v, y))
      biases.push_back(t);
    else
      return std::nullopt;
  }
  if (!found)
    return std::nullopt;
  found->top = top;
  found->biases = std::move(biases);
  for (ValueId w : found->weights)
    if (index.dependsOn(w, found->x))
      return std::nullopt;
  for (const pt::Term &t : found->biases)
    if (index.dependsOn(t.v, found->x))
      return std::nullopt;
  return found;
}

// A per-feature value as [N].
ValueId asFeatures(Builder &b, ValueId v, int64_t n) {
  if (b.type(v).numElements() == n)
    return pt::reshapeTo(b, v, {n});
  return pt::broadcastTo(b, pt::reshapeTo(b, v, {1}), {n});
}

Status rewriteNorm(Graph &g, UseIndex &index, const NormMatch &m, PassStats &stats) {
  NodeId topNode = g.value(m.top).def;
  SourceLoc loc = g.node(topNode).loc;
  Builder b(g, loc);
  int64_t n = g.type(m.x).shape.back();
  bool layer = m.kind == Kind::Layer;
  ValueId w = kNone, bias = kNone;
  for (ValueId f : m.weights) {
    ValueId v = asFeatures(b, f, n);
    w = w == kNone ? v : b.mul(w, v);
  }
  for (const pt::Term &t : m.biases) {
    ValueId v = asFeatures(b, t.v, n);
    if (bias == kNone)
      bias = t.coef > 0 ? v : b.neg(v);
    else
      bias = t.coef > 0 ? b.add(bias, v) : b.sub(bias, v);
  }
  bool hasBias = layer && bias != kNone;
  // norm(inputs..., [w], [bias]); with two inputs, the add_ variant.
  auto emitNorm = [&](std::vector<ValueId> inputs) -> Expected<std::vector<ValueId>> {
    bool withAdd = inputs.size() == 2;
    OpKind op = layer ? (withAdd ? OpKind::AddLayerNorm : OpKind::LayerNorm)
                      : (withAdd ? OpKind::AddRmsNorm : OpKind::RmsNorm);
    if (w != kNone)
      inputs.push_back(w);
    if (hasBias)
      inputs.push_back(bias);
    Attrs attrs(opInfo(op).attrs);
    for (auto [name, value] : std::initializer_list<AttrInit>{
             {"eps", m.eps}, {"has_weight", w != kNone}, {"has_bias", hasBias}})
      if (attrs.indexOf(name) >= 0)
        if (Status s = attrs.set(name, value); !s)
          return s.error();
    Expected<NodeId> node = g.addNode(op, inputs, std::move(attrs), loc);
    if (!node)
      return makeError("fuse-layer-norm: {}: {}: {}", placeOf(g.node(topNode), topNode),
                       mnemonic(op), node.error().message);
    return g.node(*node).results;
  };
  // The results without the residual sum: y, [mean,] rstd.
  Expected<std::vector<ValueId>> fused = emitNorm({m.x});
  if (!fused)
    return fused.error();
  std::vector<ValueId> r = *fused;
  ValueId y = r[0];
  if (!layer && bias != kNone) // rms_norm has no bias: y + b
    y = b.add(y, bias);
  index.replaceAllUses(m.top, y);
  NodeId seeds[] = {topNode};
  index.eraseDead(seeds);
  stats.count(layer ? "fused {} layer_norm" : "fused {} rms_norm");

  // a + b feeding the norm and used elsewhere: add_*_norm yields both the sum and the norm.
  const Node *add = pt::defIs(g, m.x, OpKind::Add);
  if (add && index.useCount(m.x) > 1) {
    NodeId addNode = g.value(m.x).def, normNode = g.value(r[0]).def;
    Expected<std::vector<ValueId>> sum = emitNorm({add->operands[0], add->operands[1]});
    if (!sum) // operands the fused add does not take: keep the add and the plain norm
      return {};
    index.replaceAllUses(m.x, (*sum)[0]);
    for (size_t i = 0; i < r.size(); ++i)
      index.replaceAllUses(r[i], (*sum)[i + 1]);
    r.assign(sum->begin() + 1, sum->end());
    NodeId dead[] = {normNode, addNode};
    index.eraseDead(dead);
    stats.count("{} with the residual add");
  }
  return {};
}

} // namespace

Expected<bool> runFuseLayerNorm(Graph &g, PassStats &stats) {
  bool changed = false;
  UseIndex index(g);
  for (NodeId id = static_cast<NodeId>(g.nodes().size()) - 1; id >= 0; --id) {
    const Node &n = g.node(id);
    bool candidate =
        n.op == OpKind::Add || n.op == OpKind::Sub || n.op == OpKind::Mul || n.op == OpKind::Div;
    if (n.erased || !candidate)
      continue;
    std::optional<NormMatch> m = matchNorm(g, index, n.results[0]);
    if (!m)
      continue;
    if (Status s = rewriteNorm(g, index, *m, stats); !s)
      return s.error();
    changed = true;
  }
  g.compact();
  return changed;
}

} // namespace kiln::passes
