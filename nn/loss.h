// Loss modules (torch.nn's MSELoss, L1Loss, SmoothL1Loss, HuberLoss, NLLLoss, CrossEntropyLoss,
// BCELoss, BCEWithLogitsLoss, KLDivLoss, SoftMarginLoss, HingeEmbeddingLoss, PoissonNLLLoss,
// MultiMarginLoss, MultiLabelMarginLoss, and the three-input MarginRankingLoss,
// CosineEmbeddingLoss, TripletMarginLoss): the functional losses (ops/loss.h) with their options
// held, class weights and pos_weight kept as buffers as torch keeps them.
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

class HuberLoss : public Loss {
 public:
  explicit HuberLoss(std::string reduction = "mean", double delta = 1.0)
      : Loss(std::move(reduction)), delta(delta) {}
  std::string name() const override { return "HuberLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  double delta;
};

class SoftMarginLoss : public Loss {
 public:
  explicit SoftMarginLoss(std::string reduction = "mean") : Loss(std::move(reduction)) {}
  std::string name() const override { return "SoftMarginLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

class HingeEmbeddingLoss : public Loss {
 public:
  explicit HingeEmbeddingLoss(double margin = 1.0, std::string reduction = "mean")
      : Loss(std::move(reduction)), margin(margin) {}
  std::string name() const override { return "HingeEmbeddingLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  double margin;
};

struct PoissonNLLLossOptions {
  bool log_input = true;
  bool full = false;
  double eps = 1e-8;
  std::string reduction = "mean";
};

class PoissonNLLLoss : public Loss {
 public:
  explicit PoissonNLLLoss(PoissonNLLLossOptions options = {})
      : Loss(std::move(options.reduction)),
        log_input(options.log_input),
        full(options.full),
        eps(options.eps) {}
  std::string name() const override { return "PoissonNLLLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  bool log_input, full;
  double eps;
};

struct MultiMarginLossOptions {
  int64_t p = 1;
  double margin = 1.0;
  Tensor weight = {};  // [C] class weights, a buffer when given
  std::string reduction = "mean";
};

class MultiMarginLoss : public Loss {
 public:
  explicit MultiMarginLoss(MultiMarginLossOptions options = {});
  std::string name() const override { return "MultiMarginLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  int64_t p;
  double margin;
  Tensor weight;
};

class MultiLabelMarginLoss : public Loss {
 public:
  explicit MultiLabelMarginLoss(std::string reduction = "mean") : Loss(std::move(reduction)) {}
  std::string name() const override { return "MultiLabelMarginLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

// The three-input losses: criterion(input1, input2, target) or (anchor, positive, negative).
class MarginRankingLoss : public CustomForward<MarginRankingLoss> {
 public:
  explicit MarginRankingLoss(double margin = 0.0, std::string reduction = "mean")
      : margin(margin), reduction(std::move(reduction)) {}
  std::string name() const override { return "MarginRankingLoss"; }
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target);
#pragma GCC diagnostic pop
  double margin;
  std::string reduction;
};

class CosineEmbeddingLoss : public CustomForward<CosineEmbeddingLoss> {
 public:
  explicit CosineEmbeddingLoss(double margin = 0.0, std::string reduction = "mean")
      : margin(margin), reduction(std::move(reduction)) {}
  std::string name() const override { return "CosineEmbeddingLoss"; }
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target);
#pragma GCC diagnostic pop
  double margin;
  std::string reduction;
};

struct TripletMarginLossOptions {
  double margin = 1.0;
  double p = 2.0;
  double eps = 1e-6;
  bool swap = false;
  std::string reduction = "mean";
};

class TripletMarginLoss : public CustomForward<TripletMarginLoss> {
 public:
  explicit TripletMarginLoss(TripletMarginLossOptions options = {}) : options(std::move(options)) {}
  std::string name() const override { return "TripletMarginLoss"; }
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative);
#pragma GCC diagnostic pop
  TripletMarginLossOptions options;
};

}  // namespace hg::nn
