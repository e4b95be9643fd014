// hg::distributed: the process group (rank, world size, collectives with async Work handles)
// and init_process_group, which reads the launcher's environment (mpirun's or torchrun's).
//
//   auto group = hg::distributed::init_process_group({.timeout = std::chrono::seconds(60)});
//   group->all_reduce(grad, hg::distributed::ReduceOp::Avg)->wait();   // grad modified in place
//
// Every collective is called by every rank of the group, in the same order, with tensors of
// the same dtype and shape on each rank; it returns at once with a Work handle, and the
// tensors must stay untouched until wait() returns or is_completed() says true.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "halfgrad/core/tensor.h"

namespace hg::distributed {

enum class ReduceOp {
  Sum,  // bool: logical or
  Avg,  // the sum divided once by the world size; floating-point dtypes only
  Max,  // bool: logical or
};
std::string_view reduce_op_name(ReduceOp op);

enum class Backend {
  Mpi,   // CPU tensors, through the MPI library mpirun started the ranks with
  Nccl,  // CUDA tensors, on halfgrad's current stream (built when NCCL is found)
};
std::string_view backend_name(Backend backend);

// A collective in flight. wait() blocks until it is done on this rank (for NCCL: until it is
// enqueued on the current stream, which later work then follows without a host sync), or
// throws an hg::Error naming the collective, the rank and the timeout when the other ranks
// do not come within the group's timeout (NOTE [Collective timeouts]).
class Work {
 public:
  virtual ~Work() = default;
  virtual bool is_completed() = 0;
  virtual void wait() = 0;
};

// Where this process sits in the job, as the launcher said.
struct LaunchEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string launcher = "none";  // "mpirun", "torchrun" or "none" (one process)
  std::string master_addr = "";   // torchrun's rendezvous address, when set
  int master_port = 0;
};

// Reads OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (mpirun) or RANK / WORLD_SIZE /
// LOCAL_RANK / MASTER_ADDR / MASTER_PORT (torchrun); mpirun's win when both are set. Throws
// when a value is not a number or the rank lies outside the world.
LaunchEnvironment read_launch_environment();

struct ProcessGroupOptions {
  Backend backend = Backend::Mpi;
  // How long wait() lets the other ranks be late; PyTorch's default, 30 minutes.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual Backend backend() const = 0;

  // Every rank's `tensor` becomes the reduction of all ranks' tensors.
  virtual std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum) = 0;
  // Every rank's `tensor` becomes rank `src`'s.
  virtual std::shared_ptr<Work> broadcast(const Tensor& tensor, int src) = 0;
  // `output` (world_size * input.numel() elements, input's dtype) gets rank r's `input` in its
  // r-th block, on every rank (torch's all_gather_into_tensor).
  virtual std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) = 0;
  // `input` holds world_size blocks of output.numel() elements; rank r's `output` gets the
  // reduction over the ranks of block r (torch's reduce_scatter_tensor).
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                               ReduceOp op = ReduceOp::Sum) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;

 protected:
  ProcessGroup(int rank, int world_size, int local_rank, std::chrono::milliseconds timeout)
      : rank_(rank), world_size_(world_size), local_rank_(local_rank), timeout_(timeout) {}

  // The checks every backend makes of its arguments, with the same messages: a source rank of
  // the group; all_gather's output and reduce_scatter's input of world_size blocks of the other
  // tensor's elements, in its dtype.
  void check_source_rank(int src) const;
  void check_all_gather_sizes(const Tensor& output, const Tensor& input) const;
  void check_reduce_scatter_sizes(const Tensor& output, const Tensor& input) const;

 private:
  int rank_;
  int world_size_;
  int local_rank_;
  std::chrono::milliseconds timeout_;
};

// Creates a process group over every rank of the job (collective: every rank calls it) and
// makes it the default group. The MPI backend initialises MPI on first use and finalises it
// at exit.
std::shared_ptr<ProcessGroup> init_process_group(ProcessGroupOptions options = {});
// The group the last init_process_group made; throws when there is none.
ProcessGroup& default_process_group();
// The same group, shared (for objects that keep using it, as DistributedDataParallel).
std::shared_ptr<ProcessGroup> shared_default_process_group();
bool is_initialized();
// Forgets the default group (MPI itself stays initialised until exit).
void destroy_process_group();

// Whether this build has each backend.
bool is_mpi_available();
bool is_nccl_available();

}  // namespace hg::distributed
