// The DSL: diagnostics name the user's line (also from inside nn modules), scalars and -1
// resolve as documented, parameter names follow the module tree, and the nn building blocks
// compute what their papers say (checked with the reference interpreter).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "codegen/reference/interpreter.h"
#include "frontend/nn.h"
#include "tests/util/dsl_error.h"
#include "tests/util/ir_types.h"

namespace kiln::dsl_test {
namespace {

using frontend::Builder;
using frontend::Scope;
using frontend::Tensor;
using ir::DType;
using ir::f32t;
using ir::f64t;
using ir::Type;
using test_util::dslErrorOf;
namespace nn = frontend::nn;

constexpr std::string_view kThisFile = "tests/frontend/dsl_test.cc";

std::string at(int line) {
  return fmt::format("{}:{}: ", kThisFile, line);
}

bool startsWith(const std::string &s, const std::string &prefix) {
  return s.rfind(prefix, 0) == 0;
}

// The IR's own inference message for `kind` on these operand types.
std::string inferError(ir::OpKind kind, std::vector<Type> operands,
                       std::initializer_list<ir::AttrInit> attrs = {}) {
  ir::Attrs a(ir::opInfo(kind).attrs);
  for (const ir::AttrInit &init : attrs)
    EXPECT_TRUE(a.set(init.first, init.second).ok());
  Expected<std::vector<Type>> t = ir::inferTypes(kind, operands, a);
  return t.ok() ? "<inferred>" : t.error().message;
}

std::vector<std::string> paramNames(const ir::Graph &g) {
  std::vector<std::string> names;
  for (const ir::Arg &a : g.args())
    if (a.kind == ir::Arg::Kind::Param)
      names.push_back(a.name);
  return names;
}

// ---- Diagnostics ----

TEST(DslErrors, SourcePathsAreRepositoryRelative) {
  EXPECT_EQ(std::source_location::current().file_name(), kThisFile);
}

TEST(DslErrors, MatmulShapeMistakeNamesThisLine) {
  Builder b;
  Tensor x = b.input("x", f32t({8, 128, 384}));
  Tensor w = b.param("w", {256, 1152}, nn::normalInit());
  int line = 0;
  std::string msg = dslErrorOf([&] { (line = __LINE__, x.matmul(w)); });
  std::string detail = inferError(ir::OpKind::Matmul, {x.type(), w.type()});
  EXPECT_EQ(msg, at(line) + "matmul: " + detail);
  EXPECT_NE(detail.find("inner dimensions differ"), std::string::npos) << detail;
}

TEST(DslErrors, BinaryOperatorNamesTheExpressionLine) {
  Builder b;
  Tensor x = b.input("x", f32t({2, 3}));
  Tensor y = b.input("y", f32t({4}));
  int line = 0;
  std::string msg = dslErrorOf([&] { (line = __LINE__, x + y); });
  EXPECT_EQ(msg, at(line) + "add: " + inferError(ir::OpKind::Add, {x.type(), y.type()}));
  EXPECT_NE(msg.find("do not broadcast"), std::string::npos) << msg;
}

// A Tensor of another Builder, or an empty one (default-constructed), is refused at the line that
// uses it. Its value id named another value of this graph (a foreign weight silently became the
// embedding), or an empty operand was read as the scalar 0, an assertion, or a null dereference.
TEST(DslErrors, ATensorOfAnotherBuilderOrAnEmptyOneNamesTheLine) {
  Builder b("mine"), other("other");
  Tensor x = b.input("x", f32t({2, 4}));
  (void)b.param("embed", {4, 4}, nn::normalInit());
  (void)other.input("dummy", f32t({1}));
  Tensor foreign = other.param("head", {4, 4}, nn::normalInit());
  const std::string another = "an operand is a value of another Builder, not of graph @mine (a "
                              "Tensor belongs to the Builder that made it)";
  const std::string empty =
      "an operand is an empty Tensor (default-constructed, never given a value)";
  // Each mistake with the line that makes it and the error expected there.
  const std::vector<std::tuple<std::function<void(int &)>, std::string>> cases = {
      {[&](int &line) { (line = __LINE__, x.matmul(foreign)); }, "matmul: " + another},
      {[&](int &line) { (line = __LINE__, b.output("y", foreign)); }, "output: " + another},
      {[&](int &line) { (line = __LINE__, x.matmul(Tensor())); }, "matmul: " + empty},
      {[&](int &line) { (line = __LINE__, x + Tensor()); }, "add: " + empty},
      {[&](int &line) { (line = __LINE__, frontend::where(x.gt(0), x, Tensor())); },
       "select: " + empty},
      {[&](int &line) { (line = __LINE__, b.output("z", Tensor())); }, "output: " + empty},
      {[&](int &line) { (line = __LINE__, Tensor().exp()); },
       "an empty Tensor (default-constructed, never given a value) is used"},
  };
  for (const auto &[make, expected] : cases) {
    int line = 0;
    const std::string message = dslErrorOf([&] { make(line); });
    EXPECT_EQ(message, at(line) + expected);
  }
}

// Values the graph would take without complaint and compute wrong with: a negative range (or a
// range of a float input), a norm's negative or NaN eps (NaN rows), a graph with no output.
TEST(DslErrors, RangesEpsAndAGraphWithoutOutputsNameTheLine) {
  Builder b("g");
  const frontend::Scope scope(b);
  const std::string badRange = "a range is positive, and only an integer input has one";
  const std::vector<std::tuple<std::function<void(int &)>, std::string>> cases = {
      {[&](int &line) {
         (line = __LINE__, b.input("ids", Type{DType::I64, {2}}, -5));
       },
       "input: \"ids\": range -5: " + badRange},
      {[&](int &line) { (line = __LINE__, b.input("x", f32t({2}), 10)); },
       "input: \"x\": range 10: " + badRange},
      {[&](int &line) { (line = __LINE__, nn::LayerNorm(scope.child("ln"), 4, -1e-5)); },
       "LayerNorm: eps -1e-05 must be finite and >= 0"},
      {[&](int &line) { (line = __LINE__, nn::RMSNorm(scope.child("rms"), 4, std::nan(""))); },
       "RMSNorm: eps nan must be finite and >= 0"},
      {[&](int &line) { (line = __LINE__, b.finish()); },
       "finish: the graph has no outputs: give it one with output() or loss()"},
  };
  for (const auto &[make, expected] : cases) {
    int line = 0;
    const std::string message = dslErrorOf([&] { make(line); });
    EXPECT_EQ(message, at(line) + expected);
  }
  // eps 0 is allowed, as PyTorch's.
  EXPECT_EQ(dslErrorOf([&] { nn::LayerNorm(scope.child("ln0"), 4, 0.0); }), "<no error>");
}

TEST(DslErrors, DtypeMistakes) {
  Builder b;
  Tensor x = b.input("x", f32t({2}));
  Tensor y = b.input("y", f64t({2}));
  Tensor ids = b.input("ids", Type{DType::I64, {2}});
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, x * y); });
  EXPECT_EQ(msg, at(line) + "mul: operand dtypes differ: f32[2] vs f64[2] (insert a cast)");
  msg = dslErrorOf([&] { (line = __LINE__, ids.exp()); });
  EXPECT_EQ(msg, at(line) + "exp: operand has dtype i64, expected a float dtype (f32, f64, bf16)");
  // A scalar on the left takes the tensor's dtype, so the failure is the op's, not the scalar's.
  msg = dslErrorOf([&] { (line = __LINE__, 1.0 / ids); });
  EXPECT_EQ(msg, at(line) + "div: " + inferError(ir::OpKind::Div, {ids.type(), ids.type()}));
  msg = dslErrorOf([&] { (line = __LINE__, -ids.ne(0)); });
  EXPECT_EQ(msg, at(line) + "neg: operand has dtype bool, expected a numeric dtype (not bool)");
}

