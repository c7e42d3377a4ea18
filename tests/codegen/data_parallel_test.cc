// Data-parallel training in the compiler: the data-parallel pass averages every gradient and the
// loss over the ranks with all_reduce, the gradients gathered in buckets, whose rules (types,
// gradient, one-process reference) hold, and whose kernel refuses a run with another number of
// ranks than the program's. The runs on 2 ranks themselves are tests/mpi/run.sh's (under mpirun).
#include <gtest/gtest.h>

#include <string>

#include "codegen/common/program.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/autodiff.h"
#include "passes/passes.h"
#include "passes/stages.h"
#include "runtime/communicator.h"
#include "runtime/tasks.h"
#include "tests/util/executable.h"

namespace kiln::data_parallel_test {
namespace {
using namespace kiln::ir;

Graph parsed(const std::string &text) {
  ParseResult r = parseGraph(text);
  EXPECT_TRUE(r.graph) << (r.errors.empty() ? "" : r.errors[0].message);
  return r.graph ? std::move(*r.graph) : Graph();
}

constexpr const char *kLossGraph = R"(graph @g {
  %x = input "x" : f32[4]
  %w = param "w" init normal(0.5) : f32[4]
  %b = param "b" init normal(0.5) : f32[4]
  %a = mul(%x, %w) : f32[4]
  %c = add(%a, %b) : f32[4]
  %s = reduce_sum(%c) {axes = [0]} : f32[]
  output "loss" = %s loss
}
)";

// The op defining output `name`, and its ranks.
std::pair<OpKind, int64_t> definer(const Graph &g, std::string_view name) {
  const Output *o = g.findOutput(name);
  EXPECT_NE(o, nullptr) << name;
  const Node &n = g.node(g.value(o->value).def);
  const bool collective =
      n.op == OpKind::AllReduce || n.op == OpKind::AllReduceStart || n.op == OpKind::AllReduceWait;
  return {n.op, collective ? n.attrs.getInt("ranks") : 0};
}

TEST(DataParallel, EveryGradientAndTheLossAreAveragedOverTheRanks) {
  Expected<Graph> grads = passes::differentiate(parsed(kLossGraph));
  ASSERT_TRUE(grads) << grads.error().message;
  passes::PassStats stats;
  Expected<bool> changed = passes::averageOverRanks(*grads, {.ranks = 3, .bucketBytes = 0}, stats);
  ASSERT_TRUE(changed) << changed.error().message;
  EXPECT_TRUE(*changed);
  EXPECT_EQ(definer(*grads, "loss"), std::pair(OpKind::AllReduce, int64_t{3}));
  // A gradient's reduction in two: started, then waited for.
  for (std::string_view name : {"grad.w", "grad.b"}) {
    EXPECT_EQ(definer(*grads, name), std::pair(OpKind::AllReduceWait, int64_t{3})) << name;
    const Node &wait = grads->node(grads->value(grads->findOutput(name)->value).def);
    const Node &start = grads->node(grads->value(wait.operands[0]).def);
    EXPECT_EQ(start.op, OpKind::AllReduceStart) << name;
    EXPECT_EQ(start.attrs.getInt("ranks"), 3) << name;
  }
  EXPECT_TRUE(verify(*grads).empty());
  // One rank: nothing to average.
  Expected<Graph> alone = passes::differentiate(parsed(kLossGraph));
  ASSERT_TRUE(alone);
  EXPECT_FALSE(*passes::averageOverRanks(*alone, {.ranks = 1}, stats));
  EXPECT_EQ(definer(*alone, "grad.w").first, OpKind::Mul);
}

// schedule-collectives: each start right after the node that makes its operand, each wait just
// before its first user, so that the reduction runs while the nodes between them compute.
TEST(DataParallel, ReductionsStartAsSoonAsTheGradientIsMade) {
  Expected<Graph> step = passes::trainingStep(
      parsed(kLossGraph), {}, nullptr, passes::Precision::F32, {.ranks = 2, .bucketBytes = 0});
  ASSERT_TRUE(step) << step.error().message;
  int starts = 0, overlapped = 0;
  const auto users = step->users();
  for (NodeId id = 0; id < static_cast<NodeId>(step->nodes().size()); ++id) {
    const Node &n = step->node(id);
    if (n.op != OpKind::AllReduceStart)
      continue;
    ++starts;
    // Right after its operand's node, or after the other starts placed there.
    NodeId before = id - 1;
    while (before >= 0 && step->node(before).op == OpKind::AllReduceStart)
      --before;
    EXPECT_EQ(step->value(n.operands[0]).def, before) << "start #" << id;
    ASSERT_EQ(users[n.results[0]].size(), 1u);
    const NodeId wait = users[n.results[0]][0];
    EXPECT_EQ(step->node(wait).op, OpKind::AllReduceWait);
    overlapped += wait > id + 1 ? 1 : 0;
  }
  EXPECT_EQ(starts, 2);
  EXPECT_GE(overlapped, 1); // grad.b's is made first; grad.w's node comes between
}

