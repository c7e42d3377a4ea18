// The op table as a whole: every record is consistent (kind, mnemonic, summary, operands,
// attributes, inference and reference present), and every decomposition computes what its op
// does, checked by running both through the reference interpreter.
#include <cstdint>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "codegen/reference/interpreter.h"
#include "ir/graph.h"
#include "tests/ir/ops_test_util.h"

namespace kiln::ir::optest::ops_table_test {
namespace {

TEST(OpTable, EveryRecordIsConsistent) {
  std::span<const OpInfo *const> ops = allOps();
  ASSERT_EQ(static_cast<int>(ops.size()), kNumOps);
  std::set<std::string_view> mnemonics;
  for (int k = 0; k < kNumOps; ++k) {
    const OpInfo &op = *ops[k];
    SCOPED_TRACE(std::string(op.mnemonic));
    EXPECT_EQ(static_cast<int>(op.kind), k) << "record at the wrong place";
    EXPECT_EQ(&opInfo(op.kind), &op);
    EXPECT_FALSE(op.mnemonic.empty());
    for (char c : op.mnemonic)
      EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '_') << "mnemonic is lower_snake_case";
    EXPECT_TRUE(mnemonics.insert(op.mnemonic).second) << "mnemonic used twice";
    EXPECT_EQ(opByMnemonic(op.mnemonic), op.kind);
    EXPECT_FALSE(op.summary.empty());
    EXPECT_NE(op.infer, nullptr);
    EXPECT_NE(op.ref32, nullptr);
    EXPECT_NE(op.ref64, nullptr);
    EXPECT_GE(op.numResults, 1);
    if (op.variadic) {
      EXPECT_EQ(op.operands.size(), 1u) << "a variadic op names its one repeated operand";
    }
    std::set<std::string_view> names;
    for (std::string_view o : op.operands) {
      EXPECT_FALSE(o.empty());
      EXPECT_TRUE(names.insert(o).second) << "operand name " << o << " used twice";
    }
    for (const AttrSpec &a : op.attrs) {
      EXPECT_FALSE(a.name.empty());
      EXPECT_TRUE(names.insert(a.name).second) << "attribute name " << a.name << " used twice";
    }
  }
  EXPECT_FALSE(opByMnemonic("no_such_op").has_value());
}

// The X-macro list and the table agree name by name (a record filed under another kind would
// compile only if both were wrong).
TEST(OpTable, OpsDefOrder) {
  std::vector<std::string_view> names = {
#define KILN_OP(Name, family) #Name,
#include "ir/ops.def"
#undef KILN_OP
  };
  ASSERT_EQ(static_cast<int>(names.size()), kNumOps);
  EXPECT_EQ(names.front(), "Neg");
  EXPECT_EQ(mnemonic(OpKind::Neg), "neg");
  EXPECT_EQ(mnemonic(OpKind::LogSoftmax), "log_softmax");
  EXPECT_EQ(mnemonic(OpKind::Tri), "tri");
}

// A gradient rule exactly where the op is differentiable (ir/op_table.cc also static_asserts
// this; the test names the offender). And the ops that are not differentiable are exactly those
// whose results are piecewise constant or not float: marking an op "No" is not a way out of
// writing its rule.
TEST(OpTable, GradRuleExactlyWhereDifferentiable) {
  std::set<std::string_view> notDifferentiable;
  for (const OpInfo *op : allOps()) {
    SCOPED_TRACE(std::string(op->mnemonic));
    EXPECT_EQ(op->grad != nullptr, op->differentiable == Differentiable::Yes);
    if (op->differentiable == Differentiable::No)
      notDifferentiable.insert(op->mnemonic);
  }
  EXPECT_EQ(notDifferentiable, (std::set<std::string_view>{
                                   "constant", "iota", "tri", "eq", "ne", "lt", "le", "gt", "ge",
                                   "logical_not", "logical_and", "logical_or", "stop_gradient"}));
}

// ---- Decompositions ----

// One decomposition case: an op on one input of `type`, with `attrs`, on `values` (empty: the
// interpreter's random normal inputs).
struct DecomposeCase {
  OpKind op;
  Type type;
  std::vector<AttrInit> attrs;
  std::vector<double> values;
};

std::vector<DecomposeCase> decomposeCases() {
  using Axes = std::vector<int64_t>;
  const double inf = kInf;
  std::vector<double> edgy = {-inf, -inf, -inf, 0, 1000, 1000, -inf, 1, 3, -2, 0.5, 7};
  return {
      {OpKind::Sigmoid, f32t({2, 6}), {}, {}},
      {OpKind::Sigmoid, f32t({4}), {}, {0, 30, -30, -inf}},
      {OpKind::Silu, f32t({3, 4}), {}, {}},
      {OpKind::ReduceMean, f32t({2, 3, 4}), {{"axes", Axes{0, -1}}}, {}},
      {OpKind::ReduceMean, f32t({2, 3, 4}), {{"axes", Axes{1}}, {"keepdims", true}}, {}},
      {OpKind::ReduceMean, f32t({2, 3}), {}, {}},
      {OpKind::ReduceMean, f32t({2, 0}), {{"axes", Axes{1}}}, {}}, // NaN, NaN
      {OpKind::Softmax, f32t({3, 5}), {}, {}},
      {OpKind::Softmax, f32t({2, 3, 4}), {{"axis", int64_t{1}}}, {}},
      {OpKind::Softmax, f32t({4, 3}), {}, edgy}, // all -inf row (NaN), big logits
      {OpKind::Softmax, f32t({4, 3}), {{"axis", int64_t{0}}}, edgy},
      {OpKind::LogSoftmax, f32t({3, 5}), {{"axis", int64_t{-1}}}, {}},
      {OpKind::LogSoftmax, f32t({2, 3, 4}), {{"axis", int64_t{0}}}, {}},
      {OpKind::LogSoftmax, f32t({4, 3}), {}, edgy},
  };
}

std::string caseName(const DecomposeCase &c) {
  std::string s = fmt::format("{} {}", mnemonic(c.op), typeString(c.type));
  for (const AttrInit &a : c.attrs)
    s += fmt::format(" {}={}", a.first, attrValueString(a.second));
  return s;
}

// Runs `g` (outputs "original" and "decomposed") on `args` in precision F and compares them.
template <class F>
void expectSameOutputs(const Graph &g, const std::vector<RefTensor<F>> &args, double tol) {
  auto r = reference::run<F>(g, args);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  const RefTensor<F> &want = (*r)[0], &got = (*r)[1];
  ASSERT_EQ(got.type, want.type);
  for (int64_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(closeTo(got.get(k), want.get(k), tol))
        << "element " << k << ": decomposed " << got.get(k) << ", original " << want.get(k);
}

TEST(OpDecompose, MatchesOriginalOp) {
  const SourceLoc loc{"models/test.cc", 42};
  for (const DecomposeCase &c : decomposeCases()) {
    SCOPED_TRACE(caseName(c));
    Graph g;
    ValueId x = g.addInput("x", c.type);
    Expected<Attrs> attrs = makeAttrs(c.op, c.attrs);
    ASSERT_TRUE(attrs) << attrs.error().message;
    Expected<NodeId> id = g.addNode(c.op, std::span<const ValueId>(&x, 1), *attrs, loc);
    ASSERT_TRUE(id) << id.error().message;
    // A copy: decompose appends to g, which may move g's nodes (and a reference into them).
    Node node = g.node(*id);
    Expected<std::vector<int32_t>> results = opInfo(c.op).decompose(g, node);
    ASSERT_TRUE(results) << results.error().message;
    ASSERT_EQ(results->size(), 1u);
    g.addOutput("original", g.result(*id));
    g.addOutput("decomposed", (*results)[0]);

    std::vector<Error> errors = verify(g);
    for (const Error &e : errors)
      ADD_FAILURE() << e.message;
    ASSERT_GT(g.nodes().size(), 2u) << "a decomposition appends nodes";
    for (size_t n = *id + 1; n < g.nodes().size(); ++n) {
      EXPECT_NE(g.node(n).op, c.op) << "decomposes into itself";
      EXPECT_EQ(g.node(n).loc, loc) << "node " << n << " keeps the source location";
    }
    EXPECT_EQ(g.type((*results)[0]), g.type(g.result(*id)));

    std::vector<RefTensor<float>> args32 = reference::makeArgs<float>(g, 7);
    std::vector<RefTensor<double>> args64 = reference::makeArgs<double>(g, 7);
    if (!c.values.empty()) {
      args32 = {makeTensor<float>({c.type, c.values})};
      args64 = {makeTensor<double>({c.type, c.values})};
    }
    expectSameOutputs<float>(g, args32, 1e-5);
    expectSameOutputs<double>(g, args64, 1e-12);
  }
}

// Every op with a decomposition has a case above, except the fused ops (several operands and
// results), whose decompositions tests/ir/fused_decompose_test.cc checks, and the region op
// (inlining its body), which tests/ir/region_test.cc checks.
TEST(OpDecompose, EveryDecompositionIsTested) {
  std::set<OpKind> tested = {OpKind::Attention, OpKind::LayerNorm, OpKind::RmsNorm, OpKind::Fusion};
  for (const DecomposeCase &c : decomposeCases())
    tested.insert(c.op);
  for (const OpInfo *op : allOps())
    if (op->decompose != nullptr) {
      EXPECT_TRUE(tested.count(op->kind)) << op->mnemonic << " has a decomposition but no case";
    }
}

// A decomposition may be handed a node of the graph it appends to (the natural call in a pass),
// and its nodes keep the node's location and, for a backward node, its forward node.
TEST(OpDecompose, AcceptsANodeOfTheSameGraph) {
  for (OpKind op :
       {OpKind::Sigmoid, OpKind::Silu, OpKind::ReduceMean, OpKind::Softmax, OpKind::LogSoftmax}) {
    SCOPED_TRACE(std::string(mnemonic(op)));
    Graph g;
    ValueId x = g.addInput("x", f32t({2, 3}));
    Expected<NodeId> fwd = g.addNode(OpKind::Exp, {x});
    Expected<NodeId> id = g.addNode(op, {g.result(*fwd)}, {}, SourceLoc{"models/test.cc", 9});
    ASSERT_TRUE(fwd && id);
    g.node(*id).gradOf = *fwd;
    Expected<std::vector<int32_t>> r = opInfo(op).decompose(g, g.node(*id));
    ASSERT_TRUE(r) << r.error().message;
    for (size_t n = *id + 1; n < g.nodes().size(); ++n) {
      EXPECT_EQ(g.node(n).loc, (SourceLoc{"models/test.cc", 9}));
      EXPECT_EQ(g.node(n).gradOf, *fwd);
    }
    EXPECT_EQ(g.type((*r)[0]), g.type(g.result(*id)));
  }
}

} // namespace
} // namespace kiln::ir::optest::ops_table_test
