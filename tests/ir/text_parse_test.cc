// The IR text parser: what it accepts beyond the printer's canonical form (any value names,
// comments, either suffix order, forward grad_of), and one exact diagnostic, with its line:col,
// for each kind of malformed input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "ir/parser.h"
#include "ir/printer.h"

namespace kiln::ir::text_parse_test {
namespace {

std::vector<std::string> errorsOf(std::string_view text) {
  ParseResult r = parseGraph(text);
  EXPECT_EQ(r.graph.has_value(), r.errors.empty());
  std::vector<std::string> out;
  for (const Error &e : r.errors)
    out.push_back(e.message);
  return out;
}

TEST(ParseText, AnyValueNamesCommentsAndSpacing) {
  ParseResult r = parseGraph(R"(// a hand-written graph
graph @tiny {   // the header
  %tokens = input "tokens" range(10) : i64[4]
  %wte.weight = param "wte.weight" init uniform(0.5) : f32[10,8]   // embedding
  %emb_0 =
      gather(%wte.weight, %tokens)
      : f32[4,8] loc("models/tiny.cc":3) grad_of(%1)
  %1 = reduce_sum(%emb_0) {keepdims=true,axes=[1]} : f32[4,1]
  output "sum" = %1   output "emb" = %emb_0
}
// trailing comment
)");
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  EXPECT_EQ(print(*r.graph), R"(graph @tiny {
  %0 = input "tokens" range(10) : i64[4]
  %1 = param "wte.weight" init uniform(0.5) : f32[10,8]
  %2 = gather(%1, %0) : f32[4,8] grad_of(%3) loc("models/tiny.cc":3)
  %3 = reduce_sum(%2) {axes = [1], keepdims = true} : f32[4,1]
  output "sum" = %3
  output "emb" = %2
}
)");
  // Each node remembers where it was written (the first result name), for diagnostics.
  EXPECT_EQ(r.graph->nodes()[0].pos.line, 5u);
  EXPECT_EQ(r.graph->nodes()[0].pos.col, 3u);
  EXPECT_EQ(r.graph->nodes()[1].pos.line, 8u);
  EXPECT_EQ(r.graph->nodes()[0].loc, (SourceLoc{"models/tiny.cc", 3}));
  EXPECT_EQ(r.graph->nodes()[0].gradOf, 1);
}

TEST(ParseText, GradOfMayNameALaterNode) {
  ParseResult r = parseGraph(R"(graph @g {
  %x = input "x" : f32[2]
  %a = neg(%x) : f32[2] grad_of(%b)
  %b = exp(%x) : f32[2]
  output "a" = %a
}
)");
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  EXPECT_EQ(r.graph->nodes()[0].gradOf, 1);
  EXPECT_THAT(print(*r.graph), ::testing::HasSubstr("%1 = neg(%0) : f32[2] grad_of(%2)\n"));
}

TEST(ParseText, QuotedGraphNameAndFloatAttributeWrittenAsInteger) {
  ParseResult r = parseGraph(
      "graph @\"two words\" { %c = constant() {value = 2, shape = []} : f32[] output \"c\" = %c }");
  ASSERT_TRUE(r.graph) << r.errors.front().message;
  EXPECT_EQ(r.graph->name(), "two words");
  EXPECT_EQ(r.graph->nodes()[0].attrs.getFloat("value"), 2.0);
  EXPECT_THAT(print(*r.graph), ::testing::HasSubstr("{value = 2.0}"));
}

// One malformed input and the exact diagnostics it gets.
struct BadInput {
  const char *label;
  const char *text;
  std::vector<std::string> errors;
};

// Lines 1-2 of most cases: a header and an input %x.
#define KILN_TEST_HEAD "graph @g {\n  %x = input \"x\" : f32[2]\n"

