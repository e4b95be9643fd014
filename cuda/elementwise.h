// CUDA elementwise kernels: the same functions, semantics and errors as cpu/elementwise.h and
// the elementwise part of cpu/index.h, on tensors of one CUDA device; plus the copies, fills
// and random fills core/ needs for CUDA storage. Results are new contiguous tensors on the
// inputs' device, computed on its current stream (nothing here waits for the GPU).
#pragma once

#include <optional>

#include "halfgrad/kernel/kinds.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/scalar.h"
#include "halfgrad/core/tensor.h"

namespace hg::cuda {

Tensor unary(kernel::Unary op, const Tensor& x);
Tensor binary(kernel::Binary op, const Tensor& a, const Tensor& b, DType dtype, double alpha = 1.0);
void binary_(kernel::Binary op, const Tensor& self, const Tensor& other, double alpha = 1.0);
Tensor compare(kernel::Compare op, const Tensor& a, const Tensor& b, DType dtype);
Tensor threshold_backward(const Tensor& grad, const Tensor& x, double threshold);
Tensor clamp(const Tensor& x, std::optional<double> low, std::optional<double> high);
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype);
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);

// dst = src converted to dst's dtype, element by element; both on one CUDA device, src
// already of dst's shape (expanded if needed), any strides, no overlap between them.
// Floating -> integer conversions saturate, NaN giving 0 (NOTE [Float to integer on CUDA] in
// core/copy.cpp).
void copy_elements(const Tensor& dst, const Tensor& src);
// Every element of dst (any strides, no element twice) set to value in dst's dtype.
void fill(const Tensor& dst, Scalar value);
// dst (contiguous, floating) filled as random::fill_uniform / fill_normal fill a host buffer:
// the same numbers for the same generator state (NOTE [Philox stream layout] in
// core/random.h), the generator advanced the same way.
void fill_uniform(const Tensor& dst, double low, double high, Generator& gen);
void fill_normal(const Tensor& dst, double mean, double stddev, Generator& gen);

}  // namespace hg::cuda
