// ProcessGroupNccl: the collectives on CUDA tensors through NCCL, enqueued on halfgrad's current
// stream of the tensor's device, and the watchdog thread that turns a collective stuck past the
// group's timeout into an error. The communicator's unique id travels from rank 0 over MPI
// (mpirun) or over a TCPStore at MASTER_ADDR:MASTER_PORT (torchrun).
#include "halfgrad/distributed/nccl_process_group.h"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/distributed/mpi_process_group.h"
#include "halfgrad/distributed/tcp_store.h"

namespace hg::distributed {

// NOTE [NCCL on the current stream] Each collective is enqueued on halfgrad's current stream of
// the tensor's device (NOTE [One current stream per device]), so the ops that follow it on that
// stream see its result with no host sync and no cross-stream event; the host never waits.
// Work::wait() therefore returns at once (what comes after is ordered by the stream), and
// is_completed() asks an event recorded after the collective. The host-side timeout of the MPI
// backend does not apply; the watchdog (NOTE [NCCL watchdog]) turns a collective that never
// completes into an error instead: then wait() and is_completed() of every collective not yet
// done throw, as does every later collective of the group.

// NOTE [NCCL watchdog] As torch's ProcessGroupNCCL: each group runs a thread that, every
// 100 ms (less for a short timeout), queries the event recorded after each collective in
// flight and asks ncclCommGetAsyncError. A collective not done within the group's timeout of
// its launch (its launch itself may block, in NCCL's connection setup with a peer that never
// comes, so the watchdog knows it from before the launch), or an asynchronous NCCL error,
// breaks the group: the watchdog remembers the error naming the collective, the rank and the
// timeout, marks every collective in flight failed, prints the error to stderr (the host
// thread may be blocked on the stuck stream, and the abort is what frees it), and calls
// ncclCommAbort, which ends the communicator's kernels. Launches hold a shared lock the abort
// takes exclusively, so no launch uses a communicator being aborted; a launch stuck inside
// NCCL keeps its share, so the watchdog waits at most a second for it and then aborts anyway,
// since the abort is what unblocks it. The destructor stops the watchdog and destroys the
// communicator, unless it was aborted. ncclCommInitRank is not watched: a rank that never
// comes to the group's creation blocks the others there (as in torch's blocking init).

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

using Clock = std::chrono::steady_clock;

// What the watchdog knows of one collective in flight.
struct InFlight {
  explicit InFlight(std::string_view name) : collective(name), started(Clock::now()) {}
  std::string collective;
  Clock::time_point started;          // before its launch: a launch that blocks counts too
  cuda::Event done;                   // recorded after the collective on its stream
  std::atomic<bool> enqueued{false};  // `done` is recorded
  std::atomic<bool> finished{false};  // done, or its launch failed: nothing left to watch
  std::atomic<bool> failed{false};    // still in flight when the group broke
};

// Whether the group broke, and why; shared with the Work handles, which may outlive the group.
struct Health {
  std::atomic<bool> broken{false};
  std::mutex mutex;
  std::string error;  // set once, before `broken`

  [[noreturn]] void rethrow() {
    std::lock_guard lock(mutex);
    HG_ERROR("{}", error);
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::vector<Tensor> tensors, std::shared_ptr<InFlight> in_flight,
           std::shared_ptr<Health> health)
      : tensors_(std::move(tensors)),
        in_flight_(std::move(in_flight)),
        health_(std::move(health)) {}

  bool is_completed() override {
    if (in_flight_->finished && !in_flight_->failed) return true;
    if (in_flight_->failed) health_->rethrow();
    return in_flight_->done.query();
  }

  void wait() override {  // NOTE [NCCL on the current stream]
    if (in_flight_->failed) health_->rethrow();
  }

 private:
  std::vector<Tensor> tensors_;  // alive until the handle goes (the allocator is stream-ordered)
  std::shared_ptr<InFlight> in_flight_;
  std::shared_ptr<Health> health_;
};

class ProcessGroupNccl final : public ProcessGroup {
 public:
  ProcessGroupNccl(ncclComm_t comm, int rank, int world_size, int local_rank, int device,
                   std::chrono::milliseconds timeout)
      : ProcessGroup(rank, world_size, local_rank, timeout),
        comm_(comm),
        device_(device),
        health_(std::make_shared<Health>()),
        watchdog_([this] { watch(); }) {}

  ~ProcessGroupNccl() override {
    {
      std::lock_guard lock(watch_mutex_);
      stopping_ = true;
    }
    watch_wake_.notify_all();
    watchdog_.join();
    if (!health_->broken) ncclCommDestroy(comm_);  // an aborted communicator is gone already
  }