TEST(DslErrors, MistakeInsideAModuleStartsWithTheCallersLine) {
  Builder b;
  nn::Linear proj(Scope(b).child("proj"), 8, 4);
  Tensor x = b.input("x", f32t({2, 5}));
  int line = 0;
  std::string msg = dslErrorOf([&] { (line = __LINE__, proj(x)); });
  std::string prefix = at(line) + "in proj: frontend/nn_layers.cc:";
  EXPECT_TRUE(startsWith(msg, prefix)) << msg;
  std::string detail =
      inferError(ir::OpKind::Matmul, {x.type(), proj.weight.type()}, {{"transpose_b", true}});
  EXPECT_NE(msg.find(": matmul: " + detail), std::string::npos) << msg;
}

TEST(DslErrors, NestedModulesNameTheInnermostAndStartAtTheUser) {
  Builder b;
  nn::BlockOptions opts{.dModel = 16, .nHeads = 2, .dFF = 32, .norm = nn::NormPlacement::Post};
  nn::EncoderLayer layer(Scope(b).child("blocks").child(0), opts);
  Tensor x = b.input("x", f32t({2, 4, 12})); // width 12, the layer expects 16
  int line = 0;
  std::string msg = dslErrorOf([&] { (line = __LINE__, layer(x)); });
  EXPECT_TRUE(startsWith(msg, at(line) + "in blocks.0.attn.q_proj: frontend/nn_layers.cc:")) << msg;
  EXPECT_NE(msg.find(": matmul: inner dimensions differ"), std::string::npos) << msg;
}

