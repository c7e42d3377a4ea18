// The executor (see executor.h).
#include "runtime/executor.h"

#include <algorithm>
#include <cstring>

#include "support/workspace.h"

namespace kiln::runtime {

int32_t KernelCall::operator()(const StepContext &ctx) const {
  const kiln_run run{ctx.base.data(), ctx.pool, ctx.comm};
  return fn(&run, args.data());
}

Status Step::operator()(const StepContext &ctx) const {
  if (calls.empty())
    return run ? run(ctx) : Status{};
  for (const KernelCall &call : calls)
    if (int32_t status = call(ctx); status != KILN_OK) {
      if (run)
        return run(ctx);
      return makeError("{} ({}): {}", kind, call.symbol, kiln_status_message(status));
    }
  return {};
}

Executor::Executor(ExecutorProgram p, std::string backend, int threads)
    : p_(std::move(p)), backend_(std::move(backend)),
      // The one clamp: the plan sized each node's scratch for kThreads workers, and a kernel
      // indexes it by its worker number, so a bigger pool would write past the region.
      pool_(static_cast<int>(std::clamp<int64_t>(threads, 1, workspace::kThreads))),
      stepSeconds_(p_.steps.size(), 0.0) {
  for (MemRegion r : kAllMemRegions) {
    regions_.emplace_back(p_.program.bytes(r));
    ctx_.base[static_cast<int>(r)] = regions_.back().data();
  }
  ctx_.pool = &pool_;
}

Expected<std::unique_ptr<Executor>> Executor::create(ExecutorProgram p, std::string backend,
                                                     int threads) {
  std::unique_ptr<Executor> exe(new Executor(std::move(p), std::move(backend), threads));
  for (const Step &s : exe->p_.atLoad)
    if (Status st = s(exe->ctx_); !st)
      return st.error();
  return exe;
}

void *Executor::data(const Symbol &s) {
  const Program &p = program();
  const Symbol *param = s.isBf16Copy() ? p.argument(bf16CopySource(s.name)) : &s;
  if (param && p.bf16CopyOf(*param) &&
      std::find(exposed_.begin(), exposed_.end(), param) == exposed_.end())
    exposed_.push_back(param);
  return ctx_.at<uint8_t>(s.region, s.offset);
}

Status Executor::run() {
  using Clock = std::chrono::steady_clock;
  ctx_.comm = communicator();
  for (const Symbol *param : exposed_) // their bytes may have been written since the last run
    storeCopy(*param, load(*param));
  for (size_t i = 0; i < p_.steps.size(); ++i) {
    const Step &s = p_.steps[i];
    Clock::time_point t0;
    if (profiling_)
      t0 = Clock::now();
    if (Status st = s(ctx_); !st)
      return st;
    if (profiling_)
      stepSeconds_[i] += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  profiledRuns_ += profiling_ ? 1 : 0;
  for (const PlacedCopy &c : p_.copies)
    std::memcpy(ctx_.at<uint8_t>(c.toRegion, c.to), ctx_.at<uint8_t>(c.fromRegion, c.from),
                static_cast<size_t>(c.bytes));
  return {};
}

void Executor::setProfiling(bool on) {
  profiling_ = on;
  profiledRuns_ = 0;
  stepSeconds_.assign(p_.steps.size(), 0.0);
}

std::vector<Executor::StepTime> Executor::stepProfile() const {
  std::vector<StepTime> out;
  for (size_t i = 0; i < p_.steps.size(); ++i)
    out.push_back({stepSeconds_[i], p_.steps[i].node, p_.steps[i].kind});
  return out;
}

std::map<std::string, Executor::KindTime> Executor::profile() const {
  std::map<std::string, KindTime> kinds;
  for (size_t i = 0; i < p_.steps.size(); ++i) {
    KindTime &k = kinds[p_.steps[i].kind];
    k.seconds += stepSeconds_[i];
    k.calls += profiledRuns_;
  }
  return kinds;
}

int64_t Executor::memoryBytes() const {
  int64_t total = 0;
  for (const AlignedBytes &r : regions_)
    total += r.size;
  return total;
}

std::vector<std::string> Executor::stepKinds() const {
  std::vector<std::string> kinds;
  for (const Step &s : p_.steps)
    kinds.push_back(s.kind);
  return kinds;
}

// The plan lays a tensor out exactly as a HostTensor holds it (row-major, in its dtype's bytes).
void Executor::store(const Symbol &s, const HostTensor &t) {
  std::memcpy(ctx_.at<uint8_t>(s.region, s.offset), t.raw().data(), t.raw().size());
}

HostTensor Executor::load(const Symbol &s) const {
  HostTensor t(s.dtype, s.shape);
  std::memcpy(t.raw().data(), ctx_.at<uint8_t>(s.region, s.offset), t.raw().size());
  return t;
}

} // namespace kiln::runtime
