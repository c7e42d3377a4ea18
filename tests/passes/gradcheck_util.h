// Gradient checking for the autodiff tests: differentiate a graph (passes::differentiate), run
// the backward graph in f64 with the reference interpreter, and compare every gradient element
// with the central difference (L(x + eps e_i) - L(x - eps e_i)) / 2 eps of the loss.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/reference/interpreter.h"
#include "ir/graph.h"
#include "passes/autodiff.h"
#include "support/rng.h"
#include "tests/util/ir_types.h"

namespace kiln::gradcheck {
using namespace kiln::ir;

inline constexpr double kEps = 1e-6, kAtol = 1e-5, kRtol = 1e-3;
inline constexpr const char *kFile = "tests/passes/gradcheck_test.cc";

// Appends nodes to a graph, each at its own source line (so a test can check that backward nodes
// carry their forward node's location); records errors instead of asserting.
class Net {
public:
  explicit Net(Graph &g) : g(g) {}

  ValueId operator()(OpKind op, std::vector<ValueId> operands, std::vector<AttrInit> attrs = {}) {
    Attrs a(opInfo(op).attrs);
    for (const AttrInit &init : attrs)
      if (Status s = a.set(init.first, init.second); !s)
        return fail(op, s.error());
    Expected<NodeId> n = g.addNode(op, operands, std::move(a), SourceLoc{kFile, line++});
    if (!n)
      return fail(op, n.error());
    return g.node(*n).results.front(); // an op of several results: its first
  }

  Graph &g;
  std::vector<std::string> errors;
  uint32_t line = 1000;

private:
  ValueId fail(OpKind op, const Error &e) {
    errors.push_back(fmt::format("{}: {}", mnemonic(op), e.message));
    return kNone;
  }
};

// A graph input and its values: fixed (required for integer and bool inputs), or random with
// magnitude uniform in [lo, hi] and, if `randomSign`, a random sign (to keep away from a kink at
// 0 on both sides).
struct Input {
  std::string name;
  Type type;
  std::vector<double> values = {};
  double lo = -2, hi = 2;
  bool randomSign = false;
};

inline RefTensor<double> makeTensor(const Type &type, const std::vector<double> &values) {
  RefTensor<double> t(type);
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.size()) << typeString(type);
  for (int64_t k = 0; k < t.size() && k < static_cast<int64_t>(values.size()); ++k) {
    if (t.isFloatStorage())
      t.f[k] = values[k];
    else
      t.i[k] = static_cast<int64_t>(values[k]);
  }
  return t;
}

inline RefTensor<double> makeValues(const Input &in, uint64_t seed) {
  if (!in.values.empty() || in.type.numElements() == 0)
    return makeTensor(in.type, in.values);
  RefTensor<double> t(in.type);
  EXPECT_TRUE(t.isFloatStorage()) << in.name << ": integer inputs need fixed values";
  for (int64_t k = 0; k < t.size() && t.isFloatStorage(); ++k) {
    double v = in.lo + (in.hi - in.lo) * rng::uniform(seed, 2 * k);
    t.f[k] = in.randomSign && rng::uniform(seed, 2 * k + 1) < 0.5 ? -v : v;
  }
  return t;
}

// Standard normal values of `type` (weights of the loss, directions for double backward).
inline RefTensor<double> normalValues(const Type &type, uint64_t seed) {
  RefTensor<double> t(type);
  for (int64_t k = 0; k < t.size(); ++k)
    t.f[k] = rng::normal(seed, k);
  return t;
}

inline int outputIndex(const Graph &g, const std::string &name) {
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (g.outputs()[i].name == name)
      return static_cast<int>(i);
  ADD_FAILURE() << "no output " << name;
  return 0;
}

inline int argIndex(const Graph &g, const std::string &name) {
  for (size_t i = 0; i < g.args().size(); ++i)
    if (g.args()[i].name == name)
      return static_cast<int>(i);
  ADD_FAILURE() << "no argument " << name;
  return 0;
}