TEST(DslErrors, HelperFunctionsReportLikeModules) {
  Builder b;
  Tensor x = b.input("x", f32t({1, 2, 3, 5})); // odd head dimension
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, nn::applyRope(x)); });
  EXPECT_EQ(msg, at(line) + "rope: the head dimension 5 must be even");
  msg = dslErrorOf([&] { (line = __LINE__, nn::applyRope(x, 10000, 3)); });
  EXPECT_EQ(msg, at(line) + "rope: positionAxis 3 must be 2 ([B, H, T, D]) or 1 ([B, T, H, D])");
  Tensor even = b.input("even", f32t({1, 2, 3, 4}));
  msg = dslErrorOf([&] {
    (line = __LINE__, nn::applyRope(even, nn::Rope(10000, nn::RopeScaling{.lowFreqFactor = 4})));
  });
  EXPECT_EQ(msg, at(line) + "rope: scaling: expected finite frequency factors 0 < low < high, "
                            "got low 4 and high 4");
}

TEST(DslErrors, FramesUnwindAfterAnError) {
  Builder b;
  nn::Linear proj(Scope(b).child("proj"), 8, 4);
  Tensor x = b.input("x", f32t({2, 5}));
  EXPECT_NE(dslErrorOf([&] { proj(x); }), "<no error>");
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, x + b.input("y", f32t({3}))); });
  EXPECT_EQ(msg, at(line) + "add: " + inferError(ir::OpKind::Add, {f32t({2, 5}), f32t({3})}));
}

TEST(DslErrors, ModuleConfigurationMistakes) {
  Builder b;
  nn::AttentionOptions oddWidth{.dModel = 30, .nHeads = 4};
  nn::AttentionOptions oddKv{.dModel = 32, .nHeads = 4, .nKvHeads = 3};
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, nn::MultiHeadAttention(Scope(b), oddWidth)); });
  EXPECT_EQ(msg, at(line) + "attention: d_model 30 is not divisible by n_heads 4");
  msg = dslErrorOf([&] { (line = __LINE__, nn::MultiHeadAttention(Scope(b), oddKv)); });
  EXPECT_EQ(msg, at(line) + "attention: n_heads 4 is not divisible by n_kv_heads 3");
}

TEST(DslErrors, HelperArgumentMistakes) {
  Builder b;
  Tensor x = b.input("x", f32t({2, 3}));
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, nn::activate(x, nn::Activation::SwiGLU)); });
  EXPECT_EQ(msg, at(line) + "activate: swiglu is gated, not a per-element activation");
  msg = dslErrorOf([&] { (line = __LINE__, nn::activate(x, nn::Activation::GeGLU)); });
  EXPECT_EQ(msg, at(line) + "activate: geglu is gated, not a per-element activation");
  msg = dslErrorOf([&] { (line = __LINE__, nn::alibiBias(b, 0, 2, 2, false, DType::F32)); });
  EXPECT_EQ(msg, at(line) + "alibi: expected at least one head, got 0");
}

