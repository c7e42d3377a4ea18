// The op records' traits (commutative, pointwise, moves elements, view, writes over an operand,
// region role, scratch) are checked against the ops' own reference semantics: a trait that a
// record claims wrongly makes a pass (CSE, constant folding, memory planning, fusion) compute
// something else, so each claim is tested, op by op, by running the op.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "ir/evaluate.h"
#include "ir/graph.h"
#include "ir/ops/collective.h"
#include "support/rng.h"
#include "support/workspace.h"
#include "tests/ir/ops_test_util.h"

namespace kiln::ir::optest::op_traits_test {
namespace {

// Random elements for an operand of type t: normal floats (with some exact ties and zeros, so
// that max/min/compare see equal values), small integers, random bools.
Arg randomArg(const Type &t, uint64_t seed) {
  Arg a{t, {}};
  for (int64_t k = 0; k < t.numElements(); ++k) {
    double u = rng::uniform(seed, k);
    if (t.dtype == DType::Bool)
      a.values.push_back(u < 0.5 ? 0 : 1);
    else if (isInteger(t.dtype))
      a.values.push_back(std::floor(u * 7) - 3);
    else
      a.values.push_back(k % 5 == 0 ? 0.5 : k % 7 == 0 ? 0 : 3 * rng::normal(seed, k));
  }
  return a;
}

// Operand dtypes the op accepts, found by asking its inference: all f64, all i64, all bool, or
// select's (bool, f64, f64). Cast gets a dtype attribute.
struct Signature {
  std::vector<DType> dtypes;
  std::vector<AttrInit> attrs;
};
std::optional<Signature> signatureOf(OpKind op) {
  // (dropout's optional step is a scalar: ops_elementwise_test.cc tests it)
  size_t n = opInfo(op).operands.size() - (op == OpKind::Dropout ? 1 : 0);
  std::vector<AttrInit> attrs;
  if (op == OpKind::Cast)
    attrs.push_back({"dtype", DType::I64});
  if (op == OpKind::Dropout)
    attrs = {{"p", 0.5}, {"seed", int64_t{3}}};
  if (op == OpKind::AllReduce || op == OpKind::AllReduceStart || op == OpKind::AllReduceWait)
    // (one process: their reference is the one-rank mean)
    attrs = {{"ranks", int64_t{1}}};
  std::vector<std::vector<DType>> tries = {
      std::vector<DType>(n, DType::F64), std::vector<DType>(n, DType::I64),
      std::vector<DType>(n, DType::Bool), std::vector<DType>(n, DType::F32)}; // (all_reduce)
  if (n == 3)
    tries.push_back({DType::Bool, DType::F64, DType::F64});
  for (const std::vector<DType> &dtypes : tries) {
    std::vector<Type> types;
    for (DType d : dtypes)
      types.push_back({d, {3, 4}});
    if (inferTypes(op, types, *makeAttrs(op, attrs)).ok())
      return Signature{dtypes, attrs};
  }
  return std::nullopt;
}

std::vector<Arg> argsOf(const Signature &s, const std::vector<Shape> &shapes, uint64_t seed) {
  std::vector<Arg> args;
  for (size_t i = 0; i < s.dtypes.size(); ++i)
    args.push_back(randomArg({s.dtypes[i], shapes[i % shapes.size()]}, seed + i));
  return args;
}

// Bit-identical, NaN equal to NaN.
bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

std::vector<const OpInfo *> opsWhere(bool (*pred)(const OpInfo &)) {
  std::vector<const OpInfo *> out;
  for (const OpInfo *op : allOps())
    if (pred(*op))
      out.push_back(op);
  return out;
}

// Swapping the operands gives the same bits, broadcasting included. (Sub or Lt marked
// commutative would make CSE merge a - b with b - a.)
TEST(OpTraits, CommutativeOpsCommute) {
  std::vector<const OpInfo *> ops = opsWhere([](const OpInfo &o) { return o.commutative; });
  EXPECT_EQ(ops.size(), 8u);
  for (const OpInfo *op : ops) {
    SCOPED_TRACE(std::string(op->mnemonic));
    ASSERT_EQ(op->operands.size(), 2u);
    std::optional<Signature> sig = signatureOf(op->kind);
    ASSERT_TRUE(sig);
    std::vector<Arg> args = argsOf(*sig, {{3, 1}, {1, 4}}, 11);
    args[1].values[2] = args[0].values[1]; // a tie
    auto ab = runOp<double>(op->kind, args, sig->attrs);
    auto ba = runOp<double>(op->kind, {args[1], args[0]}, sig->attrs);
    ASSERT_TRUE(ab && ba);
    ASSERT_EQ((*ab)[0].type, (*ba)[0].type);
    for (int64_t k = 0; k < (*ab)[0].size(); ++k)
      EXPECT_TRUE(same((*ab)[0].get(k), (*ba)[0].get(k))) << "element " << k;
  }
  for (OpKind op : {OpKind::Sub, OpKind::Div, OpKind::Pow, OpKind::Lt, OpKind::Select})
    EXPECT_FALSE(opInfo(op).commutative) << mnemonic(op);
}

// Element k of the result is the op evaluated on the operand elements at k alone: what
// ir::uniformResult (constant folding, pattern matching) computes from one value per operand.
// Dropout, whose mask depends on k, must not claim it.
TEST(OpTraits, PointwiseOpsAreFunctionsOfTheirElements) {
  std::vector<const OpInfo *> ops = opsWhere([](const OpInfo &o) { return o.pointwise; });
  EXPECT_GT(ops.size(), 30u);
  for (const OpInfo *op : ops) {
    SCOPED_TRACE(std::string(op->mnemonic));
    std::optional<Signature> sig = signatureOf(op->kind);
    ASSERT_TRUE(sig);
    EXPECT_NE(op->writesOver, nullptr) << "a pointwise op may run in place";
    EXPECT_EQ(op->regionRole, RegionRole::Pointwise);
    // The last operand of several broadcasts along the rows.
    std::vector<Shape> shapes(sig->dtypes.size(), Shape{3, 4});
    if (shapes.size() > 1)
      shapes.back() = {4};
    std::vector<Arg> args = argsOf(*sig, shapes, 5);
    auto full = runOp<double>(op->kind, args, sig->attrs);
    ASSERT_TRUE(full) << full.error().message;
    Graph g;
    std::vector<ValueId> in;
    for (const Arg &a : args)
      in.push_back(g.addInput("x" + std::to_string(in.size()), a.type));
    NodeId n = *g.addNode(op->kind, in, *makeAttrs(op->kind, sig->attrs));
    for (int64_t k = 0; k < 12; ++k) {
      std::vector<double> at;
      for (const Arg &a : args)
        at.push_back(a.values[a.type.rank() == 2 ? k : k % 4]);
      std::optional<double> one = uniformResult(g, g.node(n), at);
      ASSERT_TRUE(one) << "element " << k;
      EXPECT_TRUE(same(*one, (*full)[0].get(k))) << "element " << k;
    }
  }
  EXPECT_FALSE(opInfo(OpKind::Dropout).pointwise);
}

// Every result element is a copy of some operand element (or pad's fill value), so uniform
// operands give a uniform result; a reshape's elements are its operand's, in order (a view).
TEST(OpTraits, DataMovementCopiesElementsAndViewsKeepTheOrder) {
  struct Case {
    OpKind op;
    std::vector<Arg> args;
    std::vector<AttrInit> attrs;
  };
  Arg x = randomArg({DType::F64, {2, 3}}, 1), y = randomArg({DType::F64, {2, 2}}, 2);
  std::vector<Case> cases = {
      {OpKind::Reshape, {x}, {{"shape", Shape{3, 2}}}},
      {OpKind::Transpose, {x}, {{"perm", std::vector<int64_t>{1, 0}}}},
      {OpKind::Broadcast, {x}, {{"shape", Shape{4, 2, 3}}}},
      {OpKind::Slice, {x}, {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"end", int64_t{3}}}},
      {OpKind::Concat, {x, y}, {{"axis", int64_t{1}}}},
      {OpKind::Pad, {x}, {{"axis", int64_t{0}}, {"low", int64_t{1}}, {"value", 0.25}}},
  };
  std::set<OpKind> covered;
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(mnemonic(c.op)));
    covered.insert(c.op);
    auto out = runOp<double>(c.op, c.args, c.attrs);
    ASSERT_TRUE(out) << out.error().message;
    std::multiset<double> pool = {0.25};
    for (const Arg &a : c.args)
      pool.insert(a.values.begin(), a.values.end());
    for (double v : (*out)[0].f)
      EXPECT_TRUE(pool.count(v)) << v << " is no operand element";
    if (opInfo(c.op).view) {
      for (int64_t k = 0; k < (*out)[0].size(); ++k)
        EXPECT_EQ((*out)[0].f[k], c.args[0].values[k]);
    }
  }
  for (const OpInfo *op : opsWhere([](const OpInfo &o) { return o.movesElements; }))
    EXPECT_TRUE(covered.count(op->kind)) << op->mnemonic << " moves elements but has no case";
  for (const OpInfo *op : opsWhere([](const OpInfo &o) { return o.view; })) {
    EXPECT_TRUE(op->movesElements) << op->mnemonic;
    EXPECT_EQ(op->operands.size(), 1u) << op->mnemonic;
  }
}

