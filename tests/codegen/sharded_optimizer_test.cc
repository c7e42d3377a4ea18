// The sharded optimizer (ZeRO stage 1, --shard-optimizer): each of 2 ranks keeps the optimizer
// state of its half of the parameters and updates that half. Run here as two ranks in one process
// (tests/util/pair_world.h); tests/mpi/run.sh runs it under mpirun.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include "ir/parser.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/stages.h"
#include "runtime/checkpoint.h"
#include "runtime/safetensors.h"
#include "runtime/tasks.h"
#include "runtime/weights.h"
#include "tests/util/compare.h"
#include "tests/util/executable.h"
#include "tests/util/pair_world.h"
#include "tests/util/temp_dir.h"

namespace kiln::sharded_optimizer_test {
namespace {
using namespace kiln::ir;

// 5 + 6 + 1050000 parameter elements: parts of 525006 on 2 ranks, the last padded with one zero;
// each reduce-scattered in two messages (reduceScatterPiece: 524288 floats).
constexpr const char *kParams = R"(graph @g {
  %x = input "x" : f32[5]
  %w = param "w" init normal(0.5) : f32[5]
  %v = param "v" init normal(0.5) : f32[2, 3]
  %u = param "u" init normal(0.01) : f32[1050, 1000]
  %uu = mul(%u, %u) : f32[1050, 1000]
  %r = reduce_sum(%uu) {axes = [0, 1]} : f32[]
  %a = mul(%x, %w) : f32[5]
  %q = mul(%a, %a) : f32[5]
  %s = reduce_sum(%q) {axes = [0]} : f32[]
  %vv = mul(%v, %v) : f32[2, 3]
  %t = reduce_sum(%vv) {axes = [0, 1]} : f32[]
  %m = mul(%s, %t) : f32[]
  %l = add(%m, %r) : f32[]
  output "loss" = %l loss
}
)";

Graph step(const passes::OptimizerConfig &opt, bool shard) {
  ParseResult r = parseGraph(kParams);
  EXPECT_TRUE(r.graph);
  Expected<Graph> g =
      passes::trainingStep(std::move(*r.graph), opt, nullptr, passes::Precision::F32,
                           {.ranks = 2, .bucketBytes = 0, .shardOptimizer = shard});
  EXPECT_TRUE(g) << g.error().message;
  return std::move(*g);
}

int count(const Graph &g, OpKind op) {
  int n = 0;
  for (const Node &node : g.nodes())
    n += !node.erased && node.op == op;
  return n;
}

TEST(ShardedOptimizer, TheStepKeepsStateForItsPartAlone) {
  passes::OptimizerConfig clipped;
  clipped.clipNorm = 1;
  const Graph g = step(clipped, true);
  EXPECT_EQ(count(g, OpKind::ReduceScatter), 1);
  EXPECT_EQ(count(g, OpKind::RankChunk), 1);
  EXPECT_EQ(count(g, OpKind::AllGather), 1);
  EXPECT_EQ(count(g, OpKind::AllReduce), 2); // the loss, and the squared norm's parts
  EXPECT_EQ(count(g, OpKind::AllReduceStart), 0);
  for (const char *kind : {"opt.exp_avg.", "opt.exp_avg_sq."}) {
    const int32_t at = g.argIndex(std::string(kind) + "*");
    ASSERT_GE(at, 0) << kind;
    EXPECT_EQ(g.type(g.args()[at].value).shape, (Shape{525006}));
    EXPECT_LT(g.argIndex(std::string(kind) + "w"), 0);
  }
}

// Rank r's executor of `g` with inputs of seed 20 + r (the ranks' own data), the same weights.
std::array<std::unique_ptr<runtime::Executor>, 2> pair(const Graph &g, const char *backend,
                                                       testing_mpi::PairWorld &world) {
  std::array<std::unique_ptr<runtime::Executor>, 2> e;
  for (int r = 0; r < 2; ++r) {
    e[r] = testing_exe::fast(g, backend, 1);
    EXPECT_TRUE(e[r] && runtime::initWeights(*e[r], 7).ok() &&
                runtime::randomizeInputs(*e[r], 20 + r).ok());
    e[r]->setCommunicator(&world.rank(r));
  }
  return e;
}

void run(std::array<std::unique_ptr<runtime::Executor>, 2> &e, testing_mpi::PairWorld &world,
         int steps) {
  world.onBoth([&](int r) {
    for (int k = 0; k < steps; ++k)
      EXPECT_TRUE(e[r]->run().ok()) << "rank " << r;
  });
}

