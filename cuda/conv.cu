// conv2d's bias kernel (conv_launch.h): cuDNN convolves, this adds the bias per channel.
#include "halfgrad/cuda/conv_launch.h"
#include "halfgrad/cuda/device_utils.cuh"

namespace hg::cuda::detail {

namespace {

// ---- kernels -----------------------------------------------------------------------------

// y viewed as [N * O, L]: element i is in channel (i / L) % O.
template <class T>
__global__ void conv_add_bias_kernel(T* y, const T* bias, int64_t total, int64_t o, int64_t l) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t channel = (i / l) % o;
    y[i] = convert<T>(load(y + i) + load(bias + channel));
  }
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------

cudaError_t launch_conv_add_bias(void* y, const void* bias, DType dtype, int64_t n, int64_t o,
                                 int64_t l, cudaStream_t stream) {
  const int64_t total = n * o * l;
  if (total == 0) return cudaSuccess;
  visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_add_bias_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), total, o, l);
  });
  return cudaGetLastError();
}

}  // namespace hg::cuda::detail
