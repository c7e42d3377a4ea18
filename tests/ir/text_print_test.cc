// The IR text form: the printer's exact output, and print(parse(print(g))) == print(g) over every
// op in ir/ops.def and every attribute kind, special float values, escapes and initialisers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/parser.h"
#include "ir/printer.h"
#include "tests/util/ir_types.h"

namespace kiln::ir::text_print_test {
namespace {

NodeId mustAdd(Graph &g, OpKind op, std::initializer_list<ValueId> operands,
               std::initializer_list<AttrInit> attrs = {}, SourceLoc loc = {}) {
  Expected<NodeId> n = g.addNode(op, operands, attrs, std::move(loc));
  EXPECT_TRUE(n.ok()) << n.error().message;
  return n.ok() ? *n : 0;
}

// print(parse(text)), or the parse errors.
std::string reprint(const std::string &text) {
  ParseResult r = parseGraph(text);
  if (!r.graph) {
    std::string all = "parse failed:";
    for (const Error &e : r.errors)
      all += "\n" + e.message;
    return all;
  }
  return print(*r.graph);
}

TEST(TextPrint, CanonicalForm) {
  Graph g("gpt");
  ValueId tokens = g.addInput("tokens", T(i64, {2, 16}), 256);
  ValueId wte = g.addParam("wte.weight", T(f32, {256, 64}), {ParamInit::Kind::Normal, 0.02});
  NodeId emb = mustAdd(g, OpKind::Gather, {wte, tokens}, {}, {"models/gpt.cc", 42});
  NodeId mean =
      mustAdd(g, OpKind::ReduceMean, {g.result(emb)},
              {{"axes", std::vector<int64_t>{-1}}, {"keepdims", true}}, {"models/gpt.cc", 43});
  mustAdd(
      g, OpKind::Constant, {},
      {{"value", -std::numeric_limits<double>::infinity()}, {"shape", std::vector<int64_t>{2, 2}}});
  NodeId sum = mustAdd(g, OpKind::Add, {g.result(emb), g.result(mean)}, {}, {"models/gpt.cc", 44});
  g.node(sum).gradOf = mean;
  g.addOutput("logits", g.result(sum));
  const std::string want = R"(graph @gpt {
  %0 = input "tokens" range(256) : i64[2,16]
  %1 = param "wte.weight" init normal(0.02) : f32[256,64]
  %2 = gather(%1, %0) : f32[2,16,64] loc("models/gpt.cc":42)
  %3 = reduce_mean(%2) {axes = [-1], keepdims = true} : f32[2,16,1] loc("models/gpt.cc":43)
  %4 = constant() {value = -inf, shape = [2,2]} : f32[2,2]
  %5 = add(%2, %3) : f32[2,16,64] grad_of(%3) loc("models/gpt.cc":44)
  output "logits" = %5
}
)";
  EXPECT_EQ(print(g), want);
  EXPECT_EQ(reprint(want), want);
}

TEST(TextPrint, ArgumentsAreNumberedFirstWhateverTheBuildOrder) {
  Graph g("g");
  ValueId x = g.addInput("x", T(f32, {3}));
  NodeId e = mustAdd(g, OpKind::Exp, {x});
  ValueId w = g.addParam("w", T(f32, {3})); // a value id after the node's result
  NodeId m = mustAdd(g, OpKind::Mul, {g.result(e), w});
  g.addOutput("y", g.result(m));
  EXPECT_EQ(print(g), R"(graph @g {
  %0 = input "x" : f32[3]
  %1 = param "w" init zeros : f32[3]
  %2 = exp(%0) : f32[3]
  %3 = mul(%2, %1) : f32[3]
  output "y" = %3
}
)");
}

TEST(TextPrint, AttributesAtTheirDefaultAreLeftOutButRequiredOnesNot) {
  Graph g("g");
  ValueId x = g.addInput("x", T(f32, {2, 8}));
  // keepdims = false and step = 1 are defaults; start = 0 is required, so it is shown.
  NodeId r = mustAdd(g, OpKind::ReduceSum, {x}, {{"keepdims", false}});
  NodeId s = mustAdd(
      g, OpKind::Slice, {x},
      {{"axis", int64_t{1}}, {"start", int64_t{0}}, {"end", int64_t{4}}, {"step", int64_t{1}}});
  g.addOutput("r", g.result(r));
  g.addOutput("s", g.result(s));
  std::string text = print(g);
  EXPECT_THAT(text, ::testing::HasSubstr("  %1 = reduce_sum(%0) : f32[]\n"));
  EXPECT_THAT(text,
              ::testing::HasSubstr("  %2 = slice(%0) {axis = 1, start = 0, end = 4} : f32[2,4]\n"));
  EXPECT_EQ(reprint(text), text);
}

