// Learning-rate schedulers (torch.optim.lr_scheduler): LambdaLR, StepLR, MultiStepLR,
// ExponentialLR, LinearLR, PolynomialLR, CosineAnnealingLR, CosineAnnealingWarmRestarts, CyclicLR,
// OneCycleLR, SequentialLR, ReduceLROnPlateau, and CosineWithWarmup.
//
//   optim::CosineAnnealingLR schedule(opt, /*T_max=*/10000);
//   for (...) { ...; scaler.step(opt); schedule.step(!scaler.last_step_skipped()); }
//
// As in torch, constructing a scheduler sets the lr of step 0, and every step() advances one
// step and sets that step's lr in every param group ("lr" option). A scheduler's base lr for a
// group is the group's lr when the first scheduler was made on the optimizer (torch's
// "initial_lr", ParamGroup::initial_lr; CyclicLR's are its base_lr option). Each schedule is a
// closed-form function of the step count (CosineAnnealingWarmRestarts after a step(epoch): of
// the steps since that epoch), so other code changing a group's lr is overwritten at the next
// step(); ReduceLROnPlateau, which reacts to a metric, is the exception and scales the group's
// current lr. The torch schedules but StepLR are checked step by step against numbers torch
// printed (tests/optim/lr_schedules_twin_test.cpp); StepLR and CosineWithWarmup (transformers'
// schedule, not torch's) against values worked by hand (tests/optim/lr_scheduler_test.cpp).
//
// NOTE [Skipped steps] step(/*optimizer_stepped=*/false) tells the scheduler the optimizer
// skipped its update (GradScaler found an inf): the step count does not advance and the lr
// stays where it was, so the schedule follows the updates actually made. torch has no such
// argument (its scheduler advances regardless, and warns when it runs before the first
// optimizer.step()); step() with no argument is torch's behaviour.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "halfgrad/optim/optimizer.h"

namespace hg::optim {

// A scheduler's state (torch's scheduler.state_dict() keys last_epoch, base_lrs, _last_lr).
struct LRSchedulerStateDict {
  int64_t last_epoch = 0;
  std::vector<double> base_lrs;
  std::vector<double> last_lr;
  // The counters of a schedule whose position the step count does not say all of, under
  // torch's names (CosineAnnealingWarmRestarts' T_cur and T_i); empty for the others.
  std::map<std::string, double> extra;
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
  virtual void set_other_options(ParamGroup& /*group*/, size_t /*index*/, int64_t /*step*/) const {}

  // Saves / restores the step count and base lrs; loading sets each group's lr to the lr of
  // the loaded step. The number of groups must match, and the schedule must reach the step
  // (OneCycleLR's total_steps): check_state_dict says so with an hg::Error, and
  // load_state_dict checks first and changes nothing on its error.
  LRSchedulerStateDict state_dict() const;
  void check_state_dict(const LRSchedulerStateDict& state_dict) const;
  void load_state_dict(const LRSchedulerStateDict& state_dict);

  // The schedule's class name ("OneCycleLR"), which a checkpoint records so that a state is
  // only loaded into the kind of schedule that saved it. A scheduler derived outside halfgrad
  // should override it.
  virtual const char* name() const { return "LRScheduler"; }

  Optimizer& optimizer() const { return optimizer_; }

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // A schedule whose base lrs are its own options (CyclicLR's base_lr), not the groups' lrs;
  // a group without an initial_lr gets its base lr as one, as in torch.
  LRScheduler(Optimizer& optimizer, std::vector<double> base_lrs);
  // Sets the lr of step 0; derived constructors call it once their fields are set.
  void initialize();
  // Sets every group's lr (and other options) to those of `step` and makes it the step count.
  void apply(int64_t step);

  // LRSchedulerStateDict::extra: a schedule with counters of its own saves them, checks a
  // loaded set (an hg::Error for one that does not fit, changing nothing) and takes it. The
  // defaults have none and refuse any.
  virtual std::map<std::string, double> extra_state() const { return {}; }
  virtual void check_extra_state(const std::map<std::string, double>& extra) const;
  // `step` is the step count the loaded counters belong to.
  virtual void load_extra_state(const std::map<std::string, double>& /*extra*/, int64_t /*step*/) {}

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = 0;
};

// lr = base_lr * lr_lambda(step): one function for every group, or one per group.
class LambdaLR : public LRScheduler {
 public:
  const char* name() const override { return "LambdaLR"; }
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
  const char* name() const override { return "StepLR"; }
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma^(milestones reached): a milestone listed twice decays twice, as torch's.
class MultiStepLR : public LRScheduler {
 public:
  const char* name() const override { return "MultiStepLR"; }
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = base_lr * gamma^step.
class ExponentialLR : public LRScheduler {
 public:
  const char* name() const override { return "ExponentialLR"; }
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
  const char* name() const override { return "LinearLR"; }
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// lr = base_lr * (1 - min(step, total_iters) / total_iters)^power: a polynomial decay to 0 at
// total_iters, 0 afterwards. total_iters >= 1 and power >= 0 (torch divides by zero otherwise).
class PolynomialLR : public LRScheduler {
 public:
  const char* name() const override { return "PolynomialLR"; }
  PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  int64_t total_iters_;
  double power_;
};

// lr = eta_min + (base_lr - eta_min) (1 + cos(pi step / T_max)) / 2: half a cosine over T_max
// steps, and on past T_max as torch's (back up over the next T_max). T_max >= 1.
class CosineAnnealingLR : public LRScheduler {
 public:
  const char* name() const override { return "CosineAnnealingLR"; }
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(size_t group, double base_lr, int64_t step) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// SGDR's cosine with warm restarts: lr = eta_min + (base_lr - eta_min) (1 + cos(pi T_cur /
// T_i)) / 2, where T_cur counts the steps since the last restart and T_i is the length of the
// current cycle: T_0 first, T_mult times longer after each restart. T_0 >= 1, T_mult >= 1.
//
// step() with no argument is torch's: T_cur + 1, restarting (T_cur - T_i, T_i * T_mult) when
// it reaches T_i. step(epoch) is torch's step(epoch): it jumps to a (possibly fractional)
// epoch, as `scheduler.step(epoch + i / iters)` inside an epoch of iters batches does; T_cur and
// T_i come from torch's closed form there, last_epoch becomes floor(epoch), and the step()s
// after it count on from that T_cur (torch's `step(26); step()` is step(27)).
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  const char* name() const override { return "CosineAnnealingWarmRestarts"; }
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult = 1,
                              double eta_min = 0.0);

