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

}  // namespace hg::nn
