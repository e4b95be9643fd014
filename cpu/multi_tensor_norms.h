// The CPU multi_tensor kernels of clip_grad_norm_, clip_grad_value_, FP16Optimizer, the loss
// scalers, anomaly mode and OverflowWatch (kernel/multi_tensor.h has their contracts;
// cpu/multi_tensor.cpp puts them in cpu::multi_tensor_kernels). Each gives the bits the same
// callers computed with ops before the family existed: the per-tensor norms, the scaling and
// the clamp call the same CPU kernels with the same arguments (NOTE [Multi-tensor norms as the
// ops computed them] in multi_tensor_norms.cpp).
#pragma once

#include <span>

#include "halfgrad/core/tensor.h"

namespace hg::cpu::multi_tensor_detail {

// A 0-d float32 tensor: the norm of order norm_type (> 0, or infinity) of all the tensors
// together (at least one; floating, float8 included, any strides).
Tensor total_norm(std::span<const Tensor> tensors, double norm_type);
// Every tensor *= max_norm / (total_norm[0] + 1e-6) when that is below 1 or NaN, else nothing
// is written. total_norm: a one-element float32 tensor.
void clip_by_total_norm_(std::span<const Tensor> tensors, const Tensor& total_norm,
                         double max_norm);
// Every tensor *= factor (rounded to float; double for float64).
void scale_(std::span<const Tensor> tensors, double factor);
// Every tensor = clamp(tensor, low, high); NaN stays NaN.
void clamp_(std::span<const Tensor> tensors, double low, double high);
// A one-element float32 tensor: 1 when any element of the tensors (at least one) is inf or NaN.
Tensor non_finite_flag(std::span<const Tensor> tensors);
// [bits of the largest finite |x| as a double, count of infs and NaNs] as int64 [2].
Tensor value_range(const Tensor& t);

}  // namespace hg::cpu::multi_tensor_detail
