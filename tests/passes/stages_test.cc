// The stage passes and the pass manager's care for what they produce: autodiff and the optimizer
// refuse a graph they would give a second set of names to, integer parameters are not trained,
// and a pass that edits the graph after plan-memory never leaves a stale plan behind.
#include <gtest/gtest.h>

#include <string>

#include "ir/parser.h"
#include "passes/pass_manager.h"
#include "passes/passes.h"
#include "passes/stages.h"

namespace kiln::passes::stages_test {
namespace {
using namespace kiln::ir;

Graph parsed(const char *text) {
  ParseResult r = parseGraph(text);
  EXPECT_TRUE(r.graph) << r.errors[0].message;
  return r.graph ? std::move(*r.graph) : Graph();
}

constexpr const char *kLossGraph = R"(graph @g {
  %x = input "x" : f32[4]
  %w = param "w" init normal(0.5) : f32[4]
  %t = param "table" init zeros : i64[4]
  %a = mul(%x, %w) : f32[4]
  %s = reduce_sum(%a) {axes = [0]} : f32[]
  output "loss" = %s loss
}
)";

TEST(Stages, AutodiffTwiceIsAClearError) {
  Expected<Graph> r = runPipeline(parsed(kLossGraph), "autodiff,autodiff");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "pipeline 'autodiff,autodiff': pass 'autodiff' (2 of 2): autodiff: "
                               "graph @g already has an output \"grad.w\" (differentiated "
                               "already?)");
}

TEST(Stages, AnUpdateTwiceIsAClearError) {
  Expected<Graph> r = runPipeline(parsed(kLossGraph), "autodiff,adamw,autodiff,adamw");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("the graph already has an update output \"new.w\" (is it a "
                                   "training step already?)"),
            std::string::npos)
      << r.error().message;
}

// The i64 parameter has no gradient; the update leaves it as it is instead of failing.
TEST(Stages, IntegerParametersAreNotTrained) {
  Expected<Graph> r = runPipeline(parsed(kLossGraph), "train");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_NE(r->findOutput(OutputRole::Update, r->argIndex("w")), nullptr);
  EXPECT_EQ(r->findOutput(OutputRole::Update, r->argIndex("table")), nullptr);
  EXPECT_EQ(r->findOutput(OutputRole::Gradient, r->argIndex("table")), nullptr);
}

// fold-transpose edits matmuls in place; after it the plan would describe other lifetimes.
TEST(Stages, NoStalePlanAfterAnEditingPass) {
  Graph g = parsed(R"(graph @ft {
  %x = input "x" : f32[4,4]
  %y = input "y" : f32[4,4]
  %a = exp(%x) : f32[4,4]
  %t = transpose(%a) {perm = [1,0]} : f32[4,4]
  %c = sin(%y) : f32[4,4]
  %m = matmul(%t, %c) : f32[4,4]
  output "m" = %m
}
)");
  Expected<std::vector<const PassInfo *>> list = resolvePasses("plan-memory,fold-transpose");
  ASSERT_TRUE(list);
  PassManagerOptions options;
  options.verifyEach = true;
  Expected<PipelineReport> r = runPasses(g, *list, options);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(g.memoryPlan(), nullptr);
  EXPECT_TRUE(verify(g).empty());
}

TEST(Stages, GradOfNamingItsOwnNodeIsRejected) {
  ParseResult r = parseGraph("graph @g {\n  %x = input \"x\" : f32[2]\n"
                             "  %y = neg(%x) : f32[2] grad_of(%y)\n  output \"y\" = %y\n}\n");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message, "3:3: neg: grad_of names the node itself");
}

} // namespace
} // namespace kiln::passes::stages_test