// Each element's update is the unsharded one's, from the same mean gradient: the weights are the
// same bits on both ranks and as the unsharded run's, and each rank's state is its part of the
// unsharded state. Clipped, the global norm is summed in another order (each rank's part, then
// the two), so the weights agree to rounding.
TEST(ShardedOptimizer, TwoRanksTrainAsUnshardedOnes) {
  passes::OptimizerConfig adamw, clipped, sgd;
  clipped.clipNorm = 0.01;
  sgd.kind = passes::OptimizerConfig::Kind::Sgd, sgd.momentum = 0.9;
  for (const char *backend : {"highway", "llvm"})
    for (const passes::OptimizerConfig *opt : {&adamw, &clipped, &sgd}) {
      SCOPED_TRACE(::testing::Message() << backend << (opt == &clipped ? ", clipped" : "")
                                        << (opt == &sgd ? ", sgd" : ""));
      testing_mpi::PairWorld plain, sharded;
      auto a = pair(step(*opt, false), backend, plain);
      auto b = pair(step(*opt, true), backend, sharded);
      run(a, plain, 3);
      run(b, sharded, 3);
      for (const char *name : {"w", "v", "u"}) {
        EXPECT_TRUE(*b[0]->read(name) == *b[1]->read(name)) << name;
        if (opt == &clipped) {
          EXPECT_TRUE(test_util::closeTo(*b[0]->read(name), *a[0]->read(name), name, 1e-6, 1e-6));
        } else {
          EXPECT_TRUE(*b[0]->read(name) == *a[0]->read(name)) << name;
        }
      }
      const std::string kind = opt == &sgd ? "opt.momentum_buffer." : "opt.exp_avg.";
      std::vector<double> whole;
      for (const char *name : {"w", "v", "u"}) {
        const runtime::HostTensor t = *a[0]->read(kind + name);
        for (int64_t k = 0; k < t.numElements(); ++k)
          whole.push_back(t.get(k));
      }
      whole.push_back(0); // the padding
      const int64_t c = 525006;
      for (int r = 0; r < 2; ++r) {
        const runtime::HostTensor part = *b[r]->read(kind + "*");
        ASSERT_EQ(part.numElements(), c);
        int64_t differ = 0;
        for (int64_t k = 0; k < c; ++k)
          differ += opt == &clipped ? std::abs(part.get(k) - whole[c * r + k]) > 1e-6
                                    : part.get(k) != whole[c * r + k];
        EXPECT_EQ(differ, 0) << "rank " << r;
      }
    }
}