// An op that may write a result over an operand reads that operand's element k only to compute
// result element k: changing operand element j changes no other result element. (A backend
// computing it in place would otherwise read values it has already overwritten.)
TEST(OpTraits, WritingOverAnOperandOnlyWhereElementKReadsElementK) {
  for (const OpInfo *op : opsWhere([](const OpInfo &o) { return o.writesOver != nullptr; })) {
    if (op->kind == OpKind::Fusion || op->kind == OpKind::ScatterAdd ||
        op->kind == OpKind::UpdateSlice)
      continue; // bodies: tests/ir/region_test.cc; scatter_add, update_slice (over a base): below
    SCOPED_TRACE(std::string(op->mnemonic));
    std::optional<Signature> sig = signatureOf(op->kind);
    ASSERT_TRUE(sig);
    std::vector<Arg> args = argsOf(*sig, {{3, 4}}, 9);
    auto before = runOp<double>(op->kind, args, sig->attrs);
    ASSERT_TRUE(before);
    for (size_t i = 0; i < args.size(); ++i)
      for (int64_t j : {0, 5, 11}) {
        std::vector<Arg> changed = args;
        double &v = changed[i].values[j];
        v = changed[i].type.dtype == DType::Bool ? 1 - v : v + 1.5;
        auto after = runOp<double>(op->kind, changed, sig->attrs);
        ASSERT_TRUE(after);
        for (int64_t k = 0; k < 12; ++k)
          if (k != j) {
            EXPECT_TRUE(same((*before)[0].get(k), (*after)[0].get(k)))
                << "operand " << i << " element " << j << " changed result element " << k;
          }
      }
  }
  for (OpKind op : {OpKind::Matmul, OpKind::Softmax, OpKind::Transpose, OpKind::ReduceSum})
    EXPECT_EQ(opInfo(op).writesOver, nullptr) << mnemonic(op);

  // scatter_add over its base (operand 2): base element j reaches result element j only, named
  // row (0, 2) or not (1).
  const std::vector<Arg> args = {i64({3}, {2, 0, 2}), f64({3, 2}, {1, 2, 3, 4, 5, 6}),
                                 f64({3, 2}, {-1, -2, -3, -4, -5, -6})};
  const std::vector<AttrInit> attrs = {{"size", int64_t{3}}};
  auto before = runOp<double>(OpKind::ScatterAdd, args, attrs);
  ASSERT_TRUE(before) << before.error().message;
  for (int64_t j = 0; j < 6; ++j) {
    std::vector<Arg> changed = args;
    changed[2].values[j] += 1.5;
    auto after = runOp<double>(OpKind::ScatterAdd, changed, attrs);
    ASSERT_TRUE(after);
    for (int64_t k = 0; k < 6; ++k)
      EXPECT_EQ((*after)[0].get(k), (*before)[0].get(k) + (k == j ? 1.5 : 0.0))
          << "base element " << j << ", result element " << k;
  }
  // update_slice over its base (operand 0): base element j reaches result element j, or nothing
  // where its slice is replaced (row 0's position 1, row 2's 0; row 1's index is past them).
  const std::vector<Arg> slices = {f64({3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}),
                                   f64({3, 1, 2}, {-1, -2, -3, -4, -5, -6}), i64({3}, {1, 2, 0})};
  const std::vector<AttrInit> axis = {{"axis", int64_t{1}}};
  auto written = runOp<double>(OpKind::UpdateSlice, slices, axis);
  ASSERT_TRUE(written) << written.error().message;
  EXPECT_EQ((*written)[0].f, (std::vector<double>{1, 2, -1, -2, 5, 6, 7, 8, -5, -6, 11, 12}));
  for (int64_t j = 0; j < 12; ++j) {
    std::vector<Arg> changed = slices;
    changed[0].values[j] += 1.5;
    auto after = runOp<double>(OpKind::UpdateSlice, changed, axis);
    ASSERT_TRUE(after);
    const bool replaced = (*written)[0].get(j) < 0;
    for (int64_t k = 0; k < 12; ++k)
      EXPECT_EQ((*after)[0].get(k), (*written)[0].get(k) + (k == j && !replaced ? 1.5 : 0.0))
          << "base element " << j << ", result element " << k;
  }
}

