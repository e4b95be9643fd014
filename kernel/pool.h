// The pool family's shared types: the pooling parameters and what max_pool2d returns, on every
// backend.
#pragma once

#include <array>
#include <cstdint>

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

// kernel, stride and padding, each {H, W}; stride {0, 0} means stride = kernel.
struct Pool2dParams {
  std::array<int64_t, 2> kernel{0, 0};
  std::array<int64_t, 2> stride{0, 0};
  std::array<int64_t, 2> padding{0, 0};
  bool count_include_pad = true;  // avg_pool2d: divide by kH * kW, padding included
};

struct MaxPoolForward {
  Tensor out;
  Tensor indices;  // int64
};

}  // namespace hg::kernel
