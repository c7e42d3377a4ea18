// MPI's world as a Communicator (see mpi_communicator.h).
//
// The reductions a step starts (all_reduce_start) run in the order they were started: on a thread
// of the world's own, while the step goes on (setBackground), or at the first wait. MPI's
// shared-memory and TCP transports make progress only inside MPI calls, so a thread that sits in
// MPI_Allreduce is what lets a reduction proceed while the backward computes; it spins there,
// which is why it needs a core of its own to pay (backgroundPays).
#include "runtime/mpi/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <semaphore>
#include <thread>

#include <mpi.h>

namespace kiln::runtime {

namespace {

// An Error naming the call and what MPI said about its code.
Error mpiError(const char *call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    length = 0;
  return Error{fmt::format("{}: {}", call, length > 0 ? std::string(text, length) : "failed")};
}

// Ends every rank of the job (mpirun stops them), this process's output flushed first.
[[noreturn]] void abortJob() {
  std::fflush(nullptr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1); // (MPI_Abort does not return)
}

// At exit: MPI opened and not closed, as ~MpiWorld leaves it after an error (or a process that
// exits without closing it): the job ends, where MPI_Finalize could wait for ranks that never come.
void abortUnfinished() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    abortJob();
}

// x[0, count) /= ranks: a sum over the ranks made their mean.
void divide(float *x, int64_t count, int ranks) {
  const auto n = static_cast<float>(ranks);
  for (int64_t i = 0; i < count; ++i)
    x[i] /= n;
}

// x[0, count) := the sum over the ranks, then divided by `ranks`. Every rank holds the same sum
// (Open MPI's algorithms reduce each element once and pass the result on, or add commutatively),
// so the quotients agree too.
Status meanInPlace(float *x, int64_t count, int ranks) {
  // MPI counts are ints: a tensor past 2^31 elements goes in parts.
  for (int64_t done = 0; done < count;) {
    const int part = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
    if (int rc = MPI_Allreduce(MPI_IN_PLACE, x + done, part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        rc != MPI_SUCCESS)
      return mpiError("MPI_Allreduce", rc);
    done += part;
  }
  divide(x, count, ranks);
  return {};
}

// Every MPI call after MPI_Init is made by one thread at a time (MPI_THREAD_SERIALIZED): the
// caller's, or, once setBackground(true), the world's own thread, which then makes them all (the
// caller's blocking calls queue behind the reductions started before them, and wait).
class MpiWorld final : public Communicator {
public:
  MpiWorld(int rank, int size, int local) : rank_(rank), size_(size), local_(local) {}
  // Destroyed by an error on its way out (an exception unwinding), it leaves MPI open: another
  // rank may be waiting in a collective this one will never join, and MPI_Finalize would wait
  // with it (a file missing on one machine hung the job, its error never printed). The process
  // prints its error and exits, and abortUnfinished, at exit, ends the whole job.
  ~MpiWorld() override {
    if (!ended_)
      end(std::uncaught_exceptions() > 0);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localSize() const override { return local_; }

  Status endTogether() override {
    if (Status met = call([] {
          const int rc = MPI_Barrier(MPI_COMM_WORLD);
          return rc == MPI_SUCCESS ? Status() : mpiError("MPI_Barrier", rc);
        });
        !met)
      return met;
    end(false);
    return {};
  }

  void setBackground(bool on) override {
    if (on && !thread_.joinable()) {
      flush(); // (what was started before runs first, on this thread)
      thread_ = std::thread([this] { serve(); });
    }
  }

  Status allReduceMean(float *x, int64_t count) override {
    return call([=, this] { return meanInPlace(x, count, size_); });
  }

  Status start(float *x, int64_t count) override {
    std::packaged_task<Status()> job([=, this] { return meanInPlace(x, count, size_); });
    std::lock_guard<std::mutex> lock(mutex_);
    if (!pending_.emplace(x, job.get_future()).second)
      return makeError("all_reduce_start: a reduction of these bytes is under way already");
    (thread_.joinable() ? jobs_ : deferred_).push_back(std::move(job));
    if (thread_.joinable())
      wake_.notify_one();
    return {};
  }

  Status finish(float *x) override {
    std::future<Status> done;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = pending_.find(x);
      if (it == pending_.end())
        return makeError("all_reduce_wait: no reduction of these bytes was started");
      done = std::move(it->second);
      pending_.erase(it);
    }
    flush(); // without the background thread: the reductions started so far, in order, now
    return done.get();
  }

  Status reduceScatterMean(const float *x, float *y, int64_t count) override {
    return call([=, this]() -> Status {
      if (Status s = fitsAnInt("reduce_scatter", count); !s)
        return s;
      if (int rc = MPI_Reduce_scatter_block(x, y, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                            MPI_COMM_WORLD);
          rc != MPI_SUCCESS)
        return mpiError("MPI_Reduce_scatter_block", rc);
      divide(y, count, size_);
      return {};
    });
  }

  Status allGather(const float *x, float *y, int64_t count) override {
    return collect(x, y, count, -1);
  }

  Status gather(const float *x, float *y, int64_t count) override {
    return collect(x, y, count, 0);
  }

  Expected<bool> same(uint64_t value) override {
    // max(v) and max(~v) = ~min(v) in one reduction: the same everywhere iff max == min.
    uint64_t both[2] = {value, ~value};
    if (Status s = call([&] { return reduce(both, 2, MPI_UINT64_T, MPI_MAX); }); !s)
      return s.error();
    return both[0] == ~both[1];
  }

  Expected<double> min(double value) override {
    if (Status s = call([&] { return reduce(&value, 1, MPI_DOUBLE, MPI_MIN); }); !s)
      return s.error();
    return value;
  }

private:
  // The background thread stopped and, unless failing, MPI closed.
  void end(bool failing) {
    ended_ = true;
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
      }
      wake_.notify_one();
      // A failing rank's thread may sit in a reduction the others never join: given a second
      // to finish what it holds, else the job ends here (its error unprinted, but no hang).
      if (failing && !stopped_.try_acquire_for(std::chrono::seconds(1)))
        abortJob();
      thread_.join();
    }
    if (!failing)
      MPI_Finalize();
  }

