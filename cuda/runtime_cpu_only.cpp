// The CUDA API in a build without the CUDA backend (HALFGRAD_CUDA=OFF, or no nvcc found): no
// device is available, and what needs one says so.
#include "halfgrad/core/error.h"
#include "halfgrad/cuda/cuda.h"

namespace hg::cuda {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  HG_ERROR("{}: halfgrad was built without its CUDA backend (no CUDA device can be used)", op);
}
}  // namespace

bool is_compiled() { return false; }
bool is_available() { return false; }
bool is_bf16_supported() { return false; }
int device_count() { return 0; }
std::string describe() { return "halfgrad was built without its CUDA backend"; }

int current_device() { no_cuda("current_device"); }
void set_device(int) { no_cuda("set_device"); }
void synchronize(int) { no_cuda("synchronize"); }
bool is_current_stream_capturing(int) { return false; }
int64_t memory_allocated(int) { no_cuda("memory_allocated"); }
int64_t max_memory_allocated(int) { no_cuda("max_memory_allocated"); }
int64_t memory_reserved(int) { no_cuda("memory_reserved"); }
void reset_peak_memory_stats(int) { no_cuda("reset_peak_memory_stats"); }
void empty_cache() {}  // nothing cached (torch.cuda.empty_cache is a no-op without CUDA too)
void host_empty_cache() {}  // no pinned memory without CUDA

namespace detail {
bool set_allocation_poison(bool) { return false; }
}  // namespace detail

}  // namespace hg::cuda
