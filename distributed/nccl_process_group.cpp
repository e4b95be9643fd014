// ProcessGroupNccl: the collectives on CUDA tensors through NCCL, enqueued on halfgrad's current
// stream of the tensor's device, the communicator's unique id sent from rank 0 over MPI.
#include "halfgrad/distributed/nccl_process_group.h"

#include <nccl.h>

#include <climits>
#include <cstdio>

#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/distributed/mpi_process_group.h"

namespace hg::distributed {

// NOTE [NCCL on the current stream] Each collective is enqueued on halfgrad's current stream of
// the tensor's device (NOTE [One current stream per device]), so the ops that follow it on that
// stream see its result with no host sync and no cross-stream event; the host never waits.
// Work::wait() therefore returns at once (what comes after is ordered by the stream), and
// is_completed() asks an event recorded after the collective. The host-side timeout of the MPI
// backend does not apply: a rank that never comes leaves the stream blocked, and the
// watchdog that would turn that into an error (ncclCommGetAsyncError, ncclCommAbort) is not
// here yet.

namespace {

void check_nccl(ncclResult_t result, std::string_view what) {
  HG_CHECK(result == ncclSuccess, "{}: NCCL failed: {}", what, ncclGetErrorString(result));
}

// The NCCL type that reduces `dtype`, or none (int16: NCCL has no 16-bit integer).
bool reduction_type(DType dtype, ncclDataType_t* type) {
  switch (dtype) {
    case DType::Float32:
      *type = ncclFloat32;
      return true;
    case DType::Float16:
      *type = ncclFloat16;
      return true;
    case DType::BFloat16:
      *type = ncclBfloat16;
      return true;
    case DType::Float64:
      *type = ncclFloat64;
      return true;
    case DType::Int64:
      *type = ncclInt64;
      return true;
    case DType::Int32:
      *type = ncclInt32;
      return true;
    case DType::Int8:
      *type = ncclInt8;
      return true;
    case DType::UInt8:
    case DType::Bool:
      *type = ncclUint8;
      return true;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    case DType::Float8_e4m3fn:
      *type = ncclFloat8e4m3;
      return true;
    case DType::Float8_e5m2:
      *type = ncclFloat8e5m2;
      return true;
#endif
    default:
      return false;
  }
}

ncclDataType_t reduction_type_or_throw(std::string_view collective, DType dtype) {
  ncclDataType_t type;
  HG_CHECK(reduction_type(dtype, &type),
           "{}: the NCCL backend expected a dtype NCCL reduces, got {}", collective, dtype);
  return type;
}

ncclRedOp_t nccl_op(std::string_view collective, DType dtype, ReduceOp op) {
  HG_CHECK(op != ReduceOp::Avg || is_floating_point(dtype),
           "{}: ReduceOp::Avg expected a floating-point tensor, got {}", collective, dtype);
  // Bools travel as bytes 0 and 1: their sum and their max are both "or" as max.
  if (dtype == DType::Bool) return ncclMax;
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
  }
  return ncclSum;
}

class NcclWork final : public Work {
 public:
  NcclWork(std::vector<Tensor> tensors, cudaStream_t stream) : tensors_(std::move(tensors)) {
    done_.record(stream);
  }
  bool is_completed() override { return done_.query(); }
  void wait() override {}  // NOTE [NCCL on the current stream]

 private:
  std::vector<Tensor> tensors_;  // alive until the handle goes (the allocator is stream-ordered)
  cuda::Event done_;
};

class ProcessGroupNccl final : public ProcessGroup {
 public:
  ProcessGroupNccl(ncclComm_t comm, int rank, int world_size, int local_rank, int device,
                   std::chrono::milliseconds timeout)
      : ProcessGroup(rank, world_size, local_rank, timeout), comm_(comm), device_(device) {}

  ~ProcessGroupNccl() override { ncclCommDestroy(comm_); }

