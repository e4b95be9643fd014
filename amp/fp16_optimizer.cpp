// amp::FP16Optimizer (fp16_optimizer.h): float32 master copies of a float16/bfloat16 model's
// parameters, the scaled backward, master-gradient clipping, the step and its state dict.
#include "halfgrad/amp/fp16_optimizer.h"

#include <map>
#include <utility>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/nn/utils.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/ops/ops.h"

namespace hg::amp {

namespace {
bool is_low_precision(const Tensor& t) { return t.dtype() == kFloat16 || t.dtype() == kBFloat16; }
}  // namespace

void check_optimizer_not_stepped(const optim::Optimizer& optimizer, std::string_view caller) {
  const std::vector<optim::ParamGroup>& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      HG_CHECK(optimizer.state(g, i).empty(),
               "{}: expected an optimizer that has not stepped yet, param {} of group {} has "
               "state",
               caller, i, g);
    }
  }
}

FP16Optimizer::FP16Optimizer(const std::vector<Tensor>& model_params,
                             const OptimizerFactory& make_optimizer, FP16OptimizerOptions options) {
  HG_CHECK(static_cast<bool>(make_optimizer),
           "FP16Optimizer: expected an optimizer factory, got an empty function");
  std::vector<Pair> known;
  std::vector<Tensor> masters;
  {
    NoGradGuard no_grad;
    for (const Tensor& p : model_params) {
      HG_CHECK(p.defined() && p.is_floating_point(),
               "FP16Optimizer: expected floating model parameters, got {}",
               p.defined() ? dtype_name(p.dtype()) : "an undefined tensor");
      if (is_low_precision(p)) {
        Tensor master = p.detach().to(kFloat32).clone().contiguous();
        master.requires_grad_();
        known.push_back({p, master});
        masters.push_back(master);
      } else {
        masters.push_back(p);
      }
    }
  }
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(masters);
  HG_CHECK(optimizer != nullptr,
           "FP16Optimizer: expected the factory to return an optimizer, "
           "got a null pointer");
  owned_optimizer_ = std::move(optimizer);
  init(*owned_optimizer_, options, known);
}

FP16Optimizer::FP16Optimizer(std::unique_ptr<optim::Optimizer> init_optimizer,
                             FP16OptimizerOptions options) {
  HG_CHECK(init_optimizer != nullptr, "FP16Optimizer: expected an optimizer, got a null pointer");
  owned_optimizer_ = std::move(init_optimizer);
  init(*owned_optimizer_, options, {});
}

FP16Optimizer::FP16Optimizer(optim::Optimizer& init_optimizer, FP16OptimizerOptions options) {
  init(init_optimizer, options, {});
}

void FP16Optimizer::init(optim::Optimizer& optimizer, FP16OptimizerOptions options,
                         const std::vector<Pair>& known) {
  check_optimizer_not_stepped(optimizer, "FP16Optimizer");
  std::vector<optim::ParamGroup>& groups = optimizer.param_groups();
  if (options.dynamic_loss_scale) {
    loss_scaler_ = std::make_unique<DynamicLossScaler>(
        options.dynamic_loss_args.init_scale, options.dynamic_loss_args.scale_factor,
        options.dynamic_loss_args.scale_window, options.dynamic_loss_args.max_scale);
  } else {
    loss_scaler_ = std::make_unique<LossScaler>(options.static_loss_scale);
  }
  NoGradGuard no_grad;
  for (optim::ParamGroup& group : groups) {
    std::vector<Pair> fp16;
    std::vector<Tensor> fp32;
    for (Tensor& p : group.params) {
      const Pair* pair = nullptr;
      for (const Pair& k : known) {
        if (k.master.is_same(p)) pair = &k;
      }
      if (pair != nullptr) {
        fp16.push_back(*pair);
      } else if (is_low_precision(p)) {
        Tensor master = p.detach().to(kFloat32).clone().contiguous();
        master.requires_grad_();
        fp16.push_back({p, master});
        p = master;  // the optimizer now updates the master
      } else {
        HG_CHECK(p.dtype() == kFloat32,
                 "FP16Optimizer: expected float16, bfloat16 or float32 params, got {}",
                 dtype_name(p.dtype()));
        fp32.push_back(p);
      }
    }
    fp16_groups_.push_back(std::move(fp16));
    fp32_groups_.push_back(std::move(fp32));
  }
  optimizer_ = &optimizer;
}

