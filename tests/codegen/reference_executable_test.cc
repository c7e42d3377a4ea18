// The reference backend runs inside the memory plan, poisoning dead bytes, and computes exactly
// what the plain evaluator computes: every model family in many variants, raw and optimized
// (fused, lowered into regions); five training steps with each optimizer, updates written back in
// place. And a plan broken on purpose is caught: by the verifier, or -- with the verifier off --
// by a wrong number in the poisoned run.
#include <gtest/gtest.h>

#include "codegen/reference/executable.h"
#include "codegen/reference/interpreter.h"
#include "ir/parser.h"
#include "models/zoo.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"
#include "passes/optimizer.h"
#include "passes/stages.h"
#include "runtime/trainer.h"
#include "tests/util/executable.h"
#include "tests/util/model_variants.h"

namespace kiln::reference_executable_test {
namespace {

using models::Setting;
using Settings = std::vector<Setting>;
using testing_exe::runInPlan;
using testing_exe::sameBits;

using test_util::label;

TEST(ReferenceInPlan, ForwardEqualsThePlainEvaluatorBitForBit) {
  int runs = 0;
  for (const char *model : {"gpt", "bert", "transformer"})
    for (const Settings &s : test_util::backendVariants()) {
      SCOPED_TRACE(label(model, s));
      Expected<ir::Graph> raw = models::buildModel(model, s);
      ASSERT_TRUE(raw.ok()) << raw.error().message;
      Expected<ir::Graph> optimized = passes::optimizedForward(*raw);
      ASSERT_TRUE(optimized.ok()) << optimized.error().message;
      for (const ir::Graph *g : {&*raw, &*optimized}) {
        std::vector<ir::RefTensor<float>> args = reference::makeArgs<float>(*g, 3);
        Expected<std::vector<ir::RefTensor<float>>> plain = reference::run<float>(*g, args);
        ASSERT_TRUE(plain.ok()) << plain.error().message;
        EXPECT_TRUE(sameBits(*plain, runInPlan(*g, args))) << (g == &*raw ? "raw" : "optimized");
        ++runs;
      }
    }
  EXPECT_EQ(runs, 3 * static_cast<int>(test_util::backendVariants().size()) * 2);
  // f64 mode (8 bytes an element, the plan scaled by 8) against the plain evaluator in double.
  for (const char *model : {"gpt", "transformer"}) {
    Settings rope = {{"position", "rope"}};
    ir::Graph g = *passes::optimizedForward(*models::buildModel(model, rope));
    // The arguments as the executable holds them: in their dtypes (f32).
    std::vector<ir::RefTensor<double>> args;
    for (const ir::RefTensor<float> &a : reference::makeArgs<float>(g, 5))
      args.push_back(reference::fromHost<double>(reference::toHost(a)));
    // And the outputs as read back: in their dtypes too.
    std::vector<ir::RefTensor<double>> plain = *reference::run<double>(g, args), want;
    for (const ir::RefTensor<double> &t : plain)
      want.push_back(reference::fromHost<double>(reference::toHost(t)));
    EXPECT_TRUE(sameBits(want, runInPlan(g, args))) << model;
  }
}

// A small GPT's training step with `opt`, as `kiln train` compiles it.
ir::Graph gptStep(passes::OptimizerConfig opt) {
  Settings s = {{"loss", "true"},  {"d_model", "16"}, {"n_heads", "2"},  {"d_ff", "32"},
                {"n_layers", "1"}, {"seq_len", "8"},  {"dropout", "0.1"}};
  Expected<ir::Graph> step = passes::trainingStep(*models::buildModel("gpt", s), opt);
  EXPECT_TRUE(step.ok()) << step.error().message;
  return std::move(*step);
}

// Five steps the way the plain evaluator takes them: the caller feeds each update output back as
// its argument. Returns the losses and the final arguments.
std::pair<std::vector<double>, std::vector<ir::RefTensor<float>>>
plainSteps(const ir::Graph &step, int steps, const runtime::TaskShape &shape) {
  std::vector<ir::RefTensor<float>> args = reference::makeArgs<float>(step, 9);
  std::vector<double> losses;
  for (int k = 0; k < steps; ++k) {
    runtime::Batch batch = runtime::makeBatch(runtime::TaskKind::Lm, shape, 9, k);
    for (size_t a = 0; a < args.size(); ++a)
      for (const runtime::BatchTensor &t : batch)
        if (t.name == step.args()[a].name)
          args[a].i = t.values;
    Expected<std::vector<ir::RefTensor<float>>> outs = reference::run<float>(step, args);
    EXPECT_TRUE(outs.ok()) << outs.error().message;
    for (size_t o = 0; o < step.outputs().size(); ++o) {
      const ir::Output &out = step.outputs()[o];
      if (out.role == ir::OutputRole::Loss)
        losses.push_back((*outs)[o].get(0));
      if (out.role == ir::OutputRole::Update)
        args[out.arg] = (*outs)[o];
    }
  }
  return {losses, args};
}

TEST(ReferenceInPlan, FiveTrainingStepsWithEachOptimizerEqualThePlainEvaluator) {
  using Kind = passes::OptimizerConfig::Kind;
  passes::OptimizerConfig sgd{
      .kind = Kind::Sgd, .momentum = 0.9, .nesterov = true, .weightDecay = 0.01};
  passes::OptimizerConfig adam{.kind = Kind::Adam, .weightDecay = 0.01};
  passes::OptimizerConfig adamw{.kind = Kind::AdamW, .weightDecay = 0.1, .clipNorm = 0.5};
  adamw.schedule = {
      .kind = passes::LrSchedule::Kind::WarmupCosine, .lr = 1e-2, .warmup = 2, .total = 5};
  const runtime::TaskShape shape{.batch = 2, .seqLen = 8, .vocab = 256};
  for (const passes::OptimizerConfig &opt : {sgd, adam, adamw}) {
    SCOPED_TRACE(static_cast<int>(opt.kind));
    ir::Graph step = gptStep(opt);
    ASSERT_NE(step.memoryPlan(), nullptr);
    auto [wantLosses, wantArgs] = plainSteps(step, 5, shape);

    testing_exe::Training t(step, 9);
    ASSERT_TRUE(t.trainer);
    std::vector<double> losses;
    for (int k = 0; k < 5; ++k)
      losses.push_back(t.step(runtime::makeBatch(runtime::TaskKind::Lm, shape, 9, k)));
    EXPECT_EQ(losses, wantLosses); // bit for bit
    EXPECT_EQ(t.trainer->stepsDone(), 5);
    for (size_t a = 0; a < step.args().size(); ++a)
      if (step.args()[a].kind != ir::Arg::Kind::Input) {
        std::vector<ir::RefTensor<float>> got = {
            reference::fromHost<float>(t.exe->read(t.exe->program().symbols[a]))};
        EXPECT_TRUE(sameBits(got, {wantArgs[a]})) << step.args()[a].name;
      }
  }
}

// ---- Broken plans ----

// The outputs of `g` (with its plan) on the reference backend, the verifier off.
std::vector<ir::RefTensor<float>> runUnverified(const ir::Graph &g,
                                                const std::vector<ir::RefTensor<float>> &args) {
  return runInPlan(g, args, /*verify=*/false);
}

ir::Graph parsed(std::string_view text) {
  ir::ParseResult r = ir::parseGraph(text);
  EXPECT_TRUE(r.graph) << r.errors.front().message;
  return r.graph ? std::move(*r.graph) : ir::Graph();
}

// A small training-like step: a chain in the arena and an update of w written over w in place.
constexpr std::string_view kStep = R"(graph @s {
  %x = input "x" : f32[4,8]
  %w = param "w" init normal(0.5) : f32[4,8]
  %a = exp(%x) : f32[4,8]
  %b = neg(%a) : f32[4,8]
  %c = mul(%a, %b) : f32[4,8]
  %d = mul(%c, %w) : f32[4,8]
  %e = tanh(%d) : f32[4,8]
  %f = sin(%a) : f32[4,8]
  %n = sub(%w, %e) : f32[4,8]
  %l = reduce_sum(%f) {axes = [0, 1]} : f32[]
  output "loss" = %l loss
  output "new.w" = %n update("w")
}
)";

