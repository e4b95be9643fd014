// Loss modules (torch.nn's MSELoss, L1Loss, SmoothL1Loss, NLLLoss, CrossEntropyLoss, BCELoss,
// BCEWithLogitsLoss, KLDivLoss): the functional losses (ops/loss.h) with their options held,
// class weights and pos_weight kept as buffers as torch keeps them.
//
//   nn::CrossEntropyLoss criterion({.ignore_index = 0, .label_smoothing = 0.1});
//   Tensor loss = criterion(logits, targets);
#pragma once

#include <string>

#include "halfgrad/nn/module.h"

namespace hg::nn {

// The losses' base (torch's _Loss). Two inputs, so a CustomForward: criterion(input, target)
// runs the hooks, which see both (NOTE [Module forward signature]). reduction: "none", "mean"
// or "sum" ("batchmean" too for KLDivLoss), checked by the functional loss.
class Loss : public CustomForward<Loss> {
 public:
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
#pragma GCC diagnostic pop
  std::string reduction;  // torch prints it nowhere: "MSELoss()"

 protected:
  explicit Loss(std::string reduction) : reduction(std::move(reduction)) {}
};

class MSELoss : public Loss {
 public:
  explicit MSELoss(std::string reduction = "mean") : Loss(std::move(reduction)) {}
  std::string name() const override { return "MSELoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

class L1Loss : public Loss {
 public:
  explicit L1Loss(std::string reduction = "mean") : Loss(std::move(reduction)) {}
  std::string name() const override { return "L1Loss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

class SmoothL1Loss : public Loss {
 public:
  explicit SmoothL1Loss(std::string reduction = "mean", double beta = 1.0)
      : Loss(std::move(reduction)), beta(beta) {}
  std::string name() const override { return "SmoothL1Loss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  double beta;
};

struct NLLLossOptions {
  Tensor weight = {};  // [C] class weights, a buffer when given
  int64_t ignore_index = -100;
  std::string reduction = "mean";
};

class NLLLoss : public Loss {
 public:
  explicit NLLLoss(NLLLossOptions options = {});
  std::string name() const override { return "NLLLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor weight;
  int64_t ignore_index;
};

struct CrossEntropyLossOptions {
  Tensor weight = {};  // [C] class weights, a buffer when given
  int64_t ignore_index = -100;
  std::string reduction = "mean";
  double label_smoothing = 0.0;
};

class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(CrossEntropyLossOptions options = {});
  std::string name() const override { return "CrossEntropyLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor weight;
  int64_t ignore_index;
  double label_smoothing;
};

class BCELoss : public Loss {
 public:
  explicit BCELoss(Tensor weight = {}, std::string reduction = "mean");
  std::string name() const override { return "BCELoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor weight;
};

struct BCEWithLogitsLossOptions {
  Tensor weight = {};  // broadcast to the input, a buffer when given
  std::string reduction = "mean";
  Tensor pos_weight = {};  // the positive term's weight per class, a buffer when given
};

class BCEWithLogitsLoss : public Loss {
 public:
  explicit BCEWithLogitsLoss(BCEWithLogitsLossOptions options = {});
  std::string name() const override { return "BCEWithLogitsLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor weight, pos_weight;
};

class KLDivLoss : public Loss {
 public:
  explicit KLDivLoss(std::string reduction = "mean", bool log_target = false)
      : Loss(std::move(reduction)), log_target(log_target) {}
  std::string name() const override { return "KLDivLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  bool log_target;
};

}  // namespace hg::nn