TEST(DslErrors, DuplicateParameterNamesAreRejected) {
  Builder b;
  nn::Linear first(Scope(b).child("fc"), 4, 4);
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, nn::Linear(Scope(b).child("fc"), 4, 4)); });
  EXPECT_EQ(msg, at(line) + "parameter: the name \"fc.weight\" is empty or used twice");
}

// ---- Parameter names ----

TEST(DslNames, ParameterNamesFollowTheModuleTree) {
  Builder b;
  nn::BlockOptions opts{.dModel = 16,
                        .nHeads = 4,
                        .nKvHeads = 2,
                        .dFF = 32,
                        .normKind = nn::NormKind::RMSNorm,
                        .activation = nn::Activation::SwiGLU,
                        .bias = false,
                        .position = nn::PositionKind::Relative,
                        .relativeK = 2};
  nn::EncoderLayer layer(Scope(b).child("blocks").child(3), opts);
  std::vector<std::string> want = {"blocks.3.ln1.weight",
                                   "blocks.3.attn.q_proj.weight",
                                   "blocks.3.attn.k_proj.weight",
                                   "blocks.3.attn.v_proj.weight",
                                   "blocks.3.attn.o_proj.weight",
                                   "blocks.3.attn.relative_key.weight",
                                   "blocks.3.attn.relative_value.weight",
                                   "blocks.3.ln2.weight",
                                   "blocks.3.mlp.gate_proj.weight",
                                   "blocks.3.mlp.up_proj.weight",
                                   "blocks.3.mlp.down_proj.weight"};
  EXPECT_EQ(paramNames(b.graph()), want);
  auto typeOf = [&](std::string_view name) {
    return b.graph().type(b.graph().findArg(name)->value);
  };
  EXPECT_EQ(typeOf("blocks.3.attn.q_proj.weight"), f32t({16, 16}));
  EXPECT_EQ(typeOf("blocks.3.attn.k_proj.weight"), f32t({8, 16}));      // 2 kv heads of width 4
  EXPECT_EQ(typeOf("blocks.3.attn.relative_key.weight"), f32t({5, 4})); // distances -2..2
  EXPECT_EQ(typeOf("blocks.3.mlp.gate_proj.weight"), f32t({32, 16}));
  EXPECT_EQ(b.graph().findArg("blocks.3.ln1.weight")->init.kind, ir::ParamInit::Kind::Ones);
  EXPECT_EQ(b.graph().findArg("blocks.3.mlp.up_proj.weight")->init,
            (ir::ParamInit{ir::ParamInit::Kind::Normal, 0.02}));
}

