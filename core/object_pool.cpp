// The per-thread pool of small blocks (object_pool.h) that TensorImpls, storages and autograd
// nodes are allocated from, and its teardown at thread exit.
#include "halfgrad/core/object_pool.h"

#include <cstdint>
#include <new>

#include "halfgrad/core/sanitizer.h"

namespace hg::detail {

namespace {

constexpr size_t kGranule = 16;
constexpr size_t kClasses = kPoolMaxBlock / kGranule;

struct FreeBlock {
  FreeBlock* next;
};

// A thread's free lists. Trivially constructible and destructible, so an access is a plain
// thread-local address (no initialisation guard, no destructor registration on the fast
// path), and `gone` is still readable while the thread's other thread_locals are destroyed.
struct Lists {
  FreeBlock* heads[kClasses];
  uint32_t counts[kClasses];
  bool gone;   // the lists were freed (the thread is exiting): blocks go to operator delete
  bool armed;  // the thread's Reaper is constructed, so the lists are freed at its exit
};
thread_local Lists lists;  // zero-initialised

// Frees the thread's cached blocks when it exits. Made on the thread's first cached block.
struct Reaper {
  ~Reaper();
};
thread_local Reaper reaper;

Reaper::~Reaper() {
  lists.gone = true;
  for (size_t c = 0; c < kClasses; ++c) {
    while (FreeBlock* block = lists.heads[c]) {
      lists.heads[c] = block->next;
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
  Lists& own = lists;
  if (FreeBlock* block = own.heads[c]) {  // (empty once the lists are gone)
    own.heads[c] = block->next;
    --own.counts[c];
    return block;
  }
  return ::operator new((c + 1) * kGranule);
}

void pool_deallocate(void* block, size_t bytes) noexcept {
  Lists& own = lists;
  if (HG_ASAN || bytes == 0 || bytes > kPoolMaxBlock || own.gone) {
    ::operator delete(block);
    return;
  }
  const size_t c = class_of(bytes);
  if (own.counts[c] >= kPoolBlocksPerClass) {
    ::operator delete(block);
    return;
  }
  if (!own.armed) {
    own.armed = true;
    asm volatile("" : : "r"(&reaper));  // constructs the thread's Reaper (an odr-use)
  }
  auto* free_block = static_cast<FreeBlock*>(block);
  free_block->next = own.heads[c];
  own.heads[c] = free_block;
  ++own.counts[c];
}

}  // namespace hg::detail
