// The CUDA runtime, host side: device discovery. Later layers add streams, the caching
// allocator and the cuBLASLt/cuDNN handles here. Compiled by the host compiler and linked
// with cudart (see NOTE [CUDA headers without fmt] in probe.h).
#include <cuda_runtime.h>

#include <vector>

#include <fmt/format.h>

#include "halfgrad/cuda/cuda.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/probe.h"

namespace hg::cuda {

namespace {

// cudaGetDeviceCount fails without a driver or a GPU: that is zero devices, not an error.
int query_device_count(cudaError_t* status) {
  int count = 0;
  *status = cudaGetDeviceCount(&count);
  if (*status != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls start clean
    return 0;
  }
  return count;
}

}  // namespace

bool is_compiled() { return true; }

int device_count() {
  static const int count = [] {
    cudaError_t status;
    return query_device_count(&status);
  }();
  return count;
}

bool is_available() { return device_count() > 0; }

bool is_bf16_supported() {
  if (!is_available()) return false;
  int major = 0;
  HG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current_device()),
                "is_bf16_supported");
  return major >= 8;
}

std::string describe() {
  cudaError_t status;
  const int count = query_device_count(&status);
  if (status != cudaSuccess) {
    return fmt::format("no CUDA device ({}: {})", cudaGetErrorName(status),
                       cudaGetErrorString(status));
  }
  if (count == 0) return "no CUDA device";
  cudaDeviceProp prop{};
  status = cudaGetDeviceProperties(&prop, 0);
  if (status != cudaSuccess) {
    return fmt::format("device 0: properties unavailable ({})", cudaGetErrorName(status));
  }
  constexpr int kProbe = 1000;
  std::vector<int> squares(kProbe, -1);
  status = detail::run_probe_kernel(squares.data(), kProbe);
  bool kernels_ok = status == cudaSuccess;
  for (int i = 0; kernels_ok && i < kProbe; ++i) kernels_ok = squares[i] == i * i;
  return fmt::format("{} device(s); device 0: {} (sm_{}{}, {:.1f} GiB); halfgrad kernels: {}",
                     count, prop.name, prop.major, prop.minor,
                     double(prop.totalGlobalMem) / (1024.0 * 1024 * 1024),
                     kernels_ok ? "run" : fmt::format("fail ({})", cudaGetErrorName(status)));
}

}  // namespace hg::cuda