// Region roles: reductions are the reduce_* ops (an `axes` attribute), the one matmul role is
// matmul's, and a pointwise member is a pointwise op, a broadcast or a constant.
TEST(OpTraits, RegionRolesFollowWhatTheOpsDo) {
  for (const OpInfo *op : allOps()) {
    SCOPED_TRACE(std::string(op->mnemonic));
    switch (op->regionRole) {
    case RegionRole::Reduction:
      EXPECT_TRUE(op->mnemonic.starts_with("reduce_"));
      break;
    case RegionRole::Matmul:
      EXPECT_EQ(op->kind, OpKind::Matmul);
      break;
    case RegionRole::Pointwise:
      EXPECT_TRUE(op->pointwise || op->kind == OpKind::Broadcast || op->kind == OpKind::Constant);
      break;
    case RegionRole::None:
      EXPECT_FALSE(op->pointwise);
      break;
    }
  }
}

// Kernel workspace: flash attention's grows with the sequence up to a packed window of keys
// (4096 keys of 64) and no further, never T x T (at most 4 MiB per thread); GEMM's is bounded by
// its blocking, whatever the sizes.
// Operands by name: required ones at their place, optional ones where their has_* flag puts them
// (or, without flags, at their place), absent ones and unknown names nowhere.
TEST(OpTraits, OperandsByNameFollowTheFlags) {
  auto attrs = [](OpKind k, std::initializer_list<AttrInit> set) {
    Attrs a(opInfo(k).attrs);
    for (const auto &[name, value] : set)
      EXPECT_TRUE(a.set(name, value).ok()) << name;
    return a;
  };
  const OpInfo &att = opInfo(OpKind::Attention);
  Attrs biasOnly = attrs(OpKind::Attention, {{"has_mask", false}, {"has_bias", true}});
  EXPECT_EQ(operandIndex(att, biasOnly, "v"), 2u);
  EXPECT_EQ(operandIndex(att, biasOnly, "mask"), std::nullopt);
  EXPECT_EQ(operandIndex(att, biasOnly, "bias"), 3u);
  EXPECT_EQ(operandIndex(att, biasOnly, "weight"), std::nullopt);
  EXPECT_EQ(presentOperands(att, biasOnly), (std::vector<std::string_view>{"q", "k", "v", "bias"}));
  const OpInfo &lnb = opInfo(OpKind::LayerNormBackward);
  EXPECT_EQ(operandIndex(lnb, attrs(OpKind::LayerNormBackward, {}), "weight"), 4u); // default on
  EXPECT_EQ(operandIndex(lnb, attrs(OpKind::LayerNormBackward, {{"has_weight", false}}), "weight"),
            std::nullopt);
  EXPECT_EQ(operandIndex(opInfo(OpKind::ScatterAdd), attrs(OpKind::ScatterAdd, {}), "base"), 2u);
}

