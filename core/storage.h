// Storage: a reference-counted buffer of bytes on one device, shared by a tensor and its
// views. Allocators hand out the bytes.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "halfgrad/core/device.h"
#include "halfgrad/core/object_pool.h"

namespace hg {

// An owned pointer with the function that frees it.
class DataPtr {
 public:
  using Deleter = void (*)(void* data, void* context);

  DataPtr() = default;
  DataPtr(void* data, void* context, Deleter deleter)
      : data_(data), context_(context), deleter_(deleter) {}
  DataPtr(DataPtr&& other) noexcept { *this = std::move(other); }
  DataPtr& operator=(DataPtr&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      context_ = std::exchange(other.context_, nullptr);
      deleter_ = std::exchange(other.deleter_, nullptr);
    }
    return *this;
  }
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  ~DataPtr() { reset(); }

  void* get() const { return data_; }
  void reset() {
    if (deleter_) deleter_(data_, context_);
    data_ = context_ = nullptr;
    deleter_ = nullptr;
  }

 private:
  void* data_ = nullptr;
  void* context_ = nullptr;
  Deleter deleter_ = nullptr;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nbytes of memory (nbytes may be 0), or throws hg::Error when out of memory.
  virtual DataPtr allocate(size_t nbytes) = 0;
};

// The CPU allocator: 64-byte aligned blocks (a cache line, and a full AVX-512 vector). Freed
// blocks of up to kMaxCachedBlock bytes are kept for reuse by size class, kMaxCachedBytes in
// all; bigger ones by exact size, kMaxCachedLargeBytes in all (NOTE [CPU caching allocator]
// in storage.cpp).
inline constexpr size_t kCpuAlignment = 64;
inline constexpr size_t kMaxCachedBlock = size_t(1) << 20;
inline constexpr size_t kMaxCachedBytes = size_t(64) << 20;
inline constexpr size_t kMaxCachedLargeBytes = size_t(256) << 20;
Allocator* cpu_allocator();

// Counters of the CPU allocator, for memory reports and leak tests. "Live" blocks are the ones
// tensors hold (counted at their size class); cached blocks are free ones kept for reuse.
struct AllocatorStats {
  int64_t live_allocations = 0;
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t total_allocations = 0;
  int64_t system_allocations = 0;  // of total_allocations, those the cache could not serve
  int64_t cached_blocks = 0;
  int64_t cached_bytes = 0;
};
AllocatorStats cpu_allocator_stats();
// Starts a new peak at the present live bytes (torch.cuda.reset_peak_memory_stats's
// counterpart), so peak_bytes then measures the high-water mark of what follows.
void cpu_reset_peak_stats();
// Returns the CPU allocator's cached free blocks to the system (torch.cuda.empty_cache's
// counterpart); live blocks are untouched.
void cpu_empty_cache();
// The size class a request of nbytes is served from (a multiple of kCpuAlignment, at least
// nbytes); requests above kMaxCachedBlock are only rounded to the alignment.
size_t cpu_allocation_size(size_t nbytes);

class StorageImpl {
 public:
  StorageImpl(DataPtr data, size_t nbytes, Device device, bool pinned = false)
      : data_(std::move(data)), nbytes_(nbytes), device_(device), pinned_(pinned) {}

  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // True for CPU memory from the CUDA backend's page-locked host allocator (make_pinned_storage).
  bool is_pinned() const { return pinned_; }

  // NOTE [Version counter] Every in-place write to a storage bumps its version. Autograd
  // saves the version with each saved tensor and refuses to use one that changed. A tensor
  // and all its views share one storage, so they share the counter, as in PyTorch.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  DataPtr data_;
  size_t nbytes_;
  Device device_;
  bool pinned_;
  std::atomic<uint64_t> version_{0};
};

using Storage = std::shared_ptr<StorageImpl>;

// A new storage of nbytes from the device's allocator.
Storage make_storage(size_t nbytes, Device device);
// A new CPU storage of nbytes of page-locked memory, from the CUDA backend's caching host
// allocator (NOTE [Pinned host memory] in cuda/pinned_allocator.cpp); hg::Error without a
// usable CUDA device. `op` names the caller in that error.
Storage make_pinned_storage(size_t nbytes, const char* op = "pin_memory");
// A storage over memory the caller owns; `deleter` (if any) runs when the last tensor
// using it is gone.
Storage wrap_storage(void* data, size_t nbytes, Device device,
                     std::function<void(void*)> deleter = nullptr);

}  // namespace hg