const BadInput kBadInputs[] = {
    {"MissingHeader",
     "%x = input \"x\" : f32[2]\n",
     {"1:1: expected 'graph' at the start of the input, found %x"}},
    {"EmptyInput",
     "  // nothing\n",
     {"2:1: expected 'graph' at the start of the input, found end of input"}},
    // Lines end at \n, \r\n or a \r alone (old Mac files named line 1 for every error), and
    // a comment ends with its line.
    {"UnterminatedStringAtALoneCarriageReturn",
     "graph @g {\r  %x = input \"x : f32[2]\r  output \"y\" = %x\r}\r",
     {"2:14: unterminated string (missing closing '\"' on this line)"}},
    {"LineEndingsOfEveryKind",
     "// a comment\rgraph @g {\r\n  %x = input \"x\" : f32[2]\r  %y = nope(%x) : f32[2]\n}\n",
     {"2:1: graph @g has no outputs", "4:8: unknown op 'nope'"}},
    {"MissingGraphName",
     "graph {\n}\n",
     {"1:7: expected the graph name (like @main) after 'graph', found '{'"}},
    {"MissingOpenBrace",
     "graph @g\n  %x = input \"x\" : f32[2]\n",
     {"2:3: expected '{' after the graph name, found %x"}},
    {"UnknownOp",
     KILN_TEST_HEAD "  %y = matmull(%x, %x) : f32[2]\n  output \"y\" = %y\n}\n",
     {"3:8: unknown op 'matmull'"}},
    {"MissingCloseParen",
     KILN_TEST_HEAD "  %y = add(%x, %x : f32[2]\n}\n",
     {"3:19: expected ')' after operands, found ':'"}},
    {"UsedBeforeDefined",
     KILN_TEST_HEAD
     "  %y = add(%x, %z) : f32[2]\n  %z = neg(%x) : f32[2]\n  output \"y\" = %y\n}\n",
     {"3:16: value %z is used before it is defined"}},
    {"NeverDefined",
     KILN_TEST_HEAD "  output \"y\" = %nope\n}\n",
     {"3:16: value %nope is not defined"}},
    {"DefinedTwice",
     KILN_TEST_HEAD "  %y = neg(%x) : f32[2]\n  %y = exp(%x) : f32[2]\n  output \"y\" = %y\n}\n",
     {"4:3: %y is defined twice (first at 3:3)"}},
    {"ArgumentNameDefinedTwice",
     KILN_TEST_HEAD "  %x = input \"x2\" : f32[2]\n  output \"y\" = %x\n}\n",
     {"3:3: %x is defined twice (first at 2:3)"}},
    {"AttributeKind",
     KILN_TEST_HEAD "  %y = reduce_sum(%x) {axes = 1.5} : f32[]\n  output \"y\" = %y\n}\n",
     {"3:31: attribute 'axes' of reduce_sum expects ints, found 1.5"}},
    {"AttributeKindInList",
     KILN_TEST_HEAD "  %y = reduce_sum(%x) {axes = [0, 2.5]} : f32[]\n  output \"y\" = %y\n}\n",
     {"3:35: attribute 'axes' of reduce_sum expects ints, found 2.5"}},
    {"BoolAttributeGivenNumber",
     KILN_TEST_HEAD "  %y = reduce_sum(%x) {keepdims = 1} : f32[1]\n  output \"y\" = %y\n}\n",
     {"3:35: attribute 'keepdims' of reduce_sum expects bool, found 1"}},
    {"DTypeAttributeGivenWord",
     KILN_TEST_HEAD "  %y = cast(%x) {dtype = float} : f32[2]\n  output \"y\" = %y\n}\n",
     {"3:26: attribute 'dtype' of cast expects dtype, found 'float'"}},
    {"UnknownAttribute",
     KILN_TEST_HEAD "  %y = reduce_sum(%x) {axs = [0]} : f32[]\n  output \"y\" = %y\n}\n",
     {"3:24: unknown attribute 'axs' for reduce_sum (expected one of: axes, keepdims)"}},
    {"AttributeOnOpWithoutAttributes",
     KILN_TEST_HEAD "  %y = neg(%x) {alpha = 1} : f32[2]\n  output \"y\" = %y\n}\n",
     {"3:17: unknown attribute 'alpha' for neg (it has no attributes)"}},
    {"DuplicateAttribute",
     KILN_TEST_HEAD "  %y = softmax(%x) {axis = 0, axis = -1} : f32[2]\n  output \"y\" = %y\n}\n",
     {"3:31: attribute 'axis' is given twice (first at 3:21)"}},
    {"MissingRequiredAttribute",
     KILN_TEST_HEAD "  %y = cast(%x) : f32[2]\n  output \"y\" = %y\n}\n",
     {"3:8: cast needs attribute 'dtype' (dtype)"}},
    {"BadDType",
     KILN_TEST_HEAD "  %y = neg(%x) : f31[2]\n  output \"y\" = %y\n}\n",
     {"3:18: unknown dtype 'f31' (expected one of: f32, f64, bf16, i32, i64, bool)"}},
    {"NegativeDimension",
     "graph @g {\n  %x = input \"x\" : f32[2,-3]\n  output \"x\" = %x\n}\n",
     {"2:26: dimension must be non-negative, found -3"}},
    {"OperandCount",
     KILN_TEST_HEAD "  %y = add(%x) : f32[2]\n  output \"y\" = %y\n}\n",
     {"3:8: add expects 2 operands, found 1"}},
    {"VariadicOperandCount",
     KILN_TEST_HEAD "  %y = concat() {axis = 0} : f32[2]\n  output \"y\" = %y\n}\n",
     {"3:8: concat expects at least 1 operand, found 0"}},
    {"ResultCount",
     KILN_TEST_HEAD "  %y, %z = neg(%x) : f32[2], f32[2]\n  output \"y\" = %y\n}\n",
     {"3:3: neg has 1 result, found 2 names"}},
    {"ResultTypeCount",
     KILN_TEST_HEAD "  %y = neg(%x) : f32[2], f32[2]\n  output \"y\" = %y\n}\n",
     {"3:18: expected 1 result type (one per name), found 2"}},
    {"UnterminatedString",
     "graph @g {\n  %x = input \"x : f32[2]\n}\n",
     {"2:14: unterminated string (missing closing '\"' on this line)"}},
    {"UnknownEscape",
     "graph @g {\n  %x = input \"a\\qb\" : f32[2]\n}\n",
     {"2:16: unknown escape '\\q' in string (expected \\\", \\\\, \\n, \\t, \\r or \\xHH)"}},
    {"UnknownInit",
     "graph @g {\n  %w = param \"w\" init gaussian(0.1) : f32[2]\n  output \"w\" = %w\n}\n",
     {"2:23: unknown init 'gaussian' (expected one of: zeros, ones, normal, uniform, "
      "xavier_uniform)"}},
    {"InitWithoutScale",
     "graph @g {\n  %w = param \"w\" init normal : f32[2]\n  output \"w\" = %w\n}\n",
     {"2:23: init 'normal' needs a scale, as in normal(0.02)"}},
    {"ParamWithoutInit",
     "graph @g {\n  %w = param \"w\" : f32[2]\n}\n",
     {"2:18: expected 'init' after the parameter's name, found ':'"}},
    {"NonPositiveRange",
     "graph @g {\n  %t = input \"t\" range(0) : i64[2]\n  output \"t\" = %t\n}\n",
     {"2:24: range must be positive, found 0"}},
    {"TrailingGarbage",
     KILN_TEST_HEAD "  output \"x\" = %x\n}\nextra\n",
     {"5:1: expected end of input after the closing '}', found 'extra'"}},
    {"MissingCloseBrace",
     KILN_TEST_HEAD "  output \"x\" = %x\n",
     {"4:1: expected '}' to close the graph, found end of input"}},
    {"MissingColonBeforeTypes",
     KILN_TEST_HEAD "  %y = neg(%x) f32[2]\n}\n",
     {"3:16: expected ':' and the result types, found 'f32'"}},
    {"MissingEquals",
     KILN_TEST_HEAD "  %y neg(%x) : f32[2]\n}\n",
     {"3:6: expected '=' after the result names, found 'neg'"}},
    {"MinusWithoutANumber",
     KILN_TEST_HEAD "  %y = softmax(%x) {axis = -info} : f32[2]\n}\n",
     {"3:28: unexpected character '-'"}},
    {"UnexpectedCharacter",
     KILN_TEST_HEAD "  %y = neg($x) : f32[2]\n}\n",
     {"3:12: unexpected character '$'"}},
    {"NumberOutOfRange",
     "graph @g {\n  %x = input \"x\" : f32[99999999999999999999]\n}\n",
     {"2:24: number 99999999999999999999 is out of range"}},
    {"GradOfArgument",
     KILN_TEST_HEAD "  %y = neg(%x) : f32[2] grad_of(%x)\n  output \"y\" = %y\n}\n",
     {"3:33: grad_of must name a node's result, but %x is a graph argument"}},
    {"LocWithoutLine",
     KILN_TEST_HEAD "  %y = neg(%x) : f32[2] loc(\"m.cc\")\n}\n",
     {"3:35: expected ':' and a line number after the file in loc, found ')'"}},
    {"InputWithTwoNames",
     KILN_TEST_HEAD "  %a, %b = input \"ab\" : f32[2]\n  output \"a\" = %a\n}\n",
     {"3:7: input defines one value, found 2 names"}},
    {"NoOutputs", KILN_TEST_HEAD "}\n", {"1:1: graph @g has no outputs"}},
    {"DuplicateNamesOfArgumentsAndOutputs",
     KILN_TEST_HEAD
     "  %w = param \"x\" init zeros : f32[2]\n  output \"y\" = %x\n  output \"y\" = %w\n}\n",
     {"3:14: parameter name \"x\" is used twice (first at 2:14)",
      "5:10: output name \"y\" is used twice (first at 4:10)"}},
    // Problems that leave the syntax intact are all reported, in text order.
    {"SeveralProblemsAtOnce",
     KILN_TEST_HEAD "  %a = matmull(%x, %x) : f32[2]\n  %b = add(%a, %q) : f32[2]\n"
                    "  %c = softmax(%x) {axis = true} : f32[2]\n  output \"c\" = %c\n}\n",
     {"3:8: unknown op 'matmull'", "4:16: value %q is not defined",
      "5:28: attribute 'axis' of softmax expects int, found 'true'"}},
    // A syntax error ends the parse: what came before is reported, nothing after.
    {"ProblemsBeforeASyntaxError",
     KILN_TEST_HEAD
     "  %a = nope(%x) : f32[2]\n  %b = neg(%x) : f32[2\n  %c = nope2(%x) : f32[2]\n}\n",
     {"3:8: unknown op 'nope'", "5:3: expected ',' or ']' in the shape, found %c"}},
};
#undef KILN_TEST_HEAD