std::vector<Tensor> FP16Optimizer::all_model_params() const {
  std::vector<Tensor> out;
  for (size_t g = 0; g < fp16_groups_.size(); ++g) {
    for (const Pair& p : fp16_groups_[g]) out.push_back(p.model);
    for (const Tensor& p : fp32_groups_[g]) out.push_back(p);
  }
  return out;
}

std::vector<Tensor> FP16Optimizer::all_master_params() const {
  std::vector<Tensor> out;
  for (const optim::ParamGroup& group : optimizer_->param_groups()) {
    for (const Tensor& p : group.params) out.push_back(p);
  }
  return out;
}

void FP16Optimizer::backward(const Tensor& loss, bool update_master_grads, bool retain_graph) {
  Tensor scaled = loss_scaler_->scale_loss(loss);
  scaled.backward(Tensor(), retain_graph);
  if (update_master_grads) this->update_master_grads();
}

void FP16Optimizer::update_master_grads() {
  // The scaler's bookkeeping (NOTE [Recorded ranges]): copies and unscaling of scaled values.
  const ops::RecordFunction range("FP16Optimizer.update_master_grads",
                                  ops::RangeKind::kLossScaling);
  if (loss_scaler_->is_dynamic()) {
    overflow_ = loss_scaler_->has_overflow(all_model_params());
    if (overflow_) return;
  } else {
    overflow_ = false;
  }
  NoGradGuard no_grad;
  for (const std::vector<Pair>& group : fp16_groups_) {
    for (const Pair& p : group) {
      const Tensor& g = p.model.grad();
      Tensor& mg = p.master.mutable_grad();
      if (!g.defined()) {
        mg = Tensor();
        continue;
      }
      if (!mg.defined()) mg = zeros_like(p.master);
      mg.copy_(g);
    }
  }
  double scale = loss_scaler_->loss_scale();
  if (scale != 1.0) {
    // One multi-tensor call per device.
    std::map<std::pair<DeviceType, int>, std::vector<Tensor>> grads_by_device;
    for (const Tensor& m : all_master_params()) {
      const Tensor& g = m.grad();
      if (g.defined()) grads_by_device[{g.device().type, g.device().index}].push_back(g);
    }
    for (const auto& [device, grads] : grads_by_device) {
      kernel_for::multi_tensor(grads.front()).scale_(grads, 1.0 / scale);
    }
  }
}

bool FP16Optimizer::step() {
  loss_scaler_->update_scale(overflow_);
  if (overflow_) return false;
  optimizer_->step();
  NoGradGuard no_grad;
  for (const std::vector<Pair>& group : fp16_groups_) {
    for (const Pair& p : group) p.model.detach().copy_(p.master.detach());
  }
  return true;
}

void FP16Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  auto clear = [set_to_none](const Tensor& p) {
    Tensor& g = p.mutable_grad();
    if (set_to_none) {
      g = Tensor();
    } else if (g.defined()) {
      g = g.detach();
      g.zero_();
    }
  };
  for (const Tensor& m : all_master_params()) clear(m);
  for (const std::vector<Pair>& group : fp16_groups_) {
    for (const Pair& p : group) clear(p.model);
  }
}

double FP16Optimizer::clip_master_grads(double max_norm, double norm_type) {
  if (overflow_) return -1.0;
  return nn::utils::clip_grad_norm_(all_master_params(), max_norm, norm_type).item<double>();
}

std::vector<std::vector<Tensor>> FP16Optimizer::inspect_master_grad_data() const {
  std::vector<std::vector<Tensor>> out;
  for (const optim::ParamGroup& group : optimizer_->param_groups()) {
    std::vector<Tensor> grads;
    for (const Tensor& p : group.params) {
      grads.push_back(overflow_ || !p.grad().defined() ? Tensor() : p.grad().detach());
    }
    out.push_back(std::move(grads));
  }
  return out;
}

FP16OptimizerStateDict FP16Optimizer::state_dict() const {
  FP16OptimizerStateDict out;
  out.dynamic_loss_scale = loss_scaler_->is_dynamic();
  out.loss_scaler = loss_scaler_->state_dict();
  out.overflow = overflow_;
  out.optimizer_state_dict = optimizer_->state_dict();
  NoGradGuard no_grad;
  for (const std::vector<Pair>& group : fp16_groups_) {
    std::vector<Tensor> masters;
    for (const Pair& p : group) masters.push_back(p.master.detach().clone());
    out.fp32_from_fp16.push_back(std::move(masters));
  }
  return out;
}

