// The norm family: softmax, log_softmax, layer_norm, group_norm and batch_norm, forward and
// backward, as a table of kernels every backend fills (cpu/norm.cpp, cuda/norm.cpp).
//
// Conventions shared by the nn kernel families (norm, conv, pool, embedding, dropout):
// - Inputs may have any strides and are never modified (batch_norm's running statistics are
//   the one documented exception). Results are new contiguous tensors in the input's dtype
//   unless stated.
// - Floating dtypes only. float16/bfloat16 are computed and accumulated in float and rounded
//   once at the output; float32 accumulates in float, float64 in double (NOTE [Storage dtype
//   is not compute dtype] in core/cast.h).
// - An undefined Tensor stands for an absent optional argument (weight, bias, running stats).
// - Bad arguments throw hg::Error naming the op, what was expected and what was given.
// There is no autograd and no type promotion here: the op layer adds them.
//
// Dims: N batch, C channels, G groups, D the softmax dim.
#pragma once

#include <cstdint>

#include "halfgrad/core/shape.h"
#include "halfgrad/core/tensor.h"

namespace hg::kernel {

struct NormForward {
  Tensor out;
  Tensor mean;
  Tensor rstd;
};

struct NormBackward {
  Tensor dx;
  Tensor dweight;  // undefined when there is no weight
  Tensor dbias;    // undefined when there is no bias
};

// NOTE [Norm kernels' dtypes] The saved statistics mean and rstd = 1 / sqrt(var + eps) are
// float32, or float64 for float64 input (the accumulation type). weight and bias may be of
// any floating dtype, also one other than x's (float32 parameters with bfloat16
// activations, as torch's CPU kernels allow): they are read in the accumulation type and out
// keeps x's dtype. dweight comes back in weight's dtype; dbias too (the backward knows only
// has_bias), or in x's dtype when there is no weight. The variance used to normalise is the
// biased one (divided by the count).

struct NormKernels {
  // ---- softmax ----------------------------------------------------------------------------

  // softmax / log_softmax along dim, max-shifted so no exp overflows.
  Tensor (*softmax)(const Tensor& x, int64_t dim);
  Tensor (*log_softmax)(const Tensor& x, int64_t dim);
  // y is the forward's output: dx = y * (dy - sum(dy * y)) and dx = dy - exp(y) * sum(dy), the
  // sums along dim. dy and y must have the same shape and dtype.
  Tensor (*softmax_backward)(const Tensor& dy, const Tensor& y, int64_t dim);
  Tensor (*log_softmax_backward)(const Tensor& dy, const Tensor& y, int64_t dim);

  // ---- normalization (NOTE [Norm kernels' dtypes]) ----------------------------------------

  // Normalises over the trailing dims given by normalized_shape; weight and bias (optional)
  // have normalized_shape. mean/rstd: [rows], rows = numel / prod(normalized_shape).
  NormForward (*layer_norm)(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                            const Tensor& bias, double eps);
  NormBackward (*layer_norm_backward)(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Shape& normalized_shape,
                                      const Tensor& weight, bool has_bias);

  // x: [N, C, *]; num_groups divides C; weight/bias (optional): [C]. mean/rstd: [N, G].
  NormForward (*group_norm)(const Tensor& x, int64_t num_groups, const Tensor& weight,
                            const Tensor& bias, double eps);
  NormBackward (*group_norm_backward)(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, int64_t num_groups, const Tensor& weight,
                                      bool has_bias);

  // x: [N, C, *]; weight/bias/running_mean/running_var (each optional): [C].
  // Training normalises with the batch statistics over N and *, and, when the running
  // statistics are given, updates them in place as torch does:
  //   running_mean = (1 - momentum) * running_mean + momentum * mean
  //   running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)
  // (the unbiased variance, n = the count per channel, which must be > 1). Eval normalises
  // with the running statistics, which must be given. mean/rstd: [C], the statistics used.
  NormForward (*batch_norm)(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                            const Tensor& weight, const Tensor& bias, bool training,
                            double momentum, double eps);
  // mean/rstd as batch_norm returned them. training selects the backward through the batch
  // statistics; in eval they are constants and dx = dy * weight * rstd.
  NormBackward (*batch_norm_backward)(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& weight, bool has_bias,
                                      bool training);
};

// A backend's table, from its functions of these names (cpu/norm.cpp and cuda/norm.cpp):
//   const kernel::NormKernels norm_kernels = HG_NORM_KERNELS;
#define HG_NORM_KERNELS                                                                   \
  {                                                                                       \
    .softmax = softmax, .log_softmax = log_softmax, .softmax_backward = softmax_backward, \
    .log_softmax_backward = log_softmax_backward, .layer_norm = layer_norm,               \
    .layer_norm_backward = layer_norm_backward, .group_norm = group_norm,                 \
    .group_norm_backward = group_norm_backward, .batch_norm = batch_norm,                 \
    .batch_norm_backward = batch_norm_backward                                            \
  }

}  // namespace hg::kernel
