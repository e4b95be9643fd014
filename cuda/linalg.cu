// The small kernels around the cuBLASLt GEMMs (linalg_launch.h): scaling out by beta when
// K == 0, and writing the bias row into every output row.
#include "halfgrad/cuda/device_utils.cuh"
#include "halfgrad/cuda/linalg_launch.h"

namespace hg::cuda::detail {

namespace {

// ---- kernels -----------------------------------------------------------------------------

// beta * old is formed in double and rounded to the compute type, then to T (the CPU's order).
template <class T>
__global__ void gemm_scale_kernel(T* out, int64_t numel, double beta) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += step) {
    const double old = beta == 0.0 ? 0.0 : static_cast<double>(load(out + i));
    out[i] = convert<T>(static_cast<compute_t<T>>(beta * old));
  }
}

template <class T>
__global__ void gemm_fill_rows_kernel(T* out, const T* bias, int64_t total, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    out[i] = bias[i % n];
  }
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------

cudaError_t launch_gemm_scale(void* out, DType dtype, int64_t numel, double beta,
                              cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gemm_scale_kernel<T>
        <<<grid_for(numel), kThreads, 0, stream>>>(static_cast<T*>(out), numel, beta);
  });
  return cudaGetLastError();
}

cudaError_t launch_gemm_fill_rows(void* out, const void* bias, DType dtype, int64_t rows, int64_t n,
                                  cudaStream_t stream) {
  const int64_t total = rows * n;
  if (total == 0) return cudaSuccess;
  visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    gemm_fill_rows_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(bias), total, n);
  });
  return cudaGetLastError();
}

}  // namespace hg::cuda::detail
