// Every gradient rule against f64 central differences. Each case is a graph
//   inputs -> op -> y,  loss = reduce_sum(y * w)   (w a fixed random weight input)
// differentiated with respect to its float inputs; shapes include numpy broadcasting and random
// shapes, and inputs are chosen away from the op's non-differentiable points.
#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/passes/gradcheck_util.h"

namespace kiln::gradcheck::gradcheck_test {
namespace {

using Ints = std::vector<int64_t>;
using Build = std::function<ValueId(Net &, const std::vector<ValueId> &)>;

struct GradCase {
  std::string name;
  OpKind op; // the op whose rule the case checks
  std::vector<Input> inputs;
  Build build;
};

// gtest prints a failing case by name (not as bytes).
void PrintTo(const GradCase &c, std::ostream *os) {
  *os << c.name;
}

Type i64(Shape s) {
  return {DType::I64, std::move(s)};
}

// y = op(inputs){attrs}
Build single(OpKind op, std::vector<AttrInit> attrs = {}) {
  return [op, attrs](Net &net, const std::vector<ValueId> &in) { return net(op, in, attrs); };
}

// "3x1x4" ("s" for a scalar): shapes in test names.
std::string dims(const Shape &s) {
  if (s.empty())
    return "s";
  std::string r;
  for (size_t d = 0; d < s.size(); ++d)
    r += (d ? "x" : "") + std::to_string(s[d]);
  return r;
}

// A random shape: rank 0..3, dims 1..4.
Shape randomShape(uint64_t seed) {
  Shape s(rng::bits(seed, 0) % 4);
  for (size_t d = 0; d < s.size(); ++d)
    s[d] = 1 + static_cast<int64_t>(rng::bits(seed, d + 1) % 4);
  return s;
}

// Two random shapes that broadcast: from one result shape (rank 1..3, dims 2..4), each operand
// drops some leading dims and has some others set to 1.
std::pair<Shape, Shape> randomBroadcastPair(uint64_t seed) {
  Shape out(1 + rng::bits(seed, 0) % 3);
  for (size_t d = 0; d < out.size(); ++d)
    out[d] = 2 + static_cast<int64_t>(rng::bits(seed, d + 1) % 3);
  auto operand = [&](uint64_t stream) {
    size_t drop = rng::bits(stream, 0) % (out.size() + 1);
    Shape s(out.begin() + drop, out.end());
    for (size_t d = 0; d < s.size(); ++d)
      if (rng::bits(stream, d + 1) % 3 == 0)
        s[d] = 1;
    return s;
  };
  return {operand(rng::mix64(seed + 1)), operand(rng::mix64(seed + 2))};
}

// Where an op's inputs are drawn: magnitude in [lo, hi], optionally with a random sign.
struct Range {
  double lo = -2, hi = 2;
  bool randomSign = false;
};
constexpr Range kAny{}, kPositive{0.3, 3}, kNonZero{0.1, 2, true};

void unaryCases(std::vector<GradCase> &cases) {
  struct U {
    OpKind op;
    Range r;
  };
  // abs and relu have a kink at 0, log/sqrt/rsqrt need x > 0.
  const U ops[] = {
      {OpKind::Neg, kAny},          {OpKind::Abs, kNonZero},   {OpKind::Exp, kAny},
      {OpKind::Log, kPositive},     {OpKind::Sqrt, kPositive}, {OpKind::Rsqrt, kPositive},
      {OpKind::Tanh, kAny},         {OpKind::Sigmoid, kAny},   {OpKind::Relu, kNonZero},
      {OpKind::Gelu, kAny},         {OpKind::GeluTanh, kAny},  {OpKind::GeluGrad, kAny},
      {OpKind::GeluTanhGrad, kAny}, {OpKind::SiluGrad, kAny},  {OpKind::Silu, kAny},
      {OpKind::Sin, kAny},          {OpKind::Cos, kAny},       {OpKind::Erf, kAny},
      {OpKind::Softplus, {-30, 30}}};
  for (const U &u : ops) {
    std::vector<Shape> shapes = {{2, 3}};
    for (uint64_t seed = 0; seed < 3; ++seed)
      shapes.push_back(randomShape(rng::mix64(static_cast<uint64_t>(u.op) * 16 + seed)));
    for (size_t i = 0; i < shapes.size(); ++i)
      cases.push_back({fmt::format("{}_{}_{}", mnemonic(u.op), i, dims(shapes[i])),
                       u.op,
                       {{"x", f64t(shapes[i]), {}, u.r.lo, u.r.hi, u.r.randomSign}},
                       single(u.op)});
  }
  // Kinks, taken as PyTorch does: |x|'(0) = 0, which is also the central difference there.
  cases.push_back(
      {"abs_at_zero", OpKind::Abs, {{"x", f64t({3}), {0, 1, -1}}}, single(OpKind::Abs)});
  // softplus on both sides of its threshold (20), where it is x.
  cases.push_back({"softplus_threshold",
                   OpKind::Softplus,
                   {{"x", f64t({4}), {19.5, 20.5, 26, -26}}},
                   single(OpKind::Softplus)});
  // Dropout: the mask is fixed by the seed, so the op is linear in x.
  for (double p : {0.0, 0.3})
    cases.push_back({fmt::format("dropout_p{}", int(p * 10)),
                     OpKind::Dropout,
                     {{"x", f64t({4, 5})}},
                     single(OpKind::Dropout, {{"p", p}, {"seed", int64_t{11}}})});
}

void binaryCases(std::vector<GradCase> &cases) {
  struct B {
    OpKind op;
    Range a, b;
  };
  const B ops[] = {{OpKind::Add, kAny, kAny},    {OpKind::Sub, kAny, kAny},
                   {OpKind::Mul, kAny, kAny},    {OpKind::Div, kAny, {0.5, 2, true}},
                   {OpKind::Max, kAny, kAny},    {OpKind::Min, kAny, kAny},
                   {OpKind::Pow, {0.5, 2}, kAny}};
  for (const B &b : ops) {
    std::vector<std::pair<Shape, Shape>> shapes = {
        {{3, 1, 4}, {2, 1}}, {{2, 1}, {3, 1, 4}}, {{}, {2, 3}}, {{2, 3}, {2, 3}}};
    for (uint64_t seed = 0; seed < 3; ++seed)
      shapes.push_back(randomBroadcastPair(rng::mix64(static_cast<uint64_t>(b.op) * 16 + seed)));
    for (size_t i = 0; i < shapes.size(); ++i) {
      auto [sa, sb] = shapes[i];
      cases.push_back({fmt::format("{}_{}_{}_{}", mnemonic(b.op), i, dims(sa), dims(sb)),
                       b.op,
                       {{"a", f64t(sa), {}, b.a.lo, b.a.hi, b.a.randomSign},
                        {"b", f64t(sb), {}, b.b.lo, b.b.hi, b.b.randomSign}},
                       single(b.op)});
    }
  }
  // Ties split dy in half, which is also the central difference at a tie.
  for (OpKind op : {OpKind::Max, OpKind::Min})
    cases.push_back({fmt::format("{}_ties", mnemonic(op)),
                     op,
                     {{"a", f64t({3}), {1, 2, 3}}, {"b", f64t({3}), {1, 0, 3}}},
                     single(op)});
  // pow at a == 0 (integer exponents, so a - eps is a valid base): d/db = y log a is taken as
  // 0 there, the limit; and d/da = b a^(b-1) is 0 where b == 0, not 0 * inf = NaN. (The central
  // difference in b at a == b == 0 is infinite, so there b is a constant.)
  cases.push_back({"pow_zero_base",
                   OpKind::Pow,
                   {{"a", f64t({3}), {0, 0, 0}}, {"b", f64t({3}), {2, 3, 1}}},
                   single(OpKind::Pow)});
  cases.push_back({"pow_zero_exponent",
                   OpKind::Pow,
                   {{"a", f64t({2}), {0, 2}}},
                   [](Net &net, const std::vector<ValueId> &in) {
                     ValueId b = net(OpKind::Constant, {},
                                     {{"value", 0.0}, {"shape", Ints{2}}, {"dtype", DType::F64}});
                     return net(OpKind::Pow, {in[0], b});
                   }});
}

void selectCastCases(std::vector<GradCase> &cases) {
  // cond [2,1,3], on_true [4,1], on_false [3] -> [2,4,3]
  cases.push_back({"select_broadcast",
                   OpKind::Select,
                   {{"cond", {DType::Bool, {2, 1, 3}}, {1, 0, 1, 0, 0, 1}},
                    {"a", f64t({4, 1})},
                    {"b", f64t({3})}},
                   single(OpKind::Select)});
  cases.push_back({"select_same_shape",
                   OpKind::Select,
                   {{"cond", {DType::Bool, {4}}, {1, 0, 0, 1}}, {"a", f64t({4})}, {"b", f64t({4})}},
                   single(OpKind::Select)});
  // f64 -> f32 -> f64 (the f64 interpreter holds f32 values unrounded, so this is smooth).
  cases.push_back(
      {"cast_f64_f32",
       OpKind::Cast,
       {{"x", f64t({2, 3})}},
       [](Net &net, const std::vector<ValueId> &in) {
         ValueId t = net(OpKind::Tanh, {net(OpKind::Cast, {in[0]}, {{"dtype", DType::F32}})});
         return net(OpKind::Cast, {t}, {{"dtype", DType::F64}});
       }});
}

void reduceCases(std::vector<GradCase> &cases) {
  const std::vector<std::pair<Ints, bool>> axes = {
      {{}, false}, {{1}, false}, {{0, 2}, true}, {{-1}, true}};
  for (OpKind op : {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax})
    for (size_t i = 0; i < axes.size(); ++i)
      cases.push_back({fmt::format("{}_{}", mnemonic(op), i),
                       op,
                       {{"x", f64t({2, 3, 4})}},
                       single(op, {{"axes", axes[i].first}, {"keepdims", axes[i].second}})});
  for (OpKind op : {OpKind::ReduceSum, OpKind::ReduceMean, OpKind::ReduceMax})
    cases.push_back({fmt::format("{}_scalar", mnemonic(op)), op, {{"x", f64t({})}}, single(op)});
  // Two-way ties in each row share dy (PyTorch's amax); the central difference at a two-way tie
  // is dy/2 as well. (A three-way tie is checked by value in grad_graph_test.cc.)
  cases.push_back({"reduce_max_ties",
                   OpKind::ReduceMax,
                   {{"x", f64t({2, 3}), {1, 5, 5, 2, -1, 2}}},
                   single(OpKind::ReduceMax, {{"axes", Ints{1}}})});
  for (OpKind op : {OpKind::Softmax, OpKind::LogSoftmax}) {
    for (int64_t axis : {-1, 0, 1})
      cases.push_back(
          {fmt::format("{}_axis{}", mnemonic(op), axis < 0 ? "_last" : std::to_string(axis)),
           op,
           {{"x", f64t({2, 3, 4})}},
           single(op, {{"axis", axis}})});
    cases.push_back({fmt::format("{}_vector", mnemonic(op)), op, {{"x", f64t({5})}}, single(op)});
  }
  // cross_entropy: targets in range and the ignored id, negative or past the classes (no class:
  // only the smoothing term), with and without smoothing; and through lse as well (a z-loss:
  // lse^2).
  const std::vector<double> targets = {0, 4, -1, 2, -1, 1};
  for (double eps : {0.0, 0.2})
    cases.push_back(
        {fmt::format("cross_entropy_smoothing{}", int(eps * 10)),
         OpKind::CrossEntropy,
         {{"logits", f64t({2, 3, 5})}, {"targets", i64({2, 3}), targets}},
         single(OpKind::CrossEntropy, {{"label_smoothing", eps}, {"ignore_index", int64_t{-1}}})});
  cases.push_back({"cross_entropy_and_lse",
                   OpKind::CrossEntropy,
                   {{"logits", f64t({3, 4})}, {"targets", i64({3}), {3, 0, 7}}},
                   [](Net &net, const std::vector<ValueId> &in) {
                     const ValueId loss =
                         net(OpKind::CrossEntropy, in,
                             {{"label_smoothing", 0.1}, {"ignore_index", int64_t{7}}});
                     const ValueId lse = net.g.node(net.g.value(loss).def).results[1];
                     return net(OpKind::Add, {loss, net(OpKind::Mul, {lse, lse})});
                   }});
}

void matmulCases(std::vector<GradCase> &cases) {
  const int64_t m = 3, k = 4, n = 2;
  const std::vector<std::pair<Shape, Shape>> batches = {
      {{}, {}}, {{2, 1}, {3}}, {{}, {2}}, {{2}, {}}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (size_t i = 0; i < batches.size(); ++i) {
        Shape a = batches[i].first, b = batches[i].second;
        for (int64_t d : ta ? Ints{k, m} : Ints{m, k})
          a.push_back(d);
        for (int64_t d : tb ? Ints{n, k} : Ints{k, n})
          b.push_back(d);
        cases.push_back({fmt::format("matmul_t{}{}_{}_{}", int(ta), int(tb), dims(a), dims(b)),
                         OpKind::Matmul,
                         {{"a", f64t(a)}, {"b", f64t(b)}},
                         single(OpKind::Matmul, {{"transpose_a", ta}, {"transpose_b", tb}})});
      }
}

void shapeCases(std::vector<GradCase> &cases) {
  auto one = [&](std::string name, OpKind op, Shape x, std::vector<AttrInit> attrs) {
    cases.push_back({std::move(name), op, {{"x", f64t(std::move(x))}}, single(op, attrs)});
  };
  one("reshape_2d", OpKind::Reshape, {2, 3, 4}, {{"shape", Ints{4, 6}}});
  one("reshape_add_dims", OpKind::Reshape, {6}, {{"shape", Ints{1, 2, 3}}});
  one("transpose_3d", OpKind::Transpose, {2, 3, 4}, {{"perm", Ints{2, 0, 1}}});
  one("transpose_2d", OpKind::Transpose, {3, 2}, {{"perm", Ints{1, 0}}});
  one("broadcast_stretch", OpKind::Broadcast, {3, 1}, {{"shape", Ints{2, 3, 4}}});
  one("broadcast_scalar", OpKind::Broadcast, {}, {{"shape", Ints{2, 2}}});
  one("broadcast_lead", OpKind::Broadcast, {1, 4}, {{"shape", Ints{3, 4}}});
  auto slice = [](int64_t axis, int64_t start, int64_t end, int64_t step) {
    return std::vector<AttrInit>{{"axis", axis}, {"start", start}, {"end", end}, {"step", step}};
  };
  one("slice_step2", OpKind::Slice, {5, 3}, slice(0, 1, 5, 2));
  one("slice_step3_leftover", OpKind::Slice, {2, 7}, slice(-1, 1, 7, 3)); // 1, 4 of 7
  one("slice_contiguous", OpKind::Slice, {4, 3}, slice(1, 1, 3, 1));
  one("slice_empty", OpKind::Slice, {4, 3}, slice(0, 2, 2, 1));
  auto pad = [](int64_t axis, int64_t low, int64_t high, int64_t interior) {
    return std::vector<AttrInit>{
        {"axis", axis}, {"low", low}, {"high", high}, {"interior", interior}, {"value", 0.5}};
  };
  one("pad_interior", OpKind::Pad, {2, 3}, pad(1, 1, 2, 1));
  one("pad_axis0", OpKind::Pad, {3, 2}, pad(-2, 0, 0, 2));
  one("pad_plain", OpKind::Pad, {4}, pad(0, 2, 1, 0));
  one("pad_empty", OpKind::Pad, {0, 3}, pad(0, 1, 1, 3));

  cases.push_back({"concat_three",
                   OpKind::Concat,
                   {{"a", f64t({2, 1})}, {"b", f64t({2, 3})}, {"c", f64t({2, 2})}},
                   single(OpKind::Concat, {{"axis", int64_t{-1}}})});
  cases.push_back({"concat_axis0",
                   OpKind::Concat,
                   {{"a", f64t({1, 3})}, {"b", f64t({2, 3})}},
                   single(OpKind::Concat, {{"axis", int64_t{0}}})});
  // Repeated indices: their rows' gradients add up.
  cases.push_back({"gather_axis0",
                   OpKind::Gather,
                   {{"table", f64t({5, 3})}, {"ids", i64({2, 2}), {1, 4, 1, 0}}},
                   single(OpKind::Gather)});
  cases.push_back({"gather_axis1",
                   OpKind::Gather,
                   {{"table", f64t({2, 4, 3})}, {"ids", i64({3}), {3, 0, 3}}},
                   single(OpKind::Gather, {{"axis", int64_t{1}}})});
  cases.push_back({"gather_scalar_index",
                   OpKind::Gather,
                   {{"table", f64t({3, 2})}, {"ids", i64({}), {2}}},
                   single(OpKind::Gather)});
  cases.push_back({"scatter_add_axis0",
                   OpKind::ScatterAdd,
                   {{"ids", i64({3}), {2, 0, 2}}, {"updates", f64t({3, 2})}},
                   single(OpKind::ScatterAdd, {{"size", int64_t{4}}})});
  cases.push_back({"scatter_add_axis1",
                   OpKind::ScatterAdd,
                   {{"ids", i64({2, 2}), {1, 1, 0, 2}}, {"updates", f64t({2, 2, 2, 3})}},
                   single(OpKind::ScatterAdd, {{"axis", int64_t{1}}, {"size", int64_t{3}}})});
  cases.push_back(
      {"scatter_add_into_base",
       OpKind::ScatterAdd,
       {{"ids", i64({3}), {2, 0, 2}}, {"updates", f64t({3, 2})}, {"base", f64t({4, 2})}},
       single(OpKind::ScatterAdd, {{"size", int64_t{4}}})});
  // A KV cache's write: row 1's index is past the slices, so its update gets no gradient and
  // its base all of dy.
  cases.push_back({"update_slice",
                   OpKind::UpdateSlice,
                   {{"base", f64t({3, 2, 4, 2})},
                    {"update", f64t({3, 2, 1, 2})},
                    {"index", i64({3}), {2, 7, 0}}},
                   single(OpKind::UpdateSlice, {{"axis", int64_t{2}}})});
}

std::vector<GradCase> allCases() {
  std::vector<GradCase> cases;
  unaryCases(cases);
  binaryCases(cases);
  selectCastCases(cases);
  reduceCases(cases);
  matmulCases(cases);
  shapeCases(cases);
  return cases;
}

class GradCheck : public ::testing::TestWithParam<GradCase> {};

TEST_P(GradCheck, MatchesCentralDifferences) {
  const GradCase &c = GetParam();
  Graph g("grad_" + c.name);
  std::vector<ValueId> ids;
  std::vector<RefTensor<double>> args;
  std::vector<std::string> wrt;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Input &in = c.inputs[i];
    ids.push_back(g.addInput(in.name, in.type));
    args.push_back(makeValues(in, rng::mix64(i + 1)));
    if (isFloat(in.type.dtype))
      wrt.push_back(in.name);
  }
  Net net(g);
  ValueId y = c.build(net, ids);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  ValueId w = g.addInput("w", g.type(y));
  args.push_back(normalValues(g.type(y), 99));
  g.addOutput("loss", net(OpKind::ReduceSum, {net(OpKind::Mul, {y, w})}), OutputRole::Loss);
  ASSERT_TRUE(net.errors.empty()) << net.errors.front();
  expectGradientsMatch(g, args, wrt);
}

INSTANTIATE_TEST_SUITE_P(GradOps, GradCheck, ::testing::ValuesIn(allCases()),
                         [](const auto &info) { return info.param.name; });

// Every differentiable op has a numeric case above, except the fused ops, whose rules
// tests/ir/fused_grad_test.cc checks (their backward ops' rules are errors by design: no double
// backward through a fused backward op; see FusedGradErrors), the region op, which
// tests/ir/region_test.cc checks, and the collectives, f32 only (their kernels'; these cases run in
// f64): all_reduce (and its start and wait), whose rule tests/codegen/data_parallel_test.cc checks,
// and whose gradients over 2 ranks tests/mpi/run.sh compares with one process's, and the sharded
// optimizer's three, whose rules tests/codegen/sharded_optimizer_test.cc checks.
TEST(GradCoverage, EveryDifferentiableOpHasACase) {
  std::set<OpKind> tested = {
      OpKind::Fusion,          OpKind::Attention,         OpKind::AttentionBackward,
      OpKind::LayerNorm,       OpKind::LayerNormBackward, OpKind::RmsNorm,
      OpKind::RmsNormBackward, OpKind::AddLayerNorm,      OpKind::AddRmsNorm,
      OpKind::AllReduce,       OpKind::AllReduceStart,    OpKind::AllReduceWait,
      OpKind::ReduceScatter,   OpKind::AllGather,         OpKind::RankChunk};
  for (const GradCase &c : allCases())
    tested.insert(c.op);
  for (const OpInfo *op : allOps())
    if (op->differentiable == Differentiable::Yes) {
      EXPECT_TRUE(tested.count(op->kind)) << op->mnemonic << " has no gradient check";
    }
}

} // namespace
} // namespace kiln::gradcheck::gradcheck_test
