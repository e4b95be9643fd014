// The loss family's kernel table: the forwards and fused first-order backwards of the losses of
// ops/loss.h, which every backend implements (cpu/loss.cpp, cuda/loss.cpp).
//
//   const LossKernels& K = kernel_for::loss(logits);   // ops/kernel_lookup.h
//   ClassLossForward r = K.cross_entropy(logits, labels, {}, -100, LossReduction::Mean, 0.0,
//                                        kFloat32);
//   LossGrads g = K.cross_entropy_backward(grad, logits, labels, {}, r, -100,
//                                          LossReduction::Mean, 0.0, true, false);
//
// ops/loss.cpp validates the arguments (shapes, dtypes, reduction names) and calls these; the
// backward formulas written with ops (create_graph, a weight's gradient) stay there (NOTE [Loss
// gradients] in ops/loss.cpp). A backward member returns std::nullopt where its backend has no
// fused form for the operands: the op then computes its formula, which runs on any device. The
// op calls a fused backward only for a backward pass that is not itself recorded.
//
// Dims: N batch, C classes, S positions per sample. nll_loss and cross_entropy take input
// [N, C, d1, d2, ...] with S = d1 d2 ... (1 without trailing dims), or [C] for one sample
// (N = S = 1). A row is one position (n, s): its C values lie S apart, at (n C + c) S + s.
//
// NOTE [Loss kernels] A forward converts its floating inputs to the accumulation dtype (float32,
// or float64 for float64 inputs), computes one loss per element (per row for nll_loss and
// cross_entropy) there, and rounds once to the result dtype: "none" rounds each loss, "sum" and
// "mean" round the reduction. A float16 loss is thus not a sum of float16-rounded terms, and
// cross_entropy's log-probabilities are never rounded to the input's 16-bit dtype.
#pragma once

#include <cstdint>
#include <optional>

#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/kinds.h"

namespace hg::kernel {

// The rows of a class loss's input (see Dims above); class_dim is the dim of C.
struct ClassLayout {
  int64_t N = 1, C = 1, S = 1;
  int64_t class_dim = 0;
};

// The layout of input_sizes, [C] or [N, C, d1, ...] (at least one dim).
inline ClassLayout class_layout(const Shape& input_sizes) {
  if (input_sizes.size() == 1) return {.N = 1, .C = input_sizes[0], .S = 1, .class_dim = 0};
  int64_t S = 1;
  for (size_t d = 2; d < input_sizes.size(); ++d) S *= input_sizes[d];
  return {.N = input_sizes[0], .C = input_sizes[1], .S = S, .class_dim = 1};
}

// One loss per row: input's shape without the class dim.
inline Shape row_shape(const Shape& input_sizes, const ClassLayout& layout) {
  Shape out{};
  for (size_t d = 0; d < input_sizes.size(); ++d) {
    if (int64_t(d) != layout.class_dim) out.push_back(input_sizes[d]);
  }
  return out;
}

// Gradients with respect to input and target (each undefined unless asked for), in their
// dtypes and shapes.
struct LossGrads {
  Tensor input;
  Tensor target;
};

// What a class loss's forward returns: the loss (per row for None, else 0-d), and what its
// backward needs. The divisor of Mean is the total weight of the targets not ignored (their
// count without a weight; the row count for class probabilities), 1 when that is 0 (every
// target ignored: the gradient is then zero, not 0 * inf). A backend that sums it on the device
// (CUDA) gives it as `divisor`, 0-d in the accumulation dtype (undefined for None); one that
// reads the targets on the host (the CPU) gives the number, `host_divisor`. The backwards
// written with ops divide by whichever is given: a number and a 0-d tensor promote differently,
// and each backend keeps the rounding it always had. stats: each row's statistics for
// cross_entropy's fused backward ([N S, 3]: the max, the log-sum of exp(x - max), the total of
// the target coefficients), where the backend keeps them (CUDA; the CPU recomputes them).
struct ClassLossForward {
  Tensor loss;
  Tensor divisor;
  std::optional<double> host_divisor;
  Tensor stats;
};

// The loss kernels of one backend.
struct LossKernels {
  // The losses of input and target (floating, one shape, any strides and dtypes) with weight
  // and pos_weight (undefined when absent) broadcast to input's shape. None: a tensor of input's
  // shape in dtype; Sum: their 0-d sum; Mean: the sum divided by divisor (numel, or the batch
  // size for kl_div's batchmean). beta is smooth_l1's. binary_cross_entropy's input must lie in
  // [0, 1]: the CPU checks before computing (the error gives the range found), CUDA as it reads
  // each element (NOTE [Losses on CUDA] in cuda/loss.cpp).
  Tensor (*pointwise_loss)(PointwiseLoss kind, const Tensor& input, const Tensor& target,
                           const Tensor& weight, const Tensor& pos_weight, LossReduction reduction,
                           double divisor, DType dtype, double beta);