  using LRScheduler::step;
  // Jumps to `epoch` (>= 0, finite); an hg::Error that changes nothing otherwise.
  void step(double epoch);
  // An integer epoch is an epoch too, not a bool.
  template <class Epoch>
  requires(std::is_integral_v<Epoch> && !std::is_same_v<Epoch, bool>) void step(Epoch epoch) {
    step(double(epoch));
  }

  double lr_at(size_t group, double base_lr, int64_t step) const override;
  // torch's T_cur and T_i at the current step.
  double T_cur() const { return position(last_epoch()).t_cur; }
  int64_t T_i() const { return position(last_epoch()).t_i; }

 protected:
  std::map<std::string, double> extra_state() const override;
  void check_extra_state(const std::map<std::string, double>& extra) const override;
  void load_extra_state(const std::map<std::string, double>& extra, int64_t step) override;

 private:
  struct Position {
    double t_cur;
    int64_t t_i;
  };
  // T_cur and T_i at `step`: counted on with torch's step() from the anchor, the position
  // step(epoch) (or a loaded state) last set; from (0, T_0) at step 0 before the anchor.
  Position position(int64_t step) const;

  int64_t t_0_, t_mult_;
  double eta_min_;
  int64_t anchor_step_ = 0;
  Position anchor_;
};

// torch's CyclicLR options.
struct CyclicLROptions {
  std::vector<double> base_lr = {};  // the cycle's lower lr: one for every group, or one per group
  std::vector<double> max_lr = {};   // its upper lr, the same way
  int64_t step_size_up = 2000;       // steps from base_lr up to max_lr
  std::optional<int64_t> step_size_down = std::nullopt;  // steps back down; step_size_up if unset
  std::string mode = "triangular";  // "triangular2" (amplitude halved each cycle), "exp_range"
  double gamma = 1.0;               // exp_range: the amplitude is scaled by gamma^step
  // A custom amplitude scale (0 <= scale_fn(x) <= 1), replacing mode; it is given the cycle
  // number (scale_mode "cycle", from 1) or the step (scale_mode "iterations").
  std::function<double(double)> scale_fn = nullptr;
  std::string scale_mode = "cycle";
  bool cycle_momentum = true;                 // cycle the momentum (SGD's "momentum", Adam's
  std::vector<double> base_momentum = {0.8};  // "beta1") against the lr, between these two:
  std::vector<double> max_momentum = {0.9};   // one for every group, or one per group
};

// The cyclical learning rate policy (Smith, 2015): the lr goes from base_lr up to max_lr over
// step_size_up steps and back down over step_size_down, cycle after cycle, with the amplitude
// (max_lr - base_lr) scaled by mode or scale_fn. With cycle_momentum the momentum moves the other
// way, from max_momentum at the cycle's start to base_momentum at its peak (torch's error when
// the optimizer has none). Like torch, constructing it sets each group's lr to its base_lr; the
// group's own lr is not used. step_size_up >= 1, step_size_down >= 0.
class CyclicLR : public LRScheduler {
 public:
  const char* name() const override { return "CyclicLR"; }
  CyclicLR(Optimizer& optimizer, CyclicLROptions options);
  double lr_at(size_t group, double base_lr, int64_t step) const override;
  void set_other_options(ParamGroup& group, size_t index, int64_t step) const override;

 private:
  // How far up the cycle `step` is (0 at base_lr, 1 at max_lr), and the amplitude's scale.
  std::pair<double, double> height(int64_t step) const;

  CyclicLROptions options_;
  std::vector<double> max_lrs_, base_momentums_, max_momentums_;  // per group
  double total_size_, step_ratio_;
  bool scale_by_cycle_;
  std::string momentum_option_;  // "momentum", "beta1" or empty (not cycled)
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
  const char* name() const override { return "OneCycleLR"; }
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
  const char* name() const override { return "SequentialLR"; }
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
  const char* name() const override { return "CosineWithWarmup"; }
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
