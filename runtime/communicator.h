// The processes of one data-parallel run, as the program's collectives (the all_reduce op's
// kernel, kiln_all_reduce) and the training loop see them: a rank and a size, and the few
// collective operations they use. Under mpirun it is MPI's world (runtime/mpi/, a library of its
// own, so that what does not run under MPI does not link it); else this process alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "support/status.h"

namespace kiln::runtime {

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The ranks on this machine (this one included), which share its cores.
  virtual int localSize() const = 0;
  // x[0, count) := the mean over the ranks of each rank's x: the sum, then divided by size(),
  // every rank ending with the same bits. An Error says what MPI reported.
  virtual Status allReduceMean(float *x, int64_t count) = 0;
  // The same, begun now and ended by finish(x): start returns at once and x's bytes belong to the
  // reduction until finish returns. Reductions run in the order they were started, which every
  // rank keeps alike: in the background (a thread of the communicator's, beside the caller's work)
  // where setBackground(true) asked for it, else one after the other at the first finish.
  virtual Status start(float *x, int64_t count) = 0;
  virtual Status finish(float *x) = 0;
  // The sharded optimizer's (ir/ops/collective.h), blocking, after the reductions started before:
  // y[0, count) := this rank's part [r count, (r + 1) count) of the mean of each rank's
  // x[0, size() count) (on 2 ranks the same bits as allReduceMean's: a + b either way; on more,
  // MPI may add in another order);
  virtual Status reduceScatterMean(const float *x, float *y, int64_t count) = 0;
  // y[0, size() count) := every rank's x[0, count), rank r's at r count;
  virtual Status allGather(const float *x, float *y, int64_t count) = 0;
  // the same on rank 0 only (the others' y is neither written nor needed): a checkpoint's.
  virtual Status gather(const float *x, float *y, int64_t count) = 0;
  // Whether started reductions run in the background. A thread that waits in MPI spins on a core:
  // it pays where it has a core of its own (see backgroundPays), and costs the step otherwise.
  virtual void setBackground(bool on) = 0;
  // Whether every rank passed the same `value` (all learn the answer): how the ranks check that
  // they run the same program on the same data before the first step.
  virtual Expected<bool> same(uint64_t value) = 0;
  // The smallest of the ranks' `value`s, which every rank learns.
  virtual Expected<double> min(double value) = 0;
  // Where every rank has stopped at the same point and written its last output (an early stop,
  // TrainingResult::stopped): the ranks meet and MPI ends here, so that no rank's exit (non-zero,
  // on which mpirun ends the whole job) cuts another's last output short. Nothing to do alone;
  // no collective after it.
  virtual Status endTogether() { return {}; }
  // "rank 1 of 2" (for messages), or "" alone.
  std::string where() const;
};

// This process alone: rank 0 of 1, whose collectives leave their data as it is.
std::unique_ptr<Communicator> aloneCommunicator();

// Whether an MPI launcher started this process (mpirun / mpiexec: Open MPI's OMPI_COMM_WORLD_SIZE,
// or a PMI launcher's PMI_SIZE or PMIX_RANK). Only then does kiln join MPI (mpiWorld): a process
// started on its own stays one, without MPI's start-up (a singleton MPI_Init forks a daemon).
bool launchedByMpi();
// "rank R of N" where a launcher started this process as one of N > 1 (Open MPI's
// OMPI_COMM_WORLD_RANK and _SIZE, or PMI_RANK and PMI_SIZE), else "": what an error line says
// first, so that a failure on one machine of several names it.
std::string launchedRank();
// Whether a launcher started this process as a rank other than 0 (which leaves notes that every
// rank would print alike to rank 0).
bool launchedAsLaterRank();

// The threads a rank's pool takes by default: this machine's cores shared by the ranks on it (a
// pool of every core per rank oversubscribes them, and MPI's busy-waiting collectives then crawl:
// 2 ranks of 2 threads on 2 cores took 56 ms a step where 2 of 1 took 2).
int threadsPerRank(const Communicator &world);

// Whether reductions in the background pay on this machine: its ranks' `threads` each leave a
// core free for the communicator's thread. (Measured on 2 cores, 2 ranks x 1 thread: the benchmark
// GPT's step took 247-275 ms with them in the background, 189-191 ms without.)
bool backgroundPays(const Communicator &world, int threads);

// Rank 0 speaks for a data-parallel run: on the other ranks stdout goes to /dev/null (their
// errors still reach stderr), as soon as the world is known, so that they draw no status either.
Status quietUnlessRankZero(const Communicator &world);

} // namespace kiln::runtime
