// nn::functional: torch.nn.functional's names for halfgrad's ops, so that
// `nn::functional::cross_entropy(logits, targets)` reads as in PyTorch. These are the ops
// themselves (using-declarations), not wrappers; the losses also take libtorch's option
// objects, built with chained setters (below).
#pragma once

#include <string>
#include <utility>

#include "halfgrad/ops/ops.h"

namespace hg::nn::functional {

// activations
using hg::elu;
using hg::gelu;
using hg::glu;
using hg::hardswish;
using hg::leaky_relu;
using hg::log_softmax;
using hg::mish;
using hg::prelu;
using hg::relu;
using hg::sigmoid;
using hg::silu;
using hg::softmax;
using hg::softmin;
using hg::softplus;
using hg::tanh;

// layers
using hg::adaptive_avg_pool2d;
using hg::avg_pool1d;
using hg::avg_pool2d;
using hg::batch_norm;
using hg::bilinear;
using hg::conv1d;
using hg::conv2d;
using hg::conv_transpose2d;
using hg::dropout;
using hg::embedding;
using hg::group_norm;
using hg::interpolate;
using hg::layer_norm;
using hg::linear;
using hg::max_pool1d;
using hg::max_pool2d;
using hg::one_hot;
using hg::pad;
using hg::scaled_dot_product_attention;

// distances and normalisation
using hg::cosine_similarity;
using hg::normalize;
using hg::pairwise_distance;
using hg::pdist;

// losses
using hg::binary_cross_entropy;
using hg::binary_cross_entropy_with_logits;
using hg::cosine_embedding_loss;
using hg::cross_entropy;
using hg::hinge_embedding_loss;
using hg::huber_loss;
using hg::kl_div;
using hg::l1_loss;
using hg::margin_ranking_loss;
using hg::mse_loss;
using hg::multi_margin_loss;
using hg::multilabel_margin_loss;
using hg::nll_loss;
using hg::poisson_nll_loss;
using hg::smooth_l1_loss;
using hg::soft_margin_loss;
using hg::triplet_margin_loss;

// ---- the losses' options, as libtorch's F::...FuncOptions -------------------------------------
//
//   namespace F = hg::nn::functional;
//   F::cross_entropy(logits, y, F::CrossEntropyFuncOptions().reduction("sum").ignore_index(0));
//
// Each option is a setter that returns the object (to chain) and a getter of the same name;
// the defaults are torch's. The positional calls above stay as they are.

// One option: `name(value)` sets it and returns *this, `name()` reads it.
#define HG_FUNC_OPTION(Options, T, name, default_value)     \
 public:                                                   \
  Options& name(T value) {                                 \
    name##_ = std::move(value);                            \
    return *this;                                          \
  }                                                        \
  const T& name() const { return name##_; }                \
                                                           \
 private:                                                  \
  T name##_ = default_value;

class MSELossFuncOptions {
  HG_FUNC_OPTION(MSELossFuncOptions, std::string, reduction, "mean")
};
class L1LossFuncOptions {
  HG_FUNC_OPTION(L1LossFuncOptions, std::string, reduction, "mean")
};
class SmoothL1LossFuncOptions {
  HG_FUNC_OPTION(SmoothL1LossFuncOptions, std::string, reduction, "mean")
  HG_FUNC_OPTION(SmoothL1LossFuncOptions, double, beta, 1.0)
};
class NLLLossFuncOptions {
  HG_FUNC_OPTION(NLLLossFuncOptions, Tensor, weight, Tensor())
  HG_FUNC_OPTION(NLLLossFuncOptions, int64_t, ignore_index, -100)
  HG_FUNC_OPTION(NLLLossFuncOptions, std::string, reduction, "mean")
};
class CrossEntropyFuncOptions {
  HG_FUNC_OPTION(CrossEntropyFuncOptions, Tensor, weight, Tensor())
  HG_FUNC_OPTION(CrossEntropyFuncOptions, int64_t, ignore_index, -100)
  HG_FUNC_OPTION(CrossEntropyFuncOptions, std::string, reduction, "mean")
  HG_FUNC_OPTION(CrossEntropyFuncOptions, double, label_smoothing, 0.0)
};
class BinaryCrossEntropyFuncOptions {
  HG_FUNC_OPTION(BinaryCrossEntropyFuncOptions, Tensor, weight, Tensor())
  HG_FUNC_OPTION(BinaryCrossEntropyFuncOptions, std::string, reduction, "mean")
};
class BinaryCrossEntropyWithLogitsFuncOptions {
  HG_FUNC_OPTION(BinaryCrossEntropyWithLogitsFuncOptions, Tensor, weight, Tensor())
  HG_FUNC_OPTION(BinaryCrossEntropyWithLogitsFuncOptions, std::string, reduction, "mean")
  HG_FUNC_OPTION(BinaryCrossEntropyWithLogitsFuncOptions, Tensor, pos_weight, Tensor())
};
class KLDivFuncOptions {
  HG_FUNC_OPTION(KLDivFuncOptions, std::string, reduction, "mean")
  HG_FUNC_OPTION(KLDivFuncOptions, bool, log_target, false)
};

#undef HG_FUNC_OPTION

inline Tensor mse_loss(const Tensor& input, const Tensor& target,
                       const MSELossFuncOptions& options) {
  return hg::mse_loss(input, target, options.reduction());
}
inline Tensor l1_loss(const Tensor& input, const Tensor& target,
                      const L1LossFuncOptions& options) {
  return hg::l1_loss(input, target, options.reduction());
}
inline Tensor smooth_l1_loss(const Tensor& input, const Tensor& target,
                             const SmoothL1LossFuncOptions& options) {
  return hg::smooth_l1_loss(input, target, options.reduction(), options.beta());
}
inline Tensor nll_loss(const Tensor& input, const Tensor& target,
                       const NLLLossFuncOptions& options) {
  return hg::nll_loss(input, target, options.weight(), options.ignore_index(),
                      options.reduction());
}
inline Tensor cross_entropy(const Tensor& input, const Tensor& target,
                            const CrossEntropyFuncOptions& options) {
  return hg::cross_entropy(input, target, options.weight(), options.ignore_index(),
                           options.reduction(), options.label_smoothing());
}
inline Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                                   const BinaryCrossEntropyFuncOptions& options) {
  return hg::binary_cross_entropy(input, target, options.weight(), options.reduction());
}
inline Tensor binary_cross_entropy_with_logits(
    const Tensor& input, const Tensor& target,
    const BinaryCrossEntropyWithLogitsFuncOptions& options) {
  return hg::binary_cross_entropy_with_logits(input, target, options.weight(),
                                              options.reduction(), options.pos_weight());
}
inline Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& options) {
  return hg::kl_div(input, target, options.reduction(), options.log_target());
}

}  // namespace hg::nn::functional
