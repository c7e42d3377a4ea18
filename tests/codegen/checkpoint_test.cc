// Checkpoints of the reference trainer: a resumed run continues exactly where the saved one
// stopped, every dtype survives the file, and a file of another configuration is refused.
#include <gtest/gtest.h>

#include <filesystem>

#include "codegen/reference/checkpoint.h"
#include "codegen/reference/train.h"
#include "models/zoo.h"
#include "passes/autodiff.h"
#include "passes/optimizer.h"

namespace kiln {
namespace {

ir::Graph gptStep(const std::string &dModel) {
  std::vector<models::Setting> s = {{"loss", "true"}, {"d_model", dModel}, {"d_ff", "32"},
                                    {"n_layers", "1"}, {"seq_len", "8"}};
  ir::Graph grads = *passes::differentiate(*models::buildModel("gpt", s));
  passes::OptimizerConfig opt;
  opt.schedule.lr = 1e-2;
  return *passes::buildTrainingStep(grads, opt);
}

std::string tempPath(const std::string &name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

double stepOnce(reference::Trainer<float> &t) {
  runtime::TaskShape shape{.batch = 2, .seqLen = 8, .vocab = 256};
  auto loss = t.step(runtime::makeBatch(runtime::TaskKind::Lm, shape, 0, t.stepsDone()));
  EXPECT_TRUE(loss.ok()) << loss.error().message;
  return loss.ok() ? *loss : 0;
}

TEST(Checkpoint, ResumingContinuesBitForBit) {
  ir::Graph g = gptStep("16");
  auto straight = *reference::Trainer<float>::create(g, 1);
  std::vector<double> want;
  for (int k = 0; k < 6; ++k)
    want.push_back(stepOnce(straight));

  auto first = *reference::Trainer<float>::create(g, 1);
  std::vector<double> got;
  for (int k = 0; k < 3; ++k)
    got.push_back(stepOnce(first));
  std::string path = tempPath("resume.safetensors");
  ASSERT_TRUE(first.save(path).ok());
  auto second = *reference::Trainer<float>::create(g, 99); // other seed: everything must load
  Expected<int> loaded = second.load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(second.stepsDone(), 3);
  for (int k = 0; k < 3; ++k)
    got.push_back(stepOnce(second));
  EXPECT_EQ(got, want);
  for (size_t a = 0; a < g.args().size(); ++a) {
    if (g.args()[a].kind != ir::Arg::Kind::Input) {
      EXPECT_EQ(second.args()[a].f, straight.args()[a].f) << g.args()[a].name;
    }
  }
}

TEST(Checkpoint, EveryDtypeRoundTrips) {
  using ir::DType;
  for (DType t : ir::kAllDTypes) {
    ir::RefTensor<double> x(ir::Type{t, {2, 3}});
    for (int k = 0; k < 6; ++k) {
      if (x.isFloatStorage())
        x.f[k] = k - 2.5; // exact in bf16 too
      else
        x.i[k] = t == DType::Bool ? k % 2 : k - 2;
    }
    auto s = reference::toSafetensors("x", x);
    auto back = reference::fromSafetensors<double>(s, x.type);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->f, x.f);
    EXPECT_EQ(back->i, x.i);
  }
}

TEST(Checkpoint, RefusesAnotherConfiguration) {
  std::string path = tempPath("small.safetensors");
  ir::Graph small = gptStep("16"), big = gptStep("24");
  auto a = *reference::Trainer<float>::create(small, 0);
  ASSERT_TRUE(a.save(path).ok());
  auto b = *reference::Trainer<float>::create(big, 0);
  Expected<int> r = b.load(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, path + ": tensor \"tok_embed.weight\" is F32[256,16] in the file, "
                                      "the graph needs f32[256,24]");
}

TEST(Checkpoint, WeightsOnlyFileStartsAFreshOptimizer) {
  ir::Graph g = gptStep("16");
  auto a = *reference::Trainer<float>::create(g, 0);
  stepOnce(a);
  runtime::SafetensorsFile weights;
  for (size_t i = 0; i < g.args().size(); ++i)
    if (g.args()[i].kind == ir::Arg::Kind::Param)
      weights.tensors.push_back(reference::toSafetensors(g.args()[i].name, a.args()[i]));
  std::string path = tempPath("weights.safetensors");
  ASSERT_TRUE(runtime::writeSafetensors(path, weights).ok());
  auto b = *reference::Trainer<float>::create(g, 5);
  Expected<int> n = b.load(path);
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(*n, static_cast<int>(weights.tensors.size()));
  EXPECT_EQ(b.stepsDone(), 0);

  weights.tensors.pop_back(); // now a parameter is missing
  ASSERT_TRUE(runtime::writeSafetensors(path, weights).ok());
  Expected<int> missing = b.load(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("is missing"), std::string::npos);
}

} // namespace
} // namespace kiln
