// measurePeakFlops (see peak.h). 16 independent accumulators: an FMA has a latency of 4 cycles
// and a core issues up to 2 per cycle, so at least 8 chains are needed to keep the pipes busy;
// 16 leave room for cores with more pipes or longer latency. The operands stay in registers, so
// nothing but the FMA units is measured.
#include "runtime/kernels/peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "runtime/thread_pool.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/kernels/peak.cc"
#include "hwy/foreach_target.h" // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Runs `iterations` rounds of 16 FMAs on full vectors; returns the flops done (and a value that
// depends on every result, so the compiler keeps them).
HWY_ATTR double fmaRounds(int64_t iterations, float *sink) {
  const hn::ScalableTag<float> d;
  constexpr int kChains = 16;
  hn::Vec<decltype(d)> acc[kChains];
  for (int c = 0; c < kChains; ++c)
    acc[c] = hn::Set(d, 0.001f * static_cast<float>(c));
  const auto a = hn::Set(d, 0.9999999f), b = hn::Set(d, 1e-7f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c)
      acc[c] = hn::MulAdd(acc[c], a, b);
  for (int c = 1; c < kChains; ++c)
    acc[0] = hn::Add(acc[0], acc[c]);
  *sink = hn::GetLane(hn::SumOfLanes(d, acc[0]));
  return 2.0 * kChains * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
}

} // namespace kiln::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kiln::kernels {

HWY_EXPORT(fmaRounds);

double measurePeakFlops(runtime::ThreadPool &pool, double seconds) {
  using Clock = std::chrono::steady_clock;
  // Calibrate on one thread, then all threads run the same count at once; the slowest sets the
  // time (they share the machine, as a kernel's parts do).
  float sink = 0;
  int64_t iterations = 1 << 14;
  for (;;) {
    const auto start = Clock::now();
    HWY_DYNAMIC_DISPATCH(fmaRounds)(iterations, &sink);
    const double took = std::chrono::duration<double>(Clock::now() - start).count();
    if (took > seconds / 4 || iterations > (int64_t{1} << 40))
      break;
    iterations *= 2;
  }
  const int threads = pool.threads();
  std::vector<float> sinks(static_cast<size_t>(threads));
  std::atomic<double> flops{0};
  const auto start = Clock::now();
  pool.run(threads, [&](int64_t part, int) {
    const double f = HWY_DYNAMIC_DISPATCH(fmaRounds)(iterations, &sinks[static_cast<size_t>(part)]);
    for (double seen = flops.load(); !flops.compare_exchange_weak(seen, seen + f);) {
    }
  });
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  return took > 0 ? flops.load() / took : 0;
}

} // namespace kiln::kernels
#endif