class ParseError : public ::testing::TestWithParam<BadInput> {};

TEST_P(ParseError, ExactDiagnostics) {
  EXPECT_THAT(errorsOf(GetParam().text), ::testing::ElementsAreArray(GetParam().errors));
}

INSTANTIATE_TEST_SUITE_P(ParseBadInput, ParseError, ::testing::ValuesIn(kBadInputs),
                         [](const auto &info) { return std::string(info.param.label); });

TEST(ParseBadInput, AtLeastTwentyKinds) {
  EXPECT_GE(std::size(kBadInputs), 20u);
}

// Damaged text never crashes the parser: every prefix of a valid graph, and the graph with any
// one byte replaced, either parses into a graph that verifies and prints stably, or gives
// diagnostics that all start with a valid line:col. The second graph nests a region's body and
// carries a memory plan.
TEST(ParseRobustness, TruncatedAndDamagedText) {
  const std::string flat = R"(graph @g {
  %0 = input "tokens" range(16) : i64[2,4]
  %1 = param "w.weight" init normal(0.02) : f32[16,8]
  %2 = gather(%1, %0) : f32[2,4,8] loc("models/m.cc":3)
  %3 = reduce_sum(%2) {axes = [-1], keepdims = true} : f32[2,4,1]
  %4 = constant() {value = -inf, shape = [2,4,1]} : f32[2,4,1]
  %5 = max(%3, %4) : f32[2,4,1] grad_of(%3)
  output "y" = %5
}
)";
  const std::string nested = R"(graph @r mem(constants=0, weights=0, io=256, arena=0, scratch=0) {
  %0 = input "x" : f32[2,4] mem(io, offset=0, bytes=32)
  %1 = input "b" : f32[4] mem(io, offset=64, bytes=16)
  %2, %3 = fusion(%0, %1) {body = graph @fusion {
    %0 = input "in0" : f32[2,4]
    %1 = input "in1" : f32[4]
    %2 = add(%0, %1) : f32[2,4] loc("m.cc":1)
    %3 = reduce_max(%2) {axes = [1]} : f32[2]
    output "out0" = %2
    output "out1" = %3
  }} : f32[2,4], f32[2] mem(io, offset=128, bytes=32) mem(io, offset=192, bytes=8)
  output "y" = %2
  output "m" = %3
}
)";
  auto check = [](const std::string &t) {
    ParseResult r = parseGraph(t);
    ASSERT_EQ(r.graph.has_value(), r.errors.empty()) << t;
    if (r.graph) {
      EXPECT_TRUE(verify(*r.graph).empty()) << t;
      std::string once = print(*r.graph);
      ParseResult again = parseGraph(once);
      ASSERT_TRUE(again.graph) << once;
      EXPECT_EQ(print(*again.graph), once);
      return;
    }
    for (const Error &e : r.errors) {
      unsigned line = 0, col = 0;
      ASSERT_EQ(std::sscanf(e.message.c_str(), "%u:%u: ", &line, &col), 2) << e.message;
      EXPECT_GE(line, 1u) << e.message;
      EXPECT_GE(col, 1u) << e.message;
    }
  };
  for (const std::string &text : {flat, nested}) {
    ASSERT_TRUE(parseGraph(text).graph) << text;
    for (size_t n = 0; n < text.size(); ++n)
      check(text.substr(0, n));
    for (size_t i = 0; i < text.size(); ++i)
      for (char c : {'(', '%', '"', '-', '\n', 'x', '9', '\\', '}', '{', '\0'}) {
        std::string t = text;
        t[i] = c;
        check(t);
      }
  }
}

} // namespace
} // namespace kiln::ir::text_parse_test
