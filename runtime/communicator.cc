// A process alone (see communicator.h); MPI's world is runtime/mpi/mpi_communicator.cc.
#include "runtime/communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "runtime/thread_pool.h"

namespace kiln::runtime {

std::string Communicator::where() const {
  return size() > 1 ? fmt::format("rank {} of {}", rank(), size()) : std::string();
}

namespace {
class Alone final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int localSize() const override { return 1; }
  Status allReduceMean(float *, int64_t) override { return {}; }
  Status start(float *, int64_t) override { return {}; }
  Status finish(float *) override { return {}; }
  Status reduceScatterMean(const float *x, float *y, int64_t count) override {
    return copy(x, y, count);
  }
  Status allGather(const float *x, float *y, int64_t count) override { return copy(x, y, count); }
  Status gather(const float *x, float *y, int64_t count) override { return copy(x, y, count); }
  void setBackground(bool) override {}
  Expected<bool> same(uint64_t) override { return true; }
  Expected<double> min(double value) override { return value; }

private:
  static Status copy(const float *x, float *y, int64_t count) {
    std::copy(x, x + count, y);
    return {};
  }
};
} // namespace

std::unique_ptr<Communicator> aloneCommunicator() {
  return std::make_unique<Alone>();
}

int threadsPerRank(const Communicator &world) {
  return std::max(1, ThreadPool::defaultThreads() / std::max(1, world.localSize()));
}

Status quietUnlessRankZero(const Communicator &world) {
  if (world.rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
    return makeError("{}: cannot silence its output (/dev/null)", world.where());
  return {};
}

bool backgroundPays(const Communicator &world, int threads) {
  return world.localSize() * (threads + 1) <= ThreadPool::hardwareThreads();
}

bool launchedByMpi() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name) != nullptr)
      return true;
  return false;
}

namespace {
// The launcher's rank and size variables of this process, or nulls.
std::pair<const char *, const char *> launcherRank() {
  for (auto [rankName, sizeName] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                    std::pair{"PMI_RANK", "PMI_SIZE"}}) {
    const char *rank = std::getenv(rankName), *size = std::getenv(sizeName);
    if (rank && size)
      return {rank, size};
  }
  return {nullptr, nullptr};
}
} // namespace

std::string launchedRank() {
  const auto [rank, size] = launcherRank();
  return !rank || std::string_view(size) == "1" ? std::string()
                                                : fmt::format("rank {} of {}", rank, size);
}

bool launchedAsLaterRank() {
  const char *rank = launcherRank().first;
  return rank && std::string_view(rank) != "0";
}

} // namespace kiln::runtime
