// fuse-elementwise and plan-memory on random graphs: pointwise chains with fan-out, broadcasts,
// reductions feeding later pointwise ops, matmuls, softmax barriers and dead nodes, the kinds of
// DAG where a greedy grouping could build a cycle, an invalid body or a wrong in-place write.
// Each graph must verify after both passes, compute bit for bit what it computed before (also run
// inside its memory plan by the poisoning reference backend), and give the same gradients
// through its regions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/reference/interpreter.h"
#include "ir/printer.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "support/rng.h"
#include "tests/util/executable.h"

namespace kiln::passes {
namespace {
using namespace kiln::ir;

constexpr int kGraphs = 300;

// A random graph over f64 [3,4] values (and [3,1] row reductions), from a seed.
Graph randomGraph(uint64_t seed) {
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
    if (r < 30) {
      full.push_back(add(kUnary[rng::bits(seed, k++) % std::size(kUnary)], {pick(full)}));
    } else if (r < 60) {
      full.push_back(
          add(kBinary[rng::bits(seed, k++) % std::size(kBinary)], {pick(full), pick(full)}));
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
Graph withLoss(Graph g) {
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

std::vector<RefTensor<double>> run(const Graph &g, const std::vector<RefTensor<double>> &args) {
  auto r = reference::run<double>(g, args);
  EXPECT_TRUE(r) << r.error().message;
  return r ? std::move(*r) : std::vector<RefTensor<double>>{};
}

TEST(FuseElementwiseRandom, ValidSameValuesSameGradients) {
  int regions = 0, inPlace = 0;
  for (uint64_t seed = 1; seed <= kGraphs; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Graph plain = withLoss(randomGraph(seed));
    Graph fused = plain;
    PassStats stats;
    Expected<bool> changed = runFuseElementwise(fused, stats);
    ASSERT_TRUE(changed) << changed.error().message << "\n" << print(plain);
    std::vector<Error> errors = verify(fused);
    ASSERT_TRUE(errors.empty()) << errors[0].message << "\n" << print(fused);
    for (const Node &n : fused.nodes())
      regions += n.op == OpKind::Fusion;

    std::vector<RefTensor<double>> args = reference::makeArgs<double>(plain, seed);
    std::vector<RefTensor<double>> a = run(plain, args), b = run(fused, args);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(a[i].f, b[i].f) << plain.outputs()[i].name;

    Graph planned = fused;
    ASSERT_TRUE(runPlanMemory(planned, stats));
    errors = verify(planned);
    ASSERT_TRUE(errors.empty()) << errors[0].message << "\n" << print(planned);
    for (const MemorySlot &s : planned.memoryPlan()->slots)
      inPlace += s.share == MemorySlot::Share::InPlace;
    // Run inside the plan, poisoning dead bytes: the same bits as the plain evaluator.
    EXPECT_TRUE(testing_exe::sameBits(a, testing_exe::runInPlan(planned, args)));

    AutodiffOptions o{.wrt = {"x0", "x1", "x2", "bias", "w"}};
    Expected<Graph> dPlain = differentiate(plain, o), dFused = differentiate(fused, o);
    ASSERT_TRUE(dPlain && dFused) << (dPlain ? dFused.error() : dPlain.error()).message;
    std::vector<RefTensor<double>> ga = run(*dPlain, args), gb = run(*dFused, args);
    for (size_t i = 0; i < ga.size(); ++i) {
      ASSERT_EQ(ga[i].f.size(), gb[i].f.size());
      for (size_t e = 0; e < ga[i].f.size(); ++e)
        EXPECT_NEAR(ga[i].f[e], gb[i].f[e], 1e-12 * (1 + std::abs(ga[i].f[e])))
            << dPlain->outputs()[i].name << "[" << e << "]";
    }
  }
  RecordProperty("regions", regions);
  RecordProperty("in_place_results", inPlace);
  // The graphs exercised what they are for.
  EXPECT_GT(regions, kGraphs);
  EXPECT_GT(inPlace, kGraphs / 4);
}

} // namespace
} // namespace kiln::passes
