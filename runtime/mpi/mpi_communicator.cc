// MPI's world as a Communicator (see mpi_communicator.h).
#include "runtime/mpi/mpi_communicator.h"

#include <algorithm>
#include <climits>

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

class MpiWorld final : public Communicator {
public:
  MpiWorld(int rank, int size, int local) : rank_(rank), size_(size), local_(local) {}
  ~MpiWorld() override { MPI_Finalize(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localSize() const override { return local_; }

  Status allReduceMean(float *x, int64_t count) override {
    // MPI counts are ints: a tensor past 2^31 elements goes in parts.
    for (int64_t done = 0; done < count;) {
      const int part = static_cast<int>(std::min<int64_t>(count - done, INT_MAX));
      if (int rc = MPI_Allreduce(MPI_IN_PLACE, x + done, part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
          rc != MPI_SUCCESS)
        return mpiError("MPI_Allreduce", rc);
      done += part;
    }
    // Every rank holds the same sum (Open MPI's algorithms reduce each element once and pass the
    // result on, or add commutatively), so the quotients agree too.
    const auto n = static_cast<float>(size_);
    for (int64_t i = 0; i < count; ++i)
      x[i] /= n;
    return {};
  }

  Expected<bool> same(uint64_t value) override {
    // max(v) and max(~v) = ~min(v) in one reduction: the same everywhere iff max == min.
    uint64_t both[2] = {value, ~value};
    if (int rc = MPI_Allreduce(MPI_IN_PLACE, both, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        rc != MPI_SUCCESS)
      return mpiError("MPI_Allreduce", rc);
    return both[0] == ~both[1];
  }

  Expected<double> min(double value) override {
    if (int rc = MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
        rc != MPI_SUCCESS)
      return mpiError("MPI_Allreduce", rc);
    return value;
  }

private:
  int rank_, size_, local_;
};

} // namespace

Expected<std::unique_ptr<Communicator>> mpiWorld() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return makeError("MPI: the world is open already (one per process)");
  if (int rc = MPI_Init(nullptr, nullptr); rc != MPI_SUCCESS)
    return mpiError("MPI_Init", rc);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
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