// A checkpoint of the sharded run holds each parameter's whole state, as the unsharded run's does:
// the same file. Loaded into sharded ranks, each takes its part back.
TEST(ShardedOptimizer, CheckpointsAreTheUnshardedOnes) {
  const std::filesystem::path dir = testing_files::perTestPath();
  std::filesystem::create_directories(dir);
  testing_mpi::PairWorld plain, sharded, resumed;
  auto a = pair(step({}, false), "highway", plain);
  auto b = pair(step({}, true), "highway", sharded);
  run(a, plain, 2);
  run(b, sharded, 2);
  const std::string fromA = (dir / "a.safetensors").string(),
                    fromB = (dir / "b.safetensors").string();
  ASSERT_TRUE(runtime::saveCheckpoint(*a[0], fromA).ok());
  sharded.onBoth([&](int r) {
    Status s = runtime::saveCheckpoint(*b[r], fromB);
    EXPECT_TRUE(s.ok()) << s.error().message;
  });
  Expected<runtime::SafetensorsFile> fa = runtime::readSafetensors(fromA),
                                     fb = runtime::readSafetensors(fromB);
  ASSERT_TRUE(fa && fb);
  ASSERT_EQ(fa->tensors.size(), fb->tensors.size());
  for (const runtime::SafetensorsTensor &t : fa->tensors) {
    const runtime::SafetensorsTensor *same = fb->find(t.name);
    ASSERT_NE(same, nullptr) << t.name;
    EXPECT_EQ(same->shape, t.shape) << t.name;
    EXPECT_EQ(same->data, t.data) << t.name;
  }
  auto c = pair(step({}, true), "highway", resumed);
  resumed.onBoth([&](int r) {
    Expected<int> n = runtime::loadCheckpoint(*c[r], fromA);
    ASSERT_TRUE(n) << n.error().message;
    EXPECT_EQ(*n, static_cast<int>(fa->tensors.size())); // the file's tensors, sharded or not
  });
  for (int r = 0; r < 2; ++r)
    for (const runtime::Symbol &s : b[r]->program().symbols) {
      if (s.isWeight()) {
        EXPECT_TRUE(b[r]->read(s) == c[r]->read(s)) << "rank " << r << ": " << s.name;
      }
    }
  // A bad value in rank 1's part of the file: both ranks refuse it alike (each checks the whole
  // tensor), naming it; and a file with some of the state names the tensor it lacks.
  runtime::SafetensorsFile bad = *fa;
  const float negative = -1; // u's element 1000000 is element 1000011 of the joined parameters
  for (runtime::SafetensorsTensor &t : bad.tensors)
    if (t.name == "opt.exp_avg_sq.u")
      std::memcpy(t.data.data() + 4 * 1000000, &negative, 4);
  const std::string badPath = (dir / "bad.safetensors").string();
  ASSERT_TRUE(runtime::writeSafetensors(badPath, bad).ok());
  resumed.onBoth([&](int r) {
    Expected<int> n = runtime::loadCheckpoint(*c[r], badPath);
    ASSERT_FALSE(n) << "rank " << r;
    EXPECT_NE(n.error().message.find("state \"opt.exp_avg_sq.u\": element 1000000 = -1 is "
                                     "negative"),
              std::string::npos)
        << n.error().message;
  });
  runtime::SafetensorsFile partial = *fa;
  std::erase_if(partial.tensors, [](const runtime::SafetensorsTensor &t) {
    return t.name.starts_with("opt.exp_avg_sq.");
  });
  ASSERT_TRUE(runtime::writeSafetensors(badPath, partial).ok());
  resumed.onBoth([&](int r) {
    Expected<int> n = runtime::loadCheckpoint(*c[r], badPath);
    ASSERT_FALSE(n) << "rank " << r;
    EXPECT_NE(n.error().message.find("but not \"opt.exp_avg_sq.w\""), std::string::npos)
        << n.error().message;
  });
  // Without its ranks, a sharded program does not know its part: refused, with the reason.
  std::unique_ptr<runtime::Executor> alone = testing_exe::fast(step({}, true), "highway", 1);
  Expected<int> n = runtime::loadCheckpoint(*alone, fromA);
  ASSERT_FALSE(n);
  EXPECT_NE(n.error().message.find("compiled for another number of ranks"), std::string::npos)
      << n.error().message;
}

// The ops' rules, in the data-parallel convention (the loss is the sum of every rank's):
// reduce_scatter's dx = all_gather(dy) / N, all_gather's dx = N reduce_scatter(dy); rank_chunk has
// none (dy would go to a rank-dependent place), and autodiff says so.
TEST(ShardedOptimizer, GradientRules) {
  auto gradOf = [](const std::string &op, const std::string &types) {
    ParseResult r =
        parseGraph("graph @g {\n  %x = param \"x\" init normal(1) : f32[4]\n  %y = " + op +
                   "(%x) {ranks = 2} : " + types +
                   "\n  %s = reduce_sum(%y) {axes = [0]} : f32[]\n  output \"loss\" "
                   "= %s loss\n}\n");
    EXPECT_TRUE(r.graph) << (r.errors.empty() ? "" : r.errors[0].message);
    return passes::differentiate(*r.graph);
  };
  for (auto [op, type, mirror] : {std::tuple{"reduce_scatter", "f32[2]", OpKind::AllGather},
                                  std::tuple{"all_gather", "f32[8]", OpKind::ReduceScatter}}) {
    Expected<Graph> g = gradOf(op, type);
    ASSERT_TRUE(g) << g.error().message;
    NodeId at = g->value(g->findOutput("grad.x")->value).def;
    while (g->node(at).op == OpKind::Reshape || g->node(at).op == OpKind::Slice)
      at = g->value(g->node(at).operands[0]).def; // (reduce_scatter: x's part of dx)
    const Node &scale = g->node(at);
    ASSERT_EQ(scale.op, OpKind::Mul) << op;
    EXPECT_EQ(g->node(g->value(scale.operands[0]).def).op, mirror) << op;
  }
  Expected<Graph> chunk = gradOf("rank_chunk", "f32[2]");
  ASSERT_FALSE(chunk);
  EXPECT_NE(chunk.error().message.find("rank_chunk has no gradient"), std::string::npos)
      << chunk.error().message;
}

} // namespace
} // namespace kiln::sharded_optimizer_test
