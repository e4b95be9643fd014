// Loss modules (loss.h).
#include "halfgrad/nn/loss.h"

#include "halfgrad/ops/loss.h"

namespace hg::nn {

namespace {

// Registers `tensor` as a buffer under `name` when defined (torch keeps None out of the state).
Tensor keep(Module& module, const char* name, const Tensor& tensor) {
  return tensor.defined() ? module.register_buffer(name, tensor) : tensor;
}

}  // namespace

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return mse_loss(input, target, reduction);
}

Tensor L1Loss::forward(const Tensor& input, const Tensor& target) {
  return l1_loss(input, target, reduction);
}

Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return smooth_l1_loss(input, target, reduction, beta);
}

NLLLoss::NLLLoss(NLLLossOptions options)
    : Loss(std::move(options.reduction)), ignore_index(options.ignore_index) {
  weight = keep(*this, "weight", options.weight);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return nll_loss(input, target, weight, ignore_index, reduction);
}

CrossEntropyLoss::CrossEntropyLoss(CrossEntropyLossOptions options)
    : Loss(std::move(options.reduction)),
      ignore_index(options.ignore_index),
      label_smoothing(options.label_smoothing) {
  weight = keep(*this, "weight", options.weight);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing);
}

BCELoss::BCELoss(Tensor weight_, std::string reduction) : Loss(std::move(reduction)) {
  weight = keep(*this, "weight", weight_);
}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy(input, target, weight, reduction);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(BCEWithLogitsLossOptions options)
    : Loss(std::move(options.reduction)) {
  weight = keep(*this, "weight", options.weight);
  pos_weight = keep(*this, "pos_weight", options.pos_weight);
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight);
}

Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target) {
  return kl_div(input, target, reduction, log_target);
}

Tensor HuberLoss::forward(const Tensor& input, const Tensor& target) {
  return huber_loss(input, target, reduction, delta);
}

Tensor SoftMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return soft_margin_loss(input, target, reduction);
}

Tensor HingeEmbeddingLoss::forward(const Tensor& input, const Tensor& target) {
  return hinge_embedding_loss(input, target, margin, reduction);
}

Tensor PoissonNLLLoss::forward(const Tensor& input, const Tensor& target) {
  return poisson_nll_loss(input, target, log_input, full, eps, reduction);
}

MultiMarginLoss::MultiMarginLoss(MultiMarginLossOptions options)
    : Loss(std::move(options.reduction)), p(options.p), margin(options.margin) {
  weight = keep(*this, "weight", options.weight);
}

Tensor MultiMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return multi_margin_loss(input, target, p, margin, weight, reduction);
}

Tensor MultiLabelMarginLoss::forward(const Tensor& input, const Tensor& target) {
  return multilabel_margin_loss(input, target, reduction);
}

Tensor MarginRankingLoss::forward(const Tensor& input1, const Tensor& input2,
                                  const Tensor& target) {
  return margin_ranking_loss(input1, input2, target, margin, reduction);
}

Tensor CosineEmbeddingLoss::forward(const Tensor& input1, const Tensor& input2,
                                    const Tensor& target) {
  return cosine_embedding_loss(input1, input2, target, margin, reduction);
}

Tensor TripletMarginLoss::forward(const Tensor& anchor, const Tensor& positive,
                                  const Tensor& negative) {
  return triplet_margin_loss(anchor, positive, negative, options.margin, options.p, options.eps,
                             options.swap, options.reduction);
}

}  // namespace hg::nn
