// NOTE [CUDA caching allocator]
//
// cudaMalloc and cudaFree are slow, and cudaFree waits for the whole device, so no op may call
// them. Each device has a cache of blocks instead:
// - A request is rounded up: to 512 bytes up to 1 MiB, to 2 MiB above. A training loop asks
//   for the same sizes every step, so rounded sizes come back exactly.
// - A block freed by its tensor goes to a free list keyed by (pool, stream, size) and is handed
//   out again to a request of that pool and stream whose rounded size it fits (within a quarter
//   more). It is never split.
// - A block belongs to the stream that was current when it was allocated; work on that stream
//   is ordered, so a block reused on it needs no event. A tensor used on another stream must be
//   kept alive by its user until that stream is done with it.
// - Only when cudaMalloc fails are the cached blocks given back (cudaFree) and the request
//   retried; empty_cache() gives them back on demand.
// - Pools: 0 is shared; each captured Graph has its own (NOTE [Graph memory pools] in
//   allocator.h).
// Counters follow torch.cuda: memory_allocated sums the rounded sizes of live blocks,
// memory_reserved every block obtained from cudaMalloc.
#include "halfgrad/cuda/allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "halfgrad/cuda/cuda.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/stream.h"

namespace hg::cuda {

namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;

size_t round_size(size_t nbytes) {
  const size_t unit = nbytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return std::max(unit, (nbytes + unit - 1) / unit * unit);
}

std::atomic<bool> g_poison{false};

// The graph pool the calling thread allocates from, per device (0: the shared pool).
thread_local std::array<int, kMaxDevices> t_capture_pool{};

struct Block {
  void* ptr;
  size_t size;
  int device;
  cudaStream_t stream;
  int pool;
};

class DeviceAllocator final : public Allocator {
 public:
  explicit DeviceAllocator(int device) : device_(device) {}

  DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) return DataPtr();
    const size_t size = round_size(nbytes);
    const int pool = t_capture_pool[size_t(device_)];
    DeviceGuard guard(device_);
    cudaStream_t stream = current_stream(device_);
    Block* block = take_cached(pool, stream, size);
    if (!block) block = new_block(pool, stream, size, nbytes);
    if (g_poison.load(std::memory_order_relaxed)) {
      HG_CUDA_CHECK(cudaMemsetAsync(block->ptr, 0xFF, block->size, stream), "allocate (poison)");
    }
    return DataPtr(block->ptr, block, &DeviceAllocator::free_block);
  }

  int64_t allocated() {
    std::lock_guard lock(mutex_);
    return allocated_;
  }
  int64_t peak() {
    std::lock_guard lock(mutex_);
    return peak_;
  }
  int64_t reserved() {
    std::lock_guard lock(mutex_);
    return reserved_;
  }
  void reset_peak() {
    std::lock_guard lock(mutex_);
    peak_ = allocated_;
  }

  // Gives the shared pool's free blocks back to the driver (cudaFree waits for the device).
  void release_cached() {
    std::vector<Block*> released;
    {
      std::lock_guard lock(mutex_);
      for (auto it = free_.begin(); it != free_.end();) {
        if (std::get<0>(it->first) == 0) {
          released.push_back(it->second);
          reserved_ -= int64_t(it->second->size);
          it = free_.erase(it);
        } else {
          ++it;
        }
      }
    }
    DeviceGuard guard(device_);
    for (Block* b : released) {
      cudaFree(b->ptr);
      delete b;
    }
  }

  int begin_pool() {
    std::lock_guard lock(mutex_);
    const int pool = next_pool_++;
    live_pools_.insert(pool);
    t_capture_pool[size_t(device_)] = pool;
    return pool;
  }
  void end_pool(int pool) {
    if (t_capture_pool[size_t(device_)] == pool) t_capture_pool[size_t(device_)] = 0;
  }
  void release_pool(int pool) {
    std::lock_guard lock(mutex_);
    live_pools_.erase(pool);
    std::vector<Block*> moved;
    for (auto it = free_.begin(); it != free_.end();) {
      if (std::get<0>(it->first) == pool) {
        moved.push_back(it->second);
        it = free_.erase(it);
      } else {
        ++it;
      }
    }
    for (Block* b : moved) {
      b->pool = 0;
      insert_free(b);
    }
  }

 private:
  using Key = std::tuple<int, cudaStream_t, size_t>;

  static void free_block(void* /*data*/, void* context) {
    auto* block = static_cast<Block*>(context);
    static_cast<DeviceAllocator*>(detail::device_allocator(block->device))->release(block);
  }

  void release(Block* block) {
    std::lock_guard lock(mutex_);
    allocated_ -= int64_t(block->size);
    // Freed while this thread captures a graph: the graph may have baked the address in.
    if (const int capturing = t_capture_pool[size_t(device_)]; capturing != 0) {
      block->pool = capturing;
    } else if (block->pool != 0 && !live_pools_.contains(block->pool)) {
      block->pool = 0;
    }
    insert_free(block);
  }

  void insert_free(Block* block) {
    free_.emplace(Key{block->pool, block->stream, block->size}, block);
  }

  Block* take_cached(int pool, cudaStream_t stream, size_t size) {
    std::lock_guard lock(mutex_);
    auto it = free_.lower_bound(Key{pool, stream, size});
    if (it == free_.end()) return nullptr;
    const auto& [p, s, block_size] = it->first;
    if (p != pool || s != stream || block_size > size + size / 4) return nullptr;
    Block* block = it->second;
    free_.erase(it);
    count_allocated(block->size);
    return block;
  }

  Block* new_block(int pool, cudaStream_t stream, size_t size, size_t nbytes) {
    void* ptr = nullptr;
    cudaError_t status = malloc_for_pool(&ptr, size, pool);
    if (status == cudaErrorMemoryAllocation && pool == 0) {
      cudaGetLastError();
      release_cached();
      status = malloc_for_pool(&ptr, size, pool);
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      constexpr double kMiB = 1024.0 * 1024.0;
      HG_ERROR(
          "CUDA out of memory: tried to allocate {:.1f} MiB on cuda:{} ({:.1f} MiB free of "
          "{:.1f} MiB; halfgrad's tensors hold {:.1f} MiB, its cache {:.1f} MiB more)",
          double(nbytes) / kMiB, device_, double(free_bytes) / kMiB, double(total_bytes) / kMiB,
          double(allocated()) / kMiB, double(reserved() - allocated()) / kMiB);
    }
    HG_CUDA_CHECK(status, "allocate");
    auto* block = new Block{ptr, size, device_, stream, pool};
    std::lock_guard lock(mutex_);
    reserved_ += int64_t(size);
    count_allocated(size);
    return block;
  }

  // cudaMalloc is not stream-ordered, so stream capture counts it as unsafe. Memory a graph
  // captures into is kept by its pool for every replay, which makes this one safe: the thread
  // relaxes the capture check around it (NOTE [Graph memory pools]).
  static cudaError_t malloc_for_pool(void** ptr, size_t size, int pool) {
    if (pool == 0) return cudaMalloc(ptr, size);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    const cudaError_t status = cudaMalloc(ptr, size);
    cudaThreadExchangeStreamCaptureMode(&mode);
    return status;
  }

  void count_allocated(size_t size) {
    allocated_ += int64_t(size);
    peak_ = std::max(peak_, allocated_);
  }

  const int device_;
  std::mutex mutex_;
  std::multimap<Key, Block*> free_;
  std::unordered_set<int> live_pools_;
  int next_pool_ = 1;
  int64_t allocated_ = 0;
  int64_t peak_ = 0;
  int64_t reserved_ = 0;
};

