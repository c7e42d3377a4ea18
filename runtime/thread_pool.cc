// The thread pool (see thread_pool.h): workers take parts from atomic counters, so a job of P
// parts costs one hand-off, not P.
//
// Each thread owns a contiguous share of a job's parts and takes those first, in order, then
// the others' that are left. Why shares: consecutive kernels split their rows alike (a GEMM's row
// blocks, then a norm's rows of the same tensor), so a thread mostly reads what it wrote itself,
// from its own caches. With every part from one shared counter, the two threads' parts
// interleaved and each node read about half its input from the other core's caches: at 2
// threads the benchmark GPT's norms ran slower than at 1 (add_layer_norm 2.55 against 1.77 ms a
// step, the layer_norm_backward 1.88 against 1.35, fusion{add reduce_sum} 1.66 against 0.82).
// With shares: 0.70-1.24, 0.78-1.63 and 0.46-1.00 ms at 2 threads, the step 66.2-67.1 ->
// 64.1-65.0 ms (3 alternating runs). Taking the others' leftovers keeps uneven jobs (causal
// attention's row blocks, a thread that woke late) ending together.
//
// Between jobs a worker first spins (kSpin) on the job counter, then sleeps on a condition
// variable; the caller waits for the workers the same way. Why spin: a training step is hundreds
// of kernel calls with a few microseconds of serial work between them, and on this VM waking a
// thread from a futex takes tens of microseconds, which the caller would spend alone on parts
// the worker could have taken (the GEMM alone hands off twice per K block). A spinning worker
// costs a core only while jobs keep coming; after kSpin of quiet it sleeps again.
//
// When other programs share the cores, a thread of ours may be preempted for a scheduler time
// slice (milliseconds), so two rules keep one from stalling the other:
// - The caller waits only for the workers inside the job. Once every part is taken it closes
//   the job; a worker that had not entered it by then (asleep, or not scheduled) skips it. Before,
//   the caller waited for every worker to pass through every job: two 2-thread trainings of a
//   2-layer GPT side by side on 2 cores took 50 ms a step each, against 0.18 ms alone; now 0.23,
//   what 1 thread takes.
// - After kPauseOnly a spinning thread yields its core between checks, so that a thread it waits
//   for (or another program's) can run there. Two benchmark GPT bf16 trainings side by side: 216
//   ms a step each before both rules, 147 with the first, 122 with both (113 at 1 thread each);
//   alone unchanged (59.8-66.0 ms against 58.8-69.0, 4 alternating runs on a noisy host).
#include "runtime/thread_pool.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kiln::runtime {
namespace {

constexpr auto kSpin = std::chrono::microseconds(300);
constexpr auto kPauseOnly = std::chrono::microseconds(20);

// ThreadPool::job_'s fields below its generation.
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kInside = kClosed - 1;

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() holds or kSpin passes; says whether it held.
template <typename Done> bool spinUntil(Done done) {
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + kSpin, yieldFrom = start + kPauseOnly;
  for (int i = 1;; ++i) {
    if (done())
      return true;
    if (i % 64 == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now > until)
        return done();
      if (now > yieldFrom)
        std::this_thread::yield();
    } else {
      relax();
    }
  }
}

} // namespace

ThreadPool::ThreadPool(int threads) : shares_(static_cast<size_t>(std::max(threads, 1))) {
  for (int w = 1; w < std::max(threads, 1); ++w)
    workers_.emplace_back([this, w] { work(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread &t : workers_)
    t.join();
}

int ThreadPool::hardwareThreads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

Expected<std::optional<int>> ThreadPool::threadsVariable() {
  const char *text = std::getenv("KILN_THREADS");
  if (!text)
    return std::optional<int>();
  const std::string_view s(text);
  int n = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || n < 1 || n > 256)
    return makeError("KILN_THREADS={}: expected an integer in [1, 256]", s);
  return std::optional<int>(n);
}

int ThreadPool::defaultThreads() {
  Expected<std::optional<int>> n = threadsVariable();
  return n && *n ? **n : hardwareThreads();
}

// Its own share first, then the others' from where their owners are: a thread that finishes
// early takes their next parts, so an uneven job still ends together.
void ThreadPool::drain(int worker) {
  const size_t t = shares_.size();
  for (size_t k = 0; k < t; ++k) {
    Share &s = shares_[(static_cast<size_t>(worker) + k) % t];
    for (int64_t p = s.next.fetch_add(1); p < s.end; p = s.next.fetch_add(1))
      (*fn_)(p, worker);
  }
}

void ThreadPool::run(int64_t parts, const std::function<void(int64_t, int)> &fn) {
  if (parts <= 0)
    return;
  if (workers_.empty() || parts == 1) {
    for (int64_t p = 0; p < parts; ++p)
      fn(p, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    const auto t = static_cast<int64_t>(shares_.size());
    for (int64_t w = 0; w < t; ++w) {
      shares_[static_cast<size_t>(w)].next.store(parts * w / t);
      shares_[static_cast<size_t>(w)].end = parts * (w + 1) / t;
    }
    // The next generation, open, nobody inside (the generation wraps at 2^32).
    job_.store(((job_.load(std::memory_order_relaxed) >> 32) + 1) << 32, std::memory_order_release);
  }
  wake_.notify_all();
  drain(0);
  // Every part is taken. Close the job and wait only for the workers inside it, still running
  // their last parts: one that has not entered (asleep, or preempted by another program) would
  // find nothing to do, and waiting for it to be scheduled cost a time slice per job.
  const auto inside = [&] { return job_.load(std::memory_order_acquire) & kInside; };
  if ((job_.fetch_or(kClosed, std::memory_order_acq_rel) & kInside) != 0 &&
      !spinUntil([&] { return inside() == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return inside() == 0; });
  }
  fn_ = nullptr;
}

// Enters the newest job if it is still open; `seen` becomes its generation either way.
bool ThreadPool::enter(uint64_t &seen) {
  uint64_t job = job_.load(std::memory_order_acquire);
  do {
    seen = job >> 32;
    if (job & kClosed)
      return false;
  } while (!job_.compare_exchange_weak(job, job + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire));
  return true;
}

void ThreadPool::work(int worker) {
  uint64_t seen = 0;
  for (;;) {
    auto fresh = [&] {
      return stop_.load(std::memory_order_acquire) ||
             (job_.load(std::memory_order_acquire) >> 32) != seen;
    };
    if (!spinUntil(fresh)) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, fresh);
    }
    if (stop_)
      return;
    if (!enter(seen))
      continue;
    drain(worker);
    // The last worker out of a closed job tells the caller, under the lock so that a caller
    // about to sleep on done_ cannot miss it.
    const uint64_t left = job_.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if ((left & kClosed) && (left & kInside) == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

} // namespace kiln::runtime
