// runtime/cpu_features.h: the CPUID table agrees with the compiler's own view of this CPU, and a
// standalone executable compiled for features this machine lacks says which and stops before
// running any generated code.
#include <gtest/gtest.h>

#include "runtime/bundle_main.h"
#include "runtime/cpu_features.h"

namespace kiln::runtime::cpu_features_test {
namespace {

TEST(CpuFeatures, AgreeWithTheCompilersBuiltins) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_TRUE(cpuHasFeature("sse2")); // x86-64's baseline
  EXPECT_EQ(cpuHasFeature("avx"), static_cast<bool>(__builtin_cpu_supports("avx")));
  EXPECT_EQ(cpuHasFeature("avx2"), static_cast<bool>(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(cpuHasFeature("fma"), static_cast<bool>(__builtin_cpu_supports("fma")));
  EXPECT_EQ(cpuHasFeature("bmi2"), static_cast<bool>(__builtin_cpu_supports("bmi2")));
  EXPECT_EQ(cpuHasFeature("avx512f"), static_cast<bool>(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(cpuHasFeature("avx512bw"), static_cast<bool>(__builtin_cpu_supports("avx512bw")));
  EXPECT_EQ(cpuHasFeature("avx512vnni"), static_cast<bool>(__builtin_cpu_supports("avx512vnni")));
  EXPECT_EQ(cpuHasFeature("avx512bf16"), static_cast<bool>(__builtin_cpu_supports("avx512bf16")));
#endif
  EXPECT_FALSE(cpuHasFeature("no-such-feature"));
  const std::string required[] = {"sse2", "no-such-feature"};
  EXPECT_EQ(missingCpuFeatures(required), std::vector<std::string>{"no-such-feature"});
}

TEST(CpuFeatures, AnExecutableForFeaturesThisMachineLacksStopsAndNamesThem) {
  BundleSet set;
  set.cpu = "futurecpu";
  set.cpuFeatures = "sse2,no-such-feature,also-missing";
  char name[] = "model", command[] = "info";
  char *argv[] = {name, command};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(bundleMain(set, 2, argv), 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("model: error: this executable's code was compiled for the CPU futurecpu, "
                     "and this machine lacks 2 of its features: no-such-feature, also-missing. "
                     "Compile it for this machine"),
            std::string::npos)
      << err;
}

} // namespace
} // namespace kiln::runtime::cpu_features_test
