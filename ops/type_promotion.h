// The dtype an op computes in, from its operands, as PyTorch's result_type.
//
// NOTE [Type promotion of operands] Operands come in three tiers: tensors with dims,
// 0-d tensors, and C++ numbers (Scalar). Within a tier dtypes promote as promote_types.
// A lower tier changes the result only when it is of a higher category (bool < integral <
// floating): then a 0-d tensor gives its own dtype, and a number gives float32 (floating)
// or int64 (integral). So float16 tensor * 2.0 is float16, int64 tensor * 2.5 is float32,
// float16 tensor + float32 0-d tensor is float16.
#pragma once

#include <initializer_list>
#include <span>

#include "halfgrad/core/scalar.h"
#include "halfgrad/core/tensor.h"

namespace hg {

DType result_type(std::span<const Tensor> tensors, std::span<const Scalar> scalars = {});
DType result_type(std::initializer_list<Tensor> tensors,
                  std::initializer_list<Scalar> scalars = {});

// The dtype a float-only op (exp, sigmoid, division, ...) computes in: the dtype itself when
// floating, float32 for integers and bool (as torch).
DType floating_result(DType dtype);

// Whether a number operand of `t` (t + 0.1, t * 1.7) is applied in the compute type instead of
// as a 0-d tensor of the result dtype: where t is float16 or bfloat16 and stays so
// (NOTE [Number operands of 16-bit ops] in ops/elementwise.cpp).
bool number_in_compute_type(const Tensor& t, Scalar number);

}  // namespace hg
