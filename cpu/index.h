// CPU kernels of the elementwise selections: masked_fill and where. The index kernels proper
// (cat, gather, index_put, ...) are the table cpu::index_kernels (kernel/index.h).
//
// Like those, these are raw kernels: no autograd, no autocast, no type promotion. Inputs may
// have any strides and are never written; every result is a new contiguous tensor.
#pragma once

#include "halfgrad/core/scalar.h"
#include "halfgrad/core/tensor.h"

namespace hg::cpu {

// A copy of x with value where mask (bool) is true. The result has the broadcast shape of x
// and mask (PyTorch's out-of-place masked_fill). value converts to x's dtype as fill_ does.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);

// condition ? a : b elementwise, over the broadcast shape of all three. condition is bool;
// a and b share a dtype, which the result has.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);

}  // namespace hg::cpu
