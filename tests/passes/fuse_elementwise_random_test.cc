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
#include "ir/ops/region.h"
#include "ir/printer.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "tests/util/executable.h"
#include "tests/util/random_graph.h"

namespace kiln::passes::fuse_elementwise_random_test {
namespace {
using namespace kiln::ir;
using test_util::randomGraph;
using test_util::withLoss;

constexpr int kGraphs = 300;

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

// A chain of 200k pointwise ops is one region, as a chain of 3 is; the join checks were a walk of
// the group's members per join (quadratic: 40k ops took 48 s, 200k did not end in minutes).
TEST(FuseElementwise, LongChainIsOneRegion) {
  constexpr int64_t kOps = 200000;
  Graph g("chain");
  ValueId v = g.addInput("x", {DType::F32, {4}});
  for (int64_t i = 0; i < kOps; ++i)
    v = g.result(*g.addNode(i % 2 ? OpKind::Exp : OpKind::Neg, {v}, {}));
  g.addOutput("y", v);
  PassStats stats;
  ASSERT_TRUE(runFuseElementwise(g, stats));
  int64_t regions = 0, members = 0;
  for (const Node &n : g.nodes())
    if (!n.erased && n.op == OpKind::Fusion) {
      ++regions;
      members += static_cast<int64_t>(regionBody(n).nodes().size());
    }
  EXPECT_EQ(regions, 1);
  EXPECT_EQ(members, kOps);
}

} // namespace
} // namespace kiln::passes::fuse_elementwise_random_test
