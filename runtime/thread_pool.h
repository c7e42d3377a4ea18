// A small persistent thread pool (Highway 1.0.3 has none): kernels split a node's work into
// `parts` fixed pieces and the pool runs them. Which piece a thread runs may vary, but what each
// piece computes never depends on the number of threads -- so results are identical at 1 and N
// threads as long as a kernel's pieces do not depend on threads() (every kernel here splits by
// size alone, and never sums across pieces in an order the schedule decides).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "support/status.h"

namespace kiln::runtime {

class ThreadPool {
public:
  // `threads` >= 1 workers, counting the caller (threads - 1 are started).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(part, worker) for part in [0, parts), spread over the threads, and returns when all
  // have run. `worker` in [0, threads()) names the thread (for per-thread scratch). Thread w
  // first runs its own share, parts [w P / T, (w + 1) P / T) in order, then helps with the
  // others' (see thread_pool.cc). Not reentrant: fn must not call run().
  void run(int64_t parts, const std::function<void(int64_t part, int worker)> &fn);

  // The machine's cores (std::thread::hardware_concurrency, at least 1).
  static int hardwareThreads();

  // The thread count of a pool whose size nobody gave (no --threads): KILN_THREADS if it is set
  // to a valid count, else hardwareThreads(). As OMP_NUM_THREADS for OpenMP, it lets programs
  // that run side by side (a test suite, several jobs) share the cores instead of each spinning
  // on all of them: a worker preempted in the middle of a part keeps its caller waiting.
  static int defaultThreads();

  // KILN_THREADS: nullopt if unset, its count if an integer in [1, 256], else an error naming
  // the variable. Programs check it at startup, so that a bad value is reported, not ignored.
  static Expected<std::optional<int>> threadsVariable();

private:
  void work(int worker);
  void drain(int worker);
  bool enter(uint64_t &seen);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  // Written by run() before it publishes a job in job_ (release); a worker that enters the job
  // (acquire) reads them without the lock.
  const std::function<void(int64_t, int)> *fn_ = nullptr;
  // Each thread's share: the next part to take, and its end (a line each, so that one thread's
  // taking does not invalidate another's counter).
  struct alignas(64) Share {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  std::vector<Share> shares_;
  // The current job: its generation (the high 32 bits), whether the caller has closed it (bit
  // 31) and how many workers are inside it (the rest). A worker enters only an open job; the
  // caller, once it has run out of parts, closes the job and waits only for those inside.
  std::atomic<uint64_t> job_{0};
  std::atomic<bool> stop_{false};
};

// pool->run(parts, fn), or every part in order on the calling thread if there is no pool.
inline void runParts(ThreadPool *pool, int64_t parts,
                     const std::function<void(int64_t part, int worker)> &fn) {
  if (pool) {
    pool->run(parts, fn);
    return;
  }
  for (int64_t p = 0; p < parts; ++p)
    fn(p, 0);
}

} // namespace kiln::runtime
