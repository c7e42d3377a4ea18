// The fusion passes' use index (passes/use_index.h) against the graph itself: after any sequence
// of appended nodes, redirected uses and erased dead nodes, its users and use counts are the
// Graph's (users(), useCounts()), and dependsOn is a plain search over the operands -- also once a
// redirect has broken the topological numbering it prunes with.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "passes/use_index.h"
#include "support/rng.h"
#include "tests/util/random_graph.h"

namespace kiln::passes::use_index_test {
namespace {
using namespace kiln::ir;

// Whether `from` is computed from `target`, searched the other way round: forward from `target`
// through every live node that reads what it reached (Graph::users), no pruning.
bool plainDependsOn(const Graph &g, ValueId from, ValueId target) {
  std::vector<std::vector<NodeId>> users = g.users();
  std::vector<bool> reached(g.numValues(), false);
  std::vector<ValueId> work{target};
  reached[target] = true;
  while (!work.empty()) {
    ValueId v = work.back();
    work.pop_back();
    for (NodeId u : users[v])
      for (ValueId r : g.node(u).results)
        if (!reached[r]) {
          reached[r] = true;
          work.push_back(r);
        }
  }
  return reached[from];
}

void expectAgrees(Graph &g, UseIndex &index, uint64_t seed, uint64_t &k) {
  std::vector<std::vector<NodeId>> users = g.users();
  std::vector<int32_t> counts = g.useCounts();
  for (ValueId v = 0; v < g.numValues(); ++v) {
    std::span<const NodeId> got = index.users(v);
    ASSERT_EQ(std::vector<NodeId>(got.begin(), got.end()), users[v]) << "users of %" << v;
    ASSERT_EQ(index.useCount(v), counts[v]) << "uses of %" << v;
  }
  for (int q = 0; q < 40; ++q) {
    ValueId a = static_cast<ValueId>(rng::bits(seed, k++) % g.numValues());
    ValueId b = static_cast<ValueId>(rng::bits(seed, k++) % g.numValues());
    ASSERT_EQ(index.dependsOn(a, b), plainDependsOn(g, a, b)) << "%" << a << " from %" << b;
  }
}

TEST(UseIndex, AgreesWithTheGraphThroughRewrites) {
  int pruned = 0, unpruned = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Graph g = test_util::withLoss(test_util::randomGraph(seed));
    UseIndex index(g);
    uint64_t k = 1000;
    expectAgrees(g, index, seed, k);
    for (int step = 0; step < 6; ++step) {
      // A new node on two live [3,4] values; then the uses of an older value redirected to it, if
      // that makes no cycle (sometimes with a node numbered above the users: no longer ordered).
      std::vector<ValueId> full;
      for (ValueId v = 0; v < g.numValues(); ++v) {
        NodeId d = g.value(v).def;
        if (g.type(v) == Type{DType::F64, {3, 4}} && (d == kNone || !g.node(d).erased))
          full.push_back(v);
      }
      ValueId x = full[rng::bits(seed, k++) % full.size()];
      ValueId y = full[rng::bits(seed, k++) % full.size()];
      ValueId added = g.result(*g.addNode(OpKind::Add, {x, y}));
      ValueId from = full[rng::bits(seed, k++) % full.size()];
      if (from != added && g.value(from).def != kNone && !plainDependsOn(g, added, from)) {
        NodeId def = g.value(from).def;
        index.replaceAllUses(from, added);
        index.eraseDead(std::vector<NodeId>{def});
      }
      expectAgrees(g, index, seed, k);
    }
    (index.pruning() ? pruned : unpruned)++;
    g.compact();
    std::vector<Error> errors = verify(g);
    EXPECT_TRUE(errors.empty()) << errors.front().message;
  }
  // Both ways of searching were checked.
  EXPECT_GT(pruned, 10);
  EXPECT_GT(unpruned, 10);
}

} // namespace
} // namespace kiln::passes::use_index_test
