// print(parse(print(g))) == print(g) over the model zoo x variants: the text form loses nothing
// a model can build (types, attributes, parameter names and inits, input ranges, locations).
#include <gtest/gtest.h>

#include "codegen/reference/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "models/zoo.h"
#include "passes/autodiff.h"
#include "passes/optimizer.h"

namespace kiln::roundtrip_test {
namespace {

struct ZooVariant {
  const char *model;
  std::vector<models::Setting> settings;
};

std::string label(const ZooVariant &v) {
  std::string s = v.model;
  for (const models::Setting &kv : v.settings)
    s += " " + kv.key + "=" + kv.value;
  return s;
}

// 26 configurations: every model with each norm placement, norm kind, position scheme,
// attention kind and activation at least once.
const std::vector<ZooVariant> kZooVariants = {
    {"gpt", {}},
    {"gpt", {{"norm", "post"}}},
    {"gpt", {{"norm_kind", "rmsnorm"}, {"activation", "swiglu"}, {"position", "rope"}}},
    {"gpt", {{"position", "alibi"}, {"n_kv_heads", "1"}}},
    {"gpt", {{"position", "relative"}, {"relative_k", "4"}}},
    {"gpt", {{"position", "sinusoidal"}, {"activation", "relu"}}},
    {"gpt", {{"position", "none"}, {"activation", "gelu_tanh"}, {"n_kv_heads", "2"}}},
    {"gpt", {{"tie_embeddings", "true"}, {"bias", "false"}}},
    {"gpt", {{"dropout", "0.1"}, {"seed", "7"}}},
    {"gpt", {{"dtype", "f64"}, {"n_layers", "1"}}},
    {"bert", {}},
    {"bert", {{"norm", "pre"}}},
    {"bert", {{"position", "sinusoidal"}, {"activation", "relu"}}},
    {"bert", {{"position", "relative"}, {"n_kv_heads", "2"}}},
    {"bert", {{"position", "rope"}, {"norm_kind", "rmsnorm"}}},
    {"bert", {{"position", "alibi"}, {"activation", "swiglu"}, {"n_kv_heads", "1"}}},
    {"bert", {{"dropout", "0.2"}}},
    {"transformer", {}},
    {"transformer", {{"norm", "pre"}}},
    {"transformer", {{"tie_embeddings", "true"}}},
    {"transformer", {{"position", "learned"}, {"activation", "gelu"}}},
    {"transformer", {{"position", "relative"}, {"relative_k", "3"}}},
    {"transformer", {{"position", "rope"}, {"n_kv_heads", "1"}}},
    {"transformer", {{"position", "alibi"}, {"n_kv_heads", "2"}, {"norm_kind", "rmsnorm"}}},
    {"transformer", {{"activation", "swiglu"}, {"norm", "pre"}, {"dropout", "0.1"}}},
    {"transformer",
     {{"src_len", "12"}, {"tgt_len", "7"}, {"n_encoder_layers", "1"}, {"n_decoder_layers", "3"}}},
};

class ModelRoundTrip : public ::testing::TestWithParam<size_t> {};

TEST_P(ModelRoundTrip, PrintParsePrintIsIdentical) {
  const ZooVariant &v = kZooVariants[GetParam()];
  SCOPED_TRACE(label(v));
  Expected<ir::Graph> g = models::buildModel(v.model, v.settings);
  ASSERT_TRUE(g.ok()) << g.error().message;
  std::string first = ir::print(*g);
  ir::ParseResult parsed = ir::parseGraph(first);
  ASSERT_TRUE(parsed.errors.empty()) << parsed.errors.front().message;
  ASSERT_TRUE(parsed.graph.has_value());
  EXPECT_EQ(ir::print(*parsed.graph), first);
  // The text keeps the DSL locations: every node of a zoo model came from a models/ or
  // frontend/ source line.
  EXPECT_NE(first.find("loc(\"models/"), std::string::npos);
}

// The parsed graph is the same program, not just the same text: it computes the same outputs.
TEST_P(ModelRoundTrip, ParsedGraphComputesTheSame) {
  const ZooVariant &v = kZooVariants[GetParam()];
  SCOPED_TRACE(label(v));
  Expected<ir::Graph> g = models::buildModel(v.model, v.settings);
  ASSERT_TRUE(g.ok()) << g.error().message;
  ir::ParseResult parsed = ir::parseGraph(ir::print(*g));
  ASSERT_TRUE(parsed.graph.has_value());
  auto args = reference::makeArgs<double>(*g, 1);
  auto a = reference::run<double>(*g, args);
  auto b = reference::run<double>(*parsed.graph, args);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i)
    EXPECT_EQ((*a)[i].f, (*b)[i].f); // same ops in the same order: bit-identical
}

INSTANTIATE_TEST_SUITE_P(Zoo, ModelRoundTrip, ::testing::Range<size_t>(0, kZooVariants.size()),
                         [](const auto &info) { return "v" + std::to_string(info.param); });

TEST(ModelZooVariants, AtLeastTwentyConfigurations) {
  EXPECT_GE(kZooVariants.size(), 20u);
}

// The backward graph is an ordinary graph: the whole training step (forward, autodiff's
// backward nodes with their grad_of links, optimizer state and update) round-trips too.
TEST(ModelRoundTripTraining, TrainingStepPrintsAndParsesIdentically) {
  for (const char *model : {"gpt", "bert", "transformer"}) {
    SCOPED_TRACE(model);
    std::vector<models::Setting> settings = {{"loss", "true"}, {"n_kv_heads", "2"}};
    Expected<ir::Graph> forward = models::buildModel(model, settings);
    ASSERT_TRUE(forward.ok()) << forward.error().message;
    Expected<ir::Graph> grads = passes::differentiate(*forward);
    ASSERT_TRUE(grads.ok()) << grads.error().message;
    Expected<ir::Graph> step = passes::buildTrainingStep(*grads, {});
    ASSERT_TRUE(step.ok()) << step.error().message;
    std::string text = ir::print(*step);
    EXPECT_NE(text.find("grad_of(%"), std::string::npos);
    EXPECT_NE(text.find("= state \"opt.exp_avg."), std::string::npos);
    ir::ParseResult parsed = ir::parseGraph(text);
    ASSERT_TRUE(parsed.errors.empty()) << parsed.errors.front().message;
    EXPECT_EQ(ir::print(*parsed.graph), text);
  }
}

} // namespace
} // namespace kiln::roundtrip_test