TEST(TextPrint, MultiResultNodesListTheirResultsAndTypes) {
  // No op has two results yet; the printer's form for them is fixed all the same.
  Graph g("g");
  ValueId x = g.addInput("x", T(f32, {2}));
  Type t = T(f32, {2});
  Type ts[] = {t, T(i64, {2})};
  NodeId n = g.addNodeUnchecked(OpKind::Neg, {x}, Attrs(), ts);
  g.addOutput("a", g.node(n).results[1]);
  EXPECT_THAT(print(g), ::testing::HasSubstr("  %1, %2 = neg(%0) : f32[2], i64[2]\n"));
  EXPECT_THAT(print(g), ::testing::HasSubstr("  output \"a\" = %2\n"));
}

TEST(TextPrint, BrokenGraphsStillPrint) {
  Graph g("g");
  ValueId x = g.addInput("x", T(f32, {2}));
  Type t = T(f32, {2});
  NodeId n = g.addNodeUnchecked(OpKind::Add, {x, 42}, Attrs(), std::span(&t, 1));
  g.node(n).gradOf = 7;
  g.addOutput("y", -1);
  std::string text = print(g);
  EXPECT_THAT(text,
              ::testing::HasSubstr("%1 = add(%0, %invalid.42) : f32[2] grad_of(%invalid.n1)"));
  EXPECT_THAT(text, ::testing::HasSubstr("output \"y\" = %invalid.n1"));
  EXPECT_THAT(reprint(text), ::testing::HasSubstr("value %invalid.42 is not defined"));
}

TEST(TextRoundTrip, StringsAndNamesAreEscaped) {
  Graph g("my graph \"v2\"");
  ValueId x = g.addInput("a\"b\\c\nd\te\x01", T(f32, {2}));
  ValueId w = g.addParam("blocks.0.attn.qkv.weight", T(f32, {2}));
  NodeId n = mustAdd(g, OpKind::Add, {x, w}, {}, {"dir with \"quote\"/f.cc", 7});
  g.addOutput("out \\ put", g.result(n));
  std::string text = print(g);
  EXPECT_THAT(text, ::testing::HasSubstr("graph @\"my graph \\\"v2\\\"\" {\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("input \"a\\\"b\\\\c\\nd\\te\\x01\" : f32[2]"));
  EXPECT_THAT(text, ::testing::HasSubstr("loc(\"dir with \\\"quote\\\"/f.cc\":7)"));
  ParseResult r = parseGraph(text);
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  EXPECT_EQ(r.graph->name(), g.name());
  EXPECT_EQ(r.graph->args()[0].name, g.args()[0].name);
  EXPECT_EQ(r.graph->nodes()[0].loc, g.nodes()[0].loc);
  EXPECT_EQ(r.graph->outputs()[0].name, "out \\ put");
  EXPECT_EQ(print(*r.graph), text);
}

TEST(TextRoundTrip, EveryInitializer) {
  Graph g("g");
  const ParamInit inits[] = {{ParamInit::Kind::Zeros, 0},
                             {ParamInit::Kind::Ones, 0},
                             {ParamInit::Kind::Normal, 0.02},
                             {ParamInit::Kind::Uniform, 0.125},
                             {ParamInit::Kind::XavierUniform, 1.0}};
  for (const ParamInit &init : inits)
    g.addOutput(paramInitString(init), g.addParam("p" + paramInitString(init), T(f32, {1}), init));
  std::string text = print(g);
  EXPECT_THAT(text, ::testing::HasSubstr("init xavier_uniform(1.0) : f32[1]"));
  ParseResult r = parseGraph(text);
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  for (size_t i = 0; i < std::size(inits); ++i)
    EXPECT_EQ(r.graph->args()[i].init, inits[i]) << i;
  EXPECT_EQ(print(*r.graph), text);
}

