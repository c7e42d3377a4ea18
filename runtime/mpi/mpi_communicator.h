// MPI's world as a Communicator (runtime/communicator.h): the ranks that mpirun started. A
// library of its own (kiln_runtime_mpi), linked by what can run under MPI, so that the runtime
// library itself needs no MPI.
#pragma once

#include <memory>

#include "runtime/communicator.h"

namespace kiln::runtime {

// MPI's world, MPI_Init on making it and MPI_Finalize when it goes (one per process). Errors are
// returned, not fatal (MPI_ERRORS_RETURN), and name what MPI said.
Expected<std::unique_ptr<Communicator>> mpiWorld();

} // namespace kiln::runtime
