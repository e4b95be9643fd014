// The small kernels around the cuBLASLt GEMMs (linalg_launch.h): scaling out by beta when
// K == 0, writing the bias row into every output row, and the float8 cast of the scaled GEMM's
// operands with their amax.
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

// x * scale to float8 (saturating), and the largest |x| as float bits with the sign cleared
// (their order is the magnitudes', NaN above inf), reduced per warp, then atomicMax per warp.
template <class In, class F8>
__global__ void quantize_fp8_kernel(const In* x, const float* scale, unsigned int* amax_bits,
                                    F8* out, int64_t n) {
  const float s = *scale;
  unsigned int largest = 0;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const float value = convert<float>(load(x + i));
    largest = max(largest, __float_as_uint(value) & 0x7FFFFFFFu);
    out[i] = F8(value * s, Overflow::Saturate);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    largest = max(largest, __shfl_down_sync(0xFFFFFFFFu, largest, offset));
  }
  if ((threadIdx.x & 31) == 0 && largest != 0) atomicMax(amax_bits, largest);
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

cudaError_t launch_quantize_fp8(const void* x, DType x_dtype, const float* scale, float* amax,
                                void* out, DType out_dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  auto* amax_bits = reinterpret_cast<unsigned int*>(amax);
  visit_storage_among<DType::Float32, DType::Float16, DType::BFloat16>(x_dtype, [&](auto tag) {
    using In = typename decltype(tag)::type;
    const auto* in = static_cast<const In*>(x);
    if (out_dtype == DType::Float8_e4m3fn) {
      quantize_fp8_kernel<<<grid_for(n), kThreads, 0, stream>>>(
          in, scale, amax_bits, static_cast<Float8_e4m3fn*>(out), n);
    } else {
      quantize_fp8_kernel<<<grid_for(n), kThreads, 0, stream>>>(
          in, scale, amax_bits, static_cast<Float8_e5m2*>(out), n);
    }
  });
  return cudaGetLastError();
}

}  // namespace hg::cuda::detail