TEST(DslNames, DecoderLayerAndDefaults) {
  Builder b("g", DType::F64);
  nn::DecoderLayer layer(Scope(b).child("decoder").child("blocks").child(0),
                         {.dModel = 8, .nHeads = 2, .dFF = 16, .activation = nn::Activation::Relu});
  std::vector<std::string> names = paramNames(b.graph());
  EXPECT_EQ(names.size(), 2u * 2 + 2 * 8 + 2 * 2 + 2u); // 3 norms, 2 x 4 projections, 2 fcs
  for (const char *name :
       {"decoder.blocks.0.ln1.bias", "decoder.blocks.0.self_attn.q_proj.bias",
        "decoder.blocks.0.cross_attn.o_proj.weight", "decoder.blocks.0.ln3.weight",
        "decoder.blocks.0.mlp.fc1.weight", "decoder.blocks.0.mlp.fc2.bias"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  EXPECT_EQ(b.graph().findArg("decoder.blocks.0.mlp.fc2.bias")->init.kind,
            ir::ParamInit::Kind::Zeros);
  EXPECT_EQ(b.graph().type(b.graph().findArg("decoder.blocks.0.ln2.weight")->value), f64t({8}));
}

// ---- Values, shapes and locations ----

TEST(DslTensor, NodesRecordTheCallLine) {
  Builder b;
  Tensor x = b.input("x", f32t({2, 3}));
  int line = __LINE__ + 1;
  Tensor y = x.exp() + 1.0;
  const ir::Graph &g = b.graph();
  ASSERT_EQ(g.nodes().size(), 3u); // exp, constant, add
  for (const ir::Node &n : g.nodes())
    EXPECT_EQ(n.loc, (ir::SourceLoc{std::string(kThisFile), static_cast<uint32_t>(line)}));
  EXPECT_EQ(y.type(), f32t({2, 3}));
}

// Inside modules, a node is at the line that called the outermost module (the model's, not the
// library's) and names the innermost module that made it.
TEST(DslTensor, NodesInModulesRecordTheCallersLineAndTheModule) {
  Builder b;
  Tensor x = b.input("x", f32t({1, 2, 4}));
  nn::EncoderLayer layer(Scope(b).child("blocks").child(0),
                         nn::BlockOptions{.dModel = 4, .nHeads = 2, .dFF = 8});
  int line = __LINE__ + 1;
  layer(x);
  std::set<std::string> scopes;
  for (const ir::Node &n : b.graph().nodes()) {
    EXPECT_EQ(n.loc.file, kThisFile);
    EXPECT_EQ(n.loc.line, static_cast<uint32_t>(line));
    scopes.insert(n.loc.scope);
  }
  for (const char *scope : {"blocks.0", "blocks.0.ln1", "blocks.0.attn", "blocks.0.attn.q_proj",
                            "blocks.0.mlp", "blocks.0.mlp.fc2"})
    EXPECT_EQ(scopes.count(scope), 1u) << scope;
}

TEST(DslTensor, ScalarsBecomeConstantsOfTheTensorsDtype) {
  Builder b;
  Tensor x = b.input("x", f64t({2, 3}));
  Tensor y = 2.0 - x * 0.5;
  const ir::Graph &g = b.graph();
  ASSERT_EQ(g.nodes().size(), 4u); // constant, mul, constant, sub
  const ir::Node &half = g.node(0);
  EXPECT_EQ(half.op, ir::OpKind::Constant);
  EXPECT_EQ(half.attrs.getFloat("value"), 0.5);
  EXPECT_EQ(half.attrs.getDType("dtype"), DType::F64);
  EXPECT_TRUE(half.attrs.getInts("shape").empty());
  const ir::Node &sub = g.node(3);
  EXPECT_EQ(sub.op, ir::OpKind::Sub);
  EXPECT_EQ(g.node(g.value(sub.operands[0]).def).attrs.getFloat("value"), 2.0); // 2 on the left
  EXPECT_EQ(y.type(), f64t({2, 3}));
  Tensor ids = b.input("ids", Type{DType::I64, {4}});
  Tensor keep = ids.ne(3);
  EXPECT_EQ(keep.type(), (Type{DType::Bool, {4}}));
  EXPECT_EQ(b.graph().type(b.graph().node(4).results[0]).dtype, DType::I64);
}

TEST(DslTensor, ReshapeResolvesOneMinusOne) {
  Builder b;
  Tensor x = b.input("x", f32t({2, 3, 4}));
  EXPECT_EQ(x.reshape({-1, 4}).shape(), (ir::Shape{6, 4}));
  EXPECT_EQ(x.reshape({2, -1}).shape(), (ir::Shape{2, 12}));
  EXPECT_EQ(x.reshape({-1}).shape(), (ir::Shape{24}));
  EXPECT_EQ(x.reshape({3, -1, 2}).shape(), (ir::Shape{3, 4, 2}));
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, x.reshape({-1, -1})); });
  EXPECT_EQ(msg, at(line) + "reshape: more than one -1 in [-1,-1]");
  msg = dslErrorOf([&] { (line = __LINE__, x.reshape({5, -1})); });
  EXPECT_EQ(msg, at(line) + "reshape: cannot reshape f32[2,3,4] (24 elements) into [5,-1]");
  // Known dims whose product overflows int64 are a diagnostic, not undefined behaviour.
  msg = dslErrorOf([&] { (line = __LINE__, x.reshape({int64_t{1} << 40, int64_t{1} << 40, -1})); });
  EXPECT_EQ(msg, at(line) + "reshape: cannot reshape f32[2,3,4] (24 elements) into "
                            "[1099511627776,1099511627776,-1]");
  msg = dslErrorOf([&] { (line = __LINE__, x.reshape({-2, -1})); });
  EXPECT_EQ(msg, at(line) + "reshape: negative dimension in [-2,-1]");
}

