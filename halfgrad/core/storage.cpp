#include "halfgrad/core/storage.h"

#include <cstdlib>
#include <new>

#include "halfgrad/core/error.h"

namespace hg {

namespace {

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    // aligned_alloc needs a size that is a multiple of the alignment (and not 0).
    const size_t rounded = std::max<size_t>(
        kCpuAlignment, (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment);
    HG_CHECK(rounded >= nbytes, "cpu allocator: cannot allocate {} bytes", nbytes);
    void* data = std::aligned_alloc(kCpuAlignment, rounded);
    HG_CHECK(data != nullptr, "cpu allocator: out of memory allocating {} bytes ({:.2f} GiB)",
             nbytes, double(nbytes) / double(1ull << 30));
    record_allocation(int64_t(rounded));
    return DataPtr(data, reinterpret_cast<void*>(rounded), &CpuAllocator::release);
  }

  AllocatorStats stats() const {
    return {live_allocations_.load(), live_bytes_.load(), peak_bytes_.load(),
            total_allocations_.load()};
  }

 private:
  static void release(void* data, void* context) {
    std::free(data);
    instance().live_allocations_.fetch_sub(1, std::memory_order_relaxed);
    instance().live_bytes_.fetch_sub(int64_t(reinterpret_cast<uintptr_t>(context)),
                                     std::memory_order_relaxed);
  }

  void record_allocation(int64_t bytes) {
    live_allocations_.fetch_add(1, std::memory_order_relaxed);
    total_allocations_.fetch_add(1, std::memory_order_relaxed);
    const int64_t live = live_bytes_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    int64_t peak = peak_bytes_.load(std::memory_order_relaxed);
    while (live > peak && !peak_bytes_.compare_exchange_weak(peak, live)) {
    }
  }

 public:
  static CpuAllocator& instance() {
    static CpuAllocator allocator;
    return allocator;
  }

 private:
  std::atomic<int64_t> live_allocations_{0};
  std::atomic<int64_t> live_bytes_{0};
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> total_allocations_{0};
};

}  // namespace

Allocator* cpu_allocator() { return &CpuAllocator::instance(); }

AllocatorStats cpu_allocator_stats() { return CpuAllocator::instance().stats(); }

Storage make_storage(size_t nbytes, Device device) {
  HG_CHECK(device.is_cpu(),
           "cannot allocate {} bytes on cuda:{}: this version of halfgrad "
           "keeps tensors on the CPU only",
           nbytes, device.index);
  return std::make_shared<StorageImpl>(cpu_allocator()->allocate(nbytes), nbytes, device);
}

Storage wrap_storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter) {
  if (!deleter)
    return std::make_shared<StorageImpl>(DataPtr(data, nullptr, nullptr), nbytes, device);
  auto* context = new std::function<void(void*)>(std::move(deleter));
  const auto call_and_free = [](void* ptr, void* ctx) {
    auto* fn = static_cast<std::function<void(void*)>*>(ctx);
    (*fn)(ptr);
    delete fn;
  };
  return std::make_shared<StorageImpl>(DataPtr(data, context, call_and_free), nbytes, device);
}

}  // namespace hg
