// Streams, events, the device guard, graphs and the device-error slots (stream.h).
#include "halfgrad/cuda/stream.h"

#include <array>
#include <bit>
#include <mutex>

#include "halfgrad/cuda/allocator.h"
#include "halfgrad/cuda/cuda.h"
#include "halfgrad/cuda/host.h"

namespace hg::cuda {

namespace {

constexpr int kMaxDevices = 64;

// What each device gets once, on first use: halfgrad's stream and the device-error slot.
struct DeviceResources {
  std::once_flag once;
  cudaStream_t stream = nullptr;
  detail::DeviceErrorSlot* error_slot = nullptr;  // mapped host memory
};

std::array<DeviceResources, kMaxDevices>& resources() {
  static auto* table = new std::array<DeviceResources, kMaxDevices>();  // never destroyed:
  return *table;  // tensors freed during static destruction may still reach a device
}

int checked_device(int device, const char* op) {
  if (device < 0) device = current_device();
  HG_CHECK(device < device_count() && device < kMaxDevices,
           "{}: expected a CUDA device index below {}, got {}", op, device_count(), device);
  return device;
}

DeviceResources& resources_of(int device) {
  DeviceResources& r = resources()[size_t(device)];
  std::call_once(r.once, [&] {
    DeviceGuard guard(device);
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cuda stream");
    void* slot = nullptr;
    HG_CUDA_CHECK(cudaHostAlloc(&slot, sizeof(detail::DeviceErrorSlot), cudaHostAllocMapped),
                  "cuda device-error slot");
    r.error_slot = static_cast<detail::DeviceErrorSlot*>(slot);
    *r.error_slot = {};
  });
  return r;
}

// The streams StreamGuards set, per thread and device (null: halfgrad's stream).
thread_local std::array<cudaStream_t, kMaxDevices> t_stream_override{};

}  // namespace

int current_device() {
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device), "current_device");
  return device;
}

void set_device(int device) {
  HG_CHECK(device >= 0 && device < device_count(),
           "set_device: expected a CUDA device index in [0, {}), got {}", device_count(), device);
  HG_CUDA_CHECK(cudaSetDevice(device), "set_device");
}

void synchronize(int device) {
  HG_CHECK(is_available(), "synchronize: no CUDA device ({})", describe());
  device = checked_device(device, "synchronize");
  DeviceGuard guard(device);
  HG_CUDA_CHECK(cudaDeviceSynchronize(), "synchronize");
  detail::raise_device_error(device);
}

bool is_current_stream_capturing(int device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  HG_CUDA_CHECK(cudaStreamIsCapturing(current_stream(device), &status),
                "is_current_stream_capturing");
  return status != cudaStreamCaptureStatusNone;
}

cudaStream_t current_stream(int device) {
  device = checked_device(device, "current_stream");
  if (cudaStream_t s = t_stream_override[size_t(device)]) return s;
  return resources_of(device).stream;
}

DeviceGuard::DeviceGuard(int device) : previous_(current_device()) {
  if (device != previous_) HG_CUDA_CHECK(cudaSetDevice(device), "DeviceGuard");
}

DeviceGuard::~DeviceGuard() {
  int now = previous_;
  cudaGetDevice(&now);
  if (now != previous_) cudaSetDevice(previous_);  // a destructor must not throw
}

StreamGuard::StreamGuard(cudaStream_t stream, int device)
    : device_(checked_device(device, "StreamGuard")),
      previous_(t_stream_override[size_t(device_)]) {
  t_stream_override[size_t(device_)] = stream;
}

StreamGuard::~StreamGuard() { t_stream_override[size_t(device_)] = previous_; }

// ---- events ------------------------------------------------------------------------------

Event::Event() { HG_CUDA_CHECK(cudaEventCreate(&event_), "Event"); }
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) {
  HG_CUDA_CHECK(cudaEventRecord(event_, stream ? stream : current_stream()), "Event::record");
}
void Event::synchronize() const {
  HG_CUDA_CHECK(cudaEventSynchronize(event_), "Event::synchronize");
}
bool Event::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  HG_CUDA_CHECK(status, "Event::query");
  return true;
}
float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  HG_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_), "Event::elapsed_ms");
  return ms;
}

// ---- graphs ------------------------------------------------------------------------------