TEST(DslErrors, TensorsPastTheSizeLimitNameTheLine) {
  Builder b;
  int line = __LINE__ + 1;
  std::string msg = dslErrorOf([&] { b.param("w", {int64_t{1} << 20, int64_t{1} << 19}, {}); });
  EXPECT_EQ(msg, at(line) + "parameter: \"w\": type f32[1048576,524288] needs 2.0 TiB, over the "
                            "limit of 1.0 TiB per tensor");
  line = __LINE__ + 1;
  msg = dslErrorOf([&] { b.input("x", f32t({int64_t{1} << 62, 4})); });
  EXPECT_EQ(msg, at(line) + "input: \"x\": type f32[4611686018427387904,4] needs 64.0 EiB, over "
                            "the limit of 1.0 TiB per tensor");
  Tensor small = b.input("y", f32t({1}));
  line = __LINE__ + 1;
  msg = dslErrorOf([&] { small.broadcastTo({int64_t{1} << 30, int64_t{1} << 30}); });
  EXPECT_EQ(msg, at(line) + "broadcast: result 0: type f32[1073741824,1073741824] needs 4.0 EiB, "
                            "over the limit of 1.0 TiB per tensor");
}

TEST(DslTensor, DataMovementShapes) {
  Builder b;
  Tensor x = b.input("x", f32t({2, 3, 4}));
  EXPECT_EQ(x.transpose(0, -1).shape(), (ir::Shape{4, 3, 2}));
  EXPECT_EQ(x.permute({1, 2, 0}).shape(), (ir::Shape{3, 4, 2}));
  EXPECT_EQ(x.slice(-1, 1, -1).shape(), (ir::Shape{2, 3, 2}));
  EXPECT_EQ(x.slice(1, 0, 3, 2).shape(), (ir::Shape{2, 2, 4}));
  EXPECT_EQ(x.unsqueeze(1).shape(), (ir::Shape{2, 1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (ir::Shape{2, 3, 4, 1}));
  EXPECT_EQ(x.unsqueeze(0).squeeze(0).shape(), (ir::Shape{2, 3, 4}));
  EXPECT_EQ(x.broadcastTo({5, 2, 3, 4}).shape(), (ir::Shape{5, 2, 3, 4}));
  EXPECT_EQ(frontend::concat({x, x}, 1).shape(), (ir::Shape{2, 6, 4}));
  EXPECT_EQ(x.sum({-1}, true).shape(), (ir::Shape{2, 3, 1}));
  EXPECT_EQ(x.mean({0, 2}).shape(), (ir::Shape{3}));
  EXPECT_EQ(x.max().shape(), (ir::Shape{}));
  EXPECT_EQ(x.dim(-2), 3);
  Tensor table = b.param("table", {10, 4}, nn::normalInit());
  Tensor ids = b.input("ids", Type{DType::I64, {2, 5}});
  EXPECT_EQ(table.gather(ids).shape(), (ir::Shape{2, 5, 4}));
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, x.squeeze(1)); });
  EXPECT_EQ(msg, at(line) + "squeeze: dimension 1 of f32[2,3,4] is 3, expected 1");
  msg = dslErrorOf([&] { (line = __LINE__, x.dim(3)); });
  EXPECT_EQ(msg, at(line) + "dim: axis 3 is out of range for rank 3 (operand f32[2,3,4])");
}

