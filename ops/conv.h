// The convolution op conv2d (ops/conv.cpp); torch.nn.functional's conventions (ops/norm.h).
#pragma once

#include <array>
#include <cstdint>

#include "halfgrad/core/tensor.h"

namespace hg {

// x: [N, C, H, W] or [C, H, W]; weight: [O, C / groups, kH, kW]; bias: [O] (optional).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

}  // namespace hg
