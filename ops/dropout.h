// The dropout op (ops/dropout.cpp); torch.nn.functional's conventions (ops/norm.h).
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg {

class Generator;

// Zeroes each element with probability p and scales the rest by 1 / (1 - p); returns x itself
// when not training. generator: nullptr draws from default_generator().
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               Generator* generator = nullptr);

}  // namespace hg
