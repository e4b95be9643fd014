// CUDA dropout kernel (dropout_launch.h).
#include <cstdint>

#include "halfgrad/core/random.h"
#include "halfgrad/cuda/device_utils.cuh"
#include "halfgrad/cuda/dropout_launch.h"

namespace hg::cuda::detail {

namespace {

// ---- kernels -------------------------------------------------------------------------------

// One thread per Philox block: its four words decide elements 4b .. 4b + 3, so each block is
// computed once (NOTE [Philox stream layout] in core/random.h).
template <class T>
__global__ void dropout_kernel(const Walk walk, const T* x, T* out, T* mask, DropoutMode mode,
                               double keep, double inv_keep, uint64_t seed, uint64_t first_block) {
  using A = compute_t<T>;
  const int64_t n = walk.numel;
  // The mask value as stored: forward and backward (dy * mask) scale by the same number.
  const T scale = convert<T>(inv_keep);
  const A scale_value = convert<A>(scale);
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks;
       b += int64_t(gridDim.x) * blockDim.x) {
    PhiloxBlock words{};
    if (mode == DropoutMode::Draw) words = random::philox_block(seed, first_block + uint64_t(b));
    for (int k = 0; k < 4; ++k) {
      const int64_t i = b * 4 + k;
      if (i >= n) break;
      int64_t off[1];
      walk_offsets(walk, i, off);
      if (mode == DropoutMode::KeepAll) {
        out[i] = x[off[0]];
        mask[i] = convert<T>(1.0);
      } else if (mode == DropoutMode::DropAll) {
        out[i] = convert<T>(0.0);
        mask[i] = convert<T>(0.0);
      } else {
        // The float32 uniform of random::fill_uniform on [0, 1): exact in float and double.
        const double u = random::unit_from_word(words.x[k], random::uniform_bits(DType::Float32));
        const bool kept = u < keep;
        mask[i] = kept ? scale : convert<T>(0.0);
        // x * 0, not 0: a dropped NaN stays NaN, as on the CPU.
        out[i] = convert<T>(load(x + off[0]) * (kept ? scale_value : A(0)));
      }
    }
  }
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_dropout(const Walk& walk, DType dtype, const void* x, void* out, void* mask,
                           DropoutMode mode, double keep, double inv_keep, uint64_t seed,
                           uint64_t first_block, cudaStream_t stream) {
  if (walk.numel == 0) return cudaSuccess;
  return visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_kernel<T><<<grid_for((walk.numel + 3) / 4), kThreads, 0, stream>>>(
        walk, static_cast<const T*>(x), static_cast<T*>(out), static_cast<T*>(mask), mode, keep,
        inv_keep, seed, first_block);
    return cudaGetLastError();
  });
}

}  // namespace hg::cuda::detail
