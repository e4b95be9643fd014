// The elementwise kernels every backend implements: unary, binary (with broadcasting),
// comparisons, clamp, the ternary addcmul/addcdiv, where and masked_fill, and relu's backward.
// No autograd, no type promotion: the op layer decides the dtype. float16/bfloat16 compute in
// float and round once per element (NOTE [Storage dtype is not compute dtype] in core/cast.h).
// Inputs may have any strides and are never written (binary_ writes self); results are new
// contiguous tensors on the inputs' device.
#pragma once

#include <optional>

#include "halfgrad/core/scalar.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/kinds.h"

namespace hg::kernel {

struct ElementwiseKernels {
  // Elementwise op(x), same shape and dtype as x. Integer inputs are allowed for the kinds
  // that take them (kernel/unary.def); the op layer converts integers to float32 for the others.
  Tensor (*unary)(Unary op, const Tensor& x);

  // op(a, b) broadcast to a common shape, computed in `dtype` (a and b are converted to it).
  // `alpha` scales b for Add and Sub (a + alpha * b), as torch.add does, and for Mul, Div and
  // Pow of floating dtypes (op(a, alpha * b)), where it carries a number in the compute type
  // (NOTE [Number operands of 16-bit ops] in ops/elementwise.cpp).
  Tensor (*binary)(Binary op, const Tensor& a, const Tensor& b, DType dtype, double alpha);
  // self = op(self, other) in place, other broadcast to self's shape, computed in self's dtype.
  void (*binary_)(Binary op, const Tensor& self, const Tensor& other, double alpha);

  // A bool tensor: op(a, b) broadcast, compared in `dtype`.
  Tensor (*compare)(Compare op, const Tensor& a, const Tensor& b, DType dtype);

  // relu's backward, torch's threshold_backward: 0 where x <= threshold, else grad (also where
  // x is NaN). A select, not a product: an infinite or NaN gradient where x <= threshold gives
  // 0. grad and x have one shape and dtype.
  Tensor (*threshold_backward)(const Tensor& grad, const Tensor& x, double threshold);

  // min(max(x, low), high) with either bound absent; NaN stays NaN.
  Tensor (*clamp)(const Tensor& x, std::optional<double> low, std::optional<double> high);

  // self + value * t1 * t2, and self + value * t1 / t2, broadcast, computed in dtype.
  Tensor (*addcmul)(const Tensor& self, const Tensor& t1, const Tensor& t2, double value,
                    DType dtype);
  Tensor (*addcdiv)(const Tensor& self, const Tensor& t1, const Tensor& t2, double value,
                    DType dtype);

  // condition ? a : b elementwise, over the broadcast shape of all three. condition is bool;
  // a and b share a dtype, which the result has.
  Tensor (*where)(const Tensor& condition, const Tensor& a, const Tensor& b);

  // A copy of x with value where mask (bool) is true. The result has the broadcast shape of x
  // and mask (PyTorch's out-of-place masked_fill). value converts to x's dtype as fill_ does.
  Tensor (*masked_fill)(const Tensor& x, const Tensor& mask, Scalar value);
};

// A backend's table, from its functions of these names (cpu/elementwise.cpp and
// cuda/elementwise.cpp):
//   const kernel::ElementwiseKernels elementwise_kernels = HG_ELEMENTWISE_KERNELS;
#define HG_ELEMENTWISE_KERNELS                                                    \
  {                                                                               \
    .unary = unary, .binary = binary, .binary_ = binary_, .compare = compare,     \
    .threshold_backward = threshold_backward, .clamp = clamp, .addcmul = addcmul, \
    .addcdiv = addcdiv, .where = where, .masked_fill = masked_fill                \
  }

}  // namespace hg::kernel
