// CUDA loss kernels over Tensors: the forwards and fused first-order backwards of the losses
// of ops/loss.h, for inputs on one CUDA device. ops/loss.cpp validates the arguments (shapes,
// dtypes, reduction names) and calls these for CUDA inputs; nothing here waits for the GPU.
//
//   cuda::ClassLossForward r = cuda::cross_entropy(logits, labels, {}, -100,
//                                                  cuda::LossReduction::Mean, 0.0, kFloat32);
//   cuda::LossGrads g = cuda::cross_entropy_backward(grad, logits, labels, {}, r.stats,
//                                                    r.divisor, -100, cuda::LossReduction::Mean,
//                                                    0.0, true, false);
//
// Losses are computed in the accumulation dtype (float32, float64 for float64 results) and
// rounded once to the result dtype (NOTE [Loss kernels] in ops/loss.cpp). "mean" divides on
// the device: for nll_loss and cross_entropy with class indices by the total weight of the
// targets not ignored, summed on the device. A class index outside [0, C) (and not
// ignore_index) is reported through the device-error slot (NOTE [Index checks on the device]
// in cuda/index.cpp): hg::Error at the next synchronize; its row counts as ignored.
//
// Dims: N batch, C classes, S positions per sample (input [N, C, d1, ...] or [C]).
#pragma once

#include <cstdint>

#include "halfgrad/core/tensor.h"
#include "halfgrad/cuda/loss_kinds.h"

namespace hg::cuda {

// The losses of input and target (floating, one shape, any strides and dtypes) with weight and
// pos_weight (undefined when absent) broadcast to input's shape. None: a tensor of input's shape
// in dtype; Sum: their 0-d sum; Mean: the sum divided by divisor (numel, or the batch size for
// kl_div's batchmean). beta is smooth_l1's.
Tensor pointwise_loss(PointwiseLoss kind, const Tensor& input, const Tensor& target,
                      const Tensor& weight, const Tensor& pos_weight, LossReduction reduction,
                      double divisor, DType dtype, double beta = 1.0);

// Gradients with respect to input and target (each undefined unless asked for), in their
// dtypes and shape. grad: the result's gradient (input's shape for None, 0-d otherwise); each
// element's loss gets grad / divisor (pass 1 for None and Sum).
struct LossGrads {
  Tensor input;
  Tensor target;
};
LossGrads pointwise_loss_backward(PointwiseLoss kind, const Tensor& grad, const Tensor& input,
                                  const Tensor& target, const Tensor& weight,
                                  const Tensor& pos_weight, double divisor, bool need_input,
                                  bool need_target, double beta = 1.0);

// What a class loss's forward returns: the loss (per row for None, else 0-d), and for the
// backward the divisor of Mean (0-d, accumulation dtype; 1 when every target is ignored;
// undefined for None) and, for cross_entropy, each row's statistics ([N S, 3]: the max, the
// log-sum of exp(x - max), the total of the target coefficients).
struct ClassLossForward {
  Tensor loss;
  Tensor divisor;
  Tensor stats;
};

// nll_loss of log-probabilities input and int64 class indices target (row shape), weight [C]
// or undefined. The loss has input's dtype.
ClassLossForward nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                          int64_t ignore_index, LossReduction reduction);
// d_input (input_sizes, input_dtype): -g w[t] at each row's target class.
Tensor nll_loss_backward(const Tensor& grad, const Tensor& target, const Tensor& weight,
                         const Shape& input_sizes, DType input_dtype, const Tensor& divisor,
                         int64_t ignore_index, LossReduction reduction);

// cross_entropy fused with log_softmax over the class dim: target is class indices (int64, row
// shape) or class probabilities (floating, input's shape); the loss has dtype (input's for
// class indices, the promoted dtype for probabilities).
ClassLossForward cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                               int64_t ignore_index, LossReduction reduction,
                               double label_smoothing, DType dtype);
// The fused first-order backward, from the forward's stats and divisor.
LossGrads cross_entropy_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                                 const Tensor& weight, const Tensor& stats, const Tensor& divisor,
                                 int64_t ignore_index, LossReduction reduction,
                                 double label_smoothing, bool need_input, bool need_target);

// The coefficients of class-index targets (input_sizes, dtype): (eps / C) w[c], plus
// (1 - eps) w[t] at the target class t; 0 in ignored rows. For backwards written with ops.
Tensor class_coefficients(const Tensor& target, const Tensor& weight, const Shape& input_sizes,
                          int64_t ignore_index, double label_smoothing, DType dtype);

}  // namespace hg::cuda
