// init_process_group and the launcher's environment: which backend makes the group, and the
// default group the rest of the library reaches through default_process_group().
#include "halfgrad/distributed/process_group.h"

#include <cstdlib>
#include <mutex>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/distributed/mpi_process_group.h"
#include "halfgrad/distributed/nccl_process_group.h"

namespace hg::distributed {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
  }
  return "?";
}

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::Mpi:
      return "mpi";
    case Backend::Nccl:
      return "nccl";
  }
  return "?";
}

namespace {

// The integer in environment variable `name`, or `fallback` when it is not set.
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  HG_CHECK(*end == '\0' && value >= 0 && value <= (1 << 30),
           "init_process_group: expected a non-negative integer in {}, got '{}'", name, text);
  return int(value);
}

std::mutex default_group_mutex;
std::shared_ptr<ProcessGroup> default_group;

}  // namespace

LaunchEnvironment read_launch_environment() {
  LaunchEnvironment env;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    env.launcher = "mpirun";
    env.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    env.world_size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    env.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  } else if (std::getenv("WORLD_SIZE") != nullptr) {
    env.launcher = "torchrun";
    env.rank = env_int("RANK", 0);
    env.world_size = env_int("WORLD_SIZE", 1);
    env.local_rank = env_int("LOCAL_RANK", 0);
  }
  if (const char* addr = std::getenv("MASTER_ADDR")) env.master_addr = addr;
  env.master_port = env_int("MASTER_PORT", 0);
  HG_CHECK(env.world_size >= 1,
           "init_process_group: expected a world size of at least 1 ({}), got {}", env.launcher,
           env.world_size);
  HG_CHECK(env.rank < env.world_size,
           "init_process_group: expected a rank below the world size {} ({}), got rank {}",
           env.world_size, env.launcher, env.rank);
  return env;
}

std::shared_ptr<ProcessGroup> init_process_group(ProcessGroupOptions options) {
  HG_CHECK(options.timeout.count() > 0,
           "init_process_group: expected a positive timeout, got {} ms", options.timeout.count());
  const LaunchEnvironment env = read_launch_environment();
  std::shared_ptr<ProcessGroup> group;
  switch (options.backend) {
    case Backend::Mpi:
      group = make_mpi_process_group(env, options);
      break;
    case Backend::Nccl:
      group = make_nccl_process_group(env, options);
      break;
  }
  std::lock_guard lock(default_group_mutex);
  default_group = group;
  return group;
}

ProcessGroup& default_process_group() {
  std::lock_guard lock(default_group_mutex);
  HG_CHECK(default_group != nullptr,
           "default_process_group: expected init_process_group to have been called, got no group");
  return *default_group;
}

std::shared_ptr<ProcessGroup> shared_default_process_group() {
  default_process_group();  // its error when there is none
  std::lock_guard lock(default_group_mutex);
  return default_group;
}

bool is_initialized() {
  std::lock_guard lock(default_group_mutex);
  return default_group != nullptr;
}

void destroy_process_group() {
  std::lock_guard lock(default_group_mutex);
  default_group.reset();
}

bool is_mpi_available() { return true; }

void ProcessGroup::check_source_rank(int src) const {
  HG_CHECK(src >= 0 && src < world_size(), "broadcast: expected a source rank in [0, {}), got {}",
           world_size(), src);
}

void ProcessGroup::check_all_gather_sizes(const Tensor& output, const Tensor& input) const {
  HG_CHECK(output.dtype() == input.dtype(),
           "all_gather: expected the output's dtype to be the input's {}, got {}", input.dtype(),
           output.dtype());
  HG_CHECK(output.numel() == input.numel() * world_size(),
           "all_gather: expected an output of world_size * input.numel() = {} * {} = {} "
           "elements, got {} (shape {})",
           world_size(), input.numel(), input.numel() * world_size(), output.numel(),
           output.sizes());
}

void ProcessGroup::check_reduce_scatter_sizes(const Tensor& output, const Tensor& input) const {
  HG_CHECK(output.dtype() == input.dtype(),
           "reduce_scatter: expected the output's dtype to be the input's {}, got {}",
           input.dtype(), output.dtype());
  HG_CHECK(input.numel() == output.numel() * world_size(),
           "reduce_scatter: expected an input of world_size * output.numel() = {} * {} = {} "
           "elements, got {} (shape {})",
           world_size(), output.numel(), output.numel() * world_size(), input.numel(),
           input.sizes());
}

}  // namespace hg::distributed
