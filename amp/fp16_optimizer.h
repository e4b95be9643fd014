// FP16Optimizer: apex.fp16_utils.FP16_Optimizer — float32 master weights and static or
// dynamic loss scaling around any optim::Optimizer.
//
//   auto net = amp::network_to_half(model);
//   amp::FP16Optimizer opt(
//       net->parameters(),
//       [](std::vector<Tensor> masters) {
//         return std::make_unique<optim::SGD>(std::move(masters), optim::SGDOptions{.lr = 0.1});
//       },
//       {.dynamic_loss_scale = true});
//   opt.zero_grad();
//   opt.backward(loss);       // loss.float() * scale, backward, fp16 grads -> fp32 masters
//   opt.step();               // skipped on overflow; masters copied back into the model
//
// Or wrap an optimizer built over the model's parameters, as apex does: its float16 and
// bfloat16 parameters are replaced by float32 masters (float32 parameters are their own
// masters), keeping its param groups.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halfgrad/amp/loss_scaler.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/optim/optimizer.h"

namespace hg::amp {

struct DynamicLossArgs {
  double init_scale = 4294967296.0;
  double scale_factor = 2.0;
  int64_t scale_window = 1000;
  // Beyond apex.fp16_utils (whose scale has no ceiling): growth stops here. amp::initialize
  // sets Apex amp's max_loss_scale.
  std::optional<double> max_scale = std::nullopt;
};

struct FP16OptimizerOptions {
  double static_loss_scale = 1.0;
  bool dynamic_loss_scale = false;  // overrides static_loss_scale
  DynamicLossArgs dynamic_loss_args = {};
};

// apex's FP16_Optimizer.state_dict() as a struct.
struct FP16OptimizerStateDict {
  bool dynamic_loss_scale = false;
  std::map<std::string, double> loss_scaler;  // LossScaler::state_dict()
  bool overflow = false;
  optim::OptimizerStateDict optimizer_state_dict;
  // The float32 masters of the float16/bfloat16 parameters, per param group (copies).
  std::vector<std::vector<Tensor>> fp32_from_fp16;
};

// An hg::Error, prefixed by `caller`, when any parameter of `optimizer` has optimizer state
// (it has stepped): FP16Optimizer and amp::initialize replace the parameters by their masters,
// which state kept for the old parameters would not follow.
void check_optimizer_not_stepped(const optim::Optimizer& optimizer, std::string_view caller);

class FP16Optimizer {
 public:
  using OptimizerFactory =
      std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> master_params)>;

  // make_optimizer receives the masters (one per model parameter, in order).
  FP16Optimizer(const std::vector<Tensor>& model_params, const OptimizerFactory& make_optimizer,
                FP16OptimizerOptions options = {});
  // init_optimizer was built over the model's parameters; it must not have stepped yet.
  explicit FP16Optimizer(std::unique_ptr<optim::Optimizer> init_optimizer,
                         FP16OptimizerOptions options = {});
  // The same over an optimizer it does not own (amp::initialize's O2, which changes the user's
  // optimizer in place as Apex does): it must outlive this FP16Optimizer.
  explicit FP16Optimizer(optim::Optimizer& init_optimizer, FP16OptimizerOptions options = {});
  FP16Optimizer(const FP16Optimizer&) = delete;
  FP16Optimizer& operator=(const FP16Optimizer&) = delete;

  // Scales loss.float() by the loss scale and backpropagates; then update_master_grads()
  // unless update_master_grads is false (several losses: call it once after the last).
  void backward(const Tensor& loss, bool update_master_grads = true, bool retain_graph = false);
  // Dynamic scaling: checks the model grads for inf/NaN (overflow() tells) and returns on
  // overflow. Otherwise copies the float16 grads into float32 master grads and divides
  // every master grad by the loss scale.
  void update_master_grads();
  // Updates the loss scale; on overflow skips the step (returns false). Otherwise steps the
  // masters and copies them into the model parameters (returns true).
  bool step();
  // Zeroes (or, set_to_none, clears) the grads of the masters and of the model params.
  void zero_grad(bool set_to_none = false);
  // nn::utils::clip_grad_norm_ over the masters; returns the total norm, or -1 on overflow.
  double clip_master_grads(double max_norm, double norm_type = 2.0);
  // Per param group, the masters' grads (undefined where there is none, and all undefined
  // after an overflow).
  std::vector<std::vector<Tensor>> inspect_master_grad_data() const;

  double loss_scale() const { return loss_scaler_->loss_scale(); }
  void set_loss_scale(double scale) { loss_scaler_->set_loss_scale(scale); }
  bool overflow() const { return overflow_; }
  bool dynamic_loss_scale() const { return loss_scaler_->is_dynamic(); }
  const LossScaler& loss_scaler() const { return *loss_scaler_; }
  // The number of float32 masters (16-bit params) in each param group, without copying them.
  std::vector<size_t> master_counts() const;
  optim::Optimizer& optimizer() { return *optimizer_; }

  FP16OptimizerStateDict state_dict() const;
  // Checks the scaler keys, the masters' count and shapes and the inner optimizer's state
  // (its own checks) before changing anything. As in apex, load the model's state first.
  void load_state_dict(const FP16OptimizerStateDict& state);
  // The loss scaler's state and the masters alone, without the inner optimizer's state
  // (amp::AmpHandle's checkpoint state: the checkpoint loads the optimizer itself). The check is
  // load_state_dict's for these parts and changes nothing.
  void check_scaler_and_masters(bool dynamic_loss_scale,
                                const std::map<std::string, double>& loss_scaler,
                                const std::vector<std::vector<Tensor>>& fp32_from_fp16) const;
  void load_scaler_and_masters(bool dynamic_loss_scale,
                               const std::map<std::string, double>& loss_scaler,
                               const std::vector<std::vector<Tensor>>& fp32_from_fp16,
                               bool overflow);

 private:
  struct Pair {
    Tensor model;
    Tensor master;
  };
  void init(optim::Optimizer& optimizer, FP16OptimizerOptions options,
            const std::vector<Pair>& known);
  std::vector<Tensor> all_model_params() const;
  std::vector<Tensor> all_master_params() const;
  void check_masters(const std::vector<std::vector<Tensor>>& fp32_from_fp16) const;
  // A new scaler of the kind given holding `state` (its load_state_dict checks it), with the
  // current scaler's ceiling.
  std::unique_ptr<LossScaler> loaded_scaler(bool dynamic_loss_scale,
                                            const std::map<std::string, double>& state) const;
  void set_scaler_and_masters(std::unique_ptr<LossScaler> scaler,
                              const std::vector<std::vector<Tensor>>& fp32_from_fp16,
                              bool overflow);

  std::unique_ptr<optim::Optimizer> owned_optimizer_;  // null when the caller owns it
  optim::Optimizer* optimizer_ = nullptr;
  std::unique_ptr<LossScaler> loss_scaler_;
  // Per param group: the (model, master) pairs of float16/bfloat16 params, and the float32
  // params that are their own masters.
  std::vector<std::vector<Pair>> fp16_groups_;
  std::vector<std::vector<Tensor>> fp32_groups_;
  bool overflow_ = false;
};

}  // namespace hg::amp
