// Launchers of the pooling kernels (pool.cu); pool.cpp checks the arguments and calls them.
// Free of fmt (NOTE [CUDA headers without fmt] in probe.h).
//
// Dims: N batch (1 for a 3-D [C, H, W] input), C channels, H/W input height/width, Hout/Wout
// output height/width, kH/kW kernel, sH/sW stride, pH/pW padding.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "halfgrad/core/dtype.h"
#include "halfgrad/cuda/kernel_args.h"

namespace hg::cuda::detail {

// A pooling problem, checked by the host (stride already resolved: never 0).
struct PoolShape {
  int64_t N, C, H, W, Hout, Wout;
  int64_t kH, kW, sH, sW, pH, pW, dH, dW;
  int64_t divisor_override;  // 0: none
  bool count_include_pad;
};

// Element strides of a tensor viewed as [N, C, H, W] (n unused when N is 1).
struct Strides4 {
  int64_t n, c, h, w;
};

// out, indices: [N, C, Hout, Wout] contiguous; indices int64, the flat h * W + w of each
// window's maximum (a NaN wins its window; the first maximum otherwise).
cudaError_t launch_max_pool2d(const void* x, Strides4 x_strides, void* out, int64_t* indices,
                              DType dtype, const PoolShape& shape, cudaStream_t stream);
// out: [N, C, Hout, Wout] contiguous, each window's sum over its divisor.
cudaError_t launch_avg_pool2d(const void* x, Strides4 x_strides, void* out, DType dtype,
                              const PoolShape& shape, cudaStream_t stream);
// dx: [N, C, H, W] contiguous; each input position gathers the shares of the windows it is in.
cudaError_t launch_avg_pool2d_backward(const void* dy, Strides4 dy_strides, void* dx, DType dtype,
                                       const PoolShape& shape, cudaStream_t stream);

// ---- max_pool2d_backward (NOTE [Deterministic max_pool2d backward] in pool.cu) ------------

// The scratch memory of one call, for `count` = dy's elements: sort keys (uint64) and values
// (float, or double for float64 dy) in and out, and the sort's own storage.
struct MaxPoolBackwardScratch {
  void* keys_in;
  void* keys_out;
  void* values_in;
  void* values_out;
  void* sort_storage;
  size_t sort_bytes;
};

// The bit width of the largest sort key for `elements` (N * C * H * W) input elements.
int max_pool2d_backward_key_bits(int64_t elements);
// The bytes of sort storage for count keys of key_bits bits and dtype's values.
cudaError_t max_pool2d_backward_sort_bytes(int64_t count, int key_bits, DType dtype, size_t* bytes);
// dx [N, C, H, W] (contiguous, in dy's dtype) = dy [N, C, Hout, Wout] summed onto the flat
// positions `indices` (int64, dy's shape) of each plane. An index outside [0, H * W) is
// reported to `slot` under `code` (dim `index_dim`) and skipped.
cudaError_t launch_max_pool2d_backward(const void* dy, Strides4 dy_strides, const int64_t* indices,
                                       Strides4 index_strides, void* dx, DType dtype,
                                       const PoolShape& shape, int key_bits,
                                       const MaxPoolBackwardScratch& scratch, DeviceErrorSlot* slot,
                                       DeviceError code, int32_t index_dim, cudaStream_t stream);

}  // namespace hg::cuda::detail
