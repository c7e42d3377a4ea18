// Random graphs for the property tests of the lowering passes (fuse-elementwise, plan-memory):
// pointwise chains with fan-out, broadcasts, reductions feeding later pointwise ops, matmuls,
// softmax barriers and dead nodes, from a seed. Shared by the random property test and the golden
// test that pins the passes' results on them.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "support/rng.h"

namespace kiln::test_util {

// A random graph over f64 [3,4] values (and [3,1] row reductions), from a seed.
inline ir::Graph randomGraph(uint64_t seed) {
  using namespace kiln::ir;
  Graph g("random");
  std::vector<ValueId> full, rows; // values of shape [3,4] and [3,1]
  for (int i = 0; i < 3; ++i)
    full.push_back(g.addInput("x" + std::to_string(i), Type{DType::F64, {3, 4}}));
  ValueId bias = g.addInput("bias", Type{DType::F64, {4}});
  ValueId w = g.addInput("w", Type{DType::F64, {4, 4}});
  uint64_t k = 0;
  auto pick = [&](const std::vector<ValueId> &from) {
    return from[rng::bits(seed, k++) % from.size()];
  };
  auto add = [&](OpKind op, std::vector<ValueId> xs, std::vector<AttrInit> attrs = {}) {
    Attrs a(opInfo(op).attrs);
    for (const AttrInit &i : attrs)
      EXPECT_TRUE(a.set(i.first, i.second));
    Expected<NodeId> n = g.addNode(op, xs, std::move(a));
    EXPECT_TRUE(n) << mnemonic(op) << ": " << n.error().message;
    return g.result(*n);
  };
  constexpr OpKind kUnary[] = {OpKind::Tanh, OpKind::Sigmoid, OpKind::Neg,
                               OpKind::Sin,  OpKind::Relu,    OpKind::Abs};
  constexpr OpKind kBinary[] = {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Max, OpKind::Min};
  int nodes = 8 + static_cast<int>(rng::bits(seed, k++) % 16);
  for (int i = 0; i < nodes; ++i) {
    uint64_t r = rng::bits(seed, k++) % 100;
    // The op is drawn before its operands (named locals: the draws must not depend on the
    // compiler's order of evaluating function arguments).
    if (r < 30) {
      OpKind op = kUnary[rng::bits(seed, k++) % std::size(kUnary)];
      full.push_back(add(op, {pick(full)}));
    } else if (r < 60) {
      OpKind op = kBinary[rng::bits(seed, k++) % std::size(kBinary)];
      full.push_back(add(op, {pick(full), pick(full)}));
    } else if (r < 67) {
      full.push_back(add(OpKind::Add, {pick(full), bias})); // a broadcast operand
    } else if (r < 74 && !rows.empty()) {
      full.push_back(add(OpKind::Mul, {pick(full), pick(rows)})); // reads a reduction
    } else if (r < 82) {
      OpKind red = rng::bits(seed, k++) % 2 ? OpKind::ReduceSum : OpKind::ReduceMax;
      rows.push_back(
          add(red, {pick(full)}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", true}}));
    } else if (r < 90) {
      full.push_back(add(OpKind::Matmul, {pick(full), w}));
    } else if (r < 94) {
      full.push_back(add(OpKind::Softmax, {pick(full)})); // a barrier: not in any region
    } else {
      ValueId a = pick(full), b = pick(full);
      full.push_back(add(OpKind::Select, {add(OpKind::Gt, {a, b}), a, b}));
    }
  }
  // Outputs: the last value and a few others; the rest may be dead.
  g.addOutput("y", full.back());
  for (int i = 0; i < 2; ++i)
    if (rng::bits(seed, k++) % 2)
      g.addOutput("o" + std::to_string(i), pick(full));
  if (!rows.empty())
    g.addOutput("r", pick(rows));
  return g;
}

// The graph plus loss = sum over outputs of sum(output * weight_output).
inline ir::Graph withLoss(ir::Graph g) {
  using namespace kiln::ir;
  std::vector<Output> outs(g.outputs().begin(), g.outputs().end());
  ValueId loss = kNone;
  for (const Output &o : outs) {
    ValueId wv = g.addInput("w_" + o.name, g.type(o.value));
    ValueId m = g.result(*g.addNode(OpKind::Mul, {o.value, wv}));
    ValueId s = g.result(*g.addNode(OpKind::ReduceSum, {m}));
    loss = loss == kNone ? s : g.result(*g.addNode(OpKind::Add, {loss, s}));
  }
  g.addOutput("loss", loss, OutputRole::Loss);
  return g;
}

} // namespace kiln::test_util
