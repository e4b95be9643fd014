// Activations with a weight: prelu (ops/activation.cpp); torch.nn.functional's conventions
// (ops/norm.h).
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg {

// max(0, x) + weight * min(0, x); weight has 1 element or one per channel (x's dim 1).
Tensor prelu(const Tensor& x, const Tensor& weight);

}  // namespace hg
