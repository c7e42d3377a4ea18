// Two ranks in one process, each on a thread of its own, meeting in shared memory: what MPI
// computes for 2 ranks, without mpirun, for tests that compare a data-parallel run with another
// (every mean is (a + b) / 2 on both ranks, the same bits, as MPI's sum of two then / 2 is).
#pragma once

#include <algorithm>
#include <array>
#include <barrier>
#include <functional>
#include <thread>
#include <vector>

#include "runtime/communicator.h"

namespace kiln::testing_mpi {

class PairWorld {
public:
  // Rank r's communicator.
  runtime::Communicator &rank(int r) { return ranks_[r]; }
  // Runs fn(0) and fn(1) on two threads at once (collectives wait for the other rank).
  void onBoth(const std::function<void(int)> &fn) {
    std::thread other([&] { fn(1); });
    fn(0);
    other.join();
  }

private:
  class Rank final : public runtime::Communicator {
  public:
    Rank(PairWorld &w, int r) : w_(w), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return 2; }
    int localSize() const override { return 2; }
    Status allReduceMean(float *x, int64_t count) override {
      std::vector<float> mean(static_cast<size_t>(count));
      exchange<float>(x, [&](const float *a, const float *b) {
        for (int64_t i = 0; i < count; ++i)
          mean[i] = (a[i] + b[i]) / 2.0f;
      });
      std::copy(mean.begin(), mean.end(), x);
      return {};
    }
    Status start(float *x, int64_t count) override { return allReduceMean(x, count); }
    Status finish(float *) override { return {}; }
    Status reduceScatterMean(const float *x, float *y, int64_t count) override {
      exchange<float>(x, [&](const float *a, const float *b) {
        for (int64_t i = r_ * count; i < (r_ + 1) * count; ++i)
          y[i - r_ * count] = (a[i] + b[i]) / 2.0f;
      });
      return {};
    }
    Status allGather(const float *x, float *y, int64_t count) override {
      exchange<float>(x, [&](const float *a, const float *b) {
        std::copy(a, a + count, y);
        std::copy(b, b + count, y + count);
      });
      return {};
    }
    Status gather(const float *x, float *y, int64_t count) override {
      return r_ == 0 ? allGather(x, y, count) : (exchange<float>(x, [](auto, auto) {}), Status());
    }
    void setBackground(bool) override {}
    Expected<bool> same(uint64_t value) override {
      bool same = false;
      exchange<uint64_t>(&value, [&](const uint64_t *a, const uint64_t *b) { same = *a == *b; });
      return same;
    }
    Expected<double> min(double value) override {
      double least = 0;
      exchange<double>(&value, [&](const double *a, const double *b) { least = std::min(*a, *b); });
      return least;
    }

  private:
    // Both ranks publish `mine` and read both; neither goes on (to change its data) before the
    // other has read.
    template <class T, class F> void exchange(const T *mine, F use) {
      w_.data_[r_] = mine;
      w_.sync_.arrive_and_wait();
      use(static_cast<const T *>(w_.data_[0]), static_cast<const T *>(w_.data_[1]));
      w_.sync_.arrive_and_wait();
    }
    PairWorld &w_;
    int r_;
  };

  std::barrier<> sync_{2};
  std::array<const void *, 2> data_{};
  std::array<Rank, 2> ranks_{Rank(*this, 0), Rank(*this, 1)};
};

} // namespace kiln::testing_mpi
