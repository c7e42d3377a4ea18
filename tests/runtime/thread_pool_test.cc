// The pool's default size: KILN_THREADS when set to a valid count, else the machine's cores; a
// bad value is an error naming the variable. run(): every part exactly once, on a named thread,
// whatever the part and thread counts and however uneven the parts (a thread that ends its share
// takes the others' leftovers), job after job, and done when run() returns.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "runtime/thread_pool.h"

namespace kiln::runtime::thread_pool_test {
namespace {

// Sets KILN_THREADS (or unsets it: nullptr) for one scope, restoring what the test runner set.
class ThreadsVariable {
public:
  explicit ThreadsVariable(const char *value) {
    if (const char *old = std::getenv("KILN_THREADS"))
      old_ = old;
    if (value)
      setenv("KILN_THREADS", value, 1);
    else
      unsetenv("KILN_THREADS");
  }
  ~ThreadsVariable() {
    if (old_)
      setenv("KILN_THREADS", old_->c_str(), 1);
    else
      unsetenv("KILN_THREADS");
  }

private:
  std::optional<std::string> old_;
};

TEST(ThreadPoolSize, KilnThreadsSetsTheDefault) {
  {
    ThreadsVariable v(nullptr);
    EXPECT_EQ(ThreadPool::defaultThreads(), ThreadPool::hardwareThreads());
    ASSERT_TRUE(ThreadPool::threadsVariable().ok());
    EXPECT_EQ(*ThreadPool::threadsVariable(), std::nullopt);
  }
  {
    ThreadsVariable v("3");
    EXPECT_EQ(ThreadPool::defaultThreads(), 3);
  }
  for (const char *bad : {"0", "257", "-1", "2x", "", " 2"}) {
    ThreadsVariable v(bad);
    Expected<std::optional<int>> n = ThreadPool::threadsVariable();
    ASSERT_FALSE(n.ok()) << bad;
    EXPECT_EQ(n.error().message,
              std::string("KILN_THREADS=") + bad + ": expected an integer in [1, 256]");
    EXPECT_EQ(ThreadPool::defaultThreads(), ThreadPool::hardwareThreads());
  }
}

TEST(ThreadPoolRun, EveryPartRunsOnceOnANamedThread) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t parts : {1, 2, 3, 4, 7, 64, 1000}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, " << parts << " parts");
      std::vector<std::atomic<int>> runs(static_cast<size_t>(parts));
      std::atomic<bool> badWorker{false};
      for (int job = 0; job < 20; ++job) // one pool, job after job
        pool.run(parts, [&](int64_t p, int worker) {
          badWorker = badWorker || worker < 0 || worker >= threads;
          // Uneven parts: the first of each share costs more than the rest together.
          volatile int64_t spin = p % 3 == 0 ? 20000 : 10;
          while (spin > 0)
            spin = spin - 1;
          runs[static_cast<size_t>(p)].fetch_add(1);
        });
      EXPECT_FALSE(badWorker);
      for (int64_t p = 0; p < parts; ++p)
        ASSERT_EQ(runs[static_cast<size_t>(p)].load(), 20) << "part " << p;
    }
  }
}

// Many jobs too short for a worker to wake for most of them: the caller takes every part and
// closes the job, so a late worker skips it; one that entered must still be waited for. Each
// part runs once per job, and a job's parts all end before run() returns.
TEST(ThreadPoolRun, ShortJobsEndBeforeRunReturns) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> runs(3);
    for (int job = 1; job <= 20000; ++job) {
      pool.run(3, [&](int64_t p, int) { runs[static_cast<size_t>(p)].fetch_add(1); });
      for (size_t p = 0; p < runs.size(); ++p)
        ASSERT_EQ(runs[p].load(), job) << threads << " threads, job " << job << ", part " << p;
    }
  }
}

} // namespace
} // namespace kiln::runtime::thread_pool_test