TEST(DslTensor, ElementwiseReductionAndConversionTypes) {
  Builder b;
  Tensor x = b.input("x", f32t({2, 3}));
  Tensor ids = b.input("ids", Type{DType::I64, {2, 3}});
  for (Tensor y : {x.exp(),
                   x.log(),
                   x.sqrt(),
                   x.rsqrt(),
                   x.tanh(),
                   x.sigmoid(),
                   x.relu(),
                   x.gelu(),
                   x.geluTanh(),
                   x.silu(),
                   x.sin(),
                   x.cos(),
                   x.abs(),
                   x.softmax(),
                   x.logSoftmax(0),
                   x.maximum(0.0),
                   x.minimum(x),
                   x.pow(2.0),
                   x.clamp(-1, 1),
                   frontend::exp(x),
                   frontend::relu(x),
                   frontend::softmax(x, 0),
                   x / 3.0})
    EXPECT_EQ(y.type(), f32t({2, 3}));
  for (Tensor m : {x.eq(x), x.ne(0.0), x.lt(1.0), x.le(x), x.gt(x), x.ge(2.0), ids.eq(ids),
                   !x.gt(0.0), x.gt(0.0) & x.lt(1.0), x.gt(0.0) | x.lt(1.0)})
    EXPECT_EQ(m.type(), (Type{DType::Bool, {2, 3}}));
  EXPECT_EQ(ids.cast(DType::F64).type(), f64t({2, 3}));
  EXPECT_EQ((ids + 1).type(), (Type{DType::I64, {2, 3}}));
  EXPECT_EQ(frontend::matmul(x, x, {.transposeB = true}).shape(), (ir::Shape{2, 2}));
  EXPECT_EQ(x.matmul(x, {.transposeA = true}).shape(), (ir::Shape{3, 3}));
  Tensor acc = x;
  acc += x;
  acc *= 2.0;
  acc -= 1.0;
  acc /= x;
  EXPECT_EQ(acc.type(), f32t({2, 3}));
  int line = 0;
  std::string msg = dslErrorOf([&] { (line = __LINE__, frontend::concat({}, 0)); });
  EXPECT_EQ(msg, at(line) + "concat: expected at least one operand");
}

TEST(DslTensor, WhereTakesAScalarBranchInTheTensorsDtype) {
  Builder b;
  Tensor x = b.input("x", Type{DType::BF16, {2, 3}});
  Tensor keep = b.tri({3, 3});
  Tensor y = frontend::where(keep, x.unsqueeze(1), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(y.type(), (Type{DType::BF16, {2, 3, 3}}));
  const ir::Graph &g = b.graph();
  const ir::Node &select = g.nodes().back();
  ASSERT_EQ(select.op, ir::OpKind::Select);
  const ir::Node &c = g.node(g.value(select.operands[2]).def);
  EXPECT_EQ(c.op, ir::OpKind::Constant);
  EXPECT_EQ(c.attrs.getFloat("value"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(c.attrs.getDType("dtype"), DType::BF16);
  int line = 0;
  std::string msg;
  msg = dslErrorOf([&] { (line = __LINE__, frontend::where(keep, 1.0, 0.0)); });
  EXPECT_EQ(msg, at(line) + "select: at least one branch must be a tensor (for its dtype)");
}

TEST(DslTensor, DropoutOfZeroAddsNothingAndNodesGetDistinctStreams) {
  Builder b("g", DType::F32, /*seed=*/7);
  Tensor x = b.input("x", f32t({4}));
  EXPECT_EQ(x.dropout(0).id(), x.id());
  EXPECT_TRUE(b.graph().nodes().empty());
  x.dropout(0.1);
  x.dropout(0.1);
  x.dropout(0.5, 42);
  ASSERT_EQ(b.graph().nodes().size(), 3u);
  EXPECT_EQ(b.graph().node(0).attrs.getInt("seed"), 7);
  EXPECT_EQ(b.graph().node(1).attrs.getInt("seed"), 8);
  EXPECT_EQ(b.graph().node(2).attrs.getInt("seed"), 42);
  EXPECT_EQ(b.graph().node(2).attrs.getFloat("p"), 0.5);
}

} // namespace
} // namespace kiln::dsl_test
