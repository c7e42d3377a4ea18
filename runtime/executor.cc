// The executor (see executor.h).
#include "runtime/executor.h"

#include <cstring>

namespace kiln::runtime {

Executor::Executor(ExecutorProgram p, std::string backend, int threads)
    : p_(std::move(p)), backend_(std::move(backend)), pool_(threads) {
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
    if (Status st = s.run(exe->ctx_); !st)
      return st.error();
  return exe;
}

Status Executor::run() {
  using Clock = std::chrono::steady_clock;
  for (size_t i = 0; i < p_.steps.size(); ++i) {
    const Step &s = p_.steps[i];
    Clock::time_point t0;
    if (profiling_)
      t0 = Clock::now();
    if (Status st = s.run(ctx_); !st)
      return st;
    if (profiling_) {
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      KindTime &k = profile_[s.kind];
      k.seconds += seconds;
      ++k.calls;
      stepSeconds_[i] += seconds;
    }
  }
  for (const PlacedCopy &c : p_.copies)
    std::memcpy(ctx_.at<uint8_t>(c.toRegion, c.to), ctx_.at<uint8_t>(c.fromRegion, c.from),
                static_cast<size_t>(c.bytes));
  return {};
}

void Executor::setProfiling(bool on) {
  profiling_ = on;
  profile_.clear();
  stepSeconds_.assign(p_.steps.size(), 0.0);
}

std::vector<Executor::StepTime> Executor::stepProfile() const {
  std::vector<StepTime> out;
  for (size_t i = 0; i < p_.steps.size(); ++i)
    out.push_back(
        {i < stepSeconds_.size() ? stepSeconds_[i] : 0.0, p_.steps[i].node, p_.steps[i].kind});
  return out;
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
