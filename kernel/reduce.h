// The reduction family's shared types: what max_dim and min_dim return on every backend.
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

// The extreme value along one dim and its index there (int64).
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};

}  // namespace hg::kernel
