// Activations of torch.nn.functional beyond the elementwise functions of ops/ops.h: prelu (with
// a weight), leaky_relu, elu and glu (ops/activation.cpp); torch.nn.functional's conventions
// (ops/norm.h).
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg {

// max(0, x) + weight * min(0, x); weight has 1 element or one per channel (x's dim 1).
Tensor prelu(const Tensor& x, const Tensor& weight);
// x where x > 0, else negative_slope x.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// x where x > 0, else alpha (exp(x) - 1).
Tensor elu(const Tensor& x, double alpha = 1.0);
// The gated linear unit: a sigmoid(b), with a and b the first and second halves of x along dim
// (its size must be even).
Tensor glu(const Tensor& x, int64_t dim = -1);

}  // namespace hg