// The whole step: the optimizer reads the averaged gradients (the updates depend on all_reduce
// results), and the program text round-trips.
TEST(DataParallel, TheOptimizerUpdatesFromTheAveragedGradients) {
  Expected<Graph> step = passes::trainingStep(
      parsed(kLossGraph), {}, nullptr, passes::Precision::F32, {.ranks = 2, .bucketBytes = 0});
  ASSERT_TRUE(step) << step.error().message;
  int reduces = 0, starts = 0, waits = 0;
  for (const Node &n : step->nodes()) {
    reduces += n.op == OpKind::AllReduce ? 1 : 0;
    starts += n.op == OpKind::AllReduceStart ? 1 : 0;
    waits += n.op == OpKind::AllReduceWait ? 1 : 0;
  }
  EXPECT_EQ(reduces, 1); // the loss
  EXPECT_EQ(starts, 2);  // grad.w and grad.b
  EXPECT_EQ(waits, 2);
  EXPECT_EQ(definer(*step, "loss").first, OpKind::AllReduce);
  const std::string text = print(*step);
  EXPECT_EQ(print(parsed(text)), text);
  // Its program says so (a bundle's `ranks`, which the C API refuses), the forward's does not.
  EXPECT_EQ(codegen::programOf(codegen::withMemoryPlan(*step)).ranks, 2);
  EXPECT_EQ(codegen::programOf(codegen::withMemoryPlan(parsed(kLossGraph))).ranks, 1);
}

// Three gradients of 32 bytes and one of 256, in buckets of 64: the backward makes w3's, w2's, then
// w1's (and big's apart); w3 and w2 fill a bucket, w1 is left alone at the end, and big, as large
// as a bucket, has one of its own.
constexpr const char *kBucketGraph = R"(graph @g {
  %x = input "x" : f32[8]
  %w1 = param "w1" init normal(0.5) : f32[8]
  %w2 = param "w2" init normal(0.5) : f32[8]
  %w3 = param "w3" init normal(0.5) : f32[8]
  %big = param "big" init normal(0.5) : f32[8, 8]
  %a = mul(%x, %w1) : f32[8]
  %b = mul(%a, %w2) : f32[8]
  %c = mul(%b, %w3) : f32[8]
  %s = reduce_sum(%c) {axes = [0]} : f32[]
  %t = reduce_sum(%big) {axes = [0, 1]} : f32[]
  %l = add(%s, %t) : f32[]
  output "loss" = %l loss
}
)";

// The wait that a gradient output's value comes from (through its bucket's slice and reshape).
NodeId waitOf(const Graph &g, std::string_view name) {
  NodeId id = g.value(g.findOutput(name)->value).def;
  while (id != kNone && g.node(id).op != OpKind::AllReduceWait)
    id = g.value(g.node(id).operands[0]).def;
  return id;
}

TEST(DataParallel, GradientsGatherInBucketsInTheBackwardsOrder) {
  Expected<Graph> grads = passes::differentiate(parsed(kBucketGraph));
  ASSERT_TRUE(grads) << grads.error().message;
  passes::PassStats stats;
  ASSERT_TRUE(*passes::averageOverRanks(*grads, {.ranks = 2, .bucketBytes = 64}, stats));
  EXPECT_TRUE(verify(*grads).empty());
  const NodeId w3 = waitOf(*grads, "grad.w3");
  ASSERT_NE(w3, kNone);
  EXPECT_EQ(waitOf(*grads, "grad.w2"), w3);
  // Their bucket: one start of the two joined, and each gradient its slice of the mean, in shape.
  const Node &start = grads->node(grads->value(grads->node(w3).operands[0]).def);
  ASSERT_EQ(start.op, OpKind::AllReduceStart);
  EXPECT_EQ(grads->node(grads->value(start.operands[0]).def).op, OpKind::Concat);
  EXPECT_EQ(grads->type(start.operands[0]).shape, (Shape{16}));
  for (std::string_view name : {"grad.w1", "grad.w2", "grad.w3", "grad.big"})
    EXPECT_EQ(grads->type(grads->findOutput(name)->value).shape,
              (name == "grad.big" ? Shape{8, 8} : Shape{8}))
        << name;
  // Alone: w1 (the last, a partial bucket) and big (a bucket's size): no copies.
  for (std::string_view name : {"grad.w1", "grad.big"}) {
    const NodeId wait = waitOf(*grads, name);
    EXPECT_EQ(grads->value(grads->findOutput(name)->value).def, wait) << name;
    EXPECT_NE(wait, w3) << name;
  }
  int starts = 0;
  for (const Node &n : grads->nodes())
    starts += n.op == OpKind::AllReduceStart ? 1 : 0;
  EXPECT_EQ(starts, 3);
  // The schedule starts the bucket once w2's gradient, its last, is made: concat and start follow
  // w2's gradient's node, before the backward goes on to w1's.
  Expected<Graph> step = passes::trainingStep(
      parsed(kBucketGraph), {}, nullptr, passes::Precision::F32, {.ranks = 2, .bucketBytes = 64});
  ASSERT_TRUE(step) << step.error().message;
  NodeId bucketStart = kNone, firstWait = kNone;
  for (NodeId id = 0; id < static_cast<NodeId>(step->nodes().size()); ++id) {
    const Node &n = step->node(id);
    const NodeId def = n.operands.empty() ? kNone : step->value(n.operands[0]).def;
    if (n.op == OpKind::AllReduceStart && def != kNone && step->node(def).op == OpKind::Concat) {
      bucketStart = id;
      EXPECT_EQ(def, id - 1); // the concat just before it
    }
    if (n.op == OpKind::AllReduceWait && firstWait == kNone)
      firstWait = id;
  }
  ASSERT_NE(bucketStart, kNone);
  EXPECT_LT(bucketStart + 1, firstWait); // work between the start and the waits
}

