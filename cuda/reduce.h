// CUDA reductions: the functions, semantics and errors of cpu/reduce.h on one CUDA device.
// Accumulates in float for the 16-bit floats and float32, in double for float64, in int64
// for integers, and rounds once into the result (NOTE [Reduction accumulators] in
// cpu/reduce.cpp). Results are new contiguous tensors; nothing here waits for the GPU.
#pragma once

#include <optional>

#include "halfgrad/kernel/kinds.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/reduce.h"

namespace hg::cuda {

Tensor reduce(kernel::Reduction op, const Tensor& x, const Shape& dims, bool keepdim,
              DType out_dtype, double p = 2.0);
kernel::ValuesIndices max_dim(const Tensor& x, int64_t dim, bool keepdim);
kernel::ValuesIndices min_dim(const Tensor& x, int64_t dim, bool keepdim);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim);
Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim, DType out_dtype);
Tensor cumsum(const Tensor& x, int64_t dim, DType out_dtype);
Tensor sum_to(const Tensor& x, const Shape& target);

}  // namespace hg::cuda
