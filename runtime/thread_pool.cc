// The thread pool (see thread_pool.h): workers sleep on a condition variable between jobs and
// take parts from one atomic counter, so a job of P parts costs one wake-up, not P.
#include "runtime/thread_pool.h"

#include <algorithm>

namespace kiln::runtime {

ThreadPool::ThreadPool(int threads) {
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

void ThreadPool::drain(int worker) {
  for (int64_t p = next_.fetch_add(1); p < parts_; p = next_.fetch_add(1))
    (*fn_)(p, worker);
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
    parts_ = parts;
    next_.store(0);
    running_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  drain(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return running_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::work(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_)
        return;
      seen = generation_;
    }
    drain(worker);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--running_ == 0)
        done_.notify_one();
    }
  }
}

} // namespace kiln::runtime
