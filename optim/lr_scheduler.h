// Learning-rate schedulers (torch.optim.lr_scheduler): LambdaLR, StepLR, MultiStepLR,
// ExponentialLR, LinearLR, CosineAnnealingLR, OneCycleLR, SequentialLR, ReduceLROnPlateau, and
// CosineWithWarmup.
//
//   optim::CosineAnnealingLR schedule(opt, /*T_max=*/10000);
//   for (...) { ...; scaler.step(opt); schedule.step(!scaler.last_step_skipped()); }
//
// As in torch, constructing a scheduler sets the lr of step 0, and every step() advances one
// step and sets that step's lr in every param group ("lr" option). A scheduler's base lr for a
// group is the group's lr when the first scheduler was made on the optimizer (torch's
// "initial_lr", ParamGroup::initial_lr). Each schedule is a closed-form function of the step
// count, so other code changing a group's lr is overwritten at the next step();
// ReduceLROnPlateau, which reacts to a metric, is the exception and scales the group's current
// lr. The torch schedules but StepLR are checked step by step against numbers torch printed
// (tests/optim/lr_schedules_twin_test.cpp); StepLR and CosineWithWarmup (transformers' schedule,
// not torch's) against values worked by hand (tests/optim/lr_scheduler_test.cpp).
//
// NOTE [Skipped steps] step(/*optimizer_stepped=*/false) tells the scheduler the optimizer
// skipped its update (GradScaler found an inf): the step count does not advance and the lr
// stays where it was, so the schedule follows the updates actually made. torch has no such
// argument (its scheduler advances regardless, and warns when it runs before the first
// optimizer.step()); step() with no argument is torch's behaviour.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
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
  // new lr in every param group. A step past the schedule's end (OneCycleLR's total_steps) is
  // an hg::Error that changes nothing.
  void step(bool optimizer_stepped = true);

  // The lr of each group as last set (torch's get_last_lr()).
  std::vector<double> get_last_lr() const { return last_lr_; }
  // Steps taken since construction (torch's last_epoch).
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // The lr of group `group`, whose base lr is base_lr, at step `step` (torch's closed form).
  virtual double lr_at(size_t group, double base_lr, int64_t step) const = 0;
  // Sets the options other than the lr that the schedule drives at `step` (OneCycleLR's
  // momentum); nothing for most schedules.
  virtual void set_other_options(ParamGroup& group, size_t index, int64_t step) const {}

  // Saves / restores the step count and base lrs; loading sets each group's lr to the lr of
  // the loaded step. The number of groups must match (hg::Error otherwise, nothing changed).
  LRSchedulerStateDict state_dict() const { return {last_epoch_, base_lrs_, last_lr_}; }
  void load_state_dict(const LRSchedulerStateDict& state_dict);

  Optimizer& optimizer() const { return optimizer_; }

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Sets the lr of step 0; derived constructors call it once their fields are set.
  void initialize();

 private:
  void apply(int64_t step);

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * lr_lambda(step): one function for every group, or one per group.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  std::vector<Lambda> lambdas_;
};

// lr = base_lr * gamma^(step / step_size) (integer division): decays by gamma every
// step_size steps. step_size must be >= 1.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma^(milestones reached): a milestone listed twice decays twice, as torch's.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = base_lr * gamma^step.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  double gamma_;
};

// lr = base_lr * (start_factor + (end_factor - start_factor) * min(step, total_iters) /
// total_iters): a linear ramp of the factor, then constant. 0 < start_factor <= 1,
// 0 <= end_factor <= 1, total_iters >= 1 (torch's checks).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// lr = eta_min + (base_lr - eta_min) (1 + cos(pi step / T_max)) / 2: half a cosine over T_max
// steps, and on past T_max as torch's (back up over the next T_max). T_max >= 1.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// torch's OneCycleLR options (total_steps given, or epochs * steps_per_epoch).
struct OneCycleOptions {
  std::vector<double> max_lr = {};  // one for every group, or one per group
  int64_t total_steps = 0;
  int64_t epochs = 0, steps_per_epoch = 0;
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";  // or "linear"
  bool cycle_momentum = true;
  double base_momentum = 0.85, max_momentum = 0.95;
  double div_factor = 25.0, final_div_factor = 1e4;
  bool three_phase = false;
};

// The 1cycle policy: the lr rises from max_lr / div_factor to max_lr over pct_start of the
// steps, then falls to max_lr / div_factor / final_div_factor (three_phase: back to the start
// first, then down), annealed by a cosine or linearly; with cycle_momentum the momentum (SGD's
// "momentum", Adam's "beta1") moves the other way between max_momentum and base_momentum. The
// group's own lr is not used. Stepping past total_steps is an hg::Error, as torch's.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, OneCycleOptions options);
  double lr_at(size_t group, double base_lr, int64_t step) const override;
  void set_other_options(ParamGroup& group, size_t index, int64_t step) const override;

 private:
  struct Phase {
    double end_step;
    double start_lr_factor, end_lr_factor;  // of max_lr
    double start_momentum, end_momentum;
  };
  // The phase `step` is in and how far through it (0..1, more past the end).
  std::pair<const Phase*, double> locate(int64_t step) const;
  double anneal(double start, double end, double pct) const;

  OneCycleOptions options_;
  std::vector<double> max_lrs_;  // per group
  std::vector<Phase> phases_;
  std::string momentum_option_;  // "momentum", "beta1" or empty (not cycled)
};

// Runs schedulers one after another: schedulers[i] from step milestones[i - 1] on, counting
// its steps from 0 there (torch's SequentialLR). The schedulers must be made on `optimizer`
// (before this, in order); milestones are increasing and one fewer than the schedulers.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double lr_at(size_t group, double base_lr, int64_t step) const override;
  void set_other_options(ParamGroup& group, size_t index, int64_t step) const override;

 private:
  // The scheduler active at `step` and the step within it.
  std::pair<const LRScheduler*, int64_t> active(int64_t step) const;

  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
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
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  int64_t warmup_steps_;
  int64_t total_steps_;
  double min_lr_;
};

// torch's ReduceLROnPlateau options.
struct PlateauOptions {
  std::string mode = "min";            // or "max": whether a smaller or a larger metric is better
  double factor = 0.1;                 // the lr is multiplied by it on a plateau; in [0, 1)
  int64_t patience = 10;               // bad steps tolerated before the lr drops
  double threshold = 1e-4;             // how much better counts as better
  std::string threshold_mode = "rel";  // or "abs"
  int64_t cooldown = 0;                // steps after a drop that count as neither
  std::vector<double> min_lr = {0.0};  // one for every group, or one per group
  double eps = 1e-8;                   // a drop smaller than this is not made
};

// The state ReduceLROnPlateau keeps (torch's state_dict keys).
struct PlateauStateDict {
  int64_t last_epoch = 0;
  double best = 0;
  int64_t num_bad_epochs = 0;
  int64_t cooldown_counter = 0;
  std::vector<double> last_lr;
};

// Multiplies each group's lr by factor (not below its min_lr) when the metric has not improved
// for more than `patience` steps, then waits `cooldown` steps. A NaN metric is a bad step.
// step(metric, false) is a skipped optimizer step: nothing is counted (NOTE [Skipped steps]).
class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options = {});

  void step(double metric, bool optimizer_stepped = true);
  std::vector<double> get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }

  PlateauStateDict state_dict() const;
  void load_state_dict(const PlateauStateDict& state_dict);

 private:
  bool is_better(double metric) const;

  Optimizer& optimizer_;
  PlateauOptions options_;
  std::vector<double> min_lrs_;  // per group
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace hg::optim
