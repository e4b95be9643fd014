// Copies across devices (copy.h).
#include "halfgrad/cuda/copy.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/cuda.h"
#include "halfgrad/cuda/elementwise.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/pinned_allocator.h"

namespace hg::cuda {

namespace {

// Copies of at least this many bytes go through pinned staging buffers.
constexpr size_t kStagedCopyBytes = size_t(1) << 20;

// NOTE [Pinned staging buffers] A copy from pageable host memory is staged by the driver,
// in pieces, at a fraction of the bus's speed. Large copies go through page-locked buffers
// instead: one is reused once the event recorded after its last copy has completed, so the
// host never waits for an upload. The buffers are kept (a training loop uploads the same
// batch size every step).
class StagingBuffers {
 public:
  struct Buffer {
    void* host = nullptr;
    size_t size = 0;
    cudaEvent_t done = nullptr;
  };

  static StagingBuffers& instance() {
    static auto* buffers = new StagingBuffers();  // never destroyed (see allocator.cpp)
    return *buffers;
  }

  // A buffer of at least nbytes that no copy is using.
  Buffer* acquire(size_t nbytes) {
    std::lock_guard lock(mutex_);
    for (Buffer* b : buffers_) {
      if (b->size >= nbytes && !in_use(b) && cudaEventQuery(b->done) == cudaSuccess) {
        busy_.push_back(b);
        return b;
      }
      cudaGetLastError();  // cudaErrorNotReady is an answer, not an error
    }
    auto* b = new Buffer();
    size_t size = kStagedCopyBytes;
    while (size < nbytes) size *= 2;
    HG_CUDA_CHECK(cudaHostAlloc(&b->host, size, cudaHostAllocDefault), "copy (pinned staging)");
    HG_CUDA_CHECK(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming),
                  "copy (pinned staging)");
    b->size = size;
    buffers_.push_back(b);
    busy_.push_back(b);
    return b;
  }

  // The buffer's copy was enqueued on `stream`; it is free again once that copy ran.
  void release(Buffer* b, cudaStream_t stream) {
    const cudaError_t status = cudaEventRecord(b->done, stream);
    std::lock_guard lock(mutex_);
    std::erase(busy_, b);
    HG_CUDA_CHECK(status, "copy (pinned staging)");
  }

 private:
  bool in_use(Buffer* b) const { return std::find(busy_.begin(), busy_.end(), b) != busy_.end(); }

  std::mutex mutex_;
  std::vector<Buffer*> buffers_;
  std::vector<Buffer*> busy_;  // handed out, their copy not yet enqueued
};

Tensor contiguous_on_its_device(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = empty(t.sizes(), t.options());
  if (t.is_cuda()) {
    copy_elements(out, t);
  } else {
    out.copy_(t);
  }
  return out;
}

Tensor to_cpu(const Tensor& src) {
  const Tensor s = contiguous_on_its_device(src);
  Tensor out = empty(s.sizes(), s.dtype());
  const size_t n = s.nbytes();
  const int device = s.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  if (n >= kStagedCopyBytes) {
    // The buffer goes back only once its bytes are read out (on any outcome).
    StagingBuffers::Buffer* b = StagingBuffers::instance().acquire(n);
    cudaError_t status = cudaMemcpyAsync(b->host, s.data_ptr(), n, cudaMemcpyDeviceToHost, stream);
    if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
    if (status == cudaSuccess) std::memcpy(out.data_ptr(), b->host, n);
    StagingBuffers::instance().release(b, stream);
    HG_CUDA_CHECK(status, "to(cpu)");
  } else if (n > 0) {
    HG_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), s.data_ptr(), n, cudaMemcpyDeviceToHost, stream),
                  "to(cpu)");
    HG_CUDA_CHECK(cudaStreamSynchronize(stream), "to(cpu)");
  } else {
    HG_CUDA_CHECK(cudaStreamSynchronize(stream), "to(cpu)");
  }
  detail::raise_device_error(device);
  return out;
}

