// A per-thread pool of small blocks for the objects every op makes (TensorImpl, StorageImpl,
// autograd metadata and nodes), through std::allocate_shared:
//
//   std::shared_ptr<TensorImpl> impl = make_pooled<TensorImpl>(storage, dtype, sizes, ...);
//
// NOTE [Object pool] A small training step makes and frees a few hundred such objects, more of
// one size at a time than glibc's per-thread cache holds (7 per size), so most went through
// its slower shared free lists. Here each thread keeps up to kPoolBlocksPerClass free blocks
// per 16-byte size class up to kPoolMaxBlock bytes; bigger objects and blocks beyond that go
// to operator new/delete. A block freed on another thread joins that thread's lists (blocks
// are plain memory). A thread's lists are freed when it exits. Under AddressSanitizer the pool
// is bypassed, so use-after-free and leaks of these objects are still reported.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace hg {

inline constexpr size_t kPoolMaxBlock = 512;
inline constexpr size_t kPoolBlocksPerClass = 256;

namespace detail {
void* pool_allocate(size_t bytes);
void pool_deallocate(void* block, size_t bytes) noexcept;
}  // namespace detail

// A standard allocator over the pool (for std::allocate_shared).
template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding, as allocators do
  T* allocate(size_t n) {
    static_assert(alignof(T) <= alignof(std::max_align_t));
    return static_cast<T*>(detail::pool_allocate(n * sizeof(T)));
  }
  void deallocate(T* block, size_t n) noexcept { detail::pool_deallocate(block, n * sizeof(T)); }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

// std::make_shared, with the object and its control block in one pooled block.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace hg
