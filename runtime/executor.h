// The executor: an Executable that runs a program of kernel calls ("steps") over the planned
// memory regions. A backend (codegen/highway) compiles a graph into steps whose every pointer is
// a resolved (region, offset) of the plan; the executor owns the regions, the thread pool, the
// weights' bytes and the per-step timing that `kiln bench` prints. No IR in it: a step is a
// closure over the places and sizes it needs.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/executable.h"
#include "runtime/host_tensor.h"
#include "runtime/program.h"
#include "runtime/thread_pool.h"
#include "support/memory_region.h"
#include "support/status.h"

namespace kiln::runtime {

// What a step sees: the base of each region and the pool.
struct StepContext {
  std::array<uint8_t *, kNumMemRegions> base{};
  ThreadPool *pool = nullptr;
  template <class T = float> T *at(MemRegion r, int64_t offset) const {
    return reinterpret_cast<T *>(base[static_cast<int>(r)] + offset);
  }
};

struct Step {
  std::string kind; // what the time table groups by: an op mnemonic, "fusion{matmul add}", ...
  std::function<Status(const StepContext &)> run;
  int64_t node = -1; // the index of the graph node it runs, for the per-step profile
};

// bytes at (from) copied over (to) after the last step: an update that was not written in place.
struct PlacedCopy {
  MemRegion fromRegion = MemRegion::Arena, toRegion = MemRegion::Weights;
  int64_t from = 0, to = 0, bytes = 0;
};

struct ExecutorProgram {
  Program program;
  std::vector<Step> atLoad; // run once at create: constants
  std::vector<Step> steps;  // every run
  std::vector<PlacedCopy> copies;
};

class Executor final : public Executable {
public:
  // Allocates the regions, starts `threads` threads and runs the load steps. Errors: a load step's.
  static Expected<std::unique_ptr<Executor>> create(ExecutorProgram p, std::string backend,
                                                    int threads);

  const Program &program() const override { return p_.program; }
  std::string_view backend() const override { return backend_; }
  Status run() override;
  int64_t memoryBytes() const override;
  int threads() const { return pool_.threads(); }
  // The kind of each step, in order (which ops got a kernel and which run by reference).
  std::vector<std::string> stepKinds() const;

  // Time of the runs since profiling was turned on (steps time themselves only then): per step,
  // in program order, with the node it runs; and summed per kind.
  void setProfiling(bool on);
  struct StepTime {
    double seconds = 0;
    int64_t node = -1;
    std::string kind;
  };
  std::vector<StepTime> stepProfile() const;
  struct KindTime {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, KindTime> profile() const;

protected:
  void store(const Symbol &s, const HostTensor &t) override;
  HostTensor load(const Symbol &s) const override;

private:
  Executor(ExecutorProgram p, std::string backend, int threads);

  ExecutorProgram p_;
  std::string backend_;
  ThreadPool pool_;
  std::vector<AlignedBytes> regions_;
  StepContext ctx_;
  bool profiling_ = false;
  int64_t profiledRuns_ = 0;
  std::vector<double> stepSeconds_; // per step, since setProfiling
};

} // namespace kiln::runtime
