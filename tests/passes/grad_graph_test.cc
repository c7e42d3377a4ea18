// Autodiff on whole graphs rather than single ops: fan-out, outputs that do not reach the loss,
// integer operands, stop_gradient, double backward (differentiating a backward graph), and the
// backward graph's own validity. Numerics against f64 central differences (gradcheck_util.h).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/passes/gradcheck_util.h"

namespace kiln::gradcheck::grad_graph_test {
namespace {

using Ints = std::vector<int64_t>;

// Adds float input `name` of `shape` to g, with random values (magnitude in [lo, hi]) in `args`.
ValueId input(Graph &g, std::vector<RefTensor<double>> &args, std::string name, Shape shape,
              double lo = -2, double hi = 2) {
  Input in{std::move(name), f64t(std::move(shape)), {}, lo, hi};
  args.push_back(makeValues(in, rng::mix64(args.size() + 17)));
  return g.addInput(in.name, in.type);
}

// loss = reduce_sum(y * w) with a fresh random weight input w; adds output "loss".
void addLoss(Net &net, std::vector<RefTensor<double>> &args, ValueId y) {
  ValueId w = net.g.addInput("w", net.g.type(y));
  args.push_back(normalValues(net.g.type(y), 99));
  net.g.addOutput("loss", net(OpKind::ReduceSum, {net(OpKind::Mul, {y, w})}), OutputRole::Loss);
}

// The backward nodes that record forward node `n` as the node they are the gradient of.
int backwardNodesOf(const Graph &g, NodeId n) {
  int count = 0;
  for (const Node &node : g.nodes())
    count += node.gradOf == n;
  return count;
}

NodeId defOf(const Graph &g, ValueId v) {
  return g.value(v).def;
}

// x used three times (twice by one node): the gradients of all uses add up.
TEST(GradGraph, FanOut) {
  Graph g;
  std::vector<RefTensor<double>> args;
  ValueId x = input(g, args, "x", {2, 3});
  Net net(g);
  ValueId y = net(OpKind::Add, {net(OpKind::Mul, {x, x}), net(OpKind::Sin, {x})});
  addLoss(net, args, y);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  Graph dg = expectGradientsMatch(g, args, {"x"});
  // d/dx (x^2 + sin x) w = (2x + cos x) w, exactly what central differences see; the sums of the
  // three contributions are backward nodes too.
  int adds = 0;
  for (size_t n = g.nodes().size(); n < dg.nodes().size(); ++n)
    adds += dg.node(static_cast<NodeId>(n)).op == OpKind::Add;
  EXPECT_GE(adds, 2) << "three uses of x, at least two accumulating additions";
}

// An output that does not reach the loss gets no backward nodes, and an argument the loss does
// not depend on gets a zero gradient.
TEST(GradGraph, OutputNotReachingLoss) {
  Graph g;
  std::vector<RefTensor<double>> args;
  ValueId x = input(g, args, "x", {3});
  ValueId z = input(g, args, "z", {3});
  Net net(g);
  ValueId aux = net(OpKind::Exp, {net(OpKind::Mul, {x, z})});
  g.addOutput("aux", aux);
  addLoss(net, args, net(OpKind::Tanh, {x}));
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  Graph dg = expectGradientsMatch(g, args, {"x", "z"});
  ASSERT_GT(dg.nodes().size(), g.nodes().size());
  EXPECT_EQ(backwardNodesOf(dg, defOf(g, aux)), 0);
  EXPECT_EQ(backwardNodesOf(dg, defOf(g, g.node(defOf(g, aux)).operands[0])), 0);
  EXPECT_EQ(dg.findOutput("aux")->value, aux) << "the forward outputs are kept as they are";
  auto r = reference::run<double>(dg, args);
  ASSERT_TRUE(r) << r.error().message;
  const RefTensor<double> &dz = (*r)[outputIndex(dg, "grad.z")];
  EXPECT_EQ(dz.f, std::vector<double>(3, 0.0));
}

// A widening lookup (a bf16 table read as f32, as bf16-weights stores an embedding) gives its
// table a bf16 gradient: the rows' f32 sums, each rounded to bf16.
TEST(GradGraph, AWideningGatherGivesItsTableABf16Gradient) {
  Graph g;
  std::vector<RefTensor<double>> args;
  ValueId table = g.addInput("table", {DType::BF16, {4, 2}});
  args.push_back(makeTensor({DType::BF16, {4, 2}}, {1, 2, 3, 4, 5, 6, 7, 8}));
  ValueId ids = g.addInput("ids", {DType::I64, {3}});
  args.push_back(makeTensor({DType::I64, {3}}, {3, 3, 1}));
  Net net(g);
  ValueId rows = net(OpKind::Gather, {table, ids}, {{"widen", true}});
  ValueId w = g.addInput("w", {DType::F32, {3, 2}});
  args.push_back(makeTensor({DType::F32, {3, 2}}, {1, 1.0 / 256, 1.0 / 1024, 3, 0.5, 0.25}));
  g.addOutput("loss", net(OpKind::ReduceSum, {net(OpKind::Mul, {rows, w})}), OutputRole::Loss);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  Expected<Graph> dg = passes::differentiate(g, {.loss = "loss", .wrt = {"table"}});
  ASSERT_TRUE(dg) << dg.error().message;
  const int grad = outputIndex(*dg, "grad.table");
  EXPECT_EQ(dg->type(dg->outputs()[static_cast<size_t>(grad)].value), (Type{DType::BF16, {4, 2}}));
  auto r = reference::run<double>(*dg, args);
  ASSERT_TRUE(r) << r.error().message;
  const RefTensor<double> &dt = (*r)[static_cast<size_t>(grad)];
  // Row 3: (1 + 1/1024, 1/256 + 3); 1 + 1/1024 rounds to 1 in bf16 (8 significant bits), and
  // 3 + 1/256 to 3. Row 1: (0.5, 0.25); rows 0 and 2: 0.
  EXPECT_EQ(dt.f, (std::vector<double>{0, 0, 0.5, 0.25, 0, 0, 1, 3}));
}

// Integer values carry no gradient: gather's indices get none (and cannot be asked for), and a
// path through an integer cast is piecewise constant.
TEST(GradGraph, IntegerOperands) {
  Graph g;
  std::vector<RefTensor<double>> args;
  ValueId table = input(g, args, "table", {4, 2}, 0.1, 0.9);
  ValueId ids = g.addInput("ids", {DType::I64, {3}});
  args.push_back(makeTensor({DType::I64, {3}}, {3, 3, 1}));
  Net net(g);
  ValueId rows = net(OpKind::Gather, {table, ids});
  // rows * (rows + 1 truncated): values in (0, 1) are away from the integer 1 where trunc jumps.
  ValueId one = net(OpKind::Constant, {}, {{"value", 1.0}, {"dtype", DType::F64}});
  ValueId shifted = net(OpKind::Add, {rows, one});
  ValueId truncated = net(OpKind::Cast, {net(OpKind::Cast, {shifted}, {{"dtype", DType::I64}})},
                          {{"dtype", DType::F64}});
  addLoss(net, args, net(OpKind::Mul, {rows, truncated}));
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  Graph dg = expectGradientsMatch(g, args, {"table"});
  // Rows 0 and 2 are not gathered: zero; row 3 twice: two contributions.
  auto r = reference::run<double>(dg, args);
  ASSERT_TRUE(r);
  const RefTensor<double> &dt = (*r)[outputIndex(dg, "grad.table")];
  const RefTensor<double> &w = args.back();
  EXPECT_EQ(dt.f[0], 0);
  EXPECT_EQ(dt.f[5], 0);
  EXPECT_DOUBLE_EQ(dt.f[6], w.f[0] + w.f[2]); // d/dtable[3,0] = w[0,0] + w[1,0] (trunc = 1)
  EXPECT_DOUBLE_EQ(dt.f[2], w.f[4]);          // table[1,0] is row 2 of the gather

  Expected<Graph> bad = passes::differentiate(g, {.wrt = {"ids"}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message,
            "autodiff: cannot differentiate with respect to \"ids\" of type i64[3]");
}

// stop_gradient passes values and blocks gradients: d/dx sum(x * sg(x) * w) = sg(x) w, not 2 x w.
TEST(GradGraph, StopGradientBlocks) {
  Graph g;
  std::vector<RefTensor<double>> args;
  ValueId x = input(g, args, "x", {2, 2});
  Net net(g);
  ValueId sg = net(OpKind::StopGradient, {x});
  addLoss(net, args, net(OpKind::Mul, {x, sg}));
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  Expected<Graph> dg = passes::differentiate(g, {.wrt = {"x"}});
  ASSERT_TRUE(dg) << dg.error().message;
  EXPECT_TRUE(verify(*dg).empty());
  EXPECT_EQ(backwardNodesOf(*dg, defOf(g, sg)), 0);
  auto r = reference::run<double>(*dg, args);
  ASSERT_TRUE(r) << r.error().message;
  const RefTensor<double> &dx = (*r)[outputIndex(*dg, "grad.x")];
  for (int k = 0; k < 4; ++k)
    EXPECT_DOUBLE_EQ(dx.f[k], args[0].f[k] * args[1].f[k]) << "element " << k;

  // Only through stop_gradient: no gradient at all.
  Graph g2;
  std::vector<RefTensor<double>> args2;
  ValueId x2 = input(g2, args2, "x", {3});
  Net net2(g2);
  addLoss(net2, args2, net2(OpKind::Exp, {net2(OpKind::StopGradient, {x2})}));
  Expected<Graph> dg2 = passes::differentiate(g2, {.wrt = {"x"}});
  ASSERT_TRUE(dg2) << dg2.error().message;
  auto r2 = reference::run<double>(*dg2, args2);
  ASSERT_TRUE(r2);
  EXPECT_EQ((*r2)[outputIndex(*dg2, "grad.x")].f, std::vector<double>(3, 0.0));
}

// Differentiating by all parameters (a training step) refuses a loss that none of them reaches:
// it trained without a word, the loss the same at every step. Named arguments the loss does not
// reach still get zero gradients (above).
TEST(GradGraph, ALossNoParameterReachesIsRefused) {
  Graph g("g");
  ValueId x = g.addInput("x", f64t({3}));
  ValueId w = g.addParam("w", f64t({3}));
  Net net(g);
  g.addOutput("aux", net(OpKind::Mul, {x, w}));
  g.addOutput("loss",
              net(OpKind::ReduceSum, {net(OpKind::StopGradient, {net(OpKind::Mul, {x, w})})}),
              OutputRole::Loss);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  Expected<Graph> dg = passes::differentiate(g);
  ASSERT_FALSE(dg);
  EXPECT_EQ(dg.error().message, "autodiff: the loss \"loss\" of graph @g depends on no parameter: "
                                "its training would change nothing");
  EXPECT_TRUE(passes::differentiate(g, {.wrt = {"w"}})) << "named: a zero gradient";

  Graph none("none");
  ValueId y = none.addInput("y", f64t({3}));
  Net net2(none);
  none.addOutput("loss", net2(OpKind::ReduceSum, {y}), OutputRole::Loss);
  Expected<Graph> dn = passes::differentiate(none);
  ASSERT_FALSE(dn);
  EXPECT_EQ(dn.error().message, "autodiff: the loss \"loss\" of graph @none depends on no "
                                "parameter (it has none): its training would change nothing");
}

// reduce_max shares dy evenly among tied maxima (PyTorch's amax): a three-way tie gets dy/3 each.
// (Central differences would say 1/2 at any tie, so this is checked by value.)
TEST(GradGraph, ReduceMaxThreeWayTie) {
  Graph g;
  ValueId x = g.addInput("x", f64t({2, 3}));
  Net net(g);
  ValueId m = net(OpKind::ReduceMax, {x}, {{"axes", Ints{1}}});
  std::vector<RefTensor<double>> args = {makeTensor(f64t({2, 3}), {4, 4, 4, 1, 7, 7})};
  addLoss(net, args, m);
  Expected<Graph> dg = passes::differentiate(g, {.wrt = {"x"}});
  ASSERT_TRUE(dg) << dg.error().message;
  auto r = reference::run<double>(*dg, args);
  ASSERT_TRUE(r) << r.error().message;
  const std::vector<double> &w = args[1].f, &dx = (*r)[outputIndex(*dg, "grad.x")].f;
  std::vector<double> want = {w[0] / 3, w[0] / 3, w[0] / 3, 0, w[1] / 2, w[1] / 2};
  for (int k = 0; k < 6; ++k)
    EXPECT_DOUBLE_EQ(dx[k], want[k]) << "element " << k;
}

// Double backward: differentiate, add loss2 = sum(grad.x * v) (+ sum(grad.W * u)) as a new
// output, differentiate that, and compare with central differences of loss2, which is built from
// the first gradient. Every rule's nodes must themselves be differentiable for this to work.
void expectDoubleBackward(const Graph &g, std::vector<RefTensor<double>> args,
                          const std::vector<std::string> &wrt) {
  Graph dg = expectGradientsMatch(g, args, wrt);
  ASSERT_GT(dg.nodes().size(), g.nodes().size());
  Net net(dg);
  ValueId loss2 = kNone;
  for (const std::string &name : wrt) {
    ValueId grad = dg.findOutput("grad." + name)->value;
    ValueId v = dg.addInput("v." + name, dg.type(grad));
    args.push_back(normalValues(dg.type(grad), rng::mix64(args.size())));
    ValueId term = net(OpKind::ReduceSum, {net(OpKind::Mul, {grad, v})});
    loss2 = loss2 == kNone ? term : net(OpKind::Add, {loss2, term});
  }
  dg.addOutput("loss2", loss2);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  expectGradientsMatch(dg, args, wrt, "loss2", "grad2.");
}

TEST(GradDoubleBackward, MatmulAndElementwise) {
  Graph g;
  std::vector<RefTensor<double>> args;
  ValueId x = input(g, args, "x", {2, 3});
  ValueId w = input(g, args, "W", {3, 4});
  Net net(g);
  ValueId h = net(OpKind::Matmul, {x, w});                                                  // [2,4]
  ValueId ht = net(OpKind::Matmul, {w, x}, {{"transpose_a", true}, {"transpose_b", true}}); // [4,2]
  ValueId u = net(OpKind::Transpose, {ht}, {{"perm", Ints{1, 0}}});
  ValueId one = net(OpKind::Constant, {}, {{"value", 1.0}, {"dtype", DType::F64}});
  ValueId num = net(OpKind::Mul, {net(OpKind::Tanh, {h}), net(OpKind::Gelu, {u})});
  ValueId den = net(OpKind::Add, {one, net(OpKind::Exp, {net(OpKind::Sin, {u})})});
  // Plus a term of x alone, summed over its last axis to broadcast against [2,4].
  ValueId sx = net(OpKind::ReduceSum, {net(OpKind::Sigmoid, {x})},
                   {{"axes", Ints{1}}, {"keepdims", true}}); // [2,1]
  ValueId out = net(OpKind::Sub, {net(OpKind::Div, {num, den}), sx});
  addLoss(net, args, out);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  expectDoubleBackward(g, args, {"x", "W"});
}

TEST(GradDoubleBackward, NormalisationAndActivations) {
  Graph g;
  std::vector<RefTensor<double>> args;
  ValueId x = input(g, args, "x", {3, 4});
  ValueId b = input(g, args, "b", {4}, 0.5, 1.5);
  Net net(g);
  // RMS-normalise the rows, then a mix of activations.
  ValueId ms =
      net(OpKind::ReduceMean, {net(OpKind::Mul, {x, x})}, {{"axes", Ints{-1}}, {"keepdims", true}});
  ValueId eps = net(OpKind::Constant, {}, {{"value", 1e-5}, {"dtype", DType::F64}});
  ValueId xn = net(OpKind::Mul, {x, net(OpKind::Rsqrt, {net(OpKind::Add, {ms, eps})})});
  ValueId ls = net(OpKind::LogSoftmax, {xn});
  ValueId act = net(OpKind::Add, {net(OpKind::Silu, {x}), net(OpKind::Erf, {xn})});
  ValueId pw = net(OpKind::Pow, {net(OpKind::Sigmoid, {x}), b});
  ValueId y = net(OpKind::Add, {net(OpKind::Mul, {ls, act}), pw});
  y = net(OpKind::Add,
          {y, net(OpKind::Softmax, {net(OpKind::GeluTanh, {x})}, {{"axis", int64_t{0}}})});
  addLoss(net, args, y);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  expectDoubleBackward(g, args, {"x", "b"});
}

TEST(GradDoubleBackward, DataMovement) {
  Graph g;
  std::vector<RefTensor<double>> args;
  ValueId x = input(g, args, "x", {4, 3});
  ValueId ids = g.addInput("ids", {DType::I64, {3}});
  args.push_back(makeTensor({DType::I64, {3}}, {2, 0, 2}));
  Net net(g);
  ValueId s = net(OpKind::Softmax, {x}, {{"axis", int64_t{0}}});
  ValueId p = net(OpKind::Pad, {s},
                  {{"axis", int64_t{1}},
                   {"low", int64_t{1}},
                   {"high", int64_t{0}},
                   {"interior", int64_t{1}},
                   {"value", 0.25}}); // [4,6]
  ValueId sl = net(OpKind::Slice, {p},
                   {{"axis", int64_t{1}},
                    {"start", int64_t{0}},
                    {"end", int64_t{6}},
                    {"step", int64_t{2}}}); // [4,3]
  ValueId sq = net(OpKind::Mul, {x, x});
  ValueId gathered = net(OpKind::Gather, {sq, ids});                                    // [3,3]
  ValueId scattered = net(OpKind::ScatterAdd, {ids, gathered}, {{"size", int64_t{4}}}); // [4,3]
  ValueId c = net(OpKind::Concat, {sl, scattered}, {{"axis", int64_t{0}}});             // [8,3]
  ValueId m = net(OpKind::ReduceMax, {x}, {{"axes", Ints{0}}, {"keepdims", true}});     // [1,3]
  ValueId bm = net(OpKind::Broadcast, {m}, {{"shape", Ints{8, 3}}});
  ValueId r = net(OpKind::Reshape, {net(OpKind::Mul, {net(OpKind::Mul, {c, c}), bm})},
                  {{"shape", Ints{4, 6}}});
  addLoss(net, args, net(OpKind::Transpose, {r}, {{"perm", Ints{1, 0}}}));
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  expectDoubleBackward(g, args, {"x"});
}

// A small classifier, end to end: the whole backward graph verifies, every gradient has its
// argument's type, and the gradients match central differences.
TEST(GradGraph, BackwardGraphVerifies) {
  Graph g("mlp");
  std::vector<RefTensor<double>> args;
  ValueId x = input(g, args, "x", {4, 3});
  ValueId w1 = input(g, args, "w1", {5, 3});
  ValueId b1 = input(g, args, "b1", {5});
  ValueId w2 = input(g, args, "w2", {3, 5});
  ValueId target = g.addInput("target", f64t({4, 3}));
  args.push_back(makeTensor(f64t({4, 3}), {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0}));
  Net net(g);
  ValueId h = net(OpKind::Gelu,
                  {net(OpKind::Add, {net(OpKind::Matmul, {x, w1}, {{"transpose_b", true}}), b1})});
  ValueId logits = net(OpKind::Matmul, {h, w2}, {{"transpose_b", true}});
  ValueId logp = net(OpKind::LogSoftmax, {logits});
  ValueId nll =
      net(OpKind::Neg,
          {net(OpKind::ReduceMean,
               {net(OpKind::ReduceSum, {net(OpKind::Mul, {logp, target})}, {{"axes", Ints{1}}})})});
  g.addOutput("loss", nll, OutputRole::Loss);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  Graph dg = expectGradientsMatch(g, args, {"x", "w1", "b1", "w2"});
  EXPECT_TRUE(verify(dg).empty());
  for (const char *name : {"grad.x", "grad.w1", "grad.b1", "grad.w2"}) {
    const Output *o = dg.findOutput(name);
    ASSERT_NE(o, nullptr) << name;
    EXPECT_EQ(dg.type(o->value), g.type(g.findArg(std::string(name).substr(5))->value)) << name;
  }
}

// A gradient has its value's dtype: a bf16-stored weight that a bf16 product reads (an f32 result,
// so an f32 gradient from the rule) takes its gradient cast to bf16, also where it has two uses
// whose gradients add (it aborted on an assertion there, and wrote an f32 gradient for a bf16
// parameter that the verifier refused).
TEST(GradGraph, ABf16WeightOfBf16ProductsTakesABf16Gradient) {
  Graph g("g");
  Net net(g);
  const ValueId x = g.addInput("x", Type{DType::F32, {2, 8}});
  const ValueId w = g.addParam("w", Type{DType::BF16, {8, 8}});
  const ValueId once = net(OpKind::Matmul, {x, w}, {{"bf16_products", true}});
  const ValueId twice = net(OpKind::Matmul, {once, w}, {{"bf16_products", true}});
  g.addOutput("loss", net(OpKind::ReduceSum, {twice}), OutputRole::Loss);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  Expected<Graph> dg = passes::differentiate(g, {});
  ASSERT_TRUE(dg) << dg.error().message;
  EXPECT_TRUE(verify(*dg).empty());
  EXPECT_EQ(dg->type(dg->findOutput("grad.w")->value), (Type{DType::BF16, {8, 8}}));
}

} // namespace
} // namespace kiln::gradcheck::grad_graph_test
