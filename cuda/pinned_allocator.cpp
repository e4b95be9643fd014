// The caching allocator of page-locked host memory (pinned_allocator.h), torch's
// CachingHostAllocator: blocks by power-of-two size, reused once the copies that read them ran.
#include "halfgrad/cuda/pinned_allocator.h"

#include <algorithm>
#include <bit>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "halfgrad/cuda/cuda.h"
#include "halfgrad/cuda/host.h"

namespace hg::cuda {

namespace {

// NOTE [Pinned host memory] A CUDA device reads page-locked (pinned) host memory directly, so
// a copy from it runs at the bus's full speed and, enqueued with cudaMemcpyAsync, while the
// host goes on (Tensor::to(device, non_blocking = true)). cudaHostAlloc and cudaFreeHost are
// slow (cudaFreeHost waits for the whole device), and a data loader pins a batch of the same
// size every step, so freed blocks are cached as torch's CachingHostAllocator caches them:
// - A request is rounded up to a power of two (at least kMinPinnedBlock bytes) and served by a
//   free block of exactly that size, else by cudaHostAlloc. Blocks are never split.
// - An asynchronous copy that reads a block records an event on its stream
//   (record_pinned_use). A block goes back on the free list once its tensor is gone and every
//   event recorded for it has completed, so a freed block whose copy is still pending is never
//   handed to a new tensor that would overwrite it. Events are polled (cudaEventQuery) on each
//   allocation; the host never waits for them.
// - The cache keeps every block until host_empty_cache() (or a failed cudaHostAlloc, which
//   frees the free blocks and tries once more); a block still awaited stays.
// The storage of a pinned tensor is a CPU storage marked pinned (StorageImpl::is_pinned): CPU
// kernels use it as any host memory.
constexpr size_t kMinPinnedBlock = 4096;  // a page

struct Block {
  void* ptr = nullptr;
  size_t size = 0;
  bool allocated = false;  // a tensor holds it
  int pending_events = 0;  // copies recorded as reading it that may not have run
};

class PinnedAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr();
    const size_t size = std::max(kMinPinnedBlock, std::bit_ceil(nbytes));
    std::unique_lock lock(mutex_);
    poll_events();
    if (auto found = free_.find(size); found != free_.end()) {
      Block* block = found->second;
      free_.erase(found);
      block->allocated = true;
      return DataPtr(block->ptr, block, &PinnedAllocator::release);
    }
    lock.unlock();
    void* ptr = nullptr;
    cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    if (status != cudaSuccess) {  // out of page-locked memory: give the free blocks back
      cudaGetLastError();
      empty_cache();
      status = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
    }
    HG_CUDA_CHECK(status, "pin_memory");
    auto* block = new Block{.ptr = ptr, .size = size, .allocated = true, .pending_events = 0};
    lock.lock();
    blocks_.emplace(ptr, block);
    return DataPtr(ptr, block, &PinnedAllocator::release);
  }

  void record_use(const void* data, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    const auto found = blocks_.find(data);
    if (found == blocks_.end()) return;
    cudaEvent_t event = nullptr;
    HG_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "to(cuda)");
    const cudaError_t status = cudaEventRecord(event, stream);
    if (status != cudaSuccess) {
      cudaEventDestroy(event);
      HG_CUDA_CHECK(status, "to(cuda)");
    }
    found->second->pending_events += 1;
    events_.emplace_back(event, found->second);
  }

  void empty_cache() {
    std::vector<void*> unused;
    {
      std::lock_guard lock(mutex_);
      poll_events();
      for (const auto& [size, block] : free_) {
        unused.push_back(block->ptr);
        blocks_.erase(block->ptr);
        delete block;
      }
      free_.clear();
    }
    for (void* ptr : unused) cudaFreeHost(ptr);
  }

  // Never destroyed: pinned tensors in static storage may be freed after any other static.
  static PinnedAllocator& instance() {
    static auto* allocator = new PinnedAllocator;
    return *allocator;
  }

 private:
  static void release(void* data, void* context) {
    (void)data;
    auto* block = static_cast<Block*>(context);
    PinnedAllocator& self = instance();
    std::lock_guard lock(self.mutex_);
    block->allocated = false;
    if (block->pending_events == 0) self.free_.emplace(block->size, block);
  }

  // With mutex_ held: retires the completed events, freeing blocks no copy still reads.
  void poll_events() {
    std::erase_if(events_, [this](const std::pair<cudaEvent_t, Block*>& entry) {
      const cudaError_t status = cudaEventQuery(entry.first);
      if (status != cudaSuccess) cudaGetLastError();  // not ready is an answer, not an error
      if (status == cudaErrorNotReady) return false;
      // Completed, or failed (a device error, reported by the next synchronizing call):
      // either way no copy will read the block any more.
      cudaEventDestroy(entry.first);
      Block* block = entry.second;
      block->pending_events -= 1;
      if (block->pending_events == 0 && !block->allocated) free_.emplace(block->size, block);
      return true;
    });
  }

  std::mutex mutex_;
  std::unordered_map<const void*, Block*> blocks_;      // every block, by address
  std::multimap<size_t, Block*> free_;                  // reusable, by size
  std::vector<std::pair<cudaEvent_t, Block*>> events_;  // recorded, not yet seen completed
};

}  // namespace

namespace detail {

Allocator* pinned_allocator(const char* op) {
  HG_CHECK(device_count() > 0, "{}: page-locked host memory needs a usable CUDA device: {}", op,
           describe());
  return &PinnedAllocator::instance();
}

void record_pinned_use(const void* data, cudaStream_t stream) {
  PinnedAllocator::instance().record_use(data, stream);
}

}  // namespace detail

void host_empty_cache() { PinnedAllocator::instance().empty_cache(); }

}  // namespace hg::cuda