TEST(OpTraits, ScratchIsLinearForAttentionAndBoundedForMatmul) {
  auto attentionScratch = [](int64_t t, bool backward) {
    Graph g;
    Type qkv{DType::F32, {1, 4, t, 64}};
    ValueId q = g.addInput("q", qkv), k = g.addInput("k", qkv), v = g.addInput("v", qkv);
    NodeId n = *g.addNode(OpKind::Attention, {q, k, v},
                          {{"scale", 0.125}, {"q_heads", int64_t{4}}, {"kv_heads", int64_t{4}}});
    if (!backward)
      return opInfo(OpKind::Attention).scratchBytes(g, g.node(n));
    const Node &fwd = g.node(n);
    ValueId out = fwd.results[0], lse = fwd.results[1];
    NodeId b = *g.addNode(OpKind::AttentionBackward, {q, k, v, out, lse, out},
                          {{"scale", 0.125}, {"q_heads", int64_t{4}}, {"kv_heads", int64_t{4}}});
    return opInfo(OpKind::AttentionBackward).scratchBytes(g, g.node(b));
  };
  for (bool backward : {false, true}) {
    int64_t small = attentionScratch(1024, backward), big = attentionScratch(8192, backward);
    EXPECT_GT(small, 0);
    EXPECT_EQ(big, attentionScratch(65536, backward)) << "the workspace stops growing with T";
    EXPECT_LE(big, workspace::kThreads * (int64_t{4} << 20));
  }
  Graph g;
  ValueId a = g.addInput("a", {DType::F32, {4096, 4096}}),
          w = g.addInput("w", {DType::F32, {4096, 4096}});
  NodeId mm = *g.addNode(OpKind::Matmul, {a, w});
  int64_t bytes = opInfo(OpKind::Matmul).scratchBytes(g, g.node(mm));
  EXPECT_GT(bytes, 0);
  EXPECT_LT(bytes, int64_t{64} << 20);
  // reduce_scatter packs kReduceScatterPiece floats of all ranks into a message, or more where
  // that would take more than kReduceScatterMessages messages (and less for a part smaller than
  // a piece).
  ValueId v = g.addInput("v", {DType::F32, {512, 1024}});
  for (int64_t ranks : {2, 8}) {
    NodeId rs = *g.addNode(OpKind::ReduceScatter, {v, v}, {{"ranks", ranks}});
    EXPECT_EQ(opInfo(OpKind::ReduceScatter).scratchBytes(g, g.node(rs)),
              kReduceScatterPiece * int64_t{sizeof(float)})
        << ranks;
    NodeId big = *g.addNode(OpKind::ReduceScatter, {a, w}, {{"ranks", ranks}});
    const int64_t part = 2 * 4096 * 4096 / ranks, piece = reduceScatterPiece(ranks, part);
    EXPECT_EQ(piece, part / kReduceScatterMessages) << ranks;
    EXPECT_EQ(opInfo(OpKind::ReduceScatter).scratchBytes(g, g.node(big)), ranks * piece * 4);
  }
  ValueId x = g.addInput("x", {DType::F32, {6}});
  NodeId small = *g.addNode(OpKind::ReduceScatter, {x}, {{"ranks", int64_t{2}}});
  EXPECT_EQ(opInfo(OpKind::ReduceScatter).scratchBytes(g, g.node(small)), 6 * 4);
  for (const OpInfo *op : allOps())
    if (op->kind != OpKind::Matmul && op->kind != OpKind::Attention &&
        op->kind != OpKind::AttentionBackward && op->kind != OpKind::Fusion &&
        op->kind != OpKind::ReduceScatter) {
      EXPECT_EQ(op->scratchBytes, nullptr) << op->mnemonic;
    }
}

} // namespace
} // namespace kiln::ir::optest::op_traits_test
