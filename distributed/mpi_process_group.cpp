// ProcessGroupMpi: all_reduce, broadcast, all_gather, reduce_scatter and barrier on CPU tensors
// through MPI's nonblocking collectives, with Work handles that poll MPI_Test up to the
// group's timeout.
#include "halfgrad/distributed/mpi_process_group.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"

namespace hg::distributed {

// NOTE [Collective timeouts] wait() polls MPI_Test (yielding, then sleeping 100 us between
// polls) until the collective completes or the group's timeout has passed since it started.
// On timeout it throws an hg::Error naming the collective, the rank and the timeout. MPI
// cannot cancel a collective, so the request stays pending: its buffers are kept alive (a
// late peer may still write into them), every later collective of this process throws, and
// at exit the process calls MPI_Abort instead of MPI_Finalize (which would wait for the
// pending collective forever); mpirun then ends every rank and exits non-zero. A rank that
// dies (a crash, an uncaught exception) is noticed by mpirun itself, which ends the job; the
// timeout covers the rank that is alive but never comes (an exception caught above the
// collective, a deadlock, a different order of collectives).

namespace {

// Process-wide MPI state. MPI runs with MPI_THREAD_SERIALIZED: every MPI call takes `mutex`.
// Never destroyed: the exit handler and abandoned requests outlive every static.
struct MpiRuntime {
  std::mutex mutex;
  bool initialised_here = false;
  std::atomic<bool> broken{false};
  std::string broken_by;  // "all_reduce on rank 0", set once under `mutex`
};

MpiRuntime& runtime() {
  static MpiRuntime* state = new MpiRuntime;
  return *state;
}

void finish_mpi_at_exit() {
  MpiRuntime& rt = runtime();
  std::lock_guard lock(rt.mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (rt.broken) {
    std::fprintf(stderr,
                 "hg::distributed: %s timed out; a pending MPI collective cannot be finalised, "
                 "so the process aborts the MPI job (NOTE [Collective timeouts])\n",
                 rt.broken_by.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, size_t(length));
}

void check_mpi(int code, std::string_view what) {
  HG_CHECK(code == MPI_SUCCESS, "{}: MPI failed: {}", what, mpi_error_string(code));
}

// The MPI type that moves one element's bits unchanged (broadcast, all_gather).
MPI_Datatype bits_type(DType dtype) {
  switch (element_size(dtype)) {
    case 1:
      return MPI_UINT8_T;
    case 2:
      return MPI_UINT16_T;
    case 4:
      return MPI_UINT32_T;
    case 8:
      return MPI_UINT64_T;
  }
  HG_ERROR("hg::distributed: no MPI type for {} ({} bytes)", dtype, element_size(dtype));
}

// NOTE [Reducing 16-bit floats over MPI] MPI has no float16, bfloat16 or float8 type. The
// MPI backend widens such a tensor to float32 (exactly), reduces the float32 copy with
// MPI_FLOAT, and rounds the result once into the tensor; Avg divides the float32 sum by the
// world size before that one rounding. A user-defined MPI_Op over the 16-bit bits would round
// after every pairwise step (log2 or world-size roundings instead of one) and move half the
// bytes; the float32 copy costs bandwidth but gives the float64 sum rounded once, up to
// float32's error, which lies far below a 16-bit ulp. The NCCL backend reduces float16 and
// bfloat16 natively.
struct Reduction {
  MPI_Datatype type;
  MPI_Op op;
  bool widen;  // reduced in a float32 copy (NOTE [Reducing 16-bit floats over MPI])
};

Reduction reduction_for(std::string_view collective, DType dtype, ReduceOp op) {
  HG_CHECK(op != ReduceOp::Avg || is_floating_point(dtype),
           "{}: ReduceOp::Avg expected a floating-point tensor, got {}", collective, dtype);
  const MPI_Op arithmetic = op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  switch (dtype) {
    case DType::Float32:
      return {MPI_FLOAT, arithmetic, false};
    case DType::Float64:
      return {MPI_DOUBLE, arithmetic, false};
    case DType::Int64:
      return {MPI_INT64_T, arithmetic, false};
    case DType::Int32:
      return {MPI_INT32_T, arithmetic, false};
    case DType::Int16:
      return {MPI_INT16_T, arithmetic, false};
    case DType::Int8:
      return {MPI_INT8_T, arithmetic, false};
    case DType::UInt8:
      return {MPI_UINT8_T, arithmetic, false};
    case DType::Bool:
      return {MPI_C_BOOL, MPI_LOR, false};  // sum and max of bools: or
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float8_e4m3fn:
    case DType::Float8_e5m2:
      return {MPI_FLOAT, arithmetic, true};
  }
  HG_ERROR("{}: no MPI reduction for {}", collective, dtype);
}

template <class Narrow>
void widen_as(const void* src, float* dst, int64_t n) {
  const auto* from = static_cast<const Narrow*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(from[i]);
}

template <class Narrow>
void round_as(const float* src, void* dst, int64_t n, float divisor) {
  auto* to = static_cast<Narrow*>(dst);
  for (int64_t i = 0; i < n; ++i) to[i] = Narrow(src[i] / divisor);
}

void widen_to_float(DType dtype, const void* src, float* dst, int64_t n) {
  switch (dtype) {
    case DType::Float16:
      return widen_as<Half>(src, dst, n);
    case DType::BFloat16:
      return widen_as<BFloat16>(src, dst, n);
    case DType::Float8_e4m3fn:
      return widen_as<Float8_e4m3fn>(src, dst, n);
    case DType::Float8_e5m2:
      return widen_as<Float8_e5m2>(src, dst, n);
    default:
      HG_ERROR("hg::distributed: {} is not widened to float32", dtype);
  }
}

// Rounds `src` / `divisor` once into the narrow `dtype`.
void round_from_float(DType dtype, const float* src, void* dst, int64_t n, float divisor) {
  switch (dtype) {
    case DType::Float16:
      return round_as<Half>(src, dst, n, divisor);
    case DType::BFloat16:
      return round_as<BFloat16>(src, dst, n, divisor);
    case DType::Float8_e4m3fn:
      return round_as<Float8_e4m3fn>(src, dst, n, divisor);
    case DType::Float8_e5m2:
      return round_as<Float8_e5m2>(src, dst, n, divisor);
    default:
      HG_ERROR("hg::distributed: {} is not rounded from float32", dtype);
  }
}

// Divides a float32 or float64 tensor's elements by the world size (Avg of the wide types).
void divide_in_place(const Tensor& tensor, int world_size) {
  if (tensor.dtype() == DType::Float64) {
    auto* data = static_cast<double*>(tensor.data_ptr());
    for (int64_t i = 0; i < tensor.numel(); ++i) data[i] /= double(world_size);
  } else {
    auto* data = static_cast<float*>(tensor.data_ptr());
    for (int64_t i = 0; i < tensor.numel(); ++i) data[i] /= float(world_size);
  }
}

void check_cpu_tensor(std::string_view collective, std::string_view role, const Tensor& tensor) {
  HG_CHECK(tensor.defined(), "{}: expected a defined {}tensor, got an undefined one", collective,
           role);
  HG_CHECK(tensor.is_cpu(), "{}: the MPI backend expected a CPU {}tensor, got one on {}",
           collective, role, tensor.device());
  HG_CHECK(tensor.is_contiguous(),
           "{}: expected a contiguous {}tensor, got sizes {} with strides {}", collective, role,
           tensor.sizes(), tensor.strides());
  HG_CHECK(tensor.numel() <= INT_MAX, "{}: expected at most {} elements in the {}tensor, got {}",
           collective, INT_MAX, role, tensor.numel());
}

// What a collective in flight holds: its request, the tensors and float32 copies MPI reads
// and writes, and what to do once it completes (round a float32 copy back, divide for Avg).
struct Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<Tensor> tensors;
  std::vector<float> staging_in;
  std::vector<float> staging_out;
  std::function<void()> on_complete;
};

// Where a reduction of `input` into `output` (the same tensor when in_place: all_reduce) sends from
// and receives into. 16-bit and float8 values go through float32 staging in `pending` and are
// rounded back once it completes (NOTE [Reducing 16-bit floats over MPI]), Avg dividing the
// float32 sum first; other dtypes reduce in place and Avg divides the result.
struct ReductionBuffers {
  const void* send;
  void* receive;
};
ReductionBuffers stage_reduction(Pending& pending, const Tensor& input, const Tensor& output,
                                 bool in_place, const Reduction& reduction, ReduceOp op,
                                 int world_size) {
  if (!reduction.widen) {
    if (op == ReduceOp::Avg) {
      pending.on_complete = [output, world_size] { divide_in_place(output, world_size); };
    }
    return {input.data_ptr(), output.data_ptr()};
  }
  pending.staging_in.resize(size_t(input.numel()));
  widen_to_float(input.dtype(), input.data_ptr(), pending.staging_in.data(), input.numel());
  std::vector<float>& result = in_place ? pending.staging_in : pending.staging_out;
  result.resize(size_t(output.numel()));
  const float divisor = op == ReduceOp::Avg ? float(world_size) : 1.0f;
  pending.on_complete = [&result, output, divisor] {
    round_from_float(output.dtype(), result.data(), output.data_ptr(), output.numel(), divisor);
  };
  return {pending.staging_in.data(), result.data()};
}

// Collectives that timed out: MPI may still write into their buffers, so they live on.
std::vector<std::unique_ptr<Pending>>& abandoned() {
  static auto* list = new std::vector<std::unique_ptr<Pending>>;
  return *list;
}

class MpiWork final : public Work {
 public:
  MpiWork(std::string collective, int rank, std::chrono::milliseconds timeout,
          std::unique_ptr<Pending> pending)
      : collective_(std::move(collective)),
        rank_(rank),
        timeout_(timeout),
        started_(std::chrono::steady_clock::now()),
        pending_(std::move(pending)) {}

  // A handle dropped before its collective completed waits for it: MPI may not free a
  // collective's request, and its buffers must outlive it. A timeout here is not thrown from
  // a destructor; it breaks the group as in wait().
  ~MpiWork() override {
    if (pending_ == nullptr) return;
    try {
      wait();
    } catch (const Error& error) {
      std::fprintf(stderr, "hg::distributed: %s\n", error.what());
    }
  }

  // A collective that timed out never completes: is_completed() stays false, and wait()
  // throws its timeout again.
  bool is_completed() override {
    if (!timeout_error_.empty()) return false;
    return pending_ == nullptr || test();
  }

  void wait() override {
    using namespace std::chrono;
    if (!timeout_error_.empty()) HG_ERROR("{}", timeout_error_);
    int polls = 0;
    while (pending_ != nullptr && !test()) {
      if (steady_clock::now() - started_ >= timeout_) time_out();
      if (++polls < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(microseconds(100));
      }
    }
  }

 private:
  // One MPI_Test; on completion runs the completion step and releases the buffers.
  bool test() {
    MpiRuntime& rt = runtime();
    int done = 0;
    {
      std::lock_guard lock(rt.mutex);
      const int code = MPI_Test(&pending_->request, &done, MPI_STATUS_IGNORE);
      check_mpi(code, collective_);
    }
    if (!done) return false;
    std::unique_ptr<Pending> finished = std::move(pending_);
    if (finished->on_complete) finished->on_complete();
    return true;
  }

  [[noreturn]] void time_out() {
    MpiRuntime& rt = runtime();
    {
      std::lock_guard lock(rt.mutex);
      if (!rt.broken) rt.broken_by = fmt::format("{} on rank {}", collective_, rank_);
      rt.broken = true;
      abandoned().push_back(std::move(pending_));
    }
    timeout_error_ = fmt::format(
        "{}: rank {} timed out after {} ms waiting for the other ranks (the process group's "
        "timeout); a rank never called {} or called another collective. The process group is "
        "unusable now and the MPI job aborts at exit (NOTE [Collective timeouts])",
        collective_, rank_, timeout_.count(), collective_);
    HG_ERROR("{}", timeout_error_);
  }

  std::string collective_;
  int rank_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point started_;
  std::unique_ptr<Pending> pending_;
  std::string timeout_error_;  // set once the collective timed out
};

class ProcessGroupMpi final : public ProcessGroup {
 public:
  ProcessGroupMpi(MPI_Comm comm, int rank, int world_size, int local_rank,
                  std::chrono::milliseconds timeout)
      : ProcessGroup(rank, world_size, local_rank, timeout), comm_(comm) {}

  ~ProcessGroupMpi() override {
    MpiRuntime& rt = runtime();
    std::lock_guard lock(rt.mutex);
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A communicator with a timed-out collective pending is left to MPI_Abort.
    if (!finalized && !rt.broken) MPI_Comm_free(&comm_);
  }

  Backend backend() const override { return Backend::Mpi; }

  std::shared_ptr<Work> all_reduce(const Tensor& tensor, ReduceOp op) override {
    constexpr std::string_view name = "all_reduce";
    check_cpu_tensor(name, "", tensor);
    const Reduction reduction = reduction_for(name, tensor.dtype(), op);
    auto pending = std::make_unique<Pending>();
    pending->tensors = {tensor};
    const int n = int(tensor.numel());
    void* buffer =
        stage_reduction(*pending, tensor, tensor, /*in_place=*/true, reduction, op, world_size())
            .receive;
    return start(name, std::move(pending), [&](MPI_Request* request) {
      return MPI_Iallreduce(MPI_IN_PLACE, buffer, n, reduction.type, reduction.op, comm_, request);
    });
  }

  std::shared_ptr<Work> broadcast(const Tensor& tensor, int src) override {
    constexpr std::string_view name = "broadcast";
    check_cpu_tensor(name, "", tensor);
    check_source_rank(src);
    auto pending = std::make_unique<Pending>();
    pending->tensors = {tensor};
    return start(name, std::move(pending), [&](MPI_Request* request) {
      return MPI_Ibcast(tensor.data_ptr(), int(tensor.numel()), bits_type(tensor.dtype()), src,
                        comm_, request);
    });
  }

  std::shared_ptr<Work> all_gather(const Tensor& output, const Tensor& input) override {
    constexpr std::string_view name = "all_gather";
    check_cpu_tensor(name, "input ", input);
    check_cpu_tensor(name, "output ", output);
    check_all_gather_sizes(output, input);
    const int n = int(input.numel());
    const MPI_Datatype type = bits_type(input.dtype());
    // The input may be this rank's block of the output (torch's in-place form).
    const auto* own_block =
        static_cast<const char*>(output.data_ptr()) + size_t(rank()) * input.nbytes();
    const void* send = own_block == input.data_ptr() ? MPI_IN_PLACE : input.data_ptr();
    auto pending = std::make_unique<Pending>();
    pending->tensors = {output, input};
    return start(name, std::move(pending), [&](MPI_Request* request) {
      return MPI_Iallgather(send, n, type, output.data_ptr(), n, type, comm_, request);
    });
  }

  std::shared_ptr<Work> reduce_scatter(const Tensor& output, const Tensor& input,
                                       ReduceOp op) override {
    constexpr std::string_view name = "reduce_scatter";
    check_cpu_tensor(name, "input ", input);
    check_cpu_tensor(name, "output ", output);
    check_reduce_scatter_sizes(output, input);
    const Reduction reduction = reduction_for(name, input.dtype(), op);
    auto pending = std::make_unique<Pending>();
    pending->tensors = {output, input};
    const int n = int(output.numel());
    const ReductionBuffers buffers =
        stage_reduction(*pending, input, output, /*in_place=*/false, reduction, op, world_size());
    return start(name, std::move(pending), [&](MPI_Request* request) {
      return MPI_Ireduce_scatter_block(buffers.send, buffers.receive, n, reduction.type,
                                       reduction.op, comm_, request);
    });
  }

  std::shared_ptr<Work> barrier() override {
    return start("barrier", std::make_unique<Pending>(),
                 [&](MPI_Request* request) { return MPI_Ibarrier(comm_, request); });
  }

 private:
  // Starts the collective `launch` posts, under the MPI lock, unless a timeout broke MPI.
  template <class Launch>
  std::shared_ptr<Work> start(std::string_view collective, std::unique_ptr<Pending> pending,
                              Launch&& launch) {
    MpiRuntime& rt = runtime();
    {
      std::lock_guard lock(rt.mutex);
      HG_CHECK(!rt.broken,
               "{}: expected a usable process group, got one broken by an earlier timeout ({}; "
               "NOTE [Collective timeouts])",
               collective, rt.broken_by);
      check_mpi(launch(&pending->request), collective);
    }
    return std::make_shared<MpiWork>(std::string(collective), rank(), timeout(),
                                     std::move(pending));
  }

  MPI_Comm comm_;
};

}  // namespace

namespace detail {

void ensure_mpi_initialized() {
  MpiRuntime& rt = runtime();
  std::lock_guard lock(rt.mutex);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  HG_CHECK(provided >= MPI_THREAD_SERIALIZED,
           "init_process_group: expected MPI to give MPI_THREAD_SERIALIZED ({}), got level {}",
           int(MPI_THREAD_SERIALIZED), provided);
  rt.initialised_here = true;
  std::atexit(finish_mpi_at_exit);
}

void mpi_broadcast_world(void* data, size_t bytes, int root) {
  HG_CHECK(bytes <= size_t(INT_MAX), "mpi_broadcast_world: expected at most {} bytes, got {}",
           INT_MAX, bytes);
  std::lock_guard lock(runtime().mutex);
  check_mpi(MPI_Bcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

int mpi_world_rank() {
  int rank = 0;
  std::lock_guard lock(runtime().mutex);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_world_size() {
  int size = 0;
  std::lock_guard lock(runtime().mutex);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

}  // namespace detail

std::shared_ptr<ProcessGroup> make_mpi_process_group(const LaunchEnvironment& env,
                                                     const ProcessGroupOptions& options) {
  detail::ensure_mpi_initialized();
  MpiRuntime& rt = runtime();
  std::lock_guard lock(rt.mutex);
  HG_CHECK(!rt.broken,
           "init_process_group: expected a usable MPI, got one broken by an earlier timeout ({})",
           rt.broken_by);
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "init_process_group");
  // Errors come back as codes, which become hg::Errors, instead of aborting the job.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int rank = 0, world_size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world_size);
  if (env.launcher != "none" && (env.rank != rank || env.world_size != world_size)) {
    MPI_Comm_free(&comm);
    HG_ERROR(
        "init_process_group: the MPI backend expected the {} environment's rank {} of {} "
        "to be MPI's, got rank {} of {} from MPI (start the job with mpirun)",
        env.launcher, env.rank, env.world_size, rank, world_size);
  }
  return std::make_shared<ProcessGroupMpi>(comm, rank, world_size, env.local_rank, options.timeout);
}

}  // namespace hg::distributed
