// The reduction family: sum, prod, mean, amax, amin, logsumexp and norm over any set of dims;
// max/min/argmax with indices; var; the scans (cumsum, cumprod, logcumsumexp); and sum_to (the
// inverse of broadcasting).
//
//   Tensor x = hg::randn({B, T, C}, kFloat16);
//   const kernel::ReduceKernels& K = cpu::reduce_kernels;
//   Tensor s = K.reduce(Reduction::Sum, x, {0, 1}, /*keepdim=*/false, kFloat32, 2.0);  // (C)
//   auto [values, indices] = K.max_dim(x, -1, /*keepdim=*/true);                     // (B, T, 1)
//
// These sit under the op layer, which adds autograd, autocast and type promotion: a kernel
// takes tensors of any strides, never modifies its inputs and returns new contiguous tensors.
// Every result is rounded once, from the accumulator to the requested dtype (NOTE [Reduction
// accumulators] in cpu/reduce.cpp), and does not depend on the number of OpenMP threads.
// Both backends accumulate alike and throw the same errors (kernel/checks.h); the CUDA
// kernels take tensors of one CUDA device and never wait for the GPU.
#pragma once

#include <cstdint>
#include <optional>

#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/kinds.h"

namespace hg::kernel {

// The extreme value along one dim and its index there (int64).
struct ValuesIndices {
  Tensor values;
  Tensor indices;  // int64
};

// The reduction kernels of one backend (cpu::reduce_kernels, cuda::reduce_kernels).
struct ReduceKernels {
  // Reduces x over `dims` (empty: every dim; negative dims count from the end; a dim given
  // twice is an error). keepdim keeps each reduced dim with size 1.
  //
  // Accumulates in float for float16/bfloat16/float32 input, in double for float64. Integer
  // and bool input: Sum, Prod, Amax and Amin accumulate exactly in int64 (Sum and Prod wrap
  // on overflow); Mean, LogSumExp and Norm need floating input. The result has `out_dtype`,
  // rounded once from the accumulator; a floating accumulator needs a floating out_dtype.
  //
  // Norm is (sum |x|^p)^(1/p) for p > 0, max |x| for p = inf, the count of nonzeros for p = 0;
  // the other reductions ignore p.
  // LogSumExp is max-shifted: all -inf gives -inf, any +inf gives +inf, NaN gives NaN.
  // Amax, Amin (and Norm's max) propagate NaN.
  //
  // Over zero elements: Sum 0, Prod 1, Mean NaN, LogSumExp -inf, Norm 0; Amax, Amin and the
  // inf-norm have no identity and throw (as PyTorch does).
  Tensor (*reduce)(Reduction op, const Tensor& x, const Shape& dims, bool keepdim, DType out_dtype,
                   double p);

  // The extreme value along one dim and its index there (int64). Ties give the first
  // occurrence; NaN counts as beyond every number, so the first NaN wins (as in PyTorch).
  // Values keep x's dtype. Any dtype; the dim must not be empty.
  ValuesIndices (*max_dim)(const Tensor& x, int64_t dim, bool keepdim);
  ValuesIndices (*min_dim)(const Tensor& x, int64_t dim, bool keepdim);

  // max_dim(x, *dim, keepdim).indices; without a dim, the index into x flattened in row-major
  // order (keepdim then gives a tensor of x.dim() size-1 dims).
  Tensor (*argmax)(const Tensor& x, std::optional<int64_t> dim, bool keepdim);

  // Variance over `dims`: sum (x - mean)^2 / (n - correction), two passes in the accumulator
  // type (float, double for float64). n <= correction gives NaN (PyTorch warns and gives NaN).
  // Floating input only; correction >= 0.
  Tensor (*var)(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim,
                DType out_dtype);

  // Inclusive scan along dim: out[..., i, ...] = the sum (Sum), product (Prod) or log-sum-exp
  // (LogSumExp) of x[..., 0..i, ...], folded in order by scan_combine (kernel/formulas.h).
  // Accumulates in float (double for float64, int64 for integers and bool); LogSumExp takes
  // floating x only. The result has x's shape and out_dtype (floating when the accumulator is).
  Tensor (*scan)(Scan kind, const Tensor& x, int64_t dim, DType out_dtype);

  // The sum of x over the dims that broadcasting `target` to x's shape would create or expand:
  // the result has shape `target` and x's dtype (accumulated as reduce's Sum does). The
  // autograd layer uses it to reduce the gradient of a broadcast input.
  Tensor (*sum_to)(const Tensor& x, const Shape& target);
};

// A backend's table, from its functions of these names (cpu/reduce.cpp and cuda/reduce.cpp):
//   const kernel::ReduceKernels reduce_kernels = HG_REDUCE_KERNELS;
#define HG_REDUCE_KERNELS                                                                   \
  {                                                                                         \
    .reduce = reduce, .max_dim = max_dim, .min_dim = min_dim, .argmax = argmax, .var = var, \
    .scan = scan, .sum_to = sum_to                                                          \
  }

}  // namespace hg::kernel
