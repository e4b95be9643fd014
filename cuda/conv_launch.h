// Launcher of conv2d's bias kernel (conv.cu); cuDNN runs the convolution itself (conv.cpp).
// Free of fmt (NOTE [CUDA headers without fmt] in probe.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "halfgrad/core/dtype.h"

namespace hg::cuda::detail {

// y [N, O, L] (contiguous) += bias [O] (contiguous) at every n and l, computed in float
// (double for float64) and rounded once into y; y and bias of one floating dtype.
cudaError_t launch_conv_add_bias(void* y, const void* bias, DType dtype, int64_t n, int64_t o,
                                 int64_t l, cudaStream_t stream);

}  // namespace hg::cuda::detail
