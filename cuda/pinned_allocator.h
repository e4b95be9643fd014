// The caching allocator of page-locked host memory (NOTE [Pinned host memory] in
// pinned_allocator.cpp): core reaches it through the device hooks (Tensor::pin_memory, the
// factories' pin_memory option), copies tell it which stream reads a block.
#pragma once

#include <cuda_runtime.h>

#include "halfgrad/core/storage.h"

namespace hg::cuda::detail {

// The page-locked host allocator; throws hg::Error naming `op` when no CUDA device is usable.
Allocator* pinned_allocator(const char* op);

// Work enqueued on `stream` so far reads the pinned block that starts at `data` (a pinned
// storage's data()): the block is not handed out again, even once freed, before that work
// ran. Does nothing for an address this allocator did not hand out. Call with the stream's
// device current.
void record_pinned_use(const void* data, cudaStream_t stream);

}  // namespace hg::cuda::detail
