// Helpers shared by ops' backward formulas.
#pragma once

#include "halfgrad/ops/ops.h"

namespace hg::ops {

// The gradient of an input of `sizes` and `dtype` from a gradient of the op's (possibly
// broadcast, possibly promoted) result: summed over the broadcast dims, cast back to the
// input's dtype. Both steps are ops, so the result can be differentiated again.
inline Tensor reduce_grad(const Tensor& grad, const Shape& sizes, DType dtype) {
  const Tensor reduced = grad.sizes() == sizes ? grad : sum_to_size(grad, sizes);
  return reduced.dtype() == dtype ? reduced : reduced.to(dtype);
}

// d/dx gelu(x) (approximate "tanh" or "none"), x's dtype: one kernel, or under create_graph
// ops that can be differentiated again (ops/elementwise.cpp).
Tensor gelu_derivative(const Tensor& x, bool tanh_approximation);

}  // namespace hg::ops
