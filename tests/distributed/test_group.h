// The process group the distributed tests share: one MPI group over the ranks mpirun started,
// made on first use with a 30 s timeout (a test that hangs ends with an error naming the
// collective, well inside ctest's limit).
#pragma once

#include <chrono>
#include <memory>

#include "halfgrad/distributed/process_group.h"

namespace hg::distributed_test {

inline distributed::ProcessGroup& group() {
  static std::shared_ptr<distributed::ProcessGroup> made = [] {
    distributed::ProcessGroupOptions options;
    options.timeout = std::chrono::seconds(30);
    return distributed::init_process_group(options);
  }();
  return *made;
}

}  // namespace hg::distributed_test
