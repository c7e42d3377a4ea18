// Checkpoints of any Executable (runtime/checkpoint.h), here on the reference backend: a resumed
// run continues exactly where the saved one stopped, every dtype survives the file, a file of
// another configuration is refused, and so are partial optimizer state and values outside their
// domain -- without changing anything.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "models/zoo.h"
#include "passes/autodiff.h"
#include "passes/optimizer.h"
#include "runtime/checkpoint.h"
#include "runtime/model_description.h"
#include "tests/util/executable.h"
#include "tests/util/temp_dir.h"

namespace kiln::checkpoint_test {
namespace {

ir::Graph gptStep(const std::string &dModel) {
  std::vector<models::Setting> s = {
      {"loss", "true"}, {"d_model", dModel}, {"d_ff", "32"}, {"n_layers", "1"}, {"seq_len", "8"}};
  ir::Graph grads = *passes::differentiate(*models::buildModel("gpt", s));
  passes::OptimizerConfig opt;
  opt.schedule.lr = 1e-2;
  return *passes::buildTrainingStep(grads, opt);
}

std::string tempPath(const std::string &name) {
  return testing_files::perTestPath("_" + name).string();
}

using testing_exe::Training;

double stepOnce(Training &t) {
  runtime::TaskShape shape{.batch = 2, .seqLen = 8, .vocab = 256};
  return t.step(runtime::makeBatch(runtime::TaskKind::Lm, shape, 0, t.trainer->stepsDone()));
}

// Every parameter and state tensor of `exe`, in program order.
std::vector<runtime::HostTensor> weightsOf(const runtime::Executable &exe) {
  std::vector<runtime::HostTensor> out;
  for (const runtime::Symbol &s : exe.program().symbols)
    if (s.isWeight())
      out.push_back(exe.read(s));
  return out;
}

TEST(Checkpoint, ResumingContinuesBitForBit) {
  ir::Graph g = gptStep("16");
  Training straight(g, 1);
  std::vector<double> want;
  for (int k = 0; k < 6; ++k)
    want.push_back(stepOnce(straight));

  Training first(g, 1);
  std::vector<double> got;
  for (int k = 0; k < 3; ++k)
    got.push_back(stepOnce(first));
  std::string path = tempPath("resume.safetensors");
  ASSERT_TRUE(runtime::saveCheckpoint(*first.exe, path).ok());
  Training second(g, 99); // another seed: everything must load
  Expected<int> loaded = runtime::loadCheckpoint(*second.exe, path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(second.trainer->stepsDone(), 3);
  for (int k = 0; k < 3; ++k)
    got.push_back(stepOnce(second));
  EXPECT_EQ(got, want);
  EXPECT_EQ(weightsOf(*second.exe), weightsOf(*straight.exe));
}

TEST(Checkpoint, EveryDtypeRoundTrips) {
  for (DType t : kAllDTypes) {
    runtime::HostTensor x(t, {2, 3});
    for (int k = 0; k < 6; ++k)
      x.set(k, isFloat(t) ? k - 2.5 : t == DType::Bool ? k % 2 : k - 2); // exact in bf16 too
    runtime::SafetensorsTensor s = runtime::toSafetensors("x", x);
    Expected<runtime::HostTensor> back = runtime::fromSafetensors(s, t, {2, 3});
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(*back, x);
    EXPECT_FALSE(runtime::fromSafetensors(s, t, {3, 2}).ok());
  }
}

TEST(Checkpoint, RefusesAnotherConfiguration) {
  std::string path = tempPath("small.safetensors");
  ir::Graph small = gptStep("16"), big = gptStep("24");
  Training a(small, 0);
  ASSERT_TRUE(runtime::saveCheckpoint(*a.exe, path).ok());
  Training b(big, 0);
  Expected<int> r = runtime::loadCheckpoint(*b.exe, path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, path + ": tensor \"tok_embed.weight\" is F32[256,16] in the file, "
                                      "the graph needs f32[256,24]");
}

// A bf16 tensor (which an f32 parameter widens) of another shape is named with the graph's own
// type, not the bf16 it would have been read as.
TEST(Checkpoint, ABf16TensorOfAnotherShapeNamesTheGraphsType) {
  std::string path = tempPath("small-bf16.safetensors");
  Training a(gptStep("16"), 0);
  ASSERT_TRUE(runtime::saveCheckpoint(*a.exe, path).ok());
  Expected<runtime::SafetensorsFile> file = runtime::readSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.error().message;
  for (runtime::SafetensorsTensor &t : file->tensors)
    if (t.name == "tok_embed.weight") {
      t.dtype = runtime::SafetensorsDtype::BF16;
      t.data.resize(t.data.size() / 2);
    }
  ASSERT_TRUE(runtime::writeSafetensors(path, *file).ok());
  Training b(gptStep("24"), 0);
  Expected<int> r = runtime::loadCheckpoint(*b.exe, path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, path + ": tensor \"tok_embed.weight\" is BF16[256,16] in the "
                                      "file, the graph needs f32[256,24]");
}

// An inference program (no optimizer) takes a training checkpoint's parameters and passes over its
// optimizer state; a tensor that is neither is still refused.
TEST(Checkpoint, AForwardProgramLoadsATrainingCheckpointsParameters) {
  Training a(gptStep("16"), 0);
  stepOnce(a);
  std::string path = tempPath("trained.safetensors");
  ASSERT_TRUE(runtime::saveCheckpoint(*a.exe, path).ok());
  std::vector<models::Setting> s = {
      {"d_model", "16"}, {"d_ff", "32"}, {"n_layers", "1"}, {"seq_len", "8"}};
  std::unique_ptr<runtime::Executable> forward =
      testing_exe::reference(*models::buildModel("gpt", s), 3);
  Expected<int> n = runtime::loadCheckpoint(*forward, path);
  ASSERT_TRUE(n.ok()) << n.error().message;
  for (const runtime::Symbol &p : forward->program().symbols)
    if (p.kind == runtime::Symbol::Kind::Param) {
      EXPECT_TRUE(forward->read(p) == *a.exe->read(p.name)) << p.name;
    }
  runtime::SafetensorsFile file = *runtime::readSafetensors(path);
  file.tensors.push_back(
      runtime::toSafetensors("decoder.extra", forward->read(forward->program().symbols[2])));
  ASSERT_TRUE(runtime::writeSafetensors(path, file).ok());
  Expected<int> bad = runtime::loadCheckpoint(*forward, path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("\"decoder.extra\" is not a parameter"), std::string::npos);
}

// Where a resumed run continues: the batches drawn as saved (skipped updates drew theirs), else
// the optimizer's step counter; 0 for a file without the counter, whatever its metadata says (a
// fresh optimizer starts the run afresh); a count that is none is refused by name.
TEST(Checkpoint, KeepsTheBatchesDrawn) {
  ir::Graph g = gptStep("16");
  Training t(g, 1);
  stepOnce(t);
  stepOnce(t);
  const std::string path = tempPath("batches.safetensors");
  ASSERT_TRUE(runtime::saveCheckpoint(*t.exe, path).ok());
  EXPECT_EQ(*runtime::batchesIn(path), 2); // the step counter
  ASSERT_TRUE(runtime::saveCheckpoint(*t.exe, path, 5).ok());
  EXPECT_EQ(*runtime::batchesIn(path), 5);
  Expected<runtime::SafetensorsFile> file = runtime::readSafetensors(path);
  ASSERT_TRUE(file.ok());
  file->metadata["batches"] = "-3";
  ASSERT_TRUE(runtime::writeSafetensors(path, *file).ok());
  EXPECT_EQ(runtime::batchesIn(path).error().message,
            path + ": metadata \"batches\" is \"-3\", not a count of batches");
  std::erase_if(file->tensors,
                [](const runtime::SafetensorsTensor &t) { return t.name.starts_with("opt."); });
  file->metadata["batches"] = "5"; // (a forward bundle's weights, compiled from a checkpoint)
  ASSERT_TRUE(runtime::writeSafetensors(path, *file).ok());
  EXPECT_EQ(*runtime::batchesIn(path), 0);
  runtime::SafetensorsFile empty;
  ASSERT_TRUE(runtime::writeSafetensors(path, empty).ok());
  EXPECT_EQ(*runtime::batchesIn(path), 0);
}

TEST(Checkpoint, WeightsOnlyFileStartsAFreshOptimizer) {
  ir::Graph g = gptStep("16");
  Training a(g, 0);
  stepOnce(a);
  runtime::SafetensorsFile weights;
  for (const runtime::Symbol &s : a.exe->program().symbols)
    if (s.kind == runtime::Symbol::Kind::Param)
      weights.tensors.push_back(runtime::toSafetensors(s.name, a.exe->read(s)));
  std::string path = tempPath("weights.safetensors");
  ASSERT_TRUE(runtime::writeSafetensors(path, weights).ok());
  Training b(g, 5);
  Expected<int> n = runtime::loadCheckpoint(*b.exe, path);
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(*n, static_cast<int>(weights.tensors.size()));
  EXPECT_EQ(b.trainer->stepsDone(), 0);

  weights.tensors.pop_back(); // now a parameter is missing
  ASSERT_TRUE(runtime::writeSafetensors(path, weights).ok());
  Expected<int> missing = runtime::loadCheckpoint(*b.exe, path);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("is missing"), std::string::npos);
}

// A checkpoint of `g` after one step, as a file the test can then damage tensor by tensor.
runtime::SafetensorsFile checkpointAfterOneStep(const ir::Graph &g) {
  Training t(g, 0);
  stepOnce(t);
  std::string path = tempPath("full.safetensors");
  EXPECT_TRUE(runtime::saveCheckpoint(*t.exe, path).ok());
  return *runtime::readSafetensors(path);
}

// Loads `file` into a fresh trainer and returns the error ("<loaded>" if none); a failed load
// must leave the trainer's values untouched.
std::string loadError(const ir::Graph &g, const runtime::SafetensorsFile &file) {
  std::string path = tempPath("damaged.safetensors");
  EXPECT_TRUE(runtime::writeSafetensors(path, file).ok());
  Training t(g, 7), before(g, 7);
  Expected<int> r = runtime::loadCheckpoint(*t.exe, path);
  if (r.ok())
    return "<loaded>";
  EXPECT_EQ(weightsOf(*t.exe), weightsOf(*before.exe)) << "a failed load changed something";
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
    // (What the program keeps, for a whole checkpoint of another optimizer.)
    EXPECT_NE(err.find("this program's optimizer keeps opt.exp_avg, opt.exp_avg_sq, opt.step"),
              std::string::npos)
        << err;
  }
  // A parameter missing with its state (a checkpoint of a smaller model) is named as a missing
  // parameter, not as partial optimizer state.
  runtime::SafetensorsFile smaller = full;
  std::erase_if(smaller.tensors,
                [](const auto &t) { return t.name.ends_with("tok_embed.weight"); });
  EXPECT_EQ(loadError(g, smaller), "parameter \"tok_embed.weight\" is missing");
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
  // Nor is such a file written (weights an unguarded step made NaN), and one there stays.
  Training t(g, 0);
  runtime::HostTensor w = t.exe->read(*t.exe->program().argument("tok_embed.weight"));
  w.set(3, nan);
  ASSERT_TRUE(t.exe->write("tok_embed.weight", w).ok());
  const std::string path = tempPath("nan.safetensors");
  ASSERT_TRUE(runtime::writeSafetensors(path, full).ok());
  Status saved = runtime::saveCheckpoint(*t.exe, path);
  ASSERT_FALSE(saved.ok());
  EXPECT_EQ(saved.error().message, path + ": parameter \"tok_embed.weight\": element 3 = nan is "
                                          "not a finite number: a checkpoint of it would not load");
  EXPECT_EQ(*runtime::readSafetensors(path), full);
}

// A bundle's run that resumes a checkpoint says the settings it ran with: the checkpoint's order,
// the bundle's values where they differ, a setting the bundle leaves at its default dropped.
TEST(ModelDescription, ContinuedByTakesTheBundlesRunSettings) {
  using runtime::ModelDescription;
  const ModelDescription checkpoint{
      .model = "gpt",
      .settings = {{"batch", "4"}, {"d_model", "32"}, {"init", "xavier"}},
      .tokenizerJson = "{}",
      .endTokens = {7},
      .task = {},
      .hfArchitecture = "Phi3ForCausalLM"};
  const ModelDescription bundle{.model = "gpt",
                                .settings = {{"d_model", "32"}, {"dropout", "0.1"}, {"batch", "8"}},
                                .tokenizerJson = "",
                                .endTokens = {},
                                .task = {},
                                .hfArchitecture = {}};
  const ModelDescription d = runtime::continuedBy(checkpoint, bundle);
  EXPECT_EQ(d.settings,
            (decltype(d.settings){{"batch", "8"}, {"d_model", "32"}, {"dropout", "0.1"}}));
  EXPECT_EQ(d.tokenizerJson, "{}"); // the checkpoint's tokenizer, which the run trains with
  EXPECT_EQ(d.endTokens, std::vector<int32_t>{7}); // and where its texts end
  EXPECT_EQ(d.hfArchitecture, "Phi3ForCausalLM");  // and the layout export writes
  EXPECT_EQ(runtime::otherSettings(checkpoint, bundle),
            (std::vector<std::string>{"batch=4 (this executable: 8)",
                                      "init=xavier (this executable: its default)",
                                      "dropout=its default (this executable: 0.1)"}));
  EXPECT_EQ(runtime::continuedBy(checkpoint, checkpoint), checkpoint);
}

} // namespace
} // namespace kiln::checkpoint_test
