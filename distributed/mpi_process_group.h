// The MPI backend of the process group (CPU tensors), and the pieces of MPI the NCCL backend
// shares: MPI's start-up and shutdown, and a broadcast of bytes over the world.
#pragma once

#include <memory>

#include "halfgrad/distributed/process_group.h"

namespace hg::distributed {

// A group over every rank MPI started (its own duplicate of MPI_COMM_WORLD). Checks that
// MPI's ranks agree with the launcher's environment.
std::shared_ptr<ProcessGroup> make_mpi_process_group(const LaunchEnvironment& env,
                                                     const ProcessGroupOptions& options);

namespace detail {
// Initialises MPI once (MPI_THREAD_SERIALIZED) unless the program did, and finalises it at
// exit, or aborts the job there after a collective timed out (NOTE [Collective timeouts]).
void ensure_mpi_initialized();
// Rank `root`'s `bytes` bytes at `data` to every rank of MPI_COMM_WORLD (blocking).
void mpi_broadcast_world(void* data, size_t bytes, int root);
// MPI_COMM_WORLD's rank and size.
int mpi_world_rank();
int mpi_world_size();
}  // namespace detail

}  // namespace hg::distributed