Tensor to_cuda_from_cpu(const Tensor& src, int device, bool non_blocking) {
  // A non-contiguous source is gathered into new pageable memory first: only a contiguous
  // pinned source is read in place.
  const Tensor s = contiguous_on_its_device(src);
  const bool pinned = s.is_pinned();
  Tensor out = empty(s.sizes(), {.dtype = s.dtype(), .device = Device(kCUDA, device)});
  const size_t n = s.nbytes();
  if (n == 0) return out;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  // A captured copy would read its host source at every replay, long after this call: refuse
  // it, for pinned staging (reused meanwhile) and pageable memory (CUDA refuses it) alike.
  HG_CHECK(!is_current_stream_capturing(device),
           "to(cuda): a copy from the CPU cannot be captured into a CUDA graph (its source "
           "would be read again at every replay); copy into a CUDA tensor before "
           "capture_begin and refill it with copy_ between replays");
  if (pinned && non_blocking) {
    // Read in place while the host goes on; the block is not reused before this copy ran
    // (NOTE [Pinned host memory] in pinned_allocator.cpp).
    HG_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), s.data_ptr(), n, cudaMemcpyHostToDevice, stream),
                  "to(cuda)");
    detail::record_pinned_use(s.impl()->storage()->data(), stream);
  } else if (n >= kStagedCopyBytes || pinned) {
    // Pinned memory without non_blocking is staged too: the caller may write it as soon as
    // to() returns, and the driver would read it only later (it copies only pageable memory
    // out before returning).
    StagingBuffers::Buffer* b = StagingBuffers::instance().acquire(n);
    std::memcpy(b->host, s.data_ptr(), n);
    const cudaError_t status =
        cudaMemcpyAsync(out.data_ptr(), b->host, n, cudaMemcpyHostToDevice, stream);
    StagingBuffers::instance().release(b, stream);
    HG_CUDA_CHECK(status, "to(cuda)");
  } else {
    // From pageable memory the driver copies the bytes out before returning, so `s` may go.
    HG_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), s.data_ptr(), n, cudaMemcpyHostToDevice, stream),
                  "to(cuda)");
  }
  return out;
}

// Makes `waiter` wait for the work enqueued on `waited` so far.
void stream_wait(cudaStream_t waiter, cudaStream_t waited, const char* op) {
  cudaEvent_t event = nullptr;
  HG_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), op);
  cudaError_t status = cudaEventRecord(event, waited);
  if (status == cudaSuccess) status = cudaStreamWaitEvent(waiter, event, 0);
  cudaEventDestroy(event);  // released once it completes
  HG_CUDA_CHECK(status, op);
}

Tensor to_other_cuda(const Tensor& src, int device) {
  const Tensor s = contiguous_on_its_device(src);
  Tensor out = empty(s.sizes(), {.dtype = s.dtype(), .device = Device(kCUDA, device)});
  const size_t n = s.nbytes();
  if (n == 0) return out;
  const int from = s.device().index;
  cudaStream_t target = current_stream(device), source = current_stream(from);
  {
    DeviceGuard on_target(device);            // the event must belong to the stream's device
    stream_wait(source, target, "to(cuda)");  // out's block may have been in use on the target
  }
  DeviceGuard guard(from);
  HG_CUDA_CHECK(cudaMemcpyPeerAsync(out.data_ptr(), device, s.data_ptr(), from, n, source),
                "to(cuda)");
  stream_wait(target, source, "to(cuda)");
  return out;
}

}  // namespace

Tensor copy_to_device(const Tensor& src, Device device, bool non_blocking) {
  if (device.is_cpu()) return to_cpu(src);
  HG_CHECK(device.index >= 0 && device.index < device_count(),
           "to: cannot move a tensor from {} to {}: {}", src.device(), device,
           device_count() == 0 ? describe()
                               : fmt::format("this machine has {} CUDA device(s)", device_count()));
  if (src.is_cpu()) return to_cuda_from_cpu(src, device.index, non_blocking);
  return to_other_cuda(src, device.index);
}

}  // namespace hg::cuda
