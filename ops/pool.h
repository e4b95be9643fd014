// The pooling ops max_pool2d and avg_pool2d (ops/pool.cpp); torch.nn.functional's conventions
// (ops/norm.h).
#pragma once

#include <array>
#include <cstdint>

#include "halfgrad/core/tensor.h"

namespace hg {

// x: [N, C, H, W] or [C, H, W]. stride {0, 0} (the default) means stride = kernel_size.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {}, std::array<int64_t, 2> padding = {0, 0});
// As max_pool2d; count_include_pad: padded positions count in each window's divisor.
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {}, std::array<int64_t, 2> padding = {0, 0},
                  bool count_include_pad = true);

}  // namespace hg
