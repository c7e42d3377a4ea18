// The executor: an Executable that runs a program of kernel calls ("steps") over the planned
// memory regions. A backend (codegen/common/executor_backend.h) compiles a graph into steps whose
// every tensor is a (region, offset) of the plan; the executor owns the regions, the thread pool,
// the weights' bytes and the per-step timing that `kiln bench` prints. No IR in it: a step is a
// call of the kernel ABI (runtime/kernel_abi.h) with its arguments as plain data -- what a
// generated program makes too -- or, for an op with no kernel there yet, a closure (its reference
// semantics).
#pragma once

#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/executable.h"
#include "runtime/host_tensor.h"
#include "runtime/kernel_abi.h"
#include "runtime/program.h"
#include "runtime/thread_pool.h"
#include "support/memory_region.h"
#include "support/status.h"

namespace kiln::runtime {

// What a step sees: the base of each region and the pool.
struct StepContext {
  std::array<uint8_t *, kNumMemRegions> base{};
  ThreadPool *pool = nullptr;
  Communicator *comm = nullptr; // the ranks of a data-parallel run; null: this process alone
  template <class T = float> T *at(MemRegion r, int64_t offset) const {
    return reinterpret_cast<T *>(base[static_cast<int>(r)] + offset);
  }
};

// A call of a kernel of the ABI: `fn` (C name `symbol`) with `args`, the bytes of its args struct
// as 8-byte words.
struct KernelCall {
  kiln_kernel fn = nullptr;
  std::string symbol;
  std::vector<uint64_t> args;
  // The word of args that holds a kiln_rows_fn which a generated program links by name (a
  // compiled fusion region's `symbol`); the next word is its ctx, null there.
  struct Link {
    size_t word = 0;
    std::string symbol;
  };
  std::vector<Link> links;
  std::shared_ptr<const void> keep; // what the args' pointers point at (an interpreted region)

  template <class Args> static KernelCall of(kiln_kernel fn, std::string symbol, const Args &a) {
    static_assert(sizeof(Args) % 8 == 0 && std::is_trivially_copyable_v<Args>);
    KernelCall c;
    c.fn = fn, c.symbol = std::move(symbol), c.args.resize(sizeof(Args) / 8);
    std::memcpy(c.args.data(), &a, sizeof(Args));
    return c;
  }
  int32_t operator()(const StepContext &ctx) const;
};

struct Step {
  std::string kind; // what the time table groups by: an op mnemonic, "fusion{matmul add}", ...
  std::vector<KernelCall> calls; // in order (a pad: a fill, then a copy)
  // With no calls: the step (neither: nothing to do, e.g. a reshape that is a view). With some:
  // what runs instead if a call fails (the reference, which computes a case the kernel declines or
  // reports an error at the node); without it, a failed call is an error naming the step.
  std::function<Status(const StepContext &)> run;
  int64_t node = -1; // the index of the graph node it runs, for the per-step profile

  Status operator()(const StepContext &ctx) const;
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
  // Allocates the regions, starts `threads` threads -- at most workspace::kThreads, however many
  // were asked for (--threads, KILN_THREADS, the machine's cores): every kernel's scratch is
  // planned for that many workers -- and runs the load steps. Errors: a load step's.
  static Expected<std::unique_ptr<Executor>> create(ExecutorProgram p, std::string backend,
                                                    int threads);

  const Program &program() const override { return p_.program; }
  std::string_view backend() const override { return backend_; }
  Status run() override;
  int64_t memoryBytes() const override;
  int threads() const { return pool_.threads(); }
  // Where symbol s of the program lives (its bytes, row-major in its dtype), while this lives.
  // A caller may write a parameter's bytes (the C API hands them out): where the parameter has a
  // bf16 copy (Symbol::isBf16Copy), every run from then on first writes the copy from them, as
  // Executable::write would, and so it does for a copy's own bytes handed out.
  void *data(const Symbol &s);
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
  std::vector<const Symbol *> exposed_; // parameters with a bf16 copy whose bytes data() gave
};

} // namespace kiln::runtime
