// The cleanup passes and the pass manager: every zoo model (forward, and its whole training step)
// computes the same outputs after the `cleanup` pipeline on the f64 reference interpreter, with
// fewer nodes; each pass's characteristic rewrite; and the manager's printing, verification,
// statistics and timing, with passes made up here (nothing is registered globally).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <vector>

#include "codegen/reference/interpreter.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "models/zoo.h"
#include "passes/autodiff.h"
#include "passes/optimizer.h"
#include "passes/pass_manager.h"
#include "passes/passes.h"

namespace kiln::cleanup_test {
namespace {

using namespace ir;
using models::Setting;
using passes::PassInfo;
using passes::PassManagerOptions;
using passes::PassStats;
using Ref = RefTensor<double>;

std::vector<const PassInfo *> resolved(std::string_view spec) {
  Expected<std::vector<const PassInfo *>> r = passes::resolvePasses(spec);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : std::vector<const PassInfo *>{};
}

// Runs `spec` with --verify-each on; fails the test on any error.
passes::PipelineReport runChecked(Graph &g, std::string_view spec) {
  PassManagerOptions options;
  options.verifyEach = true;
  Expected<passes::PipelineReport> r = passes::runPasses(g, resolved(spec), options);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : passes::PipelineReport{};
}

int64_t countOp(const Graph &g, OpKind op) {
  return std::count_if(g.nodes().begin(), g.nodes().end(),
                       [&](const Node &n) { return n.op == op; });
}

// ---- Zoo models: same outputs, fewer nodes ----

struct Variant {
  std::string model;
  std::vector<Setting> settings;
};

std::string variantName(const Variant &v) {
  std::string s = v.model;
  for (const Setting &kv : v.settings)
    s += "_" + kv.key + "_" + kv.value;
  std::replace_if(
      s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
}

// Small enough for the interpreter to run the training step quickly, big enough to have every
// structure (several heads, a layer of each kind).
std::vector<Variant> zooVariants() {
  std::vector<Setting> dec = {{"seq_len", "6"}, {"d_model", "16"}, {"n_heads", "4"},
                              {"d_ff", "32"},   {"vocab", "32"},   {"n_layers", "1"}};
  std::vector<Setting> encdec = {
      {"src_len", "5"}, {"tgt_len", "6"}, {"d_model", "16"},         {"n_heads", "4"},
      {"d_ff", "32"},   {"vocab", "32"},  {"n_encoder_layers", "1"}, {"n_decoder_layers", "1"}};
  auto with = [](std::vector<Setting> base, std::vector<Setting> more) {
    base.insert(base.end(), more.begin(), more.end());
    return base;
  };
  return {
      {"gpt", dec},
      {"gpt", with(dec, {{"position", "rope"},
                         {"norm_kind", "rmsnorm"},
                         {"activation", "swiglu"},
                         {"n_kv_heads", "1"}})},
      {"gpt", with(dec, {{"position", "alibi"},
                         {"norm", "post"},
                         {"bias", "false"},
                         {"tie_embeddings", "false"},
                         {"dtype", "f64"}})},
      {"gpt", with(dec, {{"position", "relative"}, {"dropout", "0.1"}, {"activation", "gelu"}})},
      {"bert", dec},
      {"bert", with(dec, {{"position", "sinusoidal"}, {"norm", "pre"}, {"n_kv_heads", "2"}})},
      {"transformer", encdec},
      {"transformer", with(encdec, {{"position", "rope"},
                                    {"norm", "pre"},
                                    {"norm_kind", "rmsnorm"},
                                    {"activation", "gelu_tanh"}})},
      {"transformer", with(encdec, {{"position", "none"}, {"dropout", "0.2"}, {"dtype", "bf16"}})},
  };
}

std::vector<Ref> runF64(const Graph &g, uint64_t seed) {
  std::vector<Ref> args = reference::makeArgs<double>(g, seed);
  Expected<std::vector<Ref>> out = reference::run<double>(g, args);
  EXPECT_TRUE(out.ok()) << out.error().message;
  return out.ok() ? *out : std::vector<Ref>{};
}

// Same outputs (by name, in order) to a relative 1e-12: the passes may reassociate a constant
// factor ((x*c1)*c2, x/c), nothing more.
void expectSameOutputs(const Graph &before, const Graph &after) {
  ASSERT_EQ(before.outputs().size(), after.outputs().size());
  for (size_t o = 0; o < before.outputs().size(); ++o)
    EXPECT_EQ(before.outputs()[o].name, after.outputs()[o].name);
  ASSERT_EQ(before.args().size(), after.args().size()); // same arguments: same random values
  std::vector<Ref> a = runF64(before, 11), b = runF64(after, 11);
  ASSERT_EQ(a.size(), b.size());
  for (size_t o = 0; o < a.size(); ++o) {
    SCOPED_TRACE(before.outputs()[o].name);
    ASSERT_EQ(a[o].type, b[o].type);
    ASSERT_EQ(a[o].i, b[o].i);
    int bad = 0;
    for (size_t k = 0; k < a[o].f.size() && bad < 5; ++k) {
      double x = a[o].f[k], y = b[o].f[k];
      bool same = x == y || (std::isnan(x) && std::isnan(y)) ||
                  std::abs(x - y) <= 1e-12 * std::max(std::abs(x), std::abs(y));
      if (!same)
        ADD_FAILURE() << "element " << k << ": " << x << " before, " << y << " after (" << ++bad
                      << ")";
    }
  }
}

class CleanupZoo : public testing::TestWithParam<Variant> {};

Graph build(const Variant &v, bool loss) {
  std::vector<Setting> s = v.settings;
  if (loss)
    s.push_back({"loss", "true"});
  Expected<Graph> g = models::buildModel(v.model, s);
  EXPECT_TRUE(g.ok()) << g.error().message;
  return g.ok() ? std::move(*g) : Graph();
}

TEST_P(CleanupZoo, ForwardOutputsUnchangedAndNodesDrop) {
  Graph before = build(GetParam(), false);
  Graph after = before;
  passes::PipelineReport report = runChecked(after, "cleanup");
  EXPECT_TRUE(report.changed());
  // Every model has a LayerNorm/RMSNorm eps per norm and a mask fill per attention, spelt as
  // separate constants by the DSL: CSE keeps one of each.
  EXPECT_LT(after.nodes().size(), before.nodes().size());
  EXPECT_LT(countOp(after, OpKind::Constant), countOp(before, OpKind::Constant));
  expectSameOutputs(before, after);
  // Cleanup is idempotent: a second run finds nothing.
  Graph again = after;
  EXPECT_FALSE(runChecked(again, "cleanup").changed());
  EXPECT_EQ(print(again), print(after));
}

// The whole training step (forward, backward, AdamW) after cleanup: the backward graph is where
// the rewrites bite (x*1 from the loss seed, broadcasts and reshapes of gradients, transposes
// feeding matmuls, duplicated subexpressions).
TEST_P(CleanupZoo, TrainingStepOutputsUnchangedAndNodesDrop) {
  Graph forward = build(GetParam(), true);
  Expected<Graph> grads = passes::differentiate(forward);
  ASSERT_TRUE(grads.ok()) << grads.error().message;
  passes::OptimizerConfig adamw;
  adamw.weightDecay = 0.01;
  Expected<Graph> step = passes::buildTrainingStep(*grads, adamw);
  ASSERT_TRUE(step.ok()) << step.error().message;
  Graph after = *step;
  passes::PipelineReport report = runChecked(after, "cleanup");
  EXPECT_LT(after.nodes().size(), step->nodes().size());
  for (const passes::PassRun &r : report.runs)
    EXPECT_TRUE(r.changed || (r.name != "cse" && r.name != "dce")) << r.name;
  expectSameOutputs(*step, after);
}

INSTANTIATE_TEST_SUITE_P(Cleanup, CleanupZoo, testing::ValuesIn(zooVariants()),
                         [](const testing::TestParamInfo<Variant> &info) {
                           return variantName(info.param);
                         });

// ---- One characteristic rewrite per pass, on built graphs ----

// A backward node whose forward node a pass erases follows it to what replaced it: the kept
// duplicate (cse), the region holding it (fuse-elementwise). Without that the memory report
// would no longer know backward nodes from forward ones.
TEST(CleanupPasses, GradOfFollowsMergedAndFusedNodes) {
  Graph g;
  ValueId x = g.addInput("x", Type{DType::F32, {4}});
  NodeId e1 = *g.addNode(OpKind::Exp, {x});
  NodeId e2 = *g.addNode(OpKind::Exp, {x});
  NodeId t = *g.addNode(OpKind::Tanh, {g.result(e2)});
  NodeId back = *g.addNode(OpKind::Neg, {g.result(t)});
  NodeId back2 = *g.addNode(OpKind::Mul, {g.result(back), g.result(e1)});
  g.node(back).gradOf = e2;
  g.node(back2).gradOf = t;
  g.addOutput("y", g.result(back2));
  PassStats stats;
  ASSERT_TRUE(*passes::runCse(g, stats));
  // exp, tanh, neg (grad of the kept exp), mul (grad of tanh)
  ASSERT_EQ(g.nodes().size(), 4u);
  EXPECT_EQ(g.node(2).gradOf, 0);
  EXPECT_EQ(g.node(3).gradOf, 1);
  ASSERT_TRUE(*passes::runFuseElementwise(g, stats));
  // The forward exp + tanh became one region; the backward neg + mul another, pointing at it.
  ASSERT_EQ(g.nodes().size(), 2u) << print(g);
  EXPECT_EQ(g.node(0).gradOf, kNone);
  EXPECT_EQ(g.node(1).gradOf, 0);
}

// Every weight gradient of a training step folds (one per matmul weight), and the step computes
// the same losses, gradients and updates (f64: only the order of the sums changed).
TEST(CleanupPasses, FoldBatchSumFoldsEveryWeightGradient) {
  Graph forward = build(zooVariants()[0], true);
  Expected<Graph> grads = passes::differentiate(forward);
  ASSERT_TRUE(grads.ok()) << grads.error().message;
  Graph after = *grads;
  PassStats stats;
  Expected<bool> changed = passes::runFoldBatchSum(after, stats);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_TRUE(verify(after).empty());
  EXPECT_LT(countOp(after, OpKind::ReduceSum), countOp(*grads, OpKind::ReduceSum));
  expectSameOutputs(*grads, after);
}

TEST(CleanupPasses, CseKeepsOneEpsPerModel) {
  Graph g = build(zooVariants()[0], false);
  auto epsConstants = [](const Graph &g) {
    return std::count_if(g.nodes().begin(), g.nodes().end(), [](const Node &n) {
      return n.op == OpKind::Constant && n.attrs.getFloat("value") == 1e-5;
    });
  };
  ASSERT_EQ(epsConstants(g), 3); // ln1, ln2, ln_f
  PassStats stats;
  Expected<bool> changed = passes::runCse(g, stats);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(epsConstants(g), 1);
  EXPECT_TRUE(verify(g).empty());
}

TEST(CleanupPasses, FoldConstantsEvaluatesScalarArithmetic) {
  // 1 / sqrt(d) as a model would write the attention scale, then exp of a constant.
  Graph g;
  ValueId x = g.addInput("x", Type{DType::F64, {2, 3}});
  Builder b(g);
  ValueId scale = b.div(b.scalar(1, DType::F64), b.emit(OpKind::Sqrt, {b.scalar(64, DType::F64)}));
  ValueId e = b.emit(OpKind::Exp, {b.scalar(2, DType::F64)});
  g.addOutput("y", b.mul(b.mul(x, scale), e));
  PassStats stats;
  Expected<bool> changed = passes::runFoldConstants(g, stats);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  std::vector<double> values;
  for (const Node &n : g.nodes())
    if (n.op == OpKind::Constant)
      values.push_back(n.attrs.getFloat("value"));
  EXPECT_NE(std::find(values.begin(), values.end(), 0.125), values.end());
  EXPECT_NE(std::find(values.begin(), values.end(), std::exp(2.0)), values.end());
  EXPECT_EQ(countOp(g, OpKind::Sqrt) + countOp(g, OpKind::Exp) + countOp(g, OpKind::Div), 0);
  ASSERT_EQ(stats.entries().size(), 1u);
  EXPECT_EQ(stats.entries()[0].second, 3);
}

TEST(CleanupPasses, FoldConstantsLeavesSinusoidalTables) {
  // Sinusoidal positions are sin/cos of iota-based tables: not uniform, so nothing folds.
  Variant v = zooVariants()[0];
  v.settings.push_back({"position", "sinusoidal"});
  Graph g = build(v, false);
  int64_t sins = countOp(g, OpKind::Sin);
  ASSERT_GT(sins, 0);
  PassStats stats;
  ASSERT_TRUE(passes::runFoldConstants(g, stats).ok());
  EXPECT_EQ(countOp(g, OpKind::Sin), sins);
  EXPECT_GT(countOp(g, OpKind::Iota), 0);
}

TEST(CleanupPasses, SimplifyMovesAFactorOfQIntoAttentionScale) {
  Graph g;
  Type t{DType::F32, {1, 2, 3, 8}};
  ValueId q = g.addInput("q", t), k = g.addInput("k", t), v = g.addInput("v", t);
  Builder b(g);
  ValueId qs = b.mul(q, b.scalar(0.5, DType::F32));
  Attrs attrs(opInfo(OpKind::Attention).attrs);
  ASSERT_TRUE(attrs.set("scale", 0.25).ok());
  ASSERT_TRUE(attrs.set("q_heads", int64_t{2}).ok());
  ASSERT_TRUE(attrs.set("kv_heads", int64_t{2}).ok());
  ValueId ops[] = {qs, k, v};
  Expected<NodeId> att = g.addNode(OpKind::Attention, ops, attrs);
  if (!att.ok())
    GTEST_SKIP() << "attention is not available yet: " << att.error().message;
  g.addOutput("out", g.node(*att).results[0]);
  Graph before = g;
  PassStats stats;
  ASSERT_TRUE(passes::runSimplify(g, stats).ok());
  ASSERT_TRUE(passes::runDce(g, stats).ok());
  EXPECT_EQ(countOp(g, OpKind::Mul), 0);
  for (const Node &n : g.nodes())
    if (n.op == OpKind::Attention) {
      EXPECT_EQ(n.attrs.getFloat("scale"), 0.125);
      EXPECT_EQ(n.operands[0], q);
    }
  expectSameOutputs(before, g);
}

TEST(CleanupPasses, FoldTransposeTurnsMatrixTransposesIntoFlags) {
  // y = a^T b^T spelt with transpose nodes ([2,3,4] -> [2,4,3]; [5,3] -> [3,5]), and a head split
  // ([0,2,1,3]) feeding another matmul, which must stay.
  Graph g;
  ValueId a = g.addInput("a", Type{DType::F64, {2, 3, 4}});
  ValueId b = g.addInput("b", Type{DType::F64, {5, 3}});
  ValueId h = g.addInput("h", Type{DType::F64, {2, 3, 2, 4}});
  Builder bld(g);
  ValueId at = bld.emit(OpKind::Transpose, {a}, {{"perm", std::vector<int64_t>{0, 2, 1}}});
  ValueId bt = bld.emit(OpKind::Transpose, {b}, {{"perm", std::vector<int64_t>{1, 0}}});
  g.addOutput("y", bld.emit(OpKind::Matmul, {at, bt}));
  ValueId hs = bld.emit(OpKind::Transpose, {h}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  g.addOutput("s", bld.emit(OpKind::Matmul, {hs, hs}, {{"transpose_b", true}}));
  Graph after = g;
  runChecked(after, "fold-transpose,dce");
  ASSERT_EQ(countOp(after, OpKind::Transpose), 1);
  for (const Node &n : after.nodes())
    if (n.op == OpKind::Matmul && n.operands[0] == a) {
      EXPECT_TRUE(n.attrs.getBool("transpose_a"));
      EXPECT_TRUE(n.attrs.getBool("transpose_b"));
      EXPECT_EQ(n.operands[1], b);
    }
  expectSameOutputs(g, after);
}

// ---- The pass manager ----

// Options whose dumps and reports are appended to `out`.
PassManagerOptions into(std::string &out) {
  PassManagerOptions o;
  o.sink = [&out](std::string_view s) { out += s; };
  return o;
}

Graph smallGraph() {
  Graph g("small");
  ValueId x = g.addInput("x", Type{DType::F64, {2, 3}});
  Builder b(g);
  ValueId a = b.mul(x, b.scalar(2, DType::F64));
  ValueId c = b.mul(x, b.scalar(2, DType::F64)); // the same as a
  b.emit(OpKind::Exp, {a});                      // dead
  g.addOutput("y", b.add(a, c));
  g.addOutput("z", b.neg(x));
  return g;
}

// A pass that breaks the graph in two places the verifier sees: both neg/add nodes read an
// operand of another shape, so their declared types no longer follow.
Expected<bool> breakTwoNodes(Graph &g, PassStats &stats) {
  ValueId wrong = g.addInput("wrong", Type{DType::F64, {7}});
  int broken = 0;
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()) && broken < 2; ++id)
    if (g.node(id).op == OpKind::Neg || g.node(id).op == OpKind::Add) {
      g.node(id).operands[0] = wrong;
      ++broken;
    }
  stats.count("broke {} nodes", broken);
  return true;
}

Expected<bool> failingPass(Graph &, PassStats &) {
  return makeError("cannot handle this graph");
}

int timesRun = 0;
Expected<bool> countingPass(Graph &, PassStats &) {
  ++timesRun;
  return false;
}

constexpr PassInfo kBreak{"break-two", "breaks two nodes", &breakTwoNodes};
constexpr PassInfo kFail{"fail", "always fails", &failingPass};
constexpr PassInfo kCount{"count", "counts its runs", &countingPass};

TEST(PassManager, PrintsIrAfterEveryPassWithHeaders) {
  Graph g = smallGraph();
  std::string out;
  PassManagerOptions options = into(out);
  options.printAfter = "all";
  ASSERT_TRUE(passes::runPasses(g, resolved("cse,dce"), options).ok());
  size_t first = out.find("// ----- IR after cse (1 of 2) -----\ngraph @small {");
  size_t second = out.find("// ----- IR after dce (2 of 2) -----\n");
  ASSERT_NE(first, std::string::npos) << out;
  ASSERT_NE(second, std::string::npos) << out;
  EXPECT_LT(first, second);
  // The dump after the last pass is the final graph; the one after cse still has the dead exp.
  EXPECT_EQ(out.substr(second + std::string_view("// ----- IR after dce (2 of 2) -----\n").size()),
            print(g));
  EXPECT_NE(out.substr(first, second - first).find("exp("), std::string::npos);
  EXPECT_EQ(print(g).find("exp("), std::string::npos);
}

TEST(PassManager, PrintsIrBeforeTheNamedPassOnly) {
  Graph g = smallGraph();
  std::string out;
  PassManagerOptions options = into(out);
  options.printBefore = "dce";
  ASSERT_TRUE(passes::runPasses(g, resolved("cleanup"), options).ok());
  EXPECT_EQ(out.rfind("// ----- IR before dce (5 of 5) -----\ngraph @small {", 0), 0u) << out;
  EXPECT_EQ(out.find("IR before", 10), std::string::npos);
  EXPECT_EQ(out.find("IR after"), std::string::npos);
}

TEST(PassManager, VerifyEachNamesTheBreakingPassAndListsEveryProblem) {
  Graph g = smallGraph();
  const PassInfo *list[] = {passes::findPass("cse"), &kBreak, &kCount};
  timesRun = 0;
  PassManagerOptions options;
  options.verifyEach = true;
  Expected<passes::PipelineReport> r = passes::runPasses(g, list, options);
  ASSERT_FALSE(r.ok());
  const std::string &msg = r.error().message;
  EXPECT_EQ(msg.rfind("pass 'break-two' (2 of 3): the graph does not verify (2 problems):", 0), 0u)
      << msg;
  // One line per problem, each naming its node.
  EXPECT_EQ(std::count(msg.begin(), msg.end(), '\n'), 2) << msg;
  EXPECT_NE(msg.find("add:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("neg:"), std::string::npos) << msg;
  EXPECT_EQ(timesRun, 0); // the pipeline stopped at the broken graph
}

TEST(PassManager, WithoutVerifyEachABrokenGraphGoesThrough) {
  // What --verify-each is for: the same pipeline "succeeds" without it.
  Graph g = smallGraph();
  const PassInfo *list[] = {&kBreak, &kCount};
  timesRun = 0;
  EXPECT_TRUE(passes::runPasses(g, list).ok());
  EXPECT_EQ(timesRun, 1);
  EXPECT_EQ(verify(g).size(), 2u);
}

TEST(PassManager, VerifyEachRejectsAnInvalidInput) {
  Graph g = smallGraph();
  PassStats ignored;
  ASSERT_TRUE(breakTwoNodes(g, ignored).ok());
  PassManagerOptions options;
  options.verifyEach = true;
  Expected<passes::PipelineReport> r = passes::runPasses(g, resolved("dce"), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind("the input graph: the graph does not verify (2 problems)", 0),
            0u)
      << r.error().message;
}

TEST(PassManager, PassErrorNamesThePass) {
  Graph g = smallGraph();
  const PassInfo *list[] = {passes::findPass("dce"), &kFail, &kCount};
  timesRun = 0;
  Expected<passes::PipelineReport> r = passes::runPasses(g, list);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "pass 'fail' (2 of 3): cannot handle this graph");
  EXPECT_EQ(timesRun, 0);
}

TEST(PassManager, StatisticsAndTimingReports) {
  Graph g = smallGraph();
  std::string out;
  PassManagerOptions options = into(out);
  options.timing = options.stats = true;
  Expected<passes::PipelineReport> r = passes::runPasses(g, resolved("cleanup"), options);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(passes::formatStats(*r), "// ----- pass statistics -----\n"
                                     "// fold-constants: no change\n"
                                     "// simplify: no change\n"
                                     "// fold-transpose: no change\n"
                                     "// cse: merged 2 nodes\n"
                                     "// dce: removed 1 dead nodes\n");
  ASSERT_EQ(r->runs.size(), 5u);
  EXPECT_EQ(r->runs[3].stats.entries().at(0).second, 2);
  std::string timing = passes::formatTiming(*r);
  // The sink got the statistics, then the timing table.
  EXPECT_EQ(out.rfind(passes::formatStats(*r) + "// ----- pass timing (wall clock) -----\n", 0), 0u)
      << out;
  // A header, a row per pass run in order, and the total.
  EXPECT_EQ(std::count(timing.begin(), timing.end(), '\n'), 2 + 5 + 1);
  size_t last = 0;
  for (std::string_view name :
       {"fold-constants", "simplify", "fold-transpose", "cse", "dce", "total"}) {
    size_t at = timing.find(std::string("%  ") + std::string(name) + "\n", last);
    ASSERT_NE(at, std::string::npos) << name << "\n" << timing;
    last = at;
  }
}

TEST(PassManager, RejectsUnknownPassNamesInPrintOptions) {
  Graph g = smallGraph();
  PassManagerOptions options;
  options.printAfter = "csee";
  Expected<passes::PipelineReport> r = passes::runPasses(g, resolved("dce"), options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind("--print-ir-after=csee: unknown pass (expected 'all' or one "
                                    "of: dce, cse,",
                                    0),
            0u)
      << r.error().message;
}

TEST(PassManager, OutputIsDeterministic) {
  // Two runs on two builds of the same model print the same dumps and statistics.
  auto runOnce = [] {
    Graph g = build(zooVariants()[1], false);
    std::string out;
    PassManagerOptions options = into(out);
    options.printAfter = "all";
    options.stats = true;
    EXPECT_TRUE(passes::runPasses(g, resolved("cleanup"), options).ok());
    return out;
  };
  std::string a = runOnce();
  EXPECT_EQ(a, runOnce());
  EXPECT_NE(a.find("// cse: merged"), std::string::npos);
}

} // namespace
} // namespace kiln::cleanup_test
