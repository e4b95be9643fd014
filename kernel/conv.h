// The conv family's shared types: conv2d's parameters and what its backward returns, on every
// backend.
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

}  // namespace hg::kernel
