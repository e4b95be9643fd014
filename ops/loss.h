// Losses: mse_loss, l1_loss, smooth_l1_loss, nll_loss, cross_entropy, binary_cross_entropy,
// binary_cross_entropy_with_logits, kl_div, margin_ranking_loss, hinge_embedding_loss,
// soft_margin_loss, huber_loss, cosine_embedding_loss, poisson_nll_loss, triplet_margin_loss,
// multi_margin_loss, multilabel_margin_loss (ops/loss.cpp).
//
//   Tensor loss = hg::cross_entropy(logits, labels);   // logits [N, C], labels int64 [N]
//   Tensor l2 = hg::mse_loss(prediction, target, "sum");
//
// torch.nn.functional's names, argument order and defaults. `reduction` is "none" (one loss
// per element; per sample for nll_loss and cross_entropy), "mean" or "sum"; kl_div also takes
// "batchmean". An undefined Tensor ({}) stands for an absent weight. A loss is computed in
// float32 (float64 for float64 inputs) and rounded once to its result dtype: the promoted
// dtype of input and target, or input's dtype for class-index targets. Under autocast every
// loss runs in float32, and binary_cross_entropy is banned on CUDA (use the with-logits form).
//
// Unlike torch, which broadcasts a target of another shape for mse_loss, l1_loss,
// smooth_l1_loss and kl_div (with a warning), target must have input's shape
// (NOTE [Loss shapes] in loss.cpp).
#pragma once

#include <cstdint>
#include <string_view>

#include "halfgrad/core/tensor.h"

namespace hg {

// The squared error (input - target)^2, reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target, std::string_view reduction = "mean");

// The absolute error |input - target|, reduced.
Tensor l1_loss(const Tensor& input, const Tensor& target, std::string_view reduction = "mean");

// With d = input - target: 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (beta >= 0;
// beta = 0 is l1_loss), reduced.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                      std::string_view reduction = "mean", double beta = 1.0);

// -weight[t] * input[n, t] for log-probabilities input [N, C] (or [C], or [N, C, d1, ...]) and
// class indices target int64 [N] (0-d, [N, d1, ...]); 0 where t == ignore_index. "mean"
// divides by the total weight of the targets not ignored. weight: [C].
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                int64_t ignore_index = -100, std::string_view reduction = "mean");

// nll_loss of log_softmax(input) over the class dim, fused: target is class indices (as for
// nll_loss) or class probabilities (floating, input's shape). label_smoothing in [0, 1] mixes
// the target with the uniform distribution over the C classes.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                     int64_t ignore_index = -100, std::string_view reduction = "mean",
                     double label_smoothing = 0.0);

// -weight (target log(input) + (1 - target) log(1 - input)) for probabilities input in [0, 1],
// each log clamped at -100; weight broadcasts to input's shape.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                            std::string_view reduction = "mean");

// binary_cross_entropy(sigmoid(input), target) in a stable form; pos_weight (broadcast to
// input's shape, typically [C]: one per class) multiplies the positive term.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight = {},
                                        std::string_view reduction = "mean",
                                        const Tensor& pos_weight = {});

// The Kullback-Leibler divergence target (log(target) - input) of log-probabilities input
// (target given as log-probabilities too when log_target). "mean" is the mean over all
// elements, as torch's; "batchmean" divides the sum by the batch size (input's dim 0), the
// mathematical KL divergence.
Tensor kl_div(const Tensor& input, const Tensor& target, std::string_view reduction = "mean",
              bool log_target = false);

// max(0, -target (input1 - input2) + margin): target 1 asks input1 to rank above input2 by the
// margin, -1 below. input1, input2 and target of one shape.
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                           double margin = 0.0, std::string_view reduction = "mean");

// input where target is 1, max(0, margin - input) where it is -1 (input a distance, target of
// its shape).
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin = 1.0,
                            std::string_view reduction = "mean");

// The two-class logistic loss log(1 + exp(-target input)), target 1 or -1 of input's shape.
Tensor soft_margin_loss(const Tensor& input, const Tensor& target,
                        std::string_view reduction = "mean");

// With d = input - target: 0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere (delta >
// 0; delta * smooth_l1_loss with beta = delta).
Tensor huber_loss(const Tensor& input, const Tensor& target, std::string_view reduction = "mean",
                  double delta = 1.0);

// With the cosine c of input1 and input2 over their last dim ([N, D] or [D]): 1 - c where target
// ([N] or [], of 1 and -1) is 1, max(0, c - margin) where it is -1.
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                             double margin = 0.0, std::string_view reduction = "mean");

// The negative log-likelihood of a Poisson target of rate exp(input) (log_input) or input, up to
// a term of target alone: exp(input) - target input, or input - target log(input + eps); with
// `full`, that term's Stirling approximation where target > 1. target of input's shape.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input = true,
                        bool full = false, double eps = 1e-8, std::string_view reduction = "mean");

// max(0, margin + d(anchor, positive) - d(anchor, negative)), d = pairwise_distance(p, eps),
// for rows [N, D] or one [D]; `swap` takes d(positive, negative) where it is the smaller.
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           double margin = 1.0, double p = 2.0, double eps = 1e-6,
                           bool swap = false, std::string_view reduction = "mean");

// The multi-class hinge of input [N, C] (or [C]) and int64 classes target [N] (or [] / [1]): per
// row, the sum over classes i other than y of weight[y] max(0, margin - x[y] + x[i])^p over C
// (p 1 or 2; weight [C] or undefined).
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, int64_t p = 1,
                         double margin = 1.0, const Tensor& weight = {},
                         std::string_view reduction = "mean");

// The multi-label hinge of input [N, C] (or [C]) and int64 target of its shape, each row's target
// classes first and then -1: per row, the sum over its targets y and the classes i not among them
// of max(0, 1 - (x[y] - x[i])), over C.
Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target,
                              std::string_view reduction = "mean");

}  // namespace hg
