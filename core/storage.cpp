// Storage (storage.h): the CPU caching allocator (size classes, cached large blocks, poisoning
// for tests), and make_storage / make_pinned_storage for every device.
#include "halfgrad/core/storage.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <new>

#include "halfgrad/core/device_hooks.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/sanitizer.h"

namespace hg {

namespace {

// NOTE [CPU caching allocator] Every op makes new tensors, and for small models the
// malloc/free of their 64-byte aligned blocks (glibc's memalign path, which its per-thread
// caches do not serve) cost more than the arithmetic. So a freed block of up to
// kMaxCachedBlock bytes is kept on a free list of its size class and handed out again; at
// most kMaxCachedBytes are kept in all (a block freed beyond that goes back to the system),
// so caching adds at most that to a run's memory.
// Bigger blocks are kept by exact size (a training step frees and asks again for the same
// activation, cast and gradient sizes every iteration), up to kMaxCachedLargeBytes in all:
// without that, each step takes its large tensors as fresh pages from the kernel, and the page
// faults (zeroing included) cost more than some of the ops. A block that would pass the bound
// goes back to the system.
// Classes: multiples of 64 bytes up to 512, then four per power of two (a request is rounded
// up by at most 25%). One mutex guards the lists and the counters (kernels rarely allocate
// inside their parallel regions, so it is rarely contended). cpu_empty_cache() gives the
// cached blocks back, as torch.cuda.empty_cache does for PyTorch's CUDA cache. Under
// AddressSanitizer a cached block is poisoned after its free-list link (the first 8 bytes), so
// a use after free is still reported, and LeakSanitizer, which does not follow pointers in
// poisoned memory, still sees the cached blocks as reachable.
constexpr size_t kSmallClasses = 8;  // 64, 128, ..., 512 bytes
constexpr int kLargestClassLog2 = std::bit_width(kMaxCachedBlock - 1);
constexpr size_t kNumClasses = kSmallClasses + 4 * size_t(kLargestClassLog2 - 9);

struct SizeClass {
  size_t index;  // kNumClasses for a block too big to cache
  size_t bytes;
};

// The block a request of nbytes gets: its size class, or, above kMaxCachedBlock, nbytes
// rounded up to the alignment (not cached).
SizeClass size_class(size_t nbytes) {
  if (nbytes > kMaxCachedBlock) {
    return {kNumClasses, (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment};
  }
  if (nbytes <= kSmallClasses * kCpuAlignment) {
    const size_t units = std::max<size_t>(1, (nbytes + kCpuAlignment - 1) / kCpuAlignment);
    return {units - 1, units * kCpuAlignment};
  }
  const int log2 = std::bit_width(nbytes - 1);  // 2^(log2 - 1) < nbytes <= 2^log2
  const size_t step = size_t(1) << (log2 - 3);
  const size_t steps = (nbytes + step - 1) / step;  // 5, 6, 7 or 8
  return {kSmallClasses + 4 * size_t(log2 - 10) + (steps - 5), steps * step};
}

// Poisons a whole cached block (a large one: its address is kept outside it).
void poison_all(void* data, size_t nbytes) {
#if HG_ASAN
  __asan_poison_memory_region(data, nbytes);
#else
  (void)data, (void)nbytes;
#endif
}

// Poisons a cached block of nbytes but its link.
void poison(void* data, size_t nbytes) {
  poison_all(static_cast<char*>(data) + sizeof(void*), nbytes - sizeof(void*));
}

void unpoison(void* data, size_t nbytes) {
#if HG_ASAN
  __asan_unpoison_memory_region(data, nbytes);
#else
  (void)data, (void)nbytes;
#endif
}

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    HG_CHECK(nbytes <= std::numeric_limits<size_t>::max() - kCpuAlignment,
             "cpu allocator: cannot allocate {} bytes", nbytes);
    const SizeClass cls = size_class(nbytes);
    void* data = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (cls.index < kNumClasses && free_lists_[cls.index] != nullptr) {
        FreeBlock* block = free_lists_[cls.index];
        unpoison(block, cls.bytes);
        free_lists_[cls.index] = block->next;
        stats_.cached_blocks -= 1;
        stats_.cached_bytes -= int64_t(cls.bytes);
        small_cached_bytes_ -= cls.bytes;
        data = block;
      } else if (cls.index == kNumClasses) {
        const auto found = large_free_.find(cls.bytes);
        if (found != large_free_.end()) {
          data = found->second;
          large_free_.erase(found);
          unpoison(data, cls.bytes);
          stats_.cached_blocks -= 1;
          stats_.cached_bytes -= int64_t(cls.bytes);
          large_cached_bytes_ -= cls.bytes;
        }
      }
      if (data) record_allocation(int64_t(cls.bytes));
    }
    if (!data) {
      data = std::aligned_alloc(kCpuAlignment, cls.bytes);
      if (!data) {  // out of memory: give the cached blocks back and try once more
        empty_cache();
        data = std::aligned_alloc(kCpuAlignment, cls.bytes);
      }
      HG_CHECK(data != nullptr, "cpu allocator: out of memory allocating {} bytes ({:.2f} GiB)",
               nbytes, double(nbytes) / double(1ull << 30));
      std::lock_guard lock(mutex_);
      record_allocation(int64_t(cls.bytes));
      stats_.system_allocations += 1;
    }
    return DataPtr(data, reinterpret_cast<void*>(cls.bytes), &CpuAllocator::release);
  }