TEST(BrokenPlans, EachIsCaughtByTheVerifierOrByAWrongNumber) {
  ir::Graph good = codegen::withMemoryPlan(parsed(kStep));
  ASSERT_TRUE(ir::verify(good).empty());
  std::vector<ir::RefTensor<float>> args = reference::makeArgs<float>(good, 1);
  auto want = *reference::run<float>(good, args);
  EXPECT_TRUE(sameBits(want, runUnverified(good, args))) << "the good plan is right";
  const ir::MemoryPlan &plan = *good.memoryPlan();
  auto value = [&](int node) { return good.node(node).results[0]; };

  // 1. Two live values in the same bytes: %e (tanh) put over %a, which %f still reads.
  ir::Graph overlap = good;
  ir::MemoryPlan p1 = plan;
  p1.slots[value(4)] =
      ir::MemorySlot{MemRegion::Arena, plan.slots[value(0)].offset, plan.slots[value(4)].bytes};
  overlap.setMemoryPlan(p1);
  std::vector<Error> errors = ir::verify(overlap);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].message.find("which is still live"), std::string::npos) << errors[0].message;
  EXPECT_FALSE(sameBits(want, runUnverified(overlap, args))) << "the poisoned run notices";

  // 2. In place over an operand that is read later: %b = neg(%a) written over %a, which %c and
  // %f read after it.
  ir::Graph inPlace = good;
  ir::MemoryPlan p2 = plan;
  p2.slots[value(1)] =
      ir::MemorySlot{MemRegion::Arena, plan.slots[value(0)].offset, plan.slots[value(1)].bytes,
                     ir::MemorySlot::Share::InPlace, value(0)};
  inPlace.setMemoryPlan(p2);
  errors = ir::verify(inPlace);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].message.find("overwrites an operand that is still needed"), std::string::npos)
      << errors[0].message;
  EXPECT_FALSE(sameBits(want, runUnverified(inPlace, args))) << "the poisoned run notices";

  // 3. An update written in place over its argument while the old value is still read later:
  // here %z reads w after w's update n = sub(w, e) is computed.
  std::string text(kStep);
  text.replace(text.find("  %l = reduce_sum(%f)"), std::string("  %l = reduce_sum(%f)").size(),
               "  %z = mul(%w, %f) : f32[4,8]\n  %l = reduce_sum(%z)");
  ir::Graph late = codegen::withMemoryPlan(parsed(text));
  ASSERT_TRUE(ir::verify(late).empty());
  ir::MemoryPlan p3 = *late.memoryPlan();
  ir::ValueId n = late.node(6).results[0], w = late.args()[1].value;
  ASSERT_EQ(late.node(6).op, ir::OpKind::Sub);
  EXPECT_NE(p3.slots[n].region, MemRegion::Weights) << "the planner copies it back instead";
  std::vector<ir::RefTensor<float>> lateArgs = reference::makeArgs<float>(late, 1);
  auto lateWant = *reference::run<float>(late, lateArgs);
  p3.slots[n] = ir::MemorySlot{MemRegion::Weights, p3.slots[w].offset, p3.slots[n].bytes,
                               ir::MemorySlot::Share::InPlace, w};
  late.setMemoryPlan(p3);
  errors = ir::verify(late);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].message.find("overwrites an operand that is still needed"), std::string::npos)
      << errors[0].message;
  EXPECT_FALSE(sameBits(lateWant, runUnverified(late, lateArgs))) << "the poisoned run notices";

  // 4. An offset past its region: the verifier says so (running it would write out of bounds).
  ir::Graph past = good;
  ir::MemoryPlan p4 = plan;
  p4.slots[value(2)].offset = p4.bytes(MemRegion::Arena);
  past.setMemoryPlan(p4);
  errors = ir::verify(past);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].message.find("past arena bytes"), std::string::npos) << errors[0].message;
  EXPECT_FALSE(reference::ReferenceExecutable::create(past).ok());
}

} // namespace
} // namespace kiln::reference_executable_test
