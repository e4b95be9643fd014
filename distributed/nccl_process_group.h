// The NCCL backend of the process group (CUDA tensors), built when CUDA and NCCL are found;
// without them make_nccl_process_group says so in an hg::Error.
#pragma once

#include <memory>

#include "halfgrad/distributed/process_group.h"

namespace hg::distributed {

// A group over every rank, one GPU each (the local rank's device), its NCCL unique id sent
// from rank 0 over MPI, or under torchrun over a TCPStore at MASTER_ADDR:MASTER_PORT (rank 0
// its master; no MPI needed). Collectives enqueue on halfgrad's current CUDA stream; a watchdog
// thread aborts the communicator when one is not done within the group's timeout.
std::shared_ptr<ProcessGroup> make_nccl_process_group(const LaunchEnvironment& env,
                                                      const ProcessGroupOptions& options);

}  // namespace hg::distributed