  Backend backend() const override { return Backend::Nccl; }

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) override {
    constexpr std::string_view name = "all_reduce";
    check_cuda_tensor(name, "", tensor);
    const ncclDataType_t type = reduction_type_or_throw(name, tensor.dtype());
    const ncclRedOp_t reduce = nccl_op(name, tensor.dtype(), op);
    return launch(name, {tensor}, [&](cudaStream_t stream) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), size_t(tensor.numel()), type,
                           reduce, comm_, stream);
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& tensor, int src) override {
    constexpr std::string_view name = "broadcast";
    check_cuda_tensor(name, "", tensor);
    check_source_rank(src);
    return launch(name, {tensor}, [&](cudaStream_t stream) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.nbytes(), ncclUint8, src,
                           comm_, stream);
    });
  }

  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override {
    constexpr std::string_view name = "all_gather";
    check_cuda_tensor(name, "input ", input);
    check_cuda_tensor(name, "output ", output);
    check_all_gather_sizes(output, input);
    return launch(name, {output, input}, [&](cudaStream_t stream) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), input.nbytes(), ncclUint8, comm_,
                           stream);
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                       ReduceOp op) override {
    constexpr std::string_view name = "reduce_scatter";
    check_cuda_tensor(name, "input ", input);
    check_cuda_tensor(name, "output ", output);
    check_reduce_scatter_sizes(output, input);
    const ncclDataType_t type = reduction_type_or_throw(name, input.dtype());
    const ncclRedOp_t reduce = nccl_op(name, input.dtype(), op);
    return launch(name, {output, input}, [&](cudaStream_t stream) {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), size_t(output.numel()), type,
                               reduce, comm_, stream);
    });
  }

  // NCCL has no barrier: an all_reduce of one byte on the current stream orders the same way.
  std::shared_ptr<Work> barrier() override {
    throw_if_broken("barrier");
    if (!barrier_byte_.defined()) {
      barrier_byte_ = zeros({1}, {.dtype = kUInt8, .device = Device(kCUDA, device_)});
    }
    return launch("barrier", {barrier_byte_}, [&](cudaStream_t stream) {
      return ncclAllReduce(barrier_byte_.data_ptr(), barrier_byte_.data_ptr(), 1, ncclUint8,
                           ncclSum, comm_, stream);
    });
  }

 private:
  void throw_if_broken(std::string_view collective) {
    if (!health_->broken) return;
    std::lock_guard lock(health_->mutex);
    HG_ERROR("{}: expected a usable process group, got one broken by the NCCL watchdog: {}",
             collective, health_->error);
  }

  // Enqueues the collective `enqueue` makes on the current stream of this rank's device, with
  // the event the watchdog polls after it (NOTE [NCCL watchdog]).
  template <class Enqueue>
  std::shared_ptr<Work> launch(std::string_view collective, std::vector<Tensor> tensors,
                               Enqueue&& enqueue) {
    std::shared_lock launching(launch_mutex_);
    throw_if_broken(collective);
    cuda::DeviceGuard guard(device_);
    const cudaStream_t stream = cuda::current_stream(device_);
    auto in_flight = std::make_shared<InFlight>(collective);
    {
      std::lock_guard lock(watch_mutex_);
      watched_.push_back(in_flight);
    }
    try {
      check_nccl(enqueue(stream), collective);
      in_flight->done.record(stream);
    } catch (...) {
      in_flight->finished = true;  // nothing in flight to watch
      throw;
    }
    in_flight->enqueued = true;
    return std::make_shared<NcclWork>(std::move(tensors), std::move(in_flight), health_);
  }

  // The watchdog thread (NOTE [NCCL watchdog]).
  void watch() {
    cudaSetDevice(device_);  // the events live on this device
    const auto poll_every = std::clamp(timeout() / 10, std::chrono::milliseconds(1),
                                       std::chrono::milliseconds(100));
    std::unique_lock lock(watch_mutex_);
    while (!stopping_) {
      watch_wake_.wait_for(lock, poll_every, [&] { return stopping_; });
      if (stopping_) return;
      std::string failure;
      try {
        failure = find_failure();
      } catch (const std::exception& error) {  // an event query the CUDA runtime failed
        failure = fmt::format("the NCCL watchdog on rank {} could not poll: {}", rank(),
                              error.what());
      }
      if (!failure.empty()) {
        lock.unlock();
        break_group(failure);
        return;
      }
    }
  }

  // Drops the collectives that are done, and says what broke, if anything did. Called with
  // watch_mutex_ held.
  std::string find_failure() {
    const auto now = Clock::now();
    for (auto it = watched_.begin(); it != watched_.end();) {
      InFlight& entry = **it;
      if (entry.finished || (entry.enqueued && entry.done.query())) {
        entry.finished = true;
        it = watched_.erase(it);
        continue;
      }
      if (now - entry.started > timeout()) {
        return fmt::format(
            "{}: rank {} timed out after {} ms waiting for the other ranks (the process group's "
            "timeout); a rank never called {} or called another collective. The NCCL "
            "communicator is aborted and the process group is unusable now (NOTE [NCCL "
            "watchdog])",
            entry.collective, rank(), timeout().count(), entry.collective);
      }
      ++it;
    }
    ncclResult_t async_error = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm_, &async_error);
    if (asked != ncclSuccess) async_error = asked;
    if (async_error != ncclSuccess && async_error != ncclInProgress) {
      return fmt::format(
          "the NCCL communicator of rank {} failed: {} (a peer may have died); it is aborted and "
          "the process group is unusable now (NOTE [NCCL watchdog])",
          rank(), ncclGetErrorString(async_error));
    }
    return "";
  }

  void break_group(const std::string& failure) {
    {
      std::lock_guard lock(health_->mutex);
      health_->error = failure;
    }
    // From here no launch starts; one still inside NCCL gets a second to leave it.
    health_->broken = true;
    std::fprintf(stderr, "hg::distributed: %s\n", failure.c_str());
    std::fflush(stderr);
    std::unique_lock aborting(launch_mutex_, std::defer_lock);
    [[maybe_unused]] const bool alone = aborting.try_lock_for(std::chrono::seconds(1));
    {
      std::lock_guard lock(watch_mutex_);
      for (const auto& entry : watched_) {
        if (!entry->finished) entry->failed = true;
      }
      watched_.clear();
    }
    ncclCommAbort(comm_);
  }

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
  std::shared_ptr<Health> health_;
  std::shared_timed_mutex launch_mutex_;  // launches share it; the abort takes it alone
  std::mutex watch_mutex_;                // guards watched_ and stopping_
  std::condition_variable watch_wake_;
  std::vector<std::shared_ptr<InFlight>> watched_;
  bool stopping_ = false;
  std::thread watchdog_;  // last: it starts once every member above is made
};

