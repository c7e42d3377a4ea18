// A bundle's descriptor (runtime/bundle.h) is compiled code that the runtime trusts only after
// programOf has checked it: a descriptor from another bundle version (an object file compiled
// against an older kernel ABI) and every field out of its range are refused with a message naming
// the field, before anything is allocated or run. A well-formed descriptor loads and runs.
#include "runtime/bundle_loader.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/safetensors.h"
#include "tests/util/temp_dir.h"

namespace kiln::runtime::bundle_loader_test {
namespace {

// The entry point of the hand-made bundle: out[0] = 2 * x[0] (io region: x at 0, out at 4).
int32_t doubleIt(const kiln_run *run, int64_t *) {
  float *io = reinterpret_cast<float *>(run->bases[static_cast<int>(MemRegion::IO)]);
  io[1] = 2 * io[0];
  return KILN_OK;
}

struct Descriptor {
  kiln_symbol symbols[2] = {};
  const char *kinds[1] = {"program"};
  kiln_bundle b = {};
  Descriptor() {
    symbols[0].name = "x", symbols[0].kind = 0, symbols[0].of = -1;
    symbols[1].name = "out", symbols[1].kind = 3, symbols[1].of = -1;
    for (int i = 0; i < 2; ++i) {
      kiln_symbol &s = symbols[i];
      s.dtype = 0, s.rank = 1, s.shape[0] = 1, s.bytes = 4;
      s.region = static_cast<int>(MemRegion::IO), s.offset = 4 * i;
    }
    b.version = KILN_BUNDLE_VERSION, b.name = "tiny", b.ranks = 1;
    b.region_bytes[static_cast<int>(MemRegion::IO)] = 8;
    b.symbol_count = 2, b.symbols = symbols;
    b.step_count = 1, b.step_kinds = kinds;
    b.run = &doubleIt;
  }
};

TEST(BundleLoader, AWellFormedDescriptorLoadsAndRuns) {
  Descriptor d;
  Expected<std::unique_ptr<Executor>> exe = loadBundle(d.b, 1);
  ASSERT_TRUE(exe) << exe.error().message;
  HostTensor x(DType::F32, {1});
  reinterpret_cast<float *>(x.raw().data())[0] = 1.5f;
  ASSERT_TRUE((*exe)->write("x", x).ok());
  ASSERT_TRUE((*exe)->run().ok());
  Expected<HostTensor> out = (*exe)->read("out");
  ASSERT_TRUE(out);
  EXPECT_EQ(reinterpret_cast<const float *>(out->raw().data())[0], 3.0f);
}

// A bundle compiled from a model says so (kiln_bundle's model, settings, defaults), and the C API
// refuses a checkpoint saved with another value of a setting that fixes what its weights mean,
// which the shapes alone would not catch; a checkpoint of the same settings, or one that says
// nothing, loads.
class BundleCheckpoint : public testing_files::TempDirTest {};

TEST_F(BundleCheckpoint, TheCApiRefusesACheckpointOfOtherSettings) {
  Descriptor d;
  d.b.model = "gpt";
  d.b.settings = R"([["activation", "gelu_tanh"], ["seq_len", "32"]])";
  d.b.defaults = R"([["activation", "gelu_tanh"], ["norm", "pre"], ["n_layers", "2"],
      ["norm_eps", "1e-05"], ["vocab", "9007199254740992"],
      ["rope_scaling", "llama3:8:1:4:8192"]])";
  auto saved = [&](const std::string &name, const char *settings) {
    SafetensorsFile f;
    if (settings)
      f.metadata = {{"kiln.model", "gpt"}, {"kiln.settings", settings}};
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(writeSafetensors(path, f).ok());
    return path;
  };
  char error[512] = "";
  const std::string relu = saved("relu.safetensors", R"([["activation", "relu"]])");
  EXPECT_EQ(kiln_model_open(&d.b, 1, relu.c_str(), error, sizeof error), nullptr);
  EXPECT_EQ(std::string(error), relu +
                                    ": the checkpoint was saved with activation=relu, which "
                                    "its weights fix; this bundle was compiled with "
                                    "activation=gelu_tanh (compile it with --set "
                                    "activation=relu, or kiln compile --load " +
                                    relu + ")");
  const std::string post = saved("post.safetensors", R"([["norm", "post"]])");
  EXPECT_EQ(kiln_model_open(&d.b, 1, post.c_str(), error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("saved with norm=post"), std::string::npos) << error;
  // A number in other words is the same number; integers compare as integers, not as doubles.
  const std::string big = saved("big.safetensors", R"([["vocab", "9007199254740993"]])");
  EXPECT_EQ(kiln_model_open(&d.b, 1, big.c_str(), error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find("saved with vocab=9007199254740993"), std::string::npos)
      << error;
  for (const char *other : {"llama3:8:1:4:8193", "llama3:8:1:4", "llama3:8:1:4:8192:1", "none"}) {
    const std::string scaled =
        saved("scaled.safetensors", fmt::format(R"([["rope_scaling", "{}"]])", other).c_str());
    EXPECT_EQ(kiln_model_open(&d.b, 1, scaled.c_str(), error, sizeof error), nullptr) << other;
  }
  // auto is the number the bundle's defaults give it (the eps of its norm), on either side.
  for (const char *eps : {"inf", "1e-06", "auto:1"}) {
    const std::string other =
        saved("eps.safetensors", fmt::format(R"([["norm_eps", "{}"]])", eps).c_str());
    EXPECT_EQ(kiln_model_open(&d.b, 1, other.c_str(), error, sizeof error), nullptr) << eps;
  }
  EXPECT_NE(std::string(error).find("saved with norm_eps=auto:1, which its weights fix; this "
                                    "bundle was compiled with norm_eps=1e-05"),
            std::string::npos)
      << error;
  const std::string garbled = saved("garbled.safetensors", "activation=relu");
  EXPECT_EQ(kiln_model_open(&d.b, 1, garbled.c_str(), error, sizeof error), nullptr);
  EXPECT_NE(std::string(error).find(garbled + ": metadata"), std::string::npos) << error;
  // The same model (a run setting may differ; a setting left out is at its default), or a file
  // that does not say what it is.
  for (const char *settings :
       {R"([["seq_len", "64"]])", R"([["norm", "pre"]])", R"([["n_layers", "02"]])",
        R"([["norm_eps", "1e-5"], ["vocab", "9007199254740992"]])",
        R"([["rope_scaling", "llama3:8.0:1:4e0:8192"]])", R"([["norm_eps", "auto"]])",
        (const char *)nullptr}) {
    const std::string same = saved("same.safetensors", settings);
    kiln_model *m = kiln_model_open(&d.b, 1, same.c_str(), error, sizeof error);
    EXPECT_NE(m, nullptr) << error;
    kiln_model_close(m);
  }
  d.b.settings = R"([["norm_eps", "auto"]])";
  for (const char *settings : {R"([["norm_eps", "0.00001"]])", R"([["seq_len", "64"]])"}) {
    const std::string same = saved("same.safetensors", settings);
    kiln_model *m = kiln_model_open(&d.b, 1, same.c_str(), error, sizeof error);
    EXPECT_NE(m, nullptr) << error;
    kiln_model_close(m);
  }
}

// A data-parallel step's collectives need the other ranks, which an application's process does not
// have: refused when opened, not at the first collective of a run.
TEST(BundleLoader, TheCApiRefusesADataParallelStep) {
  Descriptor d;
  d.b.ranks = 2;
  char error[512] = "";
  EXPECT_EQ(kiln_model_open(&d.b, 1, nullptr, error, sizeof error), nullptr);
  EXPECT_EQ(std::string(error),
            "kiln_model_open: bundle tiny is a training step of 2 data-parallel ranks (kiln "
            "compile --ranks 2), which its executable runs under mpirun; the C API runs one "
            "process: compile it without --ranks");
}

TEST(BundleLoader, EveryFieldOutOfRangeIsRefusedByName) {
  struct Damage {
    std::function<void(Descriptor &)> apply;
    std::string message;
  };
  const std::vector<Damage> damages = {
      {[](Descriptor &d) { d.b.version = KILN_BUNDLE_VERSION - 1; },
       fmt::format("bundle: version {}, but this runtime reads version {}", KILN_BUNDLE_VERSION - 1,
                   KILN_BUNDLE_VERSION)},
      {[](Descriptor &d) { d.b.run = nullptr; }, "entry point is missing"},
      {[](Descriptor &d) { d.b.symbols = nullptr; }, "symbols"},
      {[](Descriptor &d) { d.b.step_count = -1; }, "missing"},
      {[](Descriptor &d) { d.b.region_bytes[0] = 16; }, "constants"},
      {[](Descriptor &d) { d.b.region_bytes[3] = -8; }, "region 3 has -8 bytes"},
      {[](Descriptor &d) { d.b.ranks = 0; }, "bundle tiny: ranks 0; expected at least 1"},
      {[](Descriptor &d) { d.symbols[0].kind = 4; }, "symbol 0 ('x') has kind 4"},
      {[](Descriptor &d) { d.symbols[1].role = -1; }, "has role -1"},
      {[](Descriptor &d) { d.symbols[0].dtype = 99; }, "has dtype 99"},
      {[](Descriptor &d) { d.symbols[0].rank = KILN_MAX_RANK + 1; }, "has rank"},
      {[](Descriptor &d) { d.symbols[0].region = 5; }, "has region 5"},
      {[](Descriptor &d) { d.symbols[0].init_kind = 5; }, "has init kind 5"},
      {[](Descriptor &d) { d.symbols[0].domain = 3; }, "has domain 3"},
      {[](Descriptor &d) { d.symbols[1].of = 2; }, "has argument index 2"},
      {[](Descriptor &d) { d.symbols[0].shape[0] = -1; }, "has a dimension -1"},
      {[](Descriptor &d) { d.symbols[0].bytes = 8; }, "has bytes 8"},
      {[](Descriptor &d) { d.symbols[1].offset = 8; }, "symbol 1 ('out') has offset 8"},
      {[](Descriptor &d) { d.symbols[1].offset = -4; }, "has offset -4"},
      {[](Descriptor &d) { d.symbols[0].shape[0] = int64_t{1} << 62; }, "has bytes 4"},
  };
  for (const Damage &damage : damages) {
    Descriptor d;
    damage.apply(d);
    Expected<std::unique_ptr<Executor>> exe = loadBundle(d.b, 1);
    ASSERT_FALSE(exe) << damage.message;
    EXPECT_NE(exe.error().message.find(damage.message), std::string::npos) << exe.error().message;
  }
}

} // namespace
} // namespace kiln::runtime::bundle_loader_test
