// Shared by the fused-op tests (fused_*_test.cc): one fused node in a graph of named inputs, its
// unfused twin (the node replaced by its decomposition), losses over chosen results, and
// comparisons of whole output lists on the reference interpreter.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/reference/interpreter.h"
#include "ir/builder.h"
#include "ir/graph.h"
#include "support/rng.h"
#include "tests/util/ir_types.h"

namespace kiln::ir::fusedtest {

// A graph input: fixed values, or (empty) random ones: standard normal floats, and for bool a
// mask in which key 0 is always allowed (so that no row is fully masked) and the rest random.
struct In {
  std::string name;
  Type type;
  std::vector<double> values = {};
};

// Attention's attributes: scale, heads, and `more`.
inline std::vector<AttrInit> attn(double scale, int64_t hq, int64_t hkv,
                                  std::vector<AttrInit> more = {}) {
  std::vector<AttrInit> a = {{"scale", scale}, {"q_heads", hq}, {"kv_heads", hkv}};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// Attention's operands q [B, Hq, Tq, D], k [B, Hkv, Tk, D], v [B, Hkv, Tk, Dv], then `more`.
inline std::vector<In> qkv(int64_t b, int64_t hq, int64_t hkv, int64_t tq, int64_t tk, int64_t d,
                           int64_t dv, std::vector<In> more = {}) {
  std::vector<In> ins = {
      {"q", f64t({b, hq, tq, d})}, {"k", f64t({b, hkv, tk, d})}, {"v", f64t({b, hkv, tk, dv})}};
  ins.insert(ins.end(), more.begin(), more.end());
  return ins;
}

// The op's attributes from its defaults and `inits` (a failure is reported).
inline Attrs attrsOf(OpKind op, const std::vector<AttrInit> &inits) {
  Attrs a(opInfo(op).attrs);
  for (const AttrInit &i : inits) {
    Status s = a.set(i.first, i.second);
    EXPECT_TRUE(s.ok()) << i.first << ": " << (s ? "" : s.error().message);
  }
  return a;
}

// g: the inputs, one `op` node on them in order (at a fixed source location), nothing else yet.
struct OneNode {
  Graph g;
  std::vector<ValueId> inputs;
  NodeId node = kNone;
  const std::vector<ValueId> &results() const { return g.node(node).results; }
};

inline const SourceLoc kLoc{"tests/ir/fused_test.cc", 7};

inline OneNode oneNode(OpKind op, const std::vector<In> &ins, const std::vector<AttrInit> &attrs) {
  OneNode r{Graph(std::string(mnemonic(op))), {}, kNone};
  for (const In &in : ins)
    r.inputs.push_back(r.g.addInput(in.name, in.type));
  Expected<NodeId> n = r.g.addNode(op, r.inputs, attrsOf(op, attrs), kLoc);
  EXPECT_TRUE(n.ok()) << (n ? "" : n.error().message);
  r.node = n ? *n : kNone;
  return r;
}

// Values for `ins` (see In), a pure function of the seed.
inline std::vector<RefTensor<double>> argsFor(const std::vector<In> &ins, uint64_t seed) {
  std::vector<RefTensor<double>> args;
  for (size_t a = 0; a < ins.size(); ++a) {
    const In &in = ins[a];
    RefTensor<double> t(in.type);
    uint64_t stream = rng::mix64(seed * 131 + a);
    for (int64_t k = 0; k < t.size(); ++k) {
      bool fixed = !in.values.empty();
      if (t.isFloatStorage())
        t.f[k] = fixed ? in.values[k] : rng::normal(stream, k);
      else if (fixed)
        t.i[k] = static_cast<int64_t>(in.values[k]);
      else // bool mask: the last axis is the key axis; key 0 always allowed
        t.i[k] = (k % in.type.shape.back() == 0) || rng::uniform(stream, k) < 0.6;
    }
    EXPECT_TRUE(in.values.empty() || static_cast<int64_t>(in.values.size()) == t.size()) << in.name;
    args.push_back(std::move(t));
  }
  return args;
}

// Replaces the fused node of `g` by primitives: its decomposition, or for add_layer_norm /
// add_rms_norm an add followed by the norm's decomposition. Uses of its results are redirected,
// the node erased and the graph compacted.
inline void unfuse(Graph &g, NodeId id) {
  Node n = g.node(id); // a copy: appending moves g's nodes
  std::vector<ValueId> results;
  if (n.op == OpKind::AddLayerNorm || n.op == OpKind::AddRmsNorm) {
    bool layer = n.op == OpKind::AddLayerNorm;
    Builder b(g, n.loc, n.gradOf);
    ValueId sum = b.add(n.operands[0], n.operands[1]);
    std::vector<ValueId> normOperands = {sum};
    normOperands.insert(normOperands.end(), n.operands.begin() + 2, n.operands.end());
    OpKind normOp = layer ? OpKind::LayerNorm : OpKind::RmsNorm;
    // add_layer_norm shares layer_norm's attributes (and add_rms_norm rms_norm's).
    Expected<NodeId> norm = g.addNode(normOp, normOperands, n.attrs, n.loc);
    ASSERT_TRUE(norm.ok()) << norm.error().message;
    Node normNode = g.node(*norm);
    Expected<std::vector<int32_t>> d = opInfo(normOp).decompose(g, normNode);
    ASSERT_TRUE(d.ok()) << d.error().message;
    g.eraseNode(*norm);
    results = {sum};
    results.insert(results.end(), d->begin(), d->end());
  } else {
    Expected<std::vector<int32_t>> d = opInfo(n.op).decompose(g, n);
    ASSERT_TRUE(d.ok()) << d.error().message;
    results.assign(d->begin(), d->end());
  }
  ASSERT_EQ(results.size(), n.results.size());
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(g.type(results[r]), g.type(n.results[r])) << "result " << r;
    g.replaceAllUses(n.results[r], results[r]);
  }
  g.eraseNode(id);
  g.compact();
}

// Adds loss = sum_r reduce_sum(result_r * w_r) over the results `which` of `node`, each w_r a
// new input "w<r>" with normal values appended to `args`; output "loss".
inline void addLoss(Graph &g, NodeId node, const std::vector<int> &which,
                    std::vector<RefTensor<double>> &args) {
  Builder b(g, kLoc);
  ValueId loss = kNone;
  for (int r : which) {
    ValueId y = g.node(node).results[r];
    Type t = g.type(y);
    ValueId w = g.addInput(fmt::format("w{}", r), t);
    RefTensor<double> wt(t);
    for (int64_t k = 0; k < wt.size(); ++k)
      wt.f[k] = rng::normal(1000 + r, k);
    args.push_back(std::move(wt));
    ValueId term = b.sum(b.mul(y, w), {}, false);
    loss = loss == kNone ? term : b.add(loss, term);
  }
  g.addOutput("loss", loss, OutputRole::Loss);
}

// Whether two output lists agree element by element: |got - want| <= tol * max(1, |want|), NaN
// only where NaN, infinities equal.
template <class F>
::testing::AssertionResult sameOutputs(const std::vector<RefTensor<F>> &got,
                                       const std::vector<RefTensor<F>> &want,
                                       const std::vector<std::string> &names, double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " outputs vs " << want.size();
  for (size_t o = 0; o < want.size(); ++o) {
    std::string name = o < names.size() ? names[o] : std::to_string(o);
    if (got[o].type != want[o].type)
      return ::testing::AssertionFailure()
             << name << ": " << typeString(got[o].type) << " vs " << typeString(want[o].type);
    for (int64_t k = 0; k < want[o].size(); ++k) {
      double a = got[o].get(k), b = want[o].get(k);
      bool ok = std::isnan(a) || std::isnan(b) ? std::isnan(a) && std::isnan(b)
                : std::isinf(a) || std::isinf(b)
                    ? a == b
                    : std::fabs(a - b) <= tol * std::max(1.0, std::fabs(b));
      if (!ok)
        return ::testing::AssertionFailure()
               << name << " element " << k << " of " << typeString(want[o].type) << ": "
               << fmt::format("{} vs {}", a, b);
    }
  }
  return ::testing::AssertionSuccess();
}

inline int countOps(const Graph &g, OpKind op) {
  int c = 0;
  for (const Node &n : g.nodes())
    c += n.op == op;
  return c;
}

} // namespace kiln::ir::fusedtest
