// The norm family's shared types: what layer_norm, group_norm and batch_norm return, forward and
// backward, on every backend.
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

struct NormForward {
  Tensor out;
  Tensor mean;
  Tensor rstd;
};

struct NormBackward {
  Tensor dx;
  Tensor dweight;  // undefined when there is no weight
  Tensor dbias;    // undefined when there is no bias
};

}  // namespace hg::kernel
