// Learning-rate schedulers (lr_scheduler.h): StepLR and CosineWithWarmup, and the lr written to
// the device for captured steps.
#include "halfgrad/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "halfgrad/core/format.h"

namespace hg::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const ParamGroup& group : optimizer_.param_groups()) {
    base_lrs_.push_back(group.options.at("lr"));
  }
}

void LRScheduler::initialize() { apply(); }

void LRScheduler::step(bool optimizer_stepped) {
  if (!optimizer_stepped) return;
  ++last_epoch_;
  apply();
}

void LRScheduler::load_state_dict(const LRSchedulerStateDict& state_dict) {
  HG_CHECK(state_dict.base_lrs.size() == base_lrs_.size() && state_dict.last_epoch >= 0,
           "lr scheduler load_state_dict: expected {} base lrs and last_epoch >= 0, got {} and "
           "{}",
           base_lrs_.size(), state_dict.base_lrs.size(), state_dict.last_epoch);
  base_lrs_ = state_dict.base_lrs;
  last_epoch_ = state_dict.last_epoch;
  apply();
}

void LRScheduler::apply() {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  HG_CHECK(groups.size() == base_lrs_.size(),
           "lr scheduler: expected the optimizer's {} param groups, got {} (a group was "
           "added after the scheduler was made)",
           base_lrs_.size(), groups.size());
  last_lr_.clear();
  for (size_t g = 0; g < groups.size(); ++g) {
    const double lr = lr_at(base_lrs_[g], last_epoch_);
    groups[g].options["lr"] = lr;
    last_lr_.push_back(lr);
  }
  optimizer_.sync_device_options();  // NOTE [The lr on the device]
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  HG_CHECK(step_size >= 1, "StepLR: expected step_size >= 1, got {}", step_size);
  initialize();
}

double StepLR::lr_at(double base_lr, int64_t step) const {
  return base_lr * std::pow(gamma_, double(step / step_size_));
}

CosineWithWarmup::CosineWithWarmup(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                                   double min_lr)
    : LRScheduler(optimizer),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps),
      min_lr_(min_lr) {
  HG_CHECK(total_steps >= 1 && warmup_steps >= 0 && warmup_steps <= total_steps,
           "CosineWithWarmup: expected 0 <= warmup_steps <= total_steps and total_steps >= 1, "
           "got warmup_steps {} and total_steps {}",
           warmup_steps, total_steps);
  HG_CHECK(min_lr >= 0, "CosineWithWarmup: expected min_lr >= 0, got {}", min_lr);
  initialize();
}

double CosineWithWarmup::lr_at(double base_lr, int64_t step) const {
  if (step < warmup_steps_) return base_lr * double(step) / double(warmup_steps_);
  const int64_t decay_steps = total_steps_ - warmup_steps_;
  const double progress =
      decay_steps == 0 ? 1.0 : std::min(1.0, double(step - warmup_steps_) / double(decay_steps));
  return min_lr_ + (base_lr - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace hg::optim