// Output `out` of g on `args` (a scalar), or NaN after reporting the error.
inline double scalarOutput(const Graph &g, const std::vector<RefTensor<double>> &args, int out) {
  auto r = reference::run<double>(g, args);
  if (!r) {
    ADD_FAILURE() << r.error().message;
    return NAN;
  }
  return (*r)[out].f[0];
}

// Every node the pass appended is a backward node: it records the forward node it is part of
// the gradient of, and carries that node's source location. The pass's own seed (d loss/d loss
// = 1) and zero gradients are the only constants without a forward node.
inline void expectBackwardProvenance(const Graph &fwd, const Graph &bwd) {
  int withGradOf = 0;
  for (size_t n = fwd.nodes().size(); n < bwd.nodes().size(); ++n) {
    const Node &node = bwd.node(static_cast<NodeId>(n));
    if (node.gradOf == kNone) {
      EXPECT_EQ(node.op, OpKind::Constant)
          << "backward node " << n << " (" << mnemonic(node.op) << ") has no gradOf";
      continue;
    }
    ++withGradOf;
    ASSERT_LT(node.gradOf, static_cast<NodeId>(fwd.nodes().size()))
        << "node " << n << " records a gradOf that is not a node of the graph differentiated";
    const Node &of = bwd.node(node.gradOf);
    EXPECT_EQ(node.loc, of.loc) << "node " << n << " (" << mnemonic(node.op) << ", gradient of "
                                << mnemonic(of.op) << ") does not carry its forward location";
  }
  EXPECT_GT(withGradOf, 0) << "no backward node records its forward node";
}

// Differentiates `g` (scalar output `loss`) with respect to the arguments `wrt`, checks the
// backward graph (verifies, provenance), runs it on `args` and compares each gradient element
// with a central difference of the loss. Returns the backward graph (an empty graph on failure).
inline Graph expectGradientsMatch(const Graph &g, const std::vector<RefTensor<double>> &args,
                                  const std::vector<std::string> &wrt,
                                  const std::string &loss = "loss",
                                  const std::string &prefix = "grad.") {
  Expected<Graph> dg = passes::differentiate(g, {.loss = loss, .wrt = wrt, .gradPrefix = prefix});
  if (!dg) {
    ADD_FAILURE() << dg.error().message;
    return Graph();
  }
  for (const Error &e : verify(*dg))
    ADD_FAILURE() << "backward graph: " << e.message;
  expectBackwardProvenance(g, *dg);

  auto r = reference::run<double>(*dg, args);
  if (!r) {
    ADD_FAILURE() << r.error().message;
    return Graph();
  }
  int lossOut = outputIndex(g, loss);
  EXPECT_EQ((*r)[lossOut].f[0], scalarOutput(g, args, lossOut)) << "the forward part changed";
  for (const std::string &name : wrt) {
    const RefTensor<double> &analytic = (*r)[outputIndex(*dg, prefix + name)];
    int a = argIndex(g, name);
    EXPECT_EQ(analytic.type, args[a].type) << "gradient of " << name;
    if (analytic.type != args[a].type)
      continue;
    int bad = 0;
    for (int64_t k = 0; k < args[a].size(); ++k) {
      std::vector<RefTensor<double>> plus = args, minus = args;
      plus[a].f[k] += kEps;
      minus[a].f[k] -= kEps;
      double numeric =
          (scalarOutput(g, plus, lossOut) - scalarOutput(g, minus, lossOut)) / (2 * kEps);
      double got = analytic.f[k];
      if (!(std::fabs(got - numeric) <= kAtol + kRtol * std::fabs(numeric)) && bad++ < 5)
        ADD_FAILURE() << "d " << loss << " / d " << name << " element " << k << " of "
                      << typeString(args[a].type) << ": analytic " << fmt::format("{}", got)
                      << ", central difference " << fmt::format("{}", numeric);
    }
  }
  return std::move(*dg);
}

} // namespace kiln::gradcheck
