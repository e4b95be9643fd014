// The convolution ops conv2d, conv1d and conv_transpose2d (ops/conv.cpp); torch.nn.functional's
// conventions (ops/norm.h).
#pragma once

#include <array>
#include <cstdint>

#include "halfgrad/core/expanding_array.h"
#include "halfgrad/core/tensor.h"

namespace hg {

// x: [N, C, H, W] or [C, H, W]; weight: [O, C / groups, kH, kW]; bias: [O] (optional). One
// number for stride, padding or dilation stands for both dims (NOTE [Expanding sizes]).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              ExpandingArray<2> stride = {1, 1}, ExpandingArray<2> padding = {0, 0},
              ExpandingArray<2> dilation = {1, 1}, int64_t groups = 1);
// The transposed convolution (conv2d's input gradient), as torch's: x [N, Cin, H, W] or
// [Cin, H, W]; weight [Cin, Cout / groups, kH, kW]; bias [Cout] (optional); each output size
// (H - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                        ExpandingArray<2> stride = {1, 1},
                        ExpandingArray<2> padding = {0, 0},
                        ExpandingArray<2> output_padding = {0, 0}, int64_t groups = 1,
                        ExpandingArray<2> dilation = {1, 1});
// x: [N, C, L] or [C, L]; weight: [O, C / groups, K]; bias: [O] (optional).
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);

}  // namespace hg
