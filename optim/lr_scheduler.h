// Learning-rate schedulers (torch.optim.lr_scheduler): StepLR and CosineWithWarmup.
//
//   optim::CosineWithWarmup schedule(opt, /*warmup_steps=*/100, /*total_steps=*/10000);
//   for (...) { ...; scaler.step(opt); schedule.step(!scaler.last_step_skipped()); }
//
// As in torch, constructing a scheduler records each group's current lr as its base lr and
// sets the lr of step 0; every step() then advances one step and sets that step's lr in
// every param group ("lr" option). The lr is a closed-form function of the step count, so
// other code changing a group's lr is overwritten at the next step().
//
// NOTE [Skipped steps] step(/*optimizer_stepped=*/false) tells the scheduler the optimizer
// skipped its update (GradScaler found an inf): the step count does not advance and the lr
// stays where it was, so the schedule follows the updates actually made. torch has no such
// argument (its scheduler advances regardless, and warns when it runs before the first
// optimizer.step()); step() with no argument is torch's behaviour.
#pragma once

#include <cstdint>
#include <vector>

#include "halfgrad/optim/optimizer.h"

namespace hg::optim {

// A scheduler's state (torch's scheduler.state_dict() keys last_epoch, base_lrs, _last_lr).
struct LRSchedulerStateDict {
  int64_t last_epoch = 0;
  std::vector<double> base_lrs;
  std::vector<double> last_lr;
};

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one step (unless optimizer_stepped is false, NOTE [Skipped steps]) and sets the
  // new lr in every param group.
  void step(bool optimizer_stepped = true);

  // The lr of each group as last set (torch's get_last_lr()).
  std::vector<double> get_last_lr() const { return last_lr_; }
  // Steps taken since construction (torch's last_epoch).
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // Saves / restores the step count and base lrs; loading sets each group's lr to the lr of
  // the loaded step. The number of groups must match (hg::Error otherwise, nothing changed).
  LRSchedulerStateDict state_dict() const { return {last_epoch_, base_lrs_, last_lr_}; }
  void load_state_dict(const LRSchedulerStateDict& state_dict);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Sets the lr of step 0; derived constructors call it once their fields are set.
  void initialize();
  // The lr of a group with base lr `base_lr` at step `step` (0, 1, ...).
  virtual double lr_at(double base_lr, int64_t step) const = 0;

 private:
  void apply();

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * gamma^(step / step_size) (integer division): decays by gamma every
// step_size steps. step_size must be >= 1.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(double base_lr, int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Linear warmup from 0 to base_lr over warmup_steps, then a half cosine from base_lr down to
// min_lr at total_steps, min_lr afterwards:
//   step < warmup:  lr = base_lr * step / warmup_steps
//   otherwise:      progress = (step - warmup) / (total - warmup), capped at 1
//                   lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * progress)) / 2
// (transformers' get_cosine_schedule_with_warmup with a floor). Expects
// 0 <= warmup_steps <= total_steps, total_steps >= 1 and min_lr >= 0.
class CosineWithWarmup : public LRScheduler {
 public:
  CosineWithWarmup(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                   double min_lr = 0);

 protected:
  double lr_at(double base_lr, int64_t step) const override;

 private:
  int64_t warmup_steps_;
  int64_t total_steps_;
  double min_lr_;
};

}  // namespace hg::optim