// Every output role and every argument domain prints, parses back to the same fields, and prints
// the same again.
TEST(TextRoundTrip, EveryOutputRoleAndDomain) {
  Graph g("g");
  ValueId x = g.addInput("x", T(f32, {4}));
  ValueId w = g.addParam("w", T(f32, {4}), {ParamInit::Kind::Normal, 0.5});
  ValueId m = g.addState("m", T(f32, {4}), {}, Domain::NonNegative);
  ValueId s = g.addState("step", T(f32, {}), {}, Domain::Count);
  ValueId y = g.result(mustAdd(g, OpKind::Mul, {x, w}));
  ValueId l = g.result(mustAdd(g, OpKind::ReduceSum, {y}));
  g.addOutput("y", y);
  g.addOutput("loss", l, OutputRole::Loss);
  g.addOutput("grad.w", y, OutputRole::Gradient, 1);
  g.addOutput("grad.x", y, OutputRole::Gradient, 0);
  g.addOutput("new.w", y, OutputRole::Update, 1);
  g.addOutput("new.m", m, OutputRole::Update, 2);
  g.addOutput("new.step", s, OutputRole::Update, 3);
  ASSERT_TRUE(verify(g).empty()) << verify(g).front().message;
  std::string text = print(g);
  EXPECT_THAT(text, ::testing::HasSubstr("state \"step\" init zeros domain(count) : f32[]"));
  EXPECT_THAT(text, ::testing::HasSubstr("output \"loss\" = %5 loss\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("output \"grad.x\" = %4 gradient(\"x\")\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("output \"new.m\" = %2 update(\"m\")\n"));
  ParseResult r = parseGraph(text);
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  ASSERT_EQ(r.graph->outputs().size(), g.outputs().size());
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    EXPECT_EQ(r.graph->outputs()[i].role, g.outputs()[i].role) << i;
    EXPECT_EQ(r.graph->outputs()[i].arg, g.outputs()[i].arg) << i;
  }
  for (size_t i = 0; i < g.args().size(); ++i)
    EXPECT_EQ(r.graph->args()[i].domain, g.args()[i].domain) << i;
  EXPECT_EQ(print(*r.graph), text);
}

// Roles made through the API are checked by the verifier as the parser checks written ones.
TEST(OutputRoles, TheVerifierChecksEachRole) {
  Graph g("g");
  ValueId x = g.addInput("x", T(f32, {4}));
  ValueId w = g.addParam("w", T(f32, {4}));
  ValueId y = g.result(mustAdd(g, OpKind::Mul, {x, w}));
  g.addOutput("loss", y, OutputRole::Loss);
  g.addOutput("grad.q", y, OutputRole::Gradient, 7);
  g.addOutput("new.x", y, OutputRole::Update, 0);
  g.addOutput("new.w", w, OutputRole::Update, 1);
  g.addOutput("new.w.again", y, OutputRole::Update, 1);
  g.addOutput("v", y, OutputRole::Value, 1);
  std::vector<std::string> got;
  for (const Error &e : verify(g))
    got.push_back(e.message);
  EXPECT_EQ(got,
            (std::vector<std::string>{
                "output \"loss\": the loss must be a float scalar, it is f32[4]",
                "output \"grad.q\": a gradient output names argument #7, which does not exist",
                "output \"new.x\": an update is of a parameter or state, but \"x\" is an input",
                "output \"new.w.again\": a second update of \"w\": an argument has at most one",
                "output \"v\": a value output names no argument"}));
}

// Floats survive the text bit for bit: the shortest round-trip form, and the special values.
TEST(TextRoundTrip, FloatAttributesKeepEveryBit) {
  const double values[] = {0.1,
                           -0.0,
                           1e-05,
                           1e+300,
                           5e-324,
                           std::numeric_limits<double>::max(),
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN(),
                           3.0};
  Graph g("g");
  for (double v : values) {
    NodeId n = mustAdd(g, OpKind::Constant, {}, {{"value", v}, {"dtype", f64}});
    g.addOutput("c" + std::to_string(n), g.result(n));
  }
  ParseResult r = parseGraph(print(g));
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  for (size_t i = 0; i < std::size(values); ++i) {
    double got = r.graph->nodes()[i].attrs.getFloat("value");
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(got)) << i;
    } else {
      EXPECT_EQ(got, values[i]) << i;
      EXPECT_EQ(std::signbit(got), std::signbit(values[i])) << i;
    }
  }
  EXPECT_EQ(print(*r.graph), print(g));
}

TEST(TextRoundTrip, ExtremeIntegers) {
  Graph g("g");
  ValueId x = g.addInput("x", T(f32, {4}));
  constexpr int64_t lo = std::numeric_limits<int64_t>::min(),
                    hi = std::numeric_limits<int64_t>::max();
  NodeId n = mustAdd(g, OpKind::Dropout, {x}, {{"p", 0.5}, {"seed", lo}});
  NodeId m = mustAdd(g, OpKind::Dropout, {g.result(n)}, {{"p", 0.0}, {"seed", hi}});
  g.addOutput("y", g.result(m));
  std::string text = print(g);
  EXPECT_THAT(text, ::testing::HasSubstr("seed = -9223372036854775808"));
  EXPECT_EQ(reprint(text), text);
}