// Two ranks with the same data, in one process: each mean over them is the data itself, so a step
// compiled for 2 ranks computes what the one-rank step does, bit for bit ((x + x) / 2 = x) -- the
// buckets' packing and unpacking included.
class Twins : public runtime::Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int localSize() const override { return 2; }
  Status allReduceMean(float *, int64_t) override { return {}; }
  Status start(float *, int64_t count) override {
    ++started, floats += count;
    return {};
  }
  Status finish(float *) override { return {}; }
  Status reduceScatterMean(const float *, float *, int64_t) override { return unsharded(); }
  Status allGather(const float *, float *, int64_t) override { return unsharded(); }
  Status gather(const float *, float *, int64_t) override { return unsharded(); }
  static Status unsharded() { return makeError("twins: the sharded optimizer's parts differ"); }
  void setBackground(bool) override {}
  Expected<bool> same(uint64_t) override { return true; }
  Expected<double> min(double value) override { return value; }
  int started = 0;
  int64_t floats = 0;
};

TEST(DataParallel, BucketedStepOfTwinRanksIsTheOneRankStep) {
  const Graph one = *passes::trainingStep(parsed(kBucketGraph), {});
  for (const char *backend : {"highway", "llvm"}) {
    for (int64_t bucketBytes : {int64_t{0}, int64_t{64}, int64_t{1} << 20}) {
      Expected<Graph> two =
          passes::trainingStep(parsed(kBucketGraph), {}, nullptr, passes::Precision::F32,
                               {.ranks = 2, .bucketBytes = bucketBytes});
      ASSERT_TRUE(two) << two.error().message;
      std::unique_ptr<runtime::Executor> a = testing_exe::ranAt(one, backend, 1, 2);
      std::unique_ptr<runtime::Executor> b = testing_exe::fast(*two, backend, 1);
      Twins twins;
      ASSERT_TRUE(b && runtime::initWeights(*b, 7).ok() && runtime::randomizeInputs(*b, 8).ok());
      b->setCommunicator(&twins);
      for (int k = 0; k < 2; ++k)
        ASSERT_TRUE(b->run().ok()) << backend;
      // 4 gradients: one each (0), w3+w2 | w1 | big (64), all in one (1 MiB); 88 floats a step.
      EXPECT_EQ(twins.started, 2 * (bucketBytes == 0 ? 4 : bucketBytes == 64 ? 3 : 1));
      EXPECT_EQ(twins.floats, 2 * 88);
      int compared = 0;
      for (const runtime::Symbol &s : a->program().symbols) {
        const runtime::Symbol *same = b->program().argument(s.name);
        same = same ? same : b->program().output(s.name);
        if (!same)
          continue;
        EXPECT_TRUE(a->read(s) == b->read(*same))
            << backend << ", buckets of " << bucketBytes << ": " << s.name;
        ++compared;
      }
      EXPECT_GE(compared, 5) << backend; // the loss and the four weights at least
    }
  }
}

