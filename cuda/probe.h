// The probe kernel: proves that this build's device code runs on the GPU it finds.
// NOTE [CUDA headers without fmt] Headers included by .cu files stay free of fmt (nvcc's
// host pass cannot compile fmt 9 in C++20 mode): kernels and their launchers live in .cu
// files and return cudaError_t; host code in .cpp files turns that into hg::Error.
#pragma once

#include <cuda_runtime.h>

namespace hg::cuda::detail {

// Runs a kernel writing out[i] = i * i for i < n on the current device and copies the
// result to host_out. Returns the first CUDA error, or cudaSuccess.
cudaError_t run_probe_kernel(int* host_out, int n);

}  // namespace hg::cuda::detail