// ---- Every op of ops.def, through print -> parse -> print. ----

struct OpExample {
  std::string_view mnemonic;
  std::vector<Type> operands;
  std::vector<AttrInit> attrs;
  Type result;
  std::string_view attrText;          // how the attributes print ("" = none shown)
  std::vector<Type> moreResults = {}; // the results after the first, of multi-result ops
};

std::vector<OpExample> opExamples() {
  using V = std::vector<int64_t>;
  Type x = T(f32, {2, 3});
  Type bx = T(b1, {2, 3});
  std::vector<OpExample> ex = {
      {"neg", {T(i32, {4})}, {}, T(i32, {4}), ""},
      {"abs", {T(f64, {4})}, {}, T(f64, {4}), ""},
      {"logical_not", {bx}, {}, bx, ""},
      {"add", {x, T(f32, {3})}, {}, x, ""},
      {"sub", {T(i64, {2, 1}), T(i64, {1, 5})}, {}, T(i64, {2, 5}), ""},
      {"mul", {T(bf16, {3}), T(bf16, {3})}, {}, T(bf16, {3}), ""},
      {"div", {T(f64, {2}), T(f64, {})}, {}, T(f64, {2}), ""},
      {"logical_and", {bx, bx}, {}, bx, ""},
      {"logical_or", {bx, T(b1, {})}, {}, bx, ""},
      {"eq", {T(i64, {3}), T(i64, {3})}, {}, T(b1, {3}), ""},
      {"ne", {bx, bx}, {}, bx, ""},
      {"select", {bx, x, T(f32, {1, 3})}, {}, x, ""},
      {"cast", {x}, {{"dtype", bf16}}, T(bf16, {2, 3}), " {dtype = bf16}"},
      {"dropout", {x}, {{"p", 0.1}, {"seed", int64_t{7}}}, x, " {p = 0.1, seed = 7}"},
      {"all_reduce", {x}, {{"ranks", int64_t{4}}}, x, " {ranks = 4}"},
      {"all_reduce_start", {x}, {{"ranks", int64_t{2}}}, x, " {ranks = 2}"},
      {"all_reduce_wait", {x}, {{"ranks", int64_t{2}}}, x, " {ranks = 2}"},
      {"reduce_scatter", {T(f32, {6})}, {{"ranks", int64_t{2}}}, T(f32, {3}), " {ranks = 2}"},
      {"all_gather", {T(f32, {3})}, {{"ranks", int64_t{2}}}, T(f32, {6}), " {ranks = 2}"},
      {"rank_chunk", {x, T(f32, {4})}, {{"ranks", int64_t{2}}}, T(f32, {5}), " {ranks = 2}"},
      {"reduce_sum",
       {T(f32, {2, 3, 4})},
       {{"axes", V{-1}}, {"keepdims", true}},
       T(f32, {2, 3, 1}),
       " {axes = [-1], keepdims = true}"},
      {"reduce_mean", {T(f32, {2, 3, 4})}, {{"axes", V{0, 2}}}, T(f32, {3}), " {axes = [0,2]}"},
      {"reduce_max", {T(i32, {2, 3})}, {}, T(i32, {}), ""},
      {"softmax", {x}, {{"axis", int64_t{0}}}, x, " {axis = 0}"},
      {"log_softmax", {x}, {}, x, ""},
      {"cross_entropy",
       {T(f32, {2, 3, 7}), T(i32, {2, 3})},
       {{"label_smoothing", 0.1}},
       T(f32, {2, 3}),
       " {label_smoothing = 0.1}",
       {T(f32, {2, 3})}},
      {"matmul",
       {T(f32, {2, 4, 3}), T(f32, {5, 3})},
       {{"transpose_b", true}},
       T(f32, {2, 4, 5}),
       " {transpose_b = true}"},
      {"reshape", {x}, {{"shape", V{3, 2}}}, T(f32, {3, 2}), " {shape = [3,2]}"},
      {"transpose",
       {T(f32, {2, 3, 4})},
       {{"perm", V{2, 0, 1}}},
       T(f32, {4, 2, 3}),
       " {perm = [2,0,1]}"},
      {"broadcast", {T(f32, {3})}, {{"shape", V{2, 3}}}, x, " {shape = [2,3]}"},
      {"slice",
       {T(f32, {2, 8})},
       {{"axis", int64_t{1}}, {"start", int64_t{1}}, {"end", int64_t{7}}, {"step", int64_t{2}}},
       x,
       " {axis = 1, start = 1, end = 7, step = 2}"},
      {"concat", {x, T(f32, {2, 5}), x}, {{"axis", int64_t{-1}}}, T(f32, {2, 11}), " {axis = -1}"},
      {"gather", {T(f32, {10, 4}), T(i64, {2, 3})}, {}, T(f32, {2, 3, 4}), ""},
      {"scatter_add",
       {T(i64, {2, 3}), T(f32, {2, 3, 4})},
       {{"size", int64_t{10}}},
       T(f32, {10, 4}),
       " {size = 10}"},
      {"update_slice",
       {T(f32, {2, 3, 8, 4}), T(f32, {2, 3, 1, 4}), T(i64, {2})},
       {{"axis", int64_t{2}}},
       T(f32, {2, 3, 8, 4}),
       " {axis = 2}"},
      {"pad",
       {x},
       {{"axis", int64_t{1}}, {"low", int64_t{1}}, {"high", int64_t{0}}, {"interior", int64_t{2}}},
       T(f32, {2, 8}),
       " {axis = 1, low = 1, high = 0, interior = 2}"},
      {"stop_gradient", {T(i64, {3})}, {}, T(i64, {3}), ""},
      {"constant", {}, {{"value", 3.0}, {"dtype", i32}}, T(i32, {}), " {value = 3.0, dtype = i32}"},
      {"iota",
       {},
       {{"shape", V{2, 5}}, {"axis", int64_t{1}}},
       T(i64, {2, 5}),
       " {shape = [2,5], axis = 1}"},
      {"tri",
       {},
       {{"shape", V{4, 4}}, {"diagonal", int64_t{-1}}, {"lower", false}, {"dtype", f32}},
       T(f32, {4, 4}),
       " {shape = [4,4], diagonal = -1, lower = false, dtype = f32}"},
      // Fused ops (ir/ops/fused.h): multi-result, optional operands and results.
      {"attention",
       {T(f32, {1, 4, 3, 8}), T(f32, {1, 2, 5, 8}), T(f32, {1, 2, 5, 6}), T(b1, {1, 1, 3, 5})},
       {{"scale", 0.25},
        {"causal", true},
        {"q_heads", int64_t{4}},
        {"kv_heads", int64_t{2}},
        {"has_mask", true}},
       T(f32, {1, 4, 3, 6}),
       " {scale = 0.25, causal = true, q_heads = 4, kv_heads = 2, has_mask = true}",
       {T(f32, {1, 4, 3})}},
      {"attention_backward",
       {T(f64, {1, 2, 3, 4}), T(f64, {1, 1, 3, 4}), T(f64, {1, 1, 3, 4}), T(f64, {1, 2, 3, 4}),
        T(f64, {1, 2, 3}), T(f64, {1, 2, 3, 4}), T(f64, {3, 3})},
       {{"scale", 0.5}, {"q_heads", int64_t{2}}, {"kv_heads", int64_t{1}}, {"has_bias", true}},
       T(f64, {1, 2, 3, 4}),
       " {scale = 0.5, q_heads = 2, kv_heads = 1, has_bias = true}",
       {T(f64, {1, 1, 3, 4}), T(f64, {1, 1, 3, 4}), T(f64, {3, 3})}},
      {"layer_norm",
       {T(f32, {2, 3, 8}), T(f32, {8}), T(f32, {8})},
       {},
       T(f32, {2, 3, 8}),
       "",
       {T(f32, {2, 3}), T(f32, {2, 3})}},
      {"layer_norm_backward",
       {T(bf16, {4, 8}), T(f32, {4}), T(f32, {4}), T(bf16, {4, 8})},
       {{"has_weight", false}},
       T(bf16, {4, 8}),
       " {has_weight = false}"},
      {"rms_norm",
       {T(bf16, {2, 8})},
       {{"eps", 1e-05}, {"has_weight", false}},
       T(bf16, {2, 8}),
       " {eps = 1e-05, has_weight = false}",
       {T(f32, {2})}},
      {"rms_norm_backward",
       {T(f64, {2, 8}), T(f64, {2}), T(f64, {2, 8}), T(f64, {8})},
       {},
       T(f64, {2, 8}),
       "",
       {T(f64, {8})}},
      {"add_layer_norm",
       {T(f32, {2, 3, 8}), T(f32, {8}), T(f32, {8})},
       {{"eps", 1e-06}, {"has_bias", false}},
       T(f32, {2, 3, 8}),
       " {eps = 1e-06, has_bias = false}",
       {T(f32, {2, 3, 8}), T(f32, {2, 3}), T(f32, {2, 3})}},
      {"add_rms_norm",
       {T(f32, {2, 8}), T(f32, {2, 8}), T(f32, {8})},
       {},
       T(f32, {2, 8}),
       "",
       {T(f32, {2, 8}), T(f32, {2})}},
  };
  // The remaining unary and binary float ops and comparisons share one shape of example.
  for (std::string_view m :
       {"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "gelu_grad",
        "gelu_tanh_grad", "silu", "silu_grad", "softplus", "sin", "cos", "erf"})
    ex.push_back({m, {x}, {}, x, ""});
  for (std::string_view m : {"max", "min", "pow"})
    ex.push_back({m, {x, x}, {}, x, ""});
  for (std::string_view m : {"lt", "le", "gt", "ge"})
    ex.push_back({m, {x, T(f32, {})}, {}, bx, ""});
  return ex;
}