TEST(DataParallel, AllReduceRules) {
  auto error = [](const std::string &body) {
    ParseResult r = parseGraph("graph @g {\n  %x = input \"x\" : " + body + "\n}\n");
    return r.errors.empty() ? std::string("none") : r.errors[0].message;
  };
  EXPECT_EQ(error("bf16[2]\n  %y = all_reduce(%x) {ranks = 2} : bf16[2]\n  output \"y\" = %y"),
            "3:3: all_reduce: x has dtype bf16, expected f32");
  EXPECT_EQ(error("f32[2]\n  %y = all_reduce(%x) {ranks = 0} : f32[2]\n  output \"y\" = %y"),
            "3:3: all_reduce: ranks must be at least 1, got 0");
  // Its gradient is the same mean of the output gradients (each rank's y feeds every rank's loss).
  Expected<Graph> grads = passes::differentiate(parsed(R"(graph @g {
  %x = param "x" init normal(1) : f32[3]
  %y = all_reduce(%x) {ranks = 2} : f32[3]
  %s = reduce_sum(%y) {axes = [0]} : f32[]
  output "loss" = %s loss
}
)"));
  ASSERT_TRUE(grads) << grads.error().message;
  EXPECT_EQ(definer(*grads, "grad.x"), std::pair(OpKind::AllReduce, int64_t{2}));
}

// One process runs a one-rank all_reduce as the identity; a program compiled for 2 ranks, run
// alone, stops at its first all_reduce with an error that says why (on every backend).
TEST(DataParallel, AProgramForTwoRanksRunAloneIsRefused) {
  const char *kReduce = R"(graph @g {
  %x = input "x" : f32[5]
  %y = all_reduce(%x) {ranks = RANKS} : f32[5]
  %s = all_reduce_start(%x) {ranks = RANKS} : f32[5]
  %e = exp(%x) : f32[5]
  %w = all_reduce_wait(%s) {ranks = RANKS} : f32[5]
  output "y" = %y
  output "w" = %w
  output "e" = %e
}
)";
  auto graph = [&](int ranks) {
    std::string text = kReduce;
    for (size_t at = text.find("RANKS"); at != std::string::npos; at = text.find("RANKS"))
      text.replace(at, 5, std::to_string(ranks));
    return parsed(text);
  };
  runtime::HostTensor x(DType::F32, {5});
  for (int k = 0; k < 5; ++k)
    x.set(k, 1.5 * k - 2);
  for (const char *backend : {"highway", "llvm"}) {
    std::unique_ptr<runtime::Executor> one = testing_exe::fast(graph(1), backend, 1);
    ASSERT_TRUE(one && one->write("x", x).ok());
    ASSERT_TRUE(one->run().ok()) << backend;
    EXPECT_TRUE(*one->read("y") == x) << backend;
    EXPECT_TRUE(*one->read("w") == x) << backend;
    std::unique_ptr<runtime::Communicator> alone = runtime::aloneCommunicator();
    std::unique_ptr<runtime::Executor> two = testing_exe::fast(graph(2), backend, 1);
    ASSERT_TRUE(two && two->write("x", x).ok());
    two->setCommunicator(alone.get());
    Status s = two->run();
    ASSERT_FALSE(s) << backend;
    EXPECT_NE(s.error().message.find(
                  "the program was compiled for another number of ranks than this run has"),
              std::string::npos)
        << s.error().message;
  }
  std::unique_ptr<runtime::Executable> ref = testing_exe::reference(graph(2), 1);
  ASSERT_TRUE(ref && ref->write("x", x).ok());
  Status s = ref->run();
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("a collective over 2 ranks: the reference interpreter is one "
                                   "process"),
            std::string::npos)
      << s.error().message;
}

// Rank r's rows of a global batch: the ranks' parts, in rank order, are the batch one process
// with all their rows draws.
TEST(DataParallel, TheRanksRowsMakeUpTheGlobalBatch) {
  using namespace kiln::runtime;
  for (TaskKind task : {TaskKind::Lm, TaskKind::Mlm, TaskKind::Copy}) {
    TaskShape global{.batch = 6, .srcLen = 5, .seqLen = 8, .vocab = 256};
    const Batch whole = makeBatch(task, global, 11, 4);
    Batch joined;
    for (int64_t r = 0; r < 3; ++r) {
      const Batch part = batchRows(whole, 2 * r, 2);
      for (size_t t = 0; t < part.size(); ++t) {
        EXPECT_EQ(part[t].shape[0], 2);
        if (r == 0)
          joined.push_back({part[t].name, whole[t].shape, {}, {}});
        joined[t].values.insert(joined[t].values.end(), part[t].values.begin(),
                                part[t].values.end());
      }
    }
    for (size_t t = 0; t < whole.size(); ++t)
      EXPECT_EQ(joined[t].values, whole[t].values) << whole[t].name;
  }
}

} // namespace
} // namespace kiln::data_parallel_test