std::array<std::unique_ptr<DeviceAllocator>, kMaxDevices>& allocators() {
  // Never destroyed: tensors freed during static destruction still return their blocks.
  static auto* table = new std::array<std::unique_ptr<DeviceAllocator>, kMaxDevices>();
  return *table;
}

DeviceAllocator& allocator_of(int device, const char* op) {
  if (device < 0) device = current_device();
  HG_CHECK(device < device_count() && device < kMaxDevices, "{}: cannot use cuda:{}: {}", op,
           device,
           device_count() == 0 ? describe()
                               : fmt::format("this machine has {} CUDA device(s)", device_count()));
  static std::once_flag once[kMaxDevices];
  std::call_once(once[device],
                 [&] { allocators()[size_t(device)] = std::make_unique<DeviceAllocator>(device); });
  return *allocators()[size_t(device)];
}

}  // namespace

namespace detail {

Allocator* device_allocator(int device) { return &allocator_of(device, "allocate"); }
int begin_graph_pool(int device) { return allocator_of(device, "Graph").begin_pool(); }
void end_graph_pool(int device, int pool) { allocator_of(device, "Graph").end_pool(pool); }
void release_graph_pool(int device, int pool) { allocator_of(device, "Graph").release_pool(pool); }

bool set_allocation_poison(bool on) { return g_poison.exchange(on); }

}  // namespace detail

int64_t memory_allocated(int device) {
  return allocator_of(device, "memory_allocated").allocated();
}
int64_t max_memory_allocated(int device) {
  return allocator_of(device, "max_memory_allocated").peak();
}
int64_t memory_reserved(int device) { return allocator_of(device, "memory_reserved").reserved(); }
void reset_peak_memory_stats(int device) {
  allocator_of(device, "reset_peak_memory_stats").reset_peak();
}
void empty_cache() {
  for (int d = 0; d < std::min(device_count(), kMaxDevices); ++d) {
    if (allocators()[size_t(d)]) allocators()[size_t(d)]->release_cached();
  }
}

}  // namespace hg::cuda
