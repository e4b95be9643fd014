// The CUDA caching allocator (NOTE [CUDA caching allocator] in allocator.cpp). core reaches
// it through the device hooks (device_hooks.cpp); graphs through the pool functions.
#pragma once

#include "halfgrad/core/storage.h"

namespace hg::cuda::detail {

// The allocator of CUDA device `device`.
Allocator* device_allocator(int device);

// NOTE [Graph memory pools] While a Graph captures on `device`, blocks the calling thread
// allocates there come from a pool of that graph, and blocks freed there go to it: an address
// the graph baked in is never handed to work outside the graph. begin_graph_pool opens a pool
// and routes the thread's allocations to it; end_graph_pool stops routing; release_graph_pool
// (the graph is gone and its replays ran) gives the pool's blocks back to the shared pool.
int begin_graph_pool(int device);
void end_graph_pool(int device, int pool);
void release_graph_pool(int device, int pool);

}  // namespace hg::cuda::detail
