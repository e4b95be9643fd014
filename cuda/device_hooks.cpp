// The CUDA backend's table of device hooks (core/device_hooks.h): the caching allocators (device
// and pinned host memory), the copy, fill and random-fill kernels core/ calls for CUDA tensors.
// Registered while the program starts.
#include "halfgrad/core/device_hooks.h"

#include "halfgrad/cuda/allocator.h"
#include "halfgrad/cuda/copy.h"
#include "halfgrad/cuda/elementwise.h"
#include "halfgrad/cuda/pinned_allocator.h"

namespace hg::cuda {
namespace {

const bool registered = [] {
  register_device_hooks(kCUDA, {.allocator = detail::device_allocator,
                                .copy_elements = copy_elements,
                                .fill = fill,
                                .fill_uniform = fill_uniform,
                                .fill_normal = fill_normal,
                                .copy_to_device = copy_to_device,
                                .pinned_allocator = detail::pinned_allocator});
  return true;
}();

}  // namespace
}  // namespace hg::cuda

// NOTE [Linking the device hooks] halfgrad is a static library, and a linker takes an object
// file out of one only for a symbol something already needs: no code names this file, so its
// registration would be left out and CUDA tensors reported as unsupported. The library's link
// interface (cuda/CMakeLists.txt) therefore asks for this symbol (-u), which brings the file,
// and its registration, into every program that links halfgrad.
extern "C" const bool hg_cuda_device_hooks_registered = hg::cuda::registered;
