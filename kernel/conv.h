// The conv family: conv2d and its backward, as a table of kernels every backend fills
// (cpu/conv.cpp on im2col and the CPU GEMM, cuda/conv.cpp on cuDNN).
//
// Conventions shared by the nn kernel families (the opening of kernel/norm.h): inputs of any
// strides, never modified; floating dtypes only, float16/bfloat16 computed in float and
// rounded once; an undefined Tensor is an absent optional argument; bad arguments throw
// hg::Error naming the op, what was expected and what was given.
//
// Dims: N batch, C input channels, O output channels, H/W height/width, kH/kW the kernel's.
#pragma once

#include <array>
#include <cstdint>

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

// stride (default 1), padding (0) and dilation (1), each {H, W}, and groups (1).
struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};

struct Conv2dBackward {
  Tensor dx;       // undefined unless needed[0]
  Tensor dweight;  // undefined unless needed[1]
  Tensor dbias;    // undefined unless needed[2] and has_bias
};

struct ConvKernels {
  // x: [N, C, H, W], weight: [O, C / groups, kH, kW], bias (optional): [O], all of one dtype.
  // Returns [N, O, Hout, Wout], Hout = (H + 2 padding - dilation (kH - 1) - 1) / stride + 1.
  // The products accumulate in float32 (float64 for float64).
  Tensor (*conv2d)(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Conv2dParams& p);
  // needed = {dx, dweight, dbias}: the gradients to compute.
  Conv2dBackward (*conv2d_backward)(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                    bool has_bias, const Conv2dParams& p,
                                    std::array<bool, 3> needed);
};

// A backend's table, from its functions of these names (cpu/conv.cpp and cuda/conv.cpp):
//   const kernel::ConvKernels conv_kernels = HG_CONV_KERNELS;
#define HG_CONV_KERNELS \
  { .conv2d = conv2d, .conv2d_backward = conv2d_backward }

}  // namespace hg::kernel