// Rank 0's unique id to every rank: over MPI under mpirun (and with no launcher), over a
// TCPStore at MASTER_ADDR:MASTER_PORT under torchrun. Returns MPI's rank and world size, or
// the environment's.
struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  ncclUniqueId id = {};
};

Rendezvous exchange_unique_id(const LaunchEnvironment& env, const ProcessGroupOptions& options) {
  Rendezvous meeting;
  if (env.launcher == "torchrun") {
    meeting.rank = env.rank;
    meeting.world_size = env.world_size;
    // Every rank makes its groups in the same order, so the count names the same group on each;
    // a later group never reads an earlier one's id.
    static std::atomic<int> groups_made{0};
    const std::string key = fmt::format("hg::distributed::nccl unique id {}", groups_made++);
    const std::unique_ptr<TCPStore> store = make_launcher_store(env, options.timeout);
    if (env.rank == 0) {
      check_nccl(ncclGetUniqueId(&meeting.id), "init_process_group");
      const auto* bytes = reinterpret_cast<const uint8_t*>(&meeting.id);
      store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(meeting.id)));
      // The master's server (this store's) serves until every other rank has the id.
      if (env.world_size > 1) store->wait({key + " taken by all"});
    } else {
      const std::vector<uint8_t> bytes = store->get(key);
      HG_CHECK(bytes.size() == sizeof(meeting.id),
               "init_process_group: expected an NCCL unique id of {} bytes from rank 0, got {}",
               sizeof(meeting.id), bytes.size());
      std::memcpy(&meeting.id, bytes.data(), bytes.size());
      if (store->add(key + " taken", 1) == env.world_size - 1) {
        store->set(key + " taken by all", std::string_view(""));
      }
    }
    return meeting;
  }
  detail::ensure_mpi_initialized();
  meeting.rank = detail::mpi_world_rank();
  meeting.world_size = detail::mpi_world_size();
  HG_CHECK(env.launcher == "none" ||
               (env.rank == meeting.rank && env.world_size == meeting.world_size),
           "init_process_group: the NCCL backend expected the {} environment's rank {} of {} to "
           "be MPI's, got rank {} of {} from MPI (start the job with mpirun or torchrun)",
           env.launcher, env.rank, env.world_size, meeting.rank, meeting.world_size);
  if (meeting.rank == 0) check_nccl(ncclGetUniqueId(&meeting.id), "init_process_group");
  detail::mpi_broadcast_world(&meeting.id, sizeof(meeting.id), 0);
  return meeting;
}

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_process_group(const LaunchEnvironment& env,
                                                      const ProcessGroupOptions& options) {
  int devices = 0;
  HG_CUDA_CHECK(cudaGetDeviceCount(&devices), "init_process_group");
  HG_CHECK(env.local_rank < devices,
           "init_process_group: the NCCL backend expected a GPU for local rank {}, got {} GPUs",
           env.local_rank, devices);
  const Rendezvous meeting = exchange_unique_id(env, options);
  cuda::DeviceGuard guard(env.local_rank);
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, meeting.world_size, meeting.id, meeting.rank),
             "init_process_group");
  return std::make_shared<ProcessGroupNccl>(comm, meeting.rank, meeting.world_size,
                                            env.local_rank, env.local_rank, options.timeout);
}

bool is_nccl_available() { return true; }

}  // namespace hg::distributed