  // A rank's part is one MPI count (an int): 2^31 floats, 8 GiB, per rank.
  static Status fitsAnInt(const char *what, int64_t count) {
    if (count <= INT_MAX)
      return {};
    return makeError("{}: a rank's part of {} floats is more than MPI's count (an int) holds", what,
                     count);
  }

  // Every rank's x[0, count), in rank order, into y: on every rank (root < 0: MPI_Allgather) or on
  // rank `root` alone (MPI_Gather).
  Status collect(const float *x, float *y, int64_t count, int root) {
    return call([=]() -> Status {
      if (Status s = fitsAnInt(root < 0 ? "all_gather" : "gather", count); !s)
        return s;
      const int n = static_cast<int>(count);
      const int rc = root < 0 ? MPI_Allgather(x, n, MPI_FLOAT, y, n, MPI_FLOAT, MPI_COMM_WORLD)
                              : MPI_Gather(x, n, MPI_FLOAT, y, n, MPI_FLOAT, root, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS)
        return mpiError(root < 0 ? "MPI_Allgather" : "MPI_Gather", rc);
      return {};
    });
  }

  static Status reduce(void *data, int count, MPI_Datatype type, MPI_Op op) {
    if (int rc = MPI_Allreduce(MPI_IN_PLACE, data, count, type, op, MPI_COMM_WORLD);
        rc != MPI_SUCCESS)
      return mpiError("MPI_Allreduce", rc);
    return {};
  }

  // Runs `job` after every reduction started before it: on the background thread, or here.
  Status call(std::function<Status()> job) {
    std::packaged_task<Status()> task(std::move(job));
    std::future<Status> done = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      (thread_.joinable() ? jobs_ : deferred_).push_back(std::move(task));
    }
    if (thread_.joinable())
      wake_.notify_one();
    flush();
    return done.get();
  }

  // The deferred jobs, in order, on the calling thread.
  void flush() {
    for (;;) {
      std::packaged_task<Status()> job;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (deferred_.empty())
          return;
        job = std::move(deferred_.front());
        deferred_.pop_front();
      }
      job();
    }
  }

  void serve() {
    for (;;) {
      std::packaged_task<Status()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) {
          stopped_.release();
          return;
        }
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  int rank_, size_, local_;
  std::mutex mutex_;
  std::condition_variable wake_;
  // Reductions and calls waiting for the background thread (jobs_), or for a finish (deferred_).
  std::deque<std::packaged_task<Status()>> jobs_, deferred_;
  std::map<float *, std::future<Status>> pending_;
  bool stopping_ = false;
  bool ended_ = false;               // end() has run (endTogether, or the destructor)
  std::binary_semaphore stopped_{0}; // released as serve() returns
  std::thread thread_;
};

} // namespace

Expected<std::unique_ptr<Communicator>> mpiWorld() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return makeError("MPI: the world is open already (one per process)");
  // Serialized: one thread at a time calls MPI (the caller's or MpiWorld's own).
  int provided = MPI_THREAD_SINGLE;
  if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      rc != MPI_SUCCESS)
    return mpiError("MPI_Init_thread", rc);
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return makeError("MPI: this MPI library does not allow calls from a second thread "
                     "(MPI_THREAD_SERIALIZED), which kiln's reductions run on");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit(abortUnfinished);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // The ranks that share this machine's memory: a communicator of their own, only counted.
  int local = 1;
  MPI_Comm host;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host) ==
      MPI_SUCCESS) {
    MPI_Comm_size(host, &local);
    MPI_Comm_free(&host);
  }
  return std::unique_ptr<Communicator>(std::make_unique<MpiWorld>(rank, size, local));
}

} // namespace kiln::runtime
