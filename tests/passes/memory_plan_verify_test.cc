// The plan verifier's overlap check (ir/memory_plan.cc, a sweep that compares each buffer with one
// live neighbour) against every pair of arena buffers compared here: planned graphs (the random
// property graphs, a zoo training step) with one arena buffer moved to another offset must be
// reported as overlapping a live buffer exactly when two buffers live at one node share a byte.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/zoo.h"
#include "passes/optimizer.h"
#include "passes/passes.h"
#include "passes/stages.h"
#include "support/rng.h"
#include "tests/util/arena_lifetimes.h"
#include "tests/util/random_graph.h"

namespace kiln::passes::memory_plan_verify_test {
namespace {
using namespace kiln::ir;

bool pairwiseOverlap(const std::vector<Lifetime> &buffers, const std::vector<int64_t> &offsets) {
  for (size_t i = 0; i < buffers.size(); ++i)
    for (size_t j = i + 1; j < buffers.size(); ++j)
      if (buffers[i].size > 0 && buffers[j].size > 0 && buffers[i].start <= buffers[j].end &&
          buffers[j].start <= buffers[i].end && offsets[i] < offsets[j] + buffers[j].size &&
          offsets[j] < offsets[i] + buffers[i].size)
        return true;
  return false;
}

bool reportsOverlap(const Graph &g) {
  for (const Error &e : verify(g))
    if (e.message.find("which is still live") != std::string::npos)
      return true;
  return false;
}

// Moves buffers of g's arena one at a time (with every value sharing its bytes) to random offsets
// inside the arena, and compares the verifier with the pairwise check; returns how many overlapped.
int checkMoves(Graph g, uint64_t seed, int moves) {
  std::vector<ValueId> roots;
  std::vector<Lifetime> buffers = test_util::arenaLifetimes(g, &roots);
  MemoryPlan plan = *g.memoryPlan();
  EXPECT_FALSE(reportsOverlap(g));
  if (buffers.empty())
    return 0;
  int overlapping = 0;
  uint64_t k = 0;
  for (int m = 0; m < moves; ++m) {
    MemoryPlan moved = plan;
    size_t b = rng::bits(seed, k++) % buffers.size();
    int64_t room = (plan.bytes(MemRegion::Arena) - buffers[b].size) / kMemAlignment;
    int64_t to = room > 0 ? kMemAlignment * static_cast<int64_t>(rng::bits(seed, k++) % room) : 0;
    for (ValueId v = 0; v < g.numValues(); ++v)
      if (moved.slots[v].region == MemRegion::Arena &&
          moved.slots[v].offset == plan.slots[roots[b]].offset) {
        // Every value of the buffer: the root and those sharing it, found by following `of`.
        ValueId r = v;
        while (moved.slots[r].share != MemorySlot::Share::None)
          r = moved.slots[r].of;
        if (r == roots[b])
          moved.slots[v].offset = to;
      }
    std::vector<int64_t> offsets;
    for (ValueId r : roots)
      offsets.push_back(moved.slots[r].offset);
    Graph h = g;
    h.setMemoryPlan(std::move(moved));
    bool want = pairwiseOverlap(buffers, offsets);
    EXPECT_EQ(reportsOverlap(h), want) << "seed " << seed << ", buffer " << b << " to " << to;
    overlapping += want;
  }
  return overlapping;
}

TEST(MemoryPlanVerify, OverlapsFoundExactlyOnRandomGraphs) {
  int overlapping = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    Graph g = test_util::withLoss(test_util::randomGraph(seed));
    PassStats stats;
    ASSERT_TRUE(runFuseElementwise(g, stats));
    ASSERT_TRUE(runPlanMemory(g, stats));
    overlapping += checkMoves(g, seed, 8);
  }
  EXPECT_GT(overlapping, 50); // both answers were checked
}

TEST(MemoryPlanVerify, OverlapsFoundExactlyInATrainingStep) {
  std::vector<models::Setting> settings = {{"loss", "true"}};
  Expected<Graph> fwd = models::buildModel("gpt", settings);
  ASSERT_TRUE(fwd) << fwd.error().message;
  Expected<Graph> step = trainingStep(*fwd, OptimizerConfig{});
  ASSERT_TRUE(step) << step.error().message;
  int overlapping = checkMoves(*step, 7, 40);
  EXPECT_GT(overlapping, 5);
  EXPECT_LT(overlapping, 40);
}

} // namespace
} // namespace kiln::passes::memory_plan_verify_test
