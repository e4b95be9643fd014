// Launchers of the CUDA loss kernels (loss.cu). Free of fmt (NOTE [CUDA headers without fmt] in
// probe.h): plain arguments in, cudaError_t out; loss.cpp checks, allocates and calls them.
//
// Operands are read through their own dtype (any floating dtype: the branch on it is uniform
// across a warp), so one kernel per accumulation type A (float, or double for float64) serves
// every mix of input, target and weight dtypes; results are rounded once to their dtype.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "halfgrad/cuda/kernel_args.h"
#include "halfgrad/cuda/walk.h"
#include "halfgrad/kernel/kinds.h"

namespace hg::cuda::detail {

using kernel::LossReduction;  // kernel/kinds.h
using kernel::PointwiseLoss;

// A floating tensor read at offsets a walk (or a row layout) gives; data null: absent (reads
// as 1 for a weight).
struct LossOperand {
  const void* data = nullptr;
  DType dtype = kFloat32;
};

// ---- reductions --------------------------------------------------------------------------

// NOTE [Loss reductions on CUDA] "mean" and "sum" never wait for the device: the losses are
// summed in two passes of fixed shape (partial_blocks blocks each sum a grid-stride share in a
// fixed order, then one block sums the partials in a fixed order) and the mean divides on the
// device. The number of partials depends only on the count, so a sum is the same from run to
// run. The partials buffer holds 2 * partial_blocks values of the accumulation type (a sum of
// losses and a sum of weights per block).
inline constexpr int kLossThreads = 256;
inline int loss_partial_blocks(int64_t n) {
  const int64_t blocks = (n + kLossThreads - 1) / kLossThreads;
  return int(blocks < 1 ? 1 : blocks > 1024 ? 1024 : blocks);
}

// ---- pointwise losses --------------------------------------------------------------------

// The losses of every element of walk (operand 0: input, 1: target, 2: weight, 3: pos_weight;
// the last two broadcast, absent when their data is null) in acc (kFloat32 or kFloat64).
// None: out (contiguous, out_dtype) gets each loss. Sum / Mean: out (0-d) gets the sum, divided
// by `divisor` for Mean. beta: smooth_l1's. binary_cross_entropy reports an input outside
// [0, 1] (NaN included) to `slot` (DeviceError::BinaryCrossEntropyInput).
cudaError_t launch_pointwise_loss(PointwiseLoss kind, double beta, const Walk& walk,
                                  LossOperand input, LossOperand target, LossOperand weight,
                                  LossOperand pos_weight, DType acc, LossReduction reduction,
                                  double divisor, void* out, DType out_dtype, void* partials,
                                  DeviceErrorSlot* slot, cudaStream_t stream);

// The gradients of those losses: walk operand 0: input, 1: target, 2: grad (the result's
// gradient, expanded to input's shape: stride 0 for a 0-d one), 3: weight, 4: pos_weight.
// Each element's gradient is grad / divisor (1 but for Mean) times the loss's derivative.
// d_input (input's dtype) and d_target (target's dtype) are contiguous, each written when not
// null.
cudaError_t launch_pointwise_loss_backward(PointwiseLoss kind, double beta, const Walk& walk,
                                           LossOperand input, LossOperand target, LossOperand grad,
                                           LossOperand weight, LossOperand pos_weight, DType acc,
                                           double divisor, void* d_input, void* d_target,
                                           cudaStream_t stream);

// ---- class losses ------------------------------------------------------------------------

// Where the rows of nll_loss and cross_entropy lie. Input is [N, C, d1, ...] (or [C]); a row
// r = n S + s is one position (n, s), S = d1 d2 ...; class c of row r is at
//   n input_n + c input_c + spatial offset 0 of s
// in input, and the row's class index (or, for probabilities, class c) at
//   n target_n (+ c target_c) + spatial offset 1 of s
// in target; a per-row gradient (reduction none) at n grad_n + spatial offset 2 of s.
struct ClassRows {
  int64_t N = 1, C = 1, S = 1;
  int64_t input_n = 0, input_c = 0;
  int64_t target_n = 0, target_c = 0;
  int64_t grad_n = 0;
  Walk spatial;  // over d1, d2, ...: operand 0 input, 1 target, 2 grad
};

// A class weight [C]: element c at data + c stride; absent (all 1) when data is null.
struct ClassWeight {
  LossOperand values;
  int64_t stride = 0;
};

// nll_loss: row loss -w[t] input[r, t], 0 where t == ignore_index; a class index outside
// [0, C) is reported (DeviceError::NllLossTarget) and its row counts as ignored. None: out
// [N S] (contiguous, out_dtype) gets the row losses. Sum / Mean: out (0-d) gets the sum,
// divided for Mean by the total weight of the rows not ignored; safe_divisor (0-d, acc) gets
// that total, or 1 when it is 0, for the backward.
cudaError_t launch_nll_loss(const ClassRows& rows, LossOperand input, const int64_t* target,
                            ClassWeight weight, int64_t ignore_index, DType acc,
                            LossReduction reduction, void* out, DType out_dtype, void* partials,
                            void* safe_divisor, DeviceErrorSlot* slot, cudaStream_t stream);

// d_input (contiguous, input's shape, d_input_dtype): -g_r w[t] at (r, t), 0 elsewhere and in
// ignored rows. g_r = grad at row r when grad_per_row, else grad[0], divided by *divisor (acc)
// when divisor is not null.
cudaError_t launch_nll_loss_backward(const ClassRows& rows, const int64_t* target,
                                     ClassWeight weight, LossOperand grad, bool grad_per_row,
                                     const void* divisor, int64_t ignore_index, DType acc,
                                     void* d_input, DType d_input_dtype, cudaStream_t stream);

// The targets of cross_entropy: class indices (index, as nll_loss's, a class outside [0, C)
// reported as DeviceError::CrossEntropyTarget) or, when index is null, class probabilities
// (prob, read at the target offsets); the class weight; label_smoothing eps, which mixes in the
// uniform distribution.
struct ClassTargets {
  const int64_t* index = nullptr;
  LossOperand prob;
  ClassWeight weight;
  int64_t ignore_index = 0;
  double label_smoothing = 0.0;
};

// cross_entropy fused with log_softmax over the classes of each row (one warp per row). stats
// (acc [N S, 3], contiguous) gets each row's max m, log of sum_c exp(x_c - m), and the total a
// of its target coefficients, for the backward. row_buffer (acc [N S, 2]) is scratch for Sum /
// Mean. Reductions as launch_nll_loss; for probabilities, Mean divides by prob_divisor (N S)
// instead of a total weight.
cudaError_t launch_cross_entropy(const ClassRows& rows, LossOperand input,
                                 const ClassTargets& targets, DType acc, LossReduction reduction,
                                 double prob_divisor, void* out, DType out_dtype, void* stats,
                                 void* row_buffer, void* partials, void* safe_divisor,
                                 DeviceErrorSlot* slot, cudaStream_t stream);

// The fused first-order backward: for element (r, c), with p = exp(x - m - log-sum) and a_c
// the target coefficient, d_input = g_r (a p - a_c) (0 in ignored rows) and, for
// probabilities, d_target = -g_r (1 - eps) w_c log p. g_r as launch_nll_loss_backward. Outputs
// contiguous of input's shape, in their dtypes; d_target written when not null.
cudaError_t launch_cross_entropy_backward(const ClassRows& rows, LossOperand input,
                                          const ClassTargets& targets, LossOperand grad,
                                          bool grad_per_row, const void* divisor, const void* stats,
                                          DType acc, void* d_input, DType d_input_dtype,
                                          void* d_target, DType d_target_dtype,
                                          cudaStream_t stream);

// The coefficients a[n, c, s] of class-index targets (targets.index; contiguous, input's shape,
// out_dtype): (eps / C) w[c] plus (1 - eps) w[t] at c == t; 0 in ignored rows (and rows with a
// bad index).
cudaError_t launch_class_coefficients(const ClassRows& rows, const ClassTargets& targets, DType acc,
                                      void* out, DType out_dtype, cudaStream_t stream);

}  // namespace hg::cuda::detail
