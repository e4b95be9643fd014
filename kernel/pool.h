// The pool family: max_pool2d, avg_pool2d and their backward passes, as a table of kernels
// every backend fills (cpu/pool.cpp, cuda/pool.cpp).
//
// Conventions shared by the nn kernel families (the opening of kernel/norm.h): inputs of any
// strides, never modified; results new contiguous tensors in the input's dtype unless stated;
// floating dtypes only, float16/bfloat16 computed in float and rounded once; bad arguments
// throw hg::Error naming the op, what was expected and what was given.
//
// Dims: N batch, C channels, H/W height/width, kH/kW the window's.
#pragma once

#include <array>
#include <cstdint>

#include "halfgrad/core/shape.h"
#include "halfgrad/core/tensor.h"

namespace hg::kernel {

// kernel > 0; stride {0, 0} means stride = kernel (the torch default); padding at most half
// the kernel, as torch requires. Windows that reach into the padding see -inf (max) or zeros
// (avg). Hout = (H + 2 padding - dilation (kernel - 1) - 1) / stride + 1, rounded down, or up
// with ceil_mode (a last window must then start inside the input or its left padding, as
// torch's). kernel, stride, padding and dilation are {H, W}; dilation (max_pool2d only) spaces
// the window's taps. avg_pool2d divides by divisor_override when it is not 0, else by the
// window's size: padding and positions past the input up to its right padding included with
// count_include_pad, the input positions only without.
struct Pool2dParams {
  std::array<int64_t, 2> kernel{0, 0};
  std::array<int64_t, 2> stride{0, 0};
  std::array<int64_t, 2> padding{0, 0};
  bool count_include_pad = true;
  std::array<int64_t, 2> dilation{1, 1};
  bool ceil_mode = false;
  int64_t divisor_override = 0;
};

struct MaxPoolForward {
  Tensor out;
  Tensor indices;  // int64
};

struct PoolKernels {
  // x: [N, C, H, W] or [C, H, W]. indices: int64, the flat offset h * W + w of each maximum
  // within its (H, W) plane, as torch returns them. A NaN in a window wins it.
  MaxPoolForward (*max_pool2d)(const Tensor& x, const Pool2dParams& p);
  // dx of input_shape, in dy's dtype: dy scattered (added) to the indices.
  Tensor (*max_pool2d_backward)(const Tensor& dy, const Tensor& indices, const Shape& input_shape);
  Tensor (*avg_pool2d)(const Tensor& x, const Pool2dParams& p);
  Tensor (*avg_pool2d_backward)(const Tensor& dy, const Shape& input_shape, const Pool2dParams& p);
};

// A backend's table, from its functions of these names (cpu/pool.cpp and cuda/pool.cpp):
//   const kernel::PoolKernels pool_kernels = HG_POOL_KERNELS;
#define HG_POOL_KERNELS                                                   \
  {                                                                       \
    .max_pool2d = max_pool2d, .max_pool2d_backward = max_pool2d_backward, \
    .avg_pool2d = avg_pool2d, .avg_pool2d_backward = avg_pool2d_backward  \
  }

}  // namespace hg::kernel
