// Checkpoints of the reference trainer: a resumed run continues exactly where the saved one
// stopped, every dtype survives the file, and a file of another configuration is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>

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

// A checkpoint of `g` after one step, as a file the test can then damage tensor by tensor.
runtime::SafetensorsFile checkpointAfterOneStep(const ir::Graph &g) {
  auto t = *reference::Trainer<float>::create(g, 0);
  stepOnce(t);
  std::string path = tempPath("full.safetensors");
  EXPECT_TRUE(t.save(path).ok());
  return *runtime::readSafetensors(path);
}

// Loads `file` into a fresh trainer and returns the error ("<loaded>" if none); a failed load
// must leave the trainer's values untouched.
std::string loadError(const ir::Graph &g, const runtime::SafetensorsFile &file) {
  std::string path = tempPath("damaged.safetensors");
  EXPECT_TRUE(runtime::writeSafetensors(path, file).ok());
  auto t = *reference::Trainer<float>::create(g, 7);
  auto before = *reference::Trainer<float>::create(g, 7);
  Expected<int> r = t.load(path);
  if (r.ok())
    return "<loaded>";
  for (size_t a = 0; a < g.args().size(); ++a)
    EXPECT_EQ(t.args()[a].f, before.args()[a].f) << "a failed load changed " << g.args()[a].name;
  EXPECT_EQ(r.error().message.rfind(path + ": ", 0), 0u) << r.error().message;
  return r.error().message.substr(path.size() + 2);
}

// Replaces element 0 of tensor `name` (an f32 tensor) by `v`.
runtime::SafetensorsFile withValue(runtime::SafetensorsFile file, const std::string &name,
                                   float v) {
  for (runtime::SafetensorsTensor &t : file.tensors)
    if (t.name == name)
      std::memcpy(t.data.data(), &v, sizeof v);
  return file;
}

TEST(Checkpoint, PartialOptimizerStateIsRefused) {
  ir::Graph g = gptStep("16");
  runtime::SafetensorsFile full = checkpointAfterOneStep(g);
  for (std::string dropped : {"opt.step", "opt.exp_avg_sq.tok_embed.weight"}) {
    runtime::SafetensorsFile file = full;
    std::erase_if(file.tensors, [&](const auto &t) { return t.name == dropped; });
    std::string err = loadError(g, file);
    EXPECT_NE(err.find("but not \"" + dropped +
                       "\": a checkpoint holds all of the optimizer "
                       "state or none of it (weights only)"),
              std::string::npos)
        << err;
  }
}

TEST(Checkpoint, ValuesOutsideTheirDomainAreRefused) {
  ir::Graph g = gptStep("16");
  runtime::SafetensorsFile full = checkpointAfterOneStep(g);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string count = "is not a count (a whole number in [0, 16777216] for f32)";
  struct Case {
    std::string tensor;
    float value;
    std::string error;
  } cases[] = {
      {"opt.step", nan, "state \"opt.step\": element 0 = nan is not a finite number"},
      {"opt.step", -1, "state \"opt.step\": element 0 = -1 " + count},
      {"opt.step", 1e30f, "state \"opt.step\": element 0 = 1.0000000150474662e+30 " + count},
      {"opt.step", 2.5, "state \"opt.step\": element 0 = 2.5 " + count},
      {"tok_embed.weight", -std::numeric_limits<float>::infinity(),
       "parameter \"tok_embed.weight\": element 0 = -inf is not a finite number"},
      {"opt.exp_avg_sq.tok_embed.weight", -0.5f,
       "state \"opt.exp_avg_sq.tok_embed.weight\": element 0 = -0.5 is negative, but this state "
       "holds values >= 0"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(loadError(g, withValue(full, c.tensor, c.value)), c.error) << c.tensor;
  // The undamaged file loads.
  EXPECT_EQ(loadError(g, full), "<loaded>");
}

} // namespace
} // namespace kiln
