// Raw CPU kernels for the neural-network ops: softmax, the norms, conv2d, pooling, the
// embedding backward and dropout. They sit under the op layer, which adds autograd, autocast
// and the dtype policy; here there is no autograd and no type promotion.
//
//   Tensor y = hg::cpu::softmax(x, /*dim=*/-1);
//   Tensor dx = hg::cpu::softmax_backward(dy, y, -1);
//   auto [out, mean, rstd] = hg::cpu::layer_norm(x, {C}, weight, bias, 1e-5);
//
// Conventions shared by every kernel here:
// - Inputs may have any strides and are never modified (batch_norm's running statistics are
//   the one documented exception). Results are new contiguous tensors in the input's dtype
//   unless stated.
// - Floating dtypes only. float16/bfloat16 are loaded as float, computed and accumulated in
//   float and rounded once at the output; float32 accumulates in float, float64 in double
//   (NOTE [Storage dtype is not compute dtype] in core/cast.h).
// - An undefined Tensor stands for an absent optional argument (weight, bias, running stats).
// - Bad arguments throw hg::Error naming the op, what was expected and what was given.
//
// Dims: N batch, C channels, G groups, O output channels, H/W height/width, D the softmax
// dim or the embedding width.
#pragma once

#include <array>
#include <cstdint>

#include "halfgrad/kernel/checks.h"
#include "halfgrad/kernel/conv.h"
#include "halfgrad/kernel/dropout.h"
#include "halfgrad/kernel/norm.h"
#include "halfgrad/kernel/pool.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/shape.h"
#include "halfgrad/core/tensor.h"

namespace hg::cpu {

// ---- softmax ------------------------------------------------------------------------------

// softmax / log_softmax along dim, max-shifted so no exp overflows.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// y is the forward's output: dx = y * (dy - sum(dy * y)) and dx = dy - exp(y) * sum(dy), the
// sums along dim. dy and y must have the same shape and dtype.
Tensor softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim);

// ---- normalization ------------------------------------------------------------------------
//
// NOTE [Norm kernels' dtypes] The saved statistics mean and rstd = 1 / sqrt(var + eps) are
// float32, or float64 for float64 input (the accumulation type). weight and bias may be of
// any floating dtype, also one other than x's (float32 parameters with bfloat16
// activations, as torch's CPU kernels allow): they are read in the accumulation type and out
// keeps x's dtype. dweight comes back in weight's dtype; dbias too (the backward knows only
// has_bias), or in x's dtype when there is no weight. The variance used to normalise is the
// biased one (divided by the count).

using kernel::NormBackward;  // kernel/norm.h
using kernel::NormForward;

// Normalises over the trailing dims given by normalized_shape; weight and bias (optional) have
// normalized_shape. mean/rstd: [rows], rows = numel / prod(normalized_shape).
NormForward layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias, double eps);
NormBackward layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const Shape& normalized_shape,
                                 const Tensor& weight, bool has_bias);

// x: [N, C, *]; num_groups divides C; weight/bias (optional): [C]. mean/rstd: [N, G].
NormForward group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight,
                       const Tensor& bias, double eps);
NormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, int64_t num_groups, const Tensor& weight,
                                 bool has_bias);

// x: [N, C, *]; weight/bias/running_mean/running_var (each optional): [C].
// Training normalises with the batch statistics over N and *, and, when the running
// statistics are given, updates them in place as torch does:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)
// (the unbiased variance, n = the count per channel, which must be > 1). Eval normalises with
// the running statistics, which must be given. mean/rstd: [C], the statistics used.
NormForward batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps);
// mean/rstd as batch_norm returned them. training selects the backward through the batch
// statistics; in eval they are constants and dx = dy * weight * rstd.
NormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& weight, bool has_bias,
                                 bool training);

// ---- conv2d -------------------------------------------------------------------------------

// stride (default 1), padding (0) and dilation (1), each {H, W}, and groups (1); shared with
// the CUDA kernels (kernel/checks.h).
using kernel::Conv2dParams;

// x: [N, C, H, W], weight: [O, C / groups, kH, kW], bias (optional): [O], all of one dtype.
// Returns [N, O, Hout, Wout], Hout = (H + 2 padding - dilation (kH - 1) - 1) / stride + 1.
// im2col + a matrix product accumulating in float32 (float64 for float64).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p);

using kernel::Conv2dBackward;  // kernel/conv.h
// needed = {dx, dweight, dbias}: the gradients to compute.
Conv2dBackward conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               bool has_bias, const Conv2dParams& p, std::array<bool, 3> needed);

// ---- pooling ------------------------------------------------------------------------------

// kernel > 0; stride {0, 0} means stride = kernel (the torch default); padding at most half
// the kernel, as torch requires. Windows that reach into the padding see -inf (max) or zeros
// (avg). ceil_mode is false: Hout = (H + 2 padding - kernel) / stride + 1. kernel, stride and
// padding are {H, W}; count_include_pad (avg_pool2d): divide by kH * kW, padding included.
// Shared with the CUDA kernels (kernel/checks.h).
using kernel::Pool2dParams;

// x: [N, C, H, W] or [C, H, W]. indices: int64, the flat offset h * W + w of each maximum
// within its (H, W) plane, as torch returns them. A NaN in a window wins it.
using kernel::MaxPoolForward;  // kernel/pool.h
MaxPoolForward max_pool2d(const Tensor& x, const Pool2dParams& p);
// dx of input_shape, in dy's dtype: dy scattered (added) to the indices.
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& input_shape, const Pool2dParams& p);

// ---- embedding ----------------------------------------------------------------------------

// dy: [*, D], indices (int64 or int32): [*] with values in [0, num_embeddings).
// Returns dweight [num_embeddings, D] in dy's dtype: dy's rows added into the rows they were
// gathered from. Row padding_idx gets no gradient; padding_idx = -1 means none.
Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                          int64_t padding_idx);

// ---- dropout ------------------------------------------------------------------------------

// Keeps each element with probability 1 - p: mask is 1 / (1 - p) (rounded to x's dtype) where
// kept and 0 elsewhere, out = x * mask (computed in float, rounded once), both in x's dtype.
// The keep decision for element i (row-major) is u_i < 1 - p, u_i the i-th float32 uniform of
// one random::fill_uniform draw of numel elements from gen, so a seed gives the same mask for
// every dtype. p == 0 returns a copy of x and a mask of ones, p == 1 zeros; neither draws.
using kernel::DropoutForward;  // kernel/dropout.h
DropoutForward dropout(const Tensor& x, double p, Generator& gen);

}  // namespace hg::cpu
