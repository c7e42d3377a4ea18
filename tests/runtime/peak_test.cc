// The FMA peak probe behind `kiln bench`'s "% of peak": a positive, finite rate on every compiled
// SIMD target, at 1 and 2 threads (its value is the machine's, so only its sanity is checked).
#include "runtime/kernels/peak.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/thread_pool.h"
#include "tests/util/simd_targets.h"

namespace kiln::kernels::peak_test {
namespace {

TEST(PeakProbe, MeasuresAPositiveFiniteRate) {
  for (int threads : {1, 2}) {
    runtime::ThreadPool pool(threads);
    test_util::forEachSimdTarget([&] {
      const double flops = measurePeakFlops(pool, 0.004);
      EXPECT_GT(flops, 0);
      EXPECT_TRUE(std::isfinite(flops));
    });
  }
}

} // namespace
} // namespace kiln::kernels::peak_test
