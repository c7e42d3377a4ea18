// The pool's default size: KILN_THREADS when set to a valid count, else the machine's cores; a
// bad value is an error naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "runtime/thread_pool.h"

namespace kiln::runtime {
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

} // namespace
} // namespace kiln::runtime
