// The probe kernel (probe.h): each thread writes the square of its index, so the host can tell
// that this build's device code runs on the GPU it finds.
#include "halfgrad/cuda/probe.h"

namespace hg::cuda::detail {

// ---- kernels -----------------------------------------------------------------------------

__global__ void probe_kernel(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * i;
}

// ---- launchers ---------------------------------------------------------------------------

cudaError_t run_probe_kernel(int* host_out, int n) {
  int* device_out = nullptr;
  cudaError_t status = cudaMalloc(&device_out, sizeof(int) * n);
  if (status != cudaSuccess) return status;
  constexpr int kThreads = 128;
  probe_kernel<<<(n + kThreads - 1) / kThreads, kThreads>>>(device_out, n);
  status = cudaGetLastError();
  if (status == cudaSuccess) {
    status = cudaMemcpy(host_out, device_out, sizeof(int) * n, cudaMemcpyDeviceToHost);
  }
  const cudaError_t freed = cudaFree(device_out);
  return status != cudaSuccess ? status : freed;
}

}  // namespace hg::cuda::detail
