// Best-fit placement (passes/best_fit.h) against the rule written out plainly: each buffer compared
// with every buffer placed before it, the gaps between those it meets found by sorting them (the
// planner's own algorithm before issue 14 made it fast). The fast placement must give the same
// offsets and peak on random lifetimes of every shape (flush and zero-byte buffers, long lives
// over short ones; both orders the planner uses, any order by start -- the free-list path -- and
// shuffled ones -- the segment tree) and on the buffers of the zoo's training steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "models/zoo.h"
#include "passes/best_fit.h"
#include "passes/memory_plan.h"
#include "passes/optimizer.h"
#include "passes/stages.h"
#include "support/rng.h"
#include "tests/util/arena_lifetimes.h"
#include "tests/util/model_variants.h"

namespace kiln::passes::best_fit_test {
namespace {
using namespace kiln::ir;

// The oracle: O(n^2) and obviously the rule.
Placement oraclePlace(const std::vector<Lifetime> &buffers, const std::vector<int32_t> &order) {
  Placement p;
  p.offsets.assign(buffers.size(), 0);
  std::vector<int32_t> placed;
  for (int32_t i : order) {
    const Lifetime &b = buffers[i];
    std::vector<std::pair<int64_t, int64_t>> conflicts; // [offset, offset + size)
    for (int32_t j : placed)
      if (buffers[j].start <= b.end && b.start <= buffers[j].end && buffers[j].size > 0)
        conflicts.push_back({p.offsets[j], p.offsets[j] + buffers[j].size});
    std::sort(conflicts.begin(), conflicts.end());
    int64_t cursor = 0, best = -1, bestGap = 0;
    for (const auto &[lo, hi] : conflicts) {
      int64_t gap = lo - cursor;
      if (gap >= b.size && (best < 0 || gap < bestGap)) {
        best = cursor;
        bestGap = gap;
      }
      cursor = std::max(cursor, hi);
    }
    p.offsets[i] = best >= 0 ? best : cursor;
    p.peak = std::max(p.peak, p.offsets[i] + b.size);
    placed.push_back(i);
  }
  return p;
}

void expectSamePlacement(const std::vector<Lifetime> &buffers, const std::vector<int32_t> &order,
                         const std::string &what) {
  Placement want = oraclePlace(buffers, order), got = placeBestFit(buffers, order);
  ASSERT_EQ(got.peak, want.peak) << what;
  for (size_t i = 0; i < buffers.size(); ++i)
    ASSERT_EQ(got.offsets[i], want.offsets[i])
        << what << ": buffer " << i << " [" << buffers[i].start << ", " << buffers[i].end << "] of "
        << buffers[i].size << " bytes";
}

// Random lifetimes over `positions` node positions; sizes from a few multiples of 64 (so buffers
// sit flush against each other and gaps fit exactly), some zero; some buffers live long.
std::vector<Lifetime> randomLifetimes(uint64_t seed, int count, int32_t positions) {
  uint64_t k = 0;
  auto draw = [&](uint64_t n) { return static_cast<int64_t>(rng::bits(seed, k++) % n); };
  std::vector<Lifetime> out;
  for (int i = 0; i < count; ++i) {
    int32_t start = static_cast<int32_t>(draw(positions));
    int64_t span = draw(10) == 0 ? draw(positions) : draw(4);
    int32_t end = static_cast<int32_t>(std::min<int64_t>(positions - 1, start + span));
    int64_t size = draw(12) == 0 ? 0 : 64 * (1 + draw(draw(2) ? 4 : 40));
    out.push_back({start, end, size});
  }
  return out;
}

TEST(BestFit, SameAsTheRuleOnRandomLifetimes) {
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    int count = 1 + static_cast<int>(rng::bits(seed, 1000) % 300);
    int32_t positions = 1 + static_cast<int32_t>(rng::bits(seed, 1001) % 200);
    std::vector<Lifetime> buffers = randomLifetimes(seed, count, positions);
    Orders orders = plannerOrders(buffers);
    for (const std::vector<int32_t> *order : {&orders.largestFirst, &orders.byStart})
      expectSamePlacement(buffers, *order, "seed " + std::to_string(seed));
    std::vector<int32_t> byStartOnly(buffers.size()); // ties in index order, not by size
    std::iota(byStartOnly.begin(), byStartOnly.end(), 0);
    std::stable_sort(byStartOnly.begin(), byStartOnly.end(),
                     [&](int32_t x, int32_t y) { return buffers[x].start < buffers[y].start; });
    expectSamePlacement(buffers, byStartOnly, "seed " + std::to_string(seed) + ", by start");
    std::vector<int32_t> shuffled(buffers.size());
    std::iota(shuffled.begin(), shuffled.end(), 0);
    for (size_t i = shuffled.size(); i > 1; --i)
      std::swap(shuffled[i - 1], shuffled[rng::bits(seed, 2000 + i) % i]);
    expectSamePlacement(buffers, shuffled, "seed " + std::to_string(seed) + ", shuffled");
  }
}

TEST(BestFit, EdgeCases) {
  expectSamePlacement({}, {}, "no buffers");
  // Zero-byte buffers at a flush edge (a gap of 0), in an exact fit, above everything.
  std::vector<Lifetime> b = {{0, 5, 64}, {0, 5, 128}, {0, 5, 0}, {2, 3, 0}, {6, 6, 64}, {0, 0, 0}};
  expectSamePlacement(b, {0, 1, 2, 3, 4, 5}, "flush");
  expectSamePlacement(b, {2, 5, 3, 0, 1, 4}, "zero bytes first");
  // A hole exactly the size of the buffer, and a smaller one before it.
  std::vector<Lifetime> h = {{0, 9, 64}, {0, 1, 64},  {0, 9, 64}, {0, 1, 128},
                             {0, 9, 64}, {2, 3, 128}, {2, 3, 64}};
  expectSamePlacement(h, {0, 1, 2, 3, 4, 5, 6}, "holes");
}

TEST(BestFit, SameAsTheRuleOnTheZoosTrainingSteps) {
  for (const models::ModelEntry &m : models::allModels())
    for (std::vector<models::Setting> v : test_util::backendVariants(m.name)) {
      std::string what = test_util::label(m.name, v);
      v.push_back({"loss", "true"});
      Expected<Graph> fwd = models::buildModel(m.name, v);
      ASSERT_TRUE(fwd) << what << ": " << fwd.error().message;
      Expected<Graph> step = trainingStep(*fwd, OptimizerConfig{});
      ASSERT_TRUE(step) << what << ": " << step.error().message;
      std::vector<Lifetime> buffers = test_util::arenaLifetimes(*step);
      ASSERT_GT(buffers.size(), 50u) << what;
      int64_t peak = -1;
      Orders orders = plannerOrders(buffers);
      for (const std::vector<int32_t> *order : {&orders.largestFirst, &orders.byStart}) {
        expectSamePlacement(buffers, *order, what);
        int64_t p = placeBestFit(buffers, *order).peak;
        peak = peak < 0 ? p : std::min(peak, p);
      }
      EXPECT_EQ(peak, step->memoryPlan()->bytes(MemRegion::Arena)) << what;
    }
}

} // namespace
} // namespace kiln::passes::best_fit_test