  Backend backend() const override { return Backend::Nccl; }

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) override {
    constexpr std::string_view name = "all_reduce";
    check_cuda_tensor(name, "", tensor);
    const ncclDataType_t type = reduction_type_or_throw(name, tensor.dtype());
    const ncclRedOp_t reduce = nccl_op(name, tensor.dtype(), op);
    const cudaStream_t stream = cuda::current_stream(device_);
    check_nccl(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), size_t(tensor.numel()), type,
                             reduce, comm_, stream),
               name);
    return std::make_shared<NcclWork>(std::vector<Tensor>{tensor}, stream);
  }

  std::shared_ptr<Work> broadcast(const Tensor& tensor, int src) override {
    constexpr std::string_view name = "broadcast";
    check_cuda_tensor(name, "", tensor);
    check_source_rank(src);
    const cudaStream_t stream = cuda::current_stream(device_);
    check_nccl(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.nbytes(), ncclUint8, src,
                             comm_, stream),
               name);
    return std::make_shared<NcclWork>(std::vector<Tensor>{tensor}, stream);
  }

  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override {
    constexpr std::string_view name = "all_gather";
    check_cuda_tensor(name, "input ", input);
    check_cuda_tensor(name, "output ", output);
    check_all_gather_sizes(output, input);
    const cudaStream_t stream = cuda::current_stream(device_);
    check_nccl(ncclAllGather(input.data_ptr(), output.data_ptr(), input.nbytes(), ncclUint8, comm_,
                             stream),
               name);
    return std::make_shared<NcclWork>(std::vector<Tensor>{output, input}, stream);
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                       ReduceOp op) override {
    constexpr std::string_view name = "reduce_scatter";
    check_cuda_tensor(name, "input ", input);
    check_cuda_tensor(name, "output ", output);
    check_reduce_scatter_sizes(output, input);
    const ncclDataType_t type = reduction_type_or_throw(name, input.dtype());
    const ncclRedOp_t reduce = nccl_op(name, input.dtype(), op);
    const cudaStream_t stream = cuda::current_stream(device_);
    check_nccl(ncclReduceScatter(input.data_ptr(), output.data_ptr(), size_t(output.numel()), type,
                                 reduce, comm_, stream),
               name);
    return std::make_shared<NcclWork>(std::vector<Tensor>{output, input}, stream);
  }

  // NCCL has no barrier: an all_reduce of one byte on the current stream orders the same way.
  std::shared_ptr<Work> barrier() override {
    const cudaStream_t stream = cuda::current_stream(device_);
    if (!barrier_byte_.defined()) {
      barrier_byte_ = zeros({1}, {.dtype = kUInt8, .device = Device(kCUDA, device_)});
    }
    check_nccl(ncclAllReduce(barrier_byte_.data_ptr(), barrier_byte_.data_ptr(), 1, ncclUint8,
                             ncclSum, comm_, stream),
               "barrier");
    return std::make_shared<NcclWork>(std::vector<Tensor>{barrier_byte_}, stream);
  }

 private:
  void check_cuda_tensor(std::string_view collective, std::string_view role,
                         const Tensor& tensor) const {
    HG_CHECK(tensor.defined(), "{}: expected a defined {}tensor, got an undefined one", collective,
             role);
    HG_CHECK(tensor.is_cuda() && tensor.device().index == device_,
             "{}: the NCCL backend expected a {}tensor on cuda:{} (this rank's device), got one "
             "on {}",
             collective, role, device_, tensor.device());
    HG_CHECK(tensor.is_contiguous(),
             "{}: expected a contiguous {}tensor, got sizes {} with strides {}", collective, role,
             tensor.sizes(), tensor.strides());
  }

  ncclComm_t comm_;
  int device_;
  Tensor barrier_byte_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_process_group(const LaunchEnvironment& env,
                                                      const ProcessGroupOptions& options) {
  detail::ensure_mpi_initialized();
  const int rank = detail::mpi_world_rank();
  const int world_size = detail::mpi_world_size();
  HG_CHECK(env.launcher == "none" || (env.rank == rank && env.world_size == world_size),
           "init_process_group: the NCCL backend expected the {} environment's rank {} of {} to "
           "be MPI's, got rank {} of {} from MPI (start the job with mpirun)",
           env.launcher, env.rank, env.world_size, rank, world_size);
  int devices = 0;
  HG_CUDA_CHECK(cudaGetDeviceCount(&devices), "init_process_group");
  HG_CHECK(env.local_rank < devices,
           "init_process_group: the NCCL backend expected a GPU for local rank {}, got {} GPUs",
           env.local_rank, devices);
  ncclUniqueId id;
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "init_process_group");
  detail::mpi_broadcast_world(&id, sizeof(id), 0);
  cuda::DeviceGuard guard(env.local_rank);
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, world_size, id, rank), "init_process_group");
  return std::make_shared<ProcessGroupNccl>(comm, rank, world_size, env.local_rank, env.local_rank,
                                            options.timeout);
}

bool is_nccl_available() { return true; }

}  // namespace hg::distributed
