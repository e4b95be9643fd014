// make_nccl_process_group for builds without NCCL: every call is an error that says why.
#include "halfgrad/core/error.h"
#include "halfgrad/distributed/nccl_process_group.h"

namespace hg::distributed {

std::shared_ptr<ProcessGroup> make_nccl_process_group(const LaunchEnvironment&,
                                                      const ProcessGroupOptions&) {
  HG_ERROR(
      "init_process_group: expected a build with NCCL for Backend::Nccl, got one without "
      "(it needs the CUDA backend and nccl.h / libnccl beside the CUDA toolkit)");
}

bool is_nccl_available() { return false; }

}  // namespace hg::distributed