  void reset_peak() {
    std::lock_guard lock(mutex_);
    stats_.peak_bytes = stats_.live_bytes;
  }
  AllocatorStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

  void empty_cache() {
    FreeBlock* lists[kNumClasses];
    std::multimap<size_t, void*> large;
    {
      std::lock_guard lock(mutex_);
      std::copy(std::begin(free_lists_), std::end(free_lists_), std::begin(lists));
      std::fill(std::begin(free_lists_), std::end(free_lists_), nullptr);
      large.swap(large_free_);
      large_cached_bytes_ = 0;
      small_cached_bytes_ = 0;
      stats_.cached_blocks = 0;
      stats_.cached_bytes = 0;
    }
    for (const auto& [bytes, block] : large) std::free(block);
    for (FreeBlock* block : lists) {
      while (block != nullptr) {
        FreeBlock* next = block->next;
        std::free(block);
        block = next;
      }
    }
  }

  // Never destroyed: tensors in static storage may be freed after any other static object.
  static CpuAllocator& instance() {
    static CpuAllocator* allocator = new CpuAllocator;
    return *allocator;
  }

 private:
  struct FreeBlock {
    FreeBlock* next;
  };

  static void release(void* data, void* context) {
    const size_t bytes = reinterpret_cast<uintptr_t>(context);
    CpuAllocator& self = instance();
    {
      std::lock_guard lock(self.mutex_);
      self.stats_.live_allocations -= 1;
      self.stats_.live_bytes -= int64_t(bytes);
      const size_t index = size_class(bytes).index;
      if (index < kNumClasses && self.small_cached_bytes_ + bytes <= kMaxCachedBytes) {
        auto* block = static_cast<FreeBlock*>(data);
        block->next = self.free_lists_[index];
        poison(block, bytes);
        self.free_lists_[index] = block;
        self.small_cached_bytes_ += bytes;
        self.stats_.cached_blocks += 1;
        self.stats_.cached_bytes += int64_t(bytes);
        return;
      }
      if (index == kNumClasses && self.large_cached_bytes_ + bytes <= kMaxCachedLargeBytes) {
        poison_all(data, bytes);
        self.large_free_.emplace(bytes, data);
        self.large_cached_bytes_ += bytes;
        self.stats_.cached_blocks += 1;
        self.stats_.cached_bytes += int64_t(bytes);
        return;
      }
    }
    std::free(data);
  }

  // With mutex_ held.
  void record_allocation(int64_t bytes) {
    stats_.live_allocations += 1;
    stats_.total_allocations += 1;
    stats_.live_bytes += bytes;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
  }

  std::mutex mutex_;
  FreeBlock* free_lists_[kNumClasses] = {};
  std::multimap<size_t, void*> large_free_;  // blocks above kMaxCachedBlock, by size
  size_t large_cached_bytes_ = 0;            // of stats_.cached_bytes, the large blocks'
  size_t small_cached_bytes_ = 0;            // and the size classes' (each bound on its own)
  AllocatorStats stats_;
};

}  // namespace

Allocator* cpu_allocator() { return &CpuAllocator::instance(); }

AllocatorStats cpu_allocator_stats() { return CpuAllocator::instance().stats(); }

void cpu_empty_cache() { CpuAllocator::instance().empty_cache(); }

void cpu_reset_peak_stats() { CpuAllocator::instance().reset_peak(); }

size_t cpu_allocation_size(size_t nbytes) { return size_class(nbytes).bytes; }

Storage make_storage(size_t nbytes, Device device) {
  if (device.is_cuda()) {
    // CUDA storage comes from the CUDA caching allocator (NOTE [Device hooks]).
    const DeviceHooks* hooks = device_hooks(kCUDA);
    HG_CHECK(hooks != nullptr,
             "cannot allocate {} bytes on cuda:{}: halfgrad was built without its CUDA backend",
             nbytes, int(device.index));
    return make_pooled<StorageImpl>(hooks->allocator(device.index)->allocate(nbytes), nbytes,
                                    device);
  }
  return make_pooled<StorageImpl>(cpu_allocator()->allocate(nbytes), nbytes, device);
}

Storage make_pinned_storage(size_t nbytes, const char* op) {
  const DeviceHooks* hooks = device_hooks(kCUDA);
  HG_CHECK(hooks != nullptr,
           "{}: cannot allocate {} bytes of page-locked host memory: halfgrad was built without "
           "its CUDA backend (pinned memory needs a usable CUDA device)",
           op, nbytes);
  return make_pooled<StorageImpl>(hooks->pinned_allocator(op)->allocate(nbytes), nbytes,
                                  Device(kCPU), /*pinned=*/true);
}

Storage wrap_storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter) {
  if (!deleter) return make_pooled<StorageImpl>(DataPtr(data, nullptr, nullptr), nbytes, device);
  auto* context = new std::function<void(void*)>(std::move(deleter));
  const auto call_and_free = [](void* ptr, void* ctx) {
    auto* fn = static_cast<std::function<void(void*)>*>(ctx);
    (*fn)(ptr);
    delete fn;
  };
  return make_pooled<StorageImpl>(DataPtr(data, context, call_and_free), nbytes, device);
}

}  // namespace hg