  // The fused first-order backward of pointwise_loss, with respect to input and target (the
  // weights' gradients are the op formulas'). grad: the result's gradient (input's shape for
  // None, 0-d otherwise); each element's loss gets grad / divisor for Mean, grad for None and
  // Sum. std::nullopt where the backend has none for these operands (the CPU has mse_loss's
  // only: NOTE [Fused mse_loss backward] in cpu/loss.cpp).
  std::optional<LossGrads> (*pointwise_loss_backward)(
      PointwiseLoss kind, const Tensor& grad, const Tensor& input, const Tensor& target,
      const Tensor& weight, const Tensor& pos_weight, LossReduction reduction, double divisor,
      bool need_input, bool need_target, double beta);

  // nll_loss of log-probabilities input and int64 class indices target (row shape), weight [C]
  // or undefined. The loss has input's dtype. A class index outside [0, C) (and not
  // ignore_index) is an hg::Error naming nll_loss: raised at once on the CPU, which reads the
  // targets on the host; at the next synchronize on CUDA (NOTE [Losses on CUDA]).
  ClassLossForward (*nll_loss)(const Tensor& input, const Tensor& target, const Tensor& weight,
                               int64_t ignore_index, LossReduction reduction);
  // d_input (input_sizes, input_dtype): -g w[t] at each row's target class, from the
  // forward's divisor. std::nullopt where the backend has no fused form (the CPU).
  std::optional<Tensor> (*nll_loss_backward)(const Tensor& grad, const Tensor& target,
                                             const Tensor& weight, const Shape& input_sizes,
                                             DType input_dtype, const ClassLossForward& forward,
                                             int64_t ignore_index, LossReduction reduction);

  // cross_entropy fused with log_softmax over the class dim: target is class indices (int64,
  // row shape, checked as nll_loss's) or class probabilities (floating, input's shape); the
  // loss has dtype (input's for class indices, the promoted dtype for probabilities).
  ClassLossForward (*cross_entropy)(const Tensor& input, const Tensor& target, const Tensor& weight,
                                    int64_t ignore_index, LossReduction reduction,
                                    double label_smoothing, DType dtype);
  // The fused first-order backward, from the forward's result (its loss is not read). d_target
  // only for class probabilities.
  LossGrads (*cross_entropy_backward)(const Tensor& grad, const Tensor& input, const Tensor& target,
                                      const Tensor& weight, const ClassLossForward& forward,
                                      int64_t ignore_index, LossReduction reduction,
                                      double label_smoothing, bool need_input, bool need_target);

  // The coefficients of class-index targets (input_sizes, dtype): (eps / C) w[c], plus
  // (1 - eps) w[t] at the target class t; 0 in ignored rows. For backwards written with ops: a
  // row's loss is -sum_c a[c] logp[c].
  Tensor (*class_coefficients)(const Tensor& target, const Tensor& weight, const Shape& input_sizes,
                               int64_t ignore_index, double label_smoothing, DType dtype);
};

// A backend's table, from its functions of these names (cpu/loss.cpp and cuda/loss.cpp):
//   const kernel::LossKernels loss_kernels = HG_LOSS_KERNELS;
#define HG_LOSS_KERNELS                                                                           \
  {                                                                                               \
    .pointwise_loss = pointwise_loss, .pointwise_loss_backward = pointwise_loss_backward,         \
    .nll_loss = nll_loss, .nll_loss_backward = nll_loss_backward, .cross_entropy = cross_entropy, \
    .cross_entropy_backward = cross_entropy_backward, .class_coefficients = class_coefficients    \
  }

}  // namespace hg::kernel