Graph::~Graph() {
  if (pool_ != 0 && exec_ == nullptr) {
    // Destroyed during its capture (an exception between capture_begin and capture_end): end
    // the capture and drop what it recorded, so that the stream and the allocator work again.
    DeviceGuard guard(device_);
    detail::end_graph_pool(device_, pool_);
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(stream_, &partial) == cudaSuccess && partial != nullptr) {
      cudaGraphDestroy(partial);
    }
    cudaGetLastError();  // an invalidated capture reports here; nothing more to do with it
  }
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (pool_ != 0) {
    // A replay may still run, on whichever stream was current: the pool's memory goes back
    // once the device is done with it.
    DeviceGuard guard(device_);
    cudaDeviceSynchronize();
    detail::release_graph_pool(device_, pool_);
  }
}

void Graph::capture_begin() {
  HG_CHECK(!exec_ && pool_ == 0, "Graph::capture_begin: this graph has captured already");
  device_ = current_device();
  stream_ = current_stream(device_);
  pool_ = detail::begin_graph_pool(device_);
  // Thread-local mode: a call on this thread that would need the host to wait (a copy to the
  // CPU, a synchronize) fails the capture, which is how a step proves it has none.
  const cudaError_t status = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) {
    detail::end_graph_pool(device_, pool_);
    detail::release_graph_pool(device_, pool_);
    pool_ = 0;
    HG_CUDA_CHECK(status, "Graph::capture_begin");
  }
}

void Graph::capture_end() {
  HG_CHECK(pool_ != 0 && !exec_, "Graph::capture_end: expected a capture in progress");
  detail::end_graph_pool(device_, pool_);
  const cudaError_t status = cudaStreamEndCapture(stream_, &graph_);
  HG_CUDA_CHECK(status, "Graph::capture_end");
  HG_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0), "Graph::capture_end");
}

void Graph::replay() {
  HG_CHECK(exec_ != nullptr, "Graph::replay: expected a captured graph, got none");
  DeviceGuard guard(device_);
  // On the current stream, as torch's replay: in order with the copies that refill the
  // graph's inputs and the writes of a new lr (NOTE [The lr on the device]) made before it.
  HG_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream(device_)), "Graph::replay");
}

// ---- device errors -----------------------------------------------------------------------

namespace detail {

DeviceErrorSlot* device_error_slot(int device) {
  return resources_of(checked_device(device, "device_error_slot")).error_slot;
}

const char* device_error_op(DeviceError code) {
  switch (code) {
    case DeviceError::IndexSelect:
      return "index_select";
    case DeviceError::IndexAdd:
      return "index_add";
    case DeviceError::Gather:
      return "gather";
    case DeviceError::ScatterAdd:
      return "scatter_add";
    case DeviceError::IndexPut:
      return "index_put";
    case DeviceError::OneHot:
      return "one_hot";
    case DeviceError::Embedding:
      return "embedding";
    case DeviceError::EmbeddingBackward:
      return "embedding backward";
    case DeviceError::MaxPool2dBackward:
      return "max_pool2d backward";
    case DeviceError::NllLossTarget:
      return "nll_loss";
    case DeviceError::CrossEntropyTarget:
      return "cross_entropy";
    case DeviceError::BinaryCrossEntropyInput:
      return "binary_cross_entropy";
    case DeviceError::None:
      break;
  }
  return "a CUDA kernel";
}

void raise_device_error(int device) {
  DeviceResources& r = resources_of(device);
  volatile DeviceErrorSlot* slot = r.error_slot;
  if (slot->code == 0) return;
  const auto code = static_cast<DeviceError>(slot->code);
  const int dim = slot->dim;
  const int64_t value = slot->value, bound = slot->bound;
  slot->code = 0;
  const bool is_target =
      code == DeviceError::NllLossTarget || code == DeviceError::CrossEntropyTarget;
  if (code == DeviceError::BinaryCrossEntropyInput) {
    HG_ERROR(
        "{} (cuda:{}): expected every element of input in [0, 1] (probabilities), got {} "
        "(found on the device)",
        device_error_op(code), device, std::bit_cast<double>(value));
  }
  if (is_target) {
    HG_ERROR("{} (cuda:{}): expected class targets in [0, {}), got {} (found on the device)",
             device_error_op(code), device, bound, value);
  }
  HG_ERROR("{} (cuda:{}): index {} is out of range for dim {} of size {} (found on the device)",
           device_error_op(code), device, value, dim, bound);
}

}  // namespace detail

}  // namespace hg::cuda