// The region op's body is a nested graph, not a one-line attribute: tests/ir/region_test.cc
// round-trips it.
TEST(TextRoundTrip, ExamplesCoverEveryOp) {
  std::vector<OpExample> ex = opExamples();
  for (const OpInfo *op : allOps()) {
    if (op->kind == OpKind::Fusion)
      continue;
    int count = 0;
    for (const OpExample &e : ex)
      count += e.mnemonic == op->mnemonic;
    EXPECT_EQ(count, 1) << op->mnemonic;
  }
  EXPECT_EQ(ex.size(), static_cast<size_t>(kNumOps) - 1);
}

class TextRoundTripOp : public ::testing::TestWithParam<OpExample> {};

TEST_P(TextRoundTripOp, PrintParsePrint) {
  const OpExample &e = GetParam();
  std::optional<OpKind> kind = opByMnemonic(e.mnemonic);
  ASSERT_TRUE(kind);
  Graph g("op_" + std::string(e.mnemonic));
  std::vector<ValueId> operands;
  for (size_t i = 0; i < e.operands.size(); ++i)
    operands.push_back(i % 2 ? g.addParam(fmt::format("p{}", i), e.operands[i])
                             : g.addInput(fmt::format("in{}", i), e.operands[i]));
  Attrs attrs(opInfo(*kind).attrs);
  for (const AttrInit &a : e.attrs)
    ASSERT_TRUE(attrs.set(a.first, a.second).ok()) << a.first;
  Expected<NodeId> n = g.addNode(*kind, operands, attrs, {"tests/ir/text_print_test.cc", 1});
  ASSERT_TRUE(n.ok()) << n.error().message;
  std::vector<Type> want = {e.result};
  want.insert(want.end(), e.moreResults.begin(), e.moreResults.end());
  std::vector<std::string> names, types;
  for (size_t i = 0; i < want.size(); ++i) {
    names.push_back(fmt::format("%{}", operands.size() + i));
    types.push_back(typeString(want[i]));
  }
  const std::vector<ValueId> &results = g.node(*n).results;
  ASSERT_EQ(results.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(g.type(results[i]), want[i])
        << "result " << i << ": " << typeString(g.type(results[i]));
  g.addOutput("out", results[0]);

  std::string text = print(g);
  std::vector<std::string> refs;
  for (size_t i = 0; i < operands.size(); ++i)
    refs.push_back(fmt::format("%{}", i));
  std::string line = fmt::format("  {} = {}({}){} : {} loc(\"tests/ir/text_print_test.cc\":1)\n",
                                 fmt::join(names, ", "), e.mnemonic, fmt::join(refs, ", "),
                                 e.attrText, fmt::join(types, ", "));
  EXPECT_THAT(text, ::testing::HasSubstr(line));
  ParseResult r = parseGraph(text);
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  EXPECT_EQ(print(*r.graph), text);
  EXPECT_TRUE(r.graph->nodes()[0].attrs == g.nodes()[0].attrs);
}

INSTANTIATE_TEST_SUITE_P(TextAllOps, TextRoundTripOp, ::testing::ValuesIn(opExamples()),
                         [](const auto &info) { return std::string(info.param.mnemonic); });

} // namespace
} // namespace kiln::ir::text_print_test
