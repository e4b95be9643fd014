// The NCCL backend of the process group (CUDA tensors), built when CUDA and NCCL are found;
// without them make_nccl_process_group says so in an hg::Error.
#pragma once

#include <memory>

#include "halfgrad/distributed/process_group.h"

namespace hg::distributed {

// A group over every rank, one GPU each (the local rank's device), its NCCL unique id sent
// from rank 0 over MPI. Collectives enqueue on halfgrad's current CUDA stream.
std::shared_ptr<ProcessGroup> make_nccl_process_group(const LaunchEnvironment& env,
                                                      const ProcessGroupOptions& options);

}  // namespace hg::distributed
