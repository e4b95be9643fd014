#include "halfgrad/core/object_pool.h"

#include <new>

#include "halfgrad/core/sanitizer.h"

namespace hg::detail {

namespace {

constexpr size_t kGranule = 16;
constexpr size_t kClasses = kPoolMaxBlock / kGranule;

struct FreeBlock {
  FreeBlock* next;
};

struct Pool {
  FreeBlock* lists[kClasses] = {};
  size_t counts[kClasses] = {};
  ~Pool();
};

// Set once the thread's pool is gone (trivially destructible, so still readable then): blocks
// freed later, by other thread_local destructors, go straight to operator delete.
thread_local bool pool_gone = false;
thread_local Pool pool;

Pool::~Pool() {
  pool_gone = true;
  for (size_t c = 0; c < kClasses; ++c) {
    while (FreeBlock* block = lists[c]) {
      lists[c] = block->next;
      ::operator delete(block);
    }
  }
}

// The class of a block of `bytes` (> 0, <= kPoolMaxBlock).
size_t class_of(size_t bytes) { return (bytes + kGranule - 1) / kGranule - 1; }

}  // namespace

void* pool_allocate(size_t bytes) {
  if (HG_ASAN || bytes == 0 || bytes > kPoolMaxBlock) return ::operator new(bytes);
  const size_t c = class_of(bytes);
  // Always a whole class: a block may be freed into another thread's lists.
  if (pool_gone) return ::operator new((c + 1) * kGranule);
  if (FreeBlock* block = pool.lists[c]) {
    pool.lists[c] = block->next;
    --pool.counts[c];
    return block;
  }
  return ::operator new((c + 1) * kGranule);
}

void pool_deallocate(void* block, size_t bytes) noexcept {
  if (HG_ASAN || bytes == 0 || bytes > kPoolMaxBlock || pool_gone) {
    ::operator delete(block);
    return;
  }
  const size_t c = class_of(bytes);
  if (pool.counts[c] >= kPoolBlocksPerClass) {
    ::operator delete(block);
    return;
  }
  auto* free_block = static_cast<FreeBlock*>(block);
  free_block->next = pool.lists[c];
  pool.lists[c] = free_block;
  ++pool.counts[c];
}

}  // namespace hg::detail
