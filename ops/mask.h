// Selection by masks (ops/mask.cpp): nonzero, one-argument where, masked_select.
//
//   Tensor at = hg::nonzero(x);                 // [count, x.dim()], the indices of nonzeros
//   Tensor picked = hg::masked_select(x, x > 0); // 1-d, in row-major order
//
// The result's size depends on the data: on CUDA the host waits for the count, as torch's
// does.
#pragma once

#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg {

// The indices of x's nonzero elements (NaN is nonzero), one row each, in row-major order:
// int64 [count, x.dim()].
Tensor nonzero(const Tensor& x);
// The same indices as one 1-d tensor per dim (torch.nonzero(as_tuple=True), and torch.where
// with one argument).
std::vector<Tensor> nonzero_as_tuple(const Tensor& x);
std::vector<Tensor> where(const Tensor& condition);
// The elements of x where mask (bool, broadcast with x) is true, in row-major order: 1-d.
// Gradients go back to the selected elements.
Tensor masked_select(const Tensor& x, const Tensor& mask);

}  // namespace hg