std::vector<size_t> FP16Optimizer::master_counts() const {
  std::vector<size_t> counts;
  for (const std::vector<Pair>& group : fp16_groups_) counts.push_back(group.size());
  return counts;
}

void FP16Optimizer::check_masters(const std::vector<std::vector<Tensor>>& fp32_from_fp16) const {
  HG_CHECK(fp32_from_fp16.size() == fp16_groups_.size(),
           "FP16Optimizer.load_state_dict: expected masters for {} param groups, got {}",
           fp16_groups_.size(), fp32_from_fp16.size());
  for (size_t g = 0; g < fp16_groups_.size(); ++g) {
    HG_CHECK(fp32_from_fp16[g].size() == fp16_groups_[g].size(),
             "FP16Optimizer.load_state_dict: expected {} masters in group {}, got {}",
             fp16_groups_[g].size(), g, fp32_from_fp16[g].size());
    for (size_t i = 0; i < fp16_groups_[g].size(); ++i) {
      const Tensor& saved = fp32_from_fp16[g][i];
      HG_CHECK(saved.defined() && saved.sizes() == fp16_groups_[g][i].master.sizes(),
               "FP16Optimizer.load_state_dict: expected master {} of group {} of shape {}, got {}",
               i, g, fp16_groups_[g][i].master.sizes(),
               saved.defined() ? fmt::format("shape {}", saved.sizes()) : "an undefined tensor");
    }
  }
}

std::unique_ptr<LossScaler> FP16Optimizer::loaded_scaler(
    bool dynamic_loss_scale, const std::map<std::string, double>& state) const {
  std::unique_ptr<LossScaler> scaler;
  if (dynamic_loss_scale) {
    // The ceiling is configuration, not state: the current scaler's stays.
    const auto* current = dynamic_cast<const DynamicLossScaler*>(loss_scaler_.get());
    const DynamicLossArgs defaults;
    scaler = std::make_unique<DynamicLossScaler>(
        defaults.init_scale, defaults.scale_factor, defaults.scale_window,
        current != nullptr ? current->max_scale() : std::nullopt);
  } else {
    scaler = std::make_unique<LossScaler>();
  }
  scaler->load_state_dict(state);  // checks before changing anything
  return scaler;
}

void FP16Optimizer::set_scaler_and_masters(std::unique_ptr<LossScaler> scaler,
                                           const std::vector<std::vector<Tensor>>& fp32_from_fp16,
                                           bool overflow) {
  loss_scaler_ = std::move(scaler);
  overflow_ = overflow;
  NoGradGuard no_grad;
  for (size_t g = 0; g < fp16_groups_.size(); ++g) {
    for (size_t i = 0; i < fp16_groups_[g].size(); ++i) {
      fp16_groups_[g][i].master.detach().copy_(fp32_from_fp16[g][i]);
    }
  }
}

void FP16Optimizer::load_state_dict(const FP16OptimizerStateDict& state) {
  check_masters(state.fp32_from_fp16);
  std::unique_ptr<LossScaler> scaler = loaded_scaler(state.dynamic_loss_scale, state.loss_scaler);
  optimizer_->load_state_dict(state.optimizer_state_dict);  // checks before changing anything
  set_scaler_and_masters(std::move(scaler), state.fp32_from_fp16, state.overflow);
}

void FP16Optimizer::check_scaler_and_masters(
    bool dynamic_loss_scale, const std::map<std::string, double>& loss_scaler,
    const std::vector<std::vector<Tensor>>& fp32_from_fp16) const {
  check_masters(fp32_from_fp16);
  loaded_scaler(dynamic_loss_scale, loss_scaler);
}

void FP16Optimizer::load_scaler_and_masters(bool dynamic_loss_scale,
                                            const std::map<std::string, double>& loss_scaler,
                                            const std::vector<std::vector<Tensor>>& fp32_from_fp16,
                                            bool overflow) {
  check_masters(fp32_from_fp16);
  set_scaler_and_masters(loaded_scaler(dynamic_loss_scale, loss_scaler), fp32_from_fp16, overflow);
}

}  // namespace hg::amp
