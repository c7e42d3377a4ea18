// Shared by the fusion tests (fusion_test.cc, fusion_models_test.cc): running a pass list with
// verification, counting ops, and comparing a fused graph with the unfused one on the reference
// interpreter -- forward outputs, and every gradient of the graphs differentiated.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/reference/interpreter.h"
#include "ir/graph.h"
#include "passes/autodiff.h"
#include "passes/pass_manager.h"

namespace kiln::fusion_util {
using namespace kiln::ir;

// Runs the passes named by `spec` ("fusion", "fuse-attention") on a copy of g, verifying after
// each pass.
inline Graph runSpec(Graph g, std::string_view spec) {
  Expected<std::vector<const passes::PassInfo *>> list = passes::resolvePasses(spec);
  EXPECT_TRUE(list.ok()) << list.error().message;
  if (!list)
    return g;
  passes::PassManagerOptions options;
  options.verifyEach = true;
  Expected<passes::PipelineReport> r = passes::runPasses(g, *list, options);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return g;
}

inline int count(const Graph &g, OpKind op) {
  return static_cast<int>(
      std::count_if(g.nodes().begin(), g.nodes().end(), [&](const Node &n) { return n.op == op; }));
}

inline const Node *firstOf(const Graph &g, OpKind op) {
  for (const Node &n : g.nodes())
    if (n.op == op)
      return &n;
  return nullptr;
}

template <class F> double maxAbs(const RefTensor<F> &t) {
  double m = 0;
  for (int64_t k = 0; k < t.size(); ++k)
    if (!std::isnan(t.get(k)))
      m = std::max(m, std::abs(t.get(k)));
  return m;
}

// max |a - b| / max(max |b|, floor) over a tensor, a norm-wise relative difference (NaN where
// exactly one of a pair is NaN; pairs of NaN agree). `floor` keeps a value that cancels to zero
// (a key bias's gradient under softmax is exactly 0) from turning rounding noise into a 100%
// difference.
template <class F> double relDiff(const RefTensor<F> &a, const RefTensor<F> &b, double floor = 0) {
  if (a.type != b.type)
    return INFINITY;
  double diff = 0, scale = floor;
  for (int64_t k = 0; k < a.size(); ++k) {
    double x = a.get(k), y = b.get(k);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y))
        return NAN;
      continue;
    }
    diff = std::max(diff, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  return scale == 0 ? diff : diff / scale;
}

// Runs `fused` and `plain` (same arguments, same outputs by name) in precision F and expects
// every output to agree within `rtol`; returns the largest difference seen.
template <class F>
double expectSameOutputs(
    const Graph &fused, const Graph &plain, double rtol, uint64_t seed,
    const std::function<void(const Graph &, std::vector<RefTensor<F>> &)> &fixArgs = nullptr) {
  std::vector<RefTensor<F>> args = reference::makeArgs<F>(plain, seed);
  if (fixArgs)
    fixArgs(plain, args);
  auto a = reference::run<F>(fused, args);
  auto b = reference::run<F>(plain, args);
  EXPECT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(b.ok()) << b.error().message;
  if (!a.ok() || !b.ok())
    return INFINITY;
  // Gradients ("grad.*") are compared on the scale of all of them: the floor is 1% of the
  // largest gradient element. So are a training step's updated parameters and state ("new.*"),
  // which are gradients shifted: some are exactly zero analytically (a key bias, which softmax
  // cannot see) and only rounding noise numerically.
  auto isGrad = [](const std::string &name) {
    return name.rfind("grad.", 0) == 0 || name.rfind("new.", 0) == 0;
  };
  double floor = 0;
  for (size_t i = 0; i < plain.outputs().size(); ++i)
    if (isGrad(plain.outputs()[i].name))
      floor = std::max(floor, 0.01 * maxAbs((*b)[i]));
  double worst = 0;
  for (size_t i = 0; i < plain.outputs().size(); ++i) {
    const std::string &name = plain.outputs()[i].name;
    const Output *o = fused.findOutput(name);
    EXPECT_NE(o, nullptr) << name;
    if (!o)
      continue;
    size_t j = static_cast<size_t>(o - fused.outputs().data());
    double d = relDiff((*a)[j], (*b)[i], isGrad(name) ? floor : 0);
    EXPECT_LE(d, rtol) << "output " << name;
    worst = std::max(worst, std::isnan(d) ? INFINITY : d);
  }
  return worst;
}

// The names of g's float inputs other than `skip` and of its float parameters.
inline std::vector<std::string> floatArgs(const Graph &g, std::string_view skip = "w") {
  std::vector<std::string> out;
  for (const Arg &a : g.args())
    if (isFloat(g.type(a.value).dtype) && a.name != skip)
      out.push_back(a.name);
  return out;
}

inline Graph differentiated(const Graph &g, std::vector<std::string> wrt) {
  passes::AutodiffOptions o;
  o.wrt = std::move(wrt);
  Expected<Graph> d = passes::differentiate(g, o);
  EXPECT_TRUE(d.ok()) << d.error().message;
  return d.ok() ? std::move(*d) : Graph();
}

} // namespace kiln::fusion_util
