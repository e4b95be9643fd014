// CPU elementwise kernels: unary, binary (with broadcasting), comparisons, clamp and the
// ternary addcmul/addcdiv. No autograd, no type promotion: the op layer decides the dtype.
// float16/bfloat16 compute in float and round once per element (NOTE [Storage dtype is not
// compute dtype] in core/cast.h).
//
// NOTE [Loops, not Eigen] DESIGN names Eigen for fp32/fp64 kernels. Elementwise ops and
// reductions here are plain loops over for_each_row's contiguous runs instead: they handle
// halfgrad's strides, broadcasting and 16-bit storage directly, and the compiler vectorizes
// the contiguous case. Eigen is used where it wins: float64 GEMM and tiny GEMMs (cpu/linalg.cpp).
#pragma once

#include <cstdint>
#include <optional>

#include "halfgrad/kernel/kinds.h"
#include "halfgrad/core/tensor.h"

namespace hg::cpu {

using kernel::Unary;  // kernel/kinds.h: the kinds every backend implements

// Elementwise f(x), same shape and dtype as x. Integer inputs are allowed for Neg, Abs,
// Sign, Relu and Square (the op layer converts integers to float32 for the others).
Tensor unary(Unary op, const Tensor& x);

using kernel::Binary;

// op(a, b) broadcast to a common shape, computed in `dtype` (a and b are converted to it).
// `alpha` scales b for Add/Sub (a + alpha * b), as torch.add does.
Tensor binary(Binary op, const Tensor& a, const Tensor& b, DType dtype, double alpha = 1.0);
// self = op(self, other) in place, other broadcast to self's shape, computed in self's dtype.
void binary_(Binary op, const Tensor& self, const Tensor& other, double alpha = 1.0);

using kernel::Compare;
// A bool tensor: op(a, b) broadcast, compared in `dtype`.
Tensor compare(Compare op, const Tensor& a, const Tensor& b, DType dtype);

// relu's backward, torch's threshold_backward: 0 where x <= threshold, else grad (also where
// x is NaN). A select, not a product: an infinite or NaN gradient where x <= threshold gives
// 0. grad and x have one shape and dtype.
Tensor threshold_backward(const Tensor& grad, const Tensor& x, double threshold);

// min(max(x, low), high) with either bound absent; NaN stays NaN.
Tensor clamp(const Tensor& x, std::optional<double> low, std::optional<double> high);

// self + value * t1 * t2, and self + value * t1 / t2, broadcast, computed in dtype.
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype);
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype);

}  // namespace hg::cpu
