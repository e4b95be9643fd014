// Learning-rate schedulers (lr_scheduler.h): the closed-form schedules, OneCycleLR, SequentialLR,
// ReduceLROnPlateau, and the lr written to the device for captured steps.
#include "halfgrad/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "halfgrad/core/format.h"

namespace hg::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (ParamGroup& group : optimizer_.param_groups()) {
    if (!group.initial_lr) group.initial_lr = group.options.at("lr");
    base_lrs_.push_back(*group.initial_lr);
  }
}

LRScheduler::LRScheduler(Optimizer& optimizer, std::vector<double> base_lrs)
    : optimizer_(optimizer), base_lrs_(std::move(base_lrs)) {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  HG_CHECK(groups.size() == base_lrs_.size(),
           "lr scheduler: expected one base lr per param group ({}), got {}", groups.size(),
           base_lrs_.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!groups[g].initial_lr) groups[g].initial_lr = base_lrs_[g];
  }
}

void LRScheduler::initialize() { apply(0); }

void LRScheduler::step(bool optimizer_stepped) {
  if (!optimizer_stepped) return;
  apply(last_epoch_ + 1);
}

LRSchedulerStateDict LRScheduler::state_dict() const {
  return {last_epoch_, base_lrs_, last_lr_, extra_state()};
}

void LRScheduler::check_extra_state(const std::map<std::string, double>& extra) const {
  HG_CHECK(extra.empty(), "{} load_state_dict: expected no state beyond the step count, got \"{}\"",
           name(), extra.empty() ? std::string() : extra.begin()->first);
}

void LRScheduler::check_state_dict(const LRSchedulerStateDict& state_dict) const {
  HG_CHECK(state_dict.base_lrs.size() == base_lrs_.size() && state_dict.last_epoch >= 0,
           "{} load_state_dict: expected {} base lrs and last_epoch >= 0, got {} and {}", name(),
           base_lrs_.size(), state_dict.base_lrs.size(), state_dict.last_epoch);
  check_extra_state(state_dict.extra);
  // The schedule must reach the step (OneCycleLR refuses one past total_steps).
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    (void)lr_at(g, state_dict.base_lrs[g], state_dict.last_epoch);
  }
}

void LRScheduler::load_state_dict(const LRSchedulerStateDict& state_dict) {
  check_state_dict(state_dict);
  const std::vector<double> previous = base_lrs_;
  const std::map<std::string, double> previous_extra = extra_state();
  base_lrs_ = state_dict.base_lrs;
  try {
    load_extra_state(state_dict.extra, state_dict.last_epoch);
    apply(state_dict.last_epoch);
  } catch (...) {
    base_lrs_ = previous;
    load_extra_state(previous_extra, last_epoch_);
    throw;
  }
}

// Every group's lr (and other options) at `step`, all computed before any is set, so a step
// the schedule refuses changes nothing.
void LRScheduler::apply(int64_t step) {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  HG_CHECK(groups.size() == base_lrs_.size(),
           "lr scheduler: expected the optimizer's {} param groups, got {} (a group was "
           "added after the scheduler was made)",
           base_lrs_.size(), groups.size());
  std::vector<double> lrs;
  for (size_t g = 0; g < groups.size(); ++g) lrs.push_back(lr_at(g, base_lrs_[g], step));
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].options["lr"] = lrs[g];
    set_other_options(groups[g], g, step);
  }
  last_lr_ = std::move(lrs);
  last_epoch_ = step;
  optimizer_.sync_device_options();  // NOTE [The lr on the device]
}

// ---- the closed-form schedules ---------------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda)
    : LambdaLR(optimizer,
               std::vector<Lambda>(optimizer.param_groups().size(), std::move(lr_lambda))) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer), lambdas_(std::move(lr_lambdas)) {
  HG_CHECK(lambdas_.size() == optimizer.param_groups().size(),
           "LambdaLR: expected {} lr_lambdas (one per param group), got {}",
           optimizer.param_groups().size(), lambdas_.size());
  for (const Lambda& f : lambdas_) HG_CHECK(bool(f), "LambdaLR: expected callable lr_lambdas");
  initialize();
}

double LambdaLR::lr_at(size_t group, double base_lr, int64_t step) const {
  return base_lr * lambdas_[group](step);
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  HG_CHECK(step_size >= 1, "StepLR: expected step_size >= 1, got {}", step_size);
  initialize();
}

double StepLR::lr_at(size_t, double base_lr, int64_t step) const {
  return base_lr * std::pow(gamma_, double(step / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initialize();
}

double MultiStepLR::lr_at(size_t, double base_lr, int64_t step) const {
  const auto reached = std::upper_bound(milestones_.begin(), milestones_.end(), step);
  return base_lr * std::pow(gamma_, double(reached - milestones_.begin()));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  initialize();
}

double ExponentialLR::lr_at(size_t, double base_lr, int64_t step) const {
  return base_lr * std::pow(gamma_, double(step));
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  HG_CHECK(start_factor > 0 && start_factor <= 1,
           "LinearLR: expected start_factor in (0, 1], got {}", start_factor);
  HG_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: expected end_factor in [0, 1], got {}",
           end_factor);
  HG_CHECK(total_iters >= 1, "LinearLR: expected total_iters >= 1, got {}", total_iters);
  initialize();
}

double LinearLR::lr_at(size_t, double base_lr, int64_t step) const {
  return base_lr *
         (start_factor_ + (end_factor_ - start_factor_) * double(std::min(total_iters_, step)) /
                              double(total_iters_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  HG_CHECK(T_max >= 1, "CosineAnnealingLR: expected T_max >= 1, got {}", T_max);
  initialize();
}

double CosineAnnealingLR::lr_at(size_t, double base_lr, int64_t step) const {
  return eta_min_ + (base_lr - eta_min_) *
                        (1.0 + std::cos(std::numbers::pi * double(step) / double(t_max_))) / 2.0;
}

namespace {

// The arguments checked before the base constructor records the groups' initial lrs, so that a
// refused construction changes nothing.
Optimizer& checked_polynomial(Optimizer& optimizer, int64_t total_iters, double power) {
  HG_CHECK(total_iters >= 1, "PolynomialLR: expected total_iters >= 1, got {}", total_iters);
  HG_CHECK(power >= 0, "PolynomialLR: expected power >= 0, got {}", power);
  return optimizer;
}

Optimizer& checked_warm_restarts(Optimizer& optimizer, int64_t T_0, int64_t T_mult) {
  HG_CHECK(T_0 >= 1, "CosineAnnealingWarmRestarts: expected a positive integer T_0, got {}", T_0);
  HG_CHECK(T_mult >= 1, "CosineAnnealingWarmRestarts: expected an integer T_mult >= 1, got {}",
           T_mult);
  return optimizer;
}

}  // namespace

PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(checked_polynomial(optimizer, total_iters, power)),
      total_iters_(total_iters),
      power_(power) {
  initialize();
}

double PolynomialLR::lr_at(size_t, double base_lr, int64_t step) const {
  return base_lr *
         std::pow(1.0 - double(std::min(total_iters_, step)) / double(total_iters_), power_);
}

// ---- CosineAnnealingWarmRestarts -----------------------------------------------------------

namespace {

// a * b, or the largest int64 where that overflows (a cycle longer than any run).
int64_t saturating_product(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? std::numeric_limits<int64_t>::max() : product;
}

}  // namespace

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t T_0,
                                                         int64_t T_mult, double eta_min)
    : LRScheduler(checked_warm_restarts(optimizer, T_0, T_mult)),
      t_0_(T_0),
      t_mult_(T_mult),
      eta_min_(eta_min),
      anchor_{0.0, T_0} {
  initialize();
}

CosineAnnealingWarmRestarts::Position CosineAnnealingWarmRestarts::position(int64_t step) const {
  Position at = step >= anchor_step_ ? anchor_ : Position{0.0, t_0_};
  const int64_t steps = step >= anchor_step_ ? step - anchor_step_ : step;
  if (steps == 0) return at;
  // torch's step(): T_cur + 1, and at T_i a restart (T_cur - T_i, T_i * T_mult); `steps` of
  // them at once. With T_mult 1 that is T_cur + steps modulo T_i; otherwise every restart at
  // least doubles T_i, so the loop runs a few dozen times at most.
  double t_cur = at.t_cur + double(steps);
  int64_t t_i = at.t_i;
  if (t_mult_ == 1) {
    if (t_cur >= double(t_i)) t_cur = std::fmod(t_cur, double(t_i));
  } else {
    while (t_cur >= double(t_i) && t_i < std::numeric_limits<int64_t>::max()) {
      t_cur -= double(t_i);
      t_i = saturating_product(t_i, t_mult_);
    }
  }
  return {t_cur, t_i};
}

double CosineAnnealingWarmRestarts::lr_at(size_t, double base_lr, int64_t step) const {
  const Position at = position(step);
  return eta_min_ + (base_lr - eta_min_) *
                        (1.0 + std::cos(std::numbers::pi * at.t_cur / double(at.t_i))) / 2.0;
}

void CosineAnnealingWarmRestarts::step(double epoch) {
  HG_CHECK(std::isfinite(epoch) && epoch >= 0 && epoch < 0x1p62,
           "CosineAnnealingWarmRestarts: expected a non-negative epoch, got {}", epoch);
  // torch's closed form for an epoch: the cycle it falls in (from the sum of the geometric
  // cycle lengths, through a logarithm as torch computes it) and how far into it.
  Position at{epoch, t_0_};
  if (epoch >= double(t_0_)) {
    if (t_mult_ == 1) {
      at.t_cur = std::fmod(epoch, double(t_0_));
    } else {
      const double mult = double(t_mult_);
      const int64_t n =
          int64_t(std::log(epoch / double(t_0_) * (mult - 1.0) + 1.0) / std::log(mult));
      const double mult_n = std::pow(mult, double(n));
      at.t_cur = epoch - double(t_0_) * (mult_n - 1.0) / (mult - 1.0);
      at.t_i = mult_n * double(t_0_) >= 0x1p62 ? std::numeric_limits<int64_t>::max()
                                               : int64_t(mult_n) * t_0_;
    }
  }
  const int64_t previous_step = anchor_step_;
  const Position previous = anchor_;
  anchor_step_ = int64_t(std::floor(epoch));
  anchor_ = at;
  try {
    apply(anchor_step_);
  } catch (...) {
    anchor_step_ = previous_step;
    anchor_ = previous;
    throw;
  }
}

std::map<std::string, double> CosineAnnealingWarmRestarts::extra_state() const {
  const Position at = position(last_epoch());
  return {{"T_cur", at.t_cur}, {"T_i", double(at.t_i)}};
}

void CosineAnnealingWarmRestarts::check_extra_state(
    const std::map<std::string, double>& extra) const {
  if (extra.empty()) return;  // a state without the counters: the closed form of the step count
  const auto t_cur = extra.find("T_cur"), t_i = extra.find("T_i");
  HG_CHECK(extra.size() == 2 && t_cur != extra.end() && t_i != extra.end(),
           "CosineAnnealingWarmRestarts load_state_dict: expected the counters T_cur and T_i, got "
           "{} entries",
           extra.size());
  HG_CHECK(t_i->second >= 1 && t_i->second < 0x1p63 && t_i->second == std::floor(t_i->second),
           "CosineAnnealingWarmRestarts load_state_dict: expected an integer T_i >= 1, got {}",
           t_i->second);
  HG_CHECK(t_cur->second >= 0 && t_cur->second < t_i->second,
           "CosineAnnealingWarmRestarts load_state_dict: expected T_cur in [0, T_i = {}), got {}",
           t_i->second, t_cur->second);
}

void CosineAnnealingWarmRestarts::load_extra_state(const std::map<std::string, double>& extra,
                                                   int64_t step) {
  if (extra.empty()) {
    anchor_step_ = 0;
    anchor_ = {0.0, t_0_};
    return;
  }
  anchor_step_ = step;
  anchor_ = {extra.at("T_cur"), int64_t(extra.at("T_i"))};
}

// ---- OneCycleLR -----------------------------------------------------------------------------

namespace {

// One value per group from a list of one (for every group) or one per group.
std::vector<double> per_group(const std::vector<double>& values, size_t groups, const char* who,
                              const char* what) {
  HG_CHECK(values.size() == 1 || values.size() == groups,
           "{}: expected one {} or one per param group ({}), got {}", who, what, groups,
           values.size());
  return values.size() == 1 ? std::vector<double>(groups, values[0]) : values;
}

}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleOptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  OneCycleOptions& o = options_;
  if (o.total_steps <= 0) {
    HG_CHECK(o.epochs > 0 && o.steps_per_epoch > 0,
             "OneCycleLR: expected total_steps > 0, or epochs > 0 and steps_per_epoch > 0, got "
             "total_steps {}, epochs {}, steps_per_epoch {}",
             o.total_steps, o.epochs, o.steps_per_epoch);
    o.total_steps = o.epochs * o.steps_per_epoch;
  }
  HG_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: expected pct_start in [0, 1], got {}",
           o.pct_start);
  HG_CHECK(o.anneal_strategy == "cos" || o.anneal_strategy == "linear",
           "OneCycleLR: expected anneal_strategy \"cos\" or \"linear\", got \"{}\"",
           o.anneal_strategy);
  HG_CHECK(o.div_factor > 0 && o.final_div_factor > 0,
           "OneCycleLR: expected div_factor and final_div_factor > 0, got {} and {}", o.div_factor,
           o.final_div_factor);
  max_lrs_ = per_group(o.max_lr, optimizer.param_groups().size(), "OneCycleLR", "max_lr");
  const double total = double(o.total_steps), rise = o.pct_start * total;
  // lr factors of max_lr: the start (1 / div), the peak (1) and the floor (1 / div / final).
  const double start = 1.0 / o.div_factor, floor = start / o.final_div_factor;
  const double low = o.base_momentum, high = o.max_momentum;
  if (o.three_phase) {
    phases_ = {{rise - 1, start, 1.0, high, low},
               {2 * rise - 2, 1.0, start, low, high},
               {total - 1, start, floor, high, high}};
  } else {
    phases_ = {{rise - 1, start, 1.0, high, low}, {total - 1, 1.0, floor, low, high}};
  }
  if (o.cycle_momentum) {
    const auto& options0 = optimizer.param_groups().front().options;
    momentum_option_ = options0.count("momentum") ? "momentum"
                       : options0.count("beta1")  ? "beta1"
                                                  : "";
    HG_CHECK(!momentum_option_.empty(),
             "OneCycleLR: cycle_momentum needs an optimizer with a momentum (SGD's momentum, "
             "Adam's beta1); pass cycle_momentum = false for this one");
  }
  initialize();
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::locate(int64_t step) const {
  HG_CHECK(step <= options_.total_steps,
           "OneCycleLR: tried to step {} times; the schedule has total_steps {}", step,
           options_.total_steps);
  double start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (double(step) <= phase.end_step || i + 1 == phases_.size()) {
      return {&phase, (double(step) - start_step) / (phase.end_step - start_step)};
    }
    start_step = phase.end_step;
  }
  return {&phases_.back(), 1.0};  // not reached: the last phase always matches
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == "cos") {
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
  }
  return (end - start) * pct + start;
}

double OneCycleLR::lr_at(size_t group, double, int64_t step) const {
  const auto [phase, pct] = locate(step);
  const double max_lr = max_lrs_[group];
  return anneal(phase->start_lr_factor * max_lr, phase->end_lr_factor * max_lr, pct);
}

void OneCycleLR::set_other_options(ParamGroup& group, size_t, int64_t step) const {
  if (momentum_option_.empty()) return;
  const auto [phase, pct] = locate(step);
  group.options[momentum_option_] = anneal(phase->start_momentum, phase->end_momentum, pct);
}

// ---- CyclicLR -------------------------------------------------------------------------------

namespace {

// CyclicLR's options checked, before the scheduler changes anything: its per-group base lrs.
std::vector<double> cyclic_base_lrs(const Optimizer& optimizer, const CyclicLROptions& o) {
  const size_t groups = optimizer.param_groups().size();
  HG_CHECK(o.step_size_up >= 1 && o.step_size_down.value_or(o.step_size_up) >= 0,
           "CyclicLR: expected step_size_up >= 1 and step_size_down >= 0, got {} and {}",
           o.step_size_up, o.step_size_down.value_or(o.step_size_up));
  HG_CHECK(bool(o.scale_fn) || o.mode == "triangular" || o.mode == "triangular2" ||
               o.mode == "exp_range",
           "CyclicLR: expected mode \"triangular\", \"triangular2\" or \"exp_range\" (or a "
           "scale_fn), got \"{}\"",
           o.mode);
  HG_CHECK(o.scale_mode == "cycle" || o.scale_mode == "iterations",
           "CyclicLR: expected scale_mode \"cycle\" or \"iterations\", got \"{}\"", o.scale_mode);
  per_group(o.max_lr, groups, "CyclicLR", "max_lr");
  if (o.cycle_momentum) {
    const auto& options0 = optimizer.param_groups().front().options;
    HG_CHECK(options0.count("momentum") || options0.count("beta1"),
             "CyclicLR: cycle_momentum needs an optimizer with a momentum (SGD's momentum, "
             "Adam's beta1); pass cycle_momentum = false for this one");
    per_group(o.base_momentum, groups, "CyclicLR", "base_momentum");
    per_group(o.max_momentum, groups, "CyclicLR", "max_momentum");
  }
  return per_group(o.base_lr, groups, "CyclicLR", "base_lr");
}

}  // namespace

CyclicLR::CyclicLR(Optimizer& optimizer, CyclicLROptions options)
    : LRScheduler(optimizer, cyclic_base_lrs(optimizer, options)), options_(std::move(options)) {
  const CyclicLROptions& o = options_;
  const size_t groups = optimizer.param_groups().size();
  max_lrs_ = per_group(o.max_lr, groups, "CyclicLR", "max_lr");
  const double up = double(o.step_size_up),
               down = double(o.step_size_down.value_or(o.step_size_up));
  total_size_ = up + down;
  step_ratio_ = up / total_size_;
  // triangular and triangular2 scale by the cycle, exp_range by the step; a custom scale_fn
  // by its scale_mode.
  scale_by_cycle_ = o.scale_fn ? o.scale_mode == "cycle" : o.mode != "exp_range";
  if (o.cycle_momentum) {
    const auto& options0 = optimizer.param_groups().front().options;
    momentum_option_ = options0.count("momentum") ? "momentum" : "beta1";
    base_momentums_ = per_group(o.base_momentum, groups, "CyclicLR", "base_momentum");
    max_momentums_ = per_group(o.max_momentum, groups, "CyclicLR", "max_momentum");
  }
  initialize();
}

std::pair<double, double> CyclicLR::height(int64_t step) const {
  // As torch computes it: the cycle (from 1), the position x in it (0..1), and the fraction of
  // the way from base to max, rising over step_ratio of the cycle and falling over the rest.
  const double cycle = std::floor(1.0 + double(step) / total_size_);
  const double x = 1.0 + double(step) / total_size_ - cycle;
  const double scale_factor = x <= step_ratio_ ? x / step_ratio_ : (x - 1.0) / (step_ratio_ - 1.0);
  const double argument = scale_by_cycle_ ? cycle : double(step);
  double amplitude_scale = 1.0;
  if (options_.scale_fn) {
    amplitude_scale = options_.scale_fn(argument);
  } else if (options_.mode == "triangular2") {
    amplitude_scale = 1.0 / std::pow(2.0, argument - 1.0);
  } else if (options_.mode == "exp_range") {
    amplitude_scale = std::pow(options_.gamma, argument);
  }
  return {scale_factor, amplitude_scale};
}

double CyclicLR::lr_at(size_t group, double base_lr, int64_t step) const {
  const auto [scale_factor, amplitude_scale] = height(step);
  return base_lr + (max_lrs_[group] - base_lr) * scale_factor * amplitude_scale;
}

void CyclicLR::set_other_options(ParamGroup& group, size_t index, int64_t step) const {
  if (momentum_option_.empty()) return;
  const auto [scale_factor, amplitude_scale] = height(step);
  const double base = base_momentums_[index], max = max_momentums_[index];
  group.options[momentum_option_] = max - (max - base) * scale_factor * amplitude_scale;
}

// ---- SequentialLR ---------------------------------------------------------------------------

SequentialLR::SequentialLR(Optimizer& optimizer,
                           std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  HG_CHECK(!schedulers_.empty() && milestones_.size() + 1 == schedulers_.size(),
           "SequentialLR: expected one milestone fewer than the schedulers, got {} schedulers and "
           "{} milestones",
           schedulers_.size(), milestones_.size());
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    HG_CHECK(schedulers_[i] != nullptr && &schedulers_[i]->optimizer() == &optimizer,
             "SequentialLR: scheduler {} belongs to another optimizer; every scheduler must be "
             "made on the SequentialLR's optimizer",
             i);
  }
  for (size_t i = 0; i < milestones_.size(); ++i) {
    HG_CHECK(milestones_[i] > (i == 0 ? 0 : milestones_[i - 1]),
             "SequentialLR: expected increasing positive milestones, got {} after {}",
             milestones_[i], i == 0 ? 0 : milestones_[i - 1]);
  }
  initialize();
}

std::pair<const LRScheduler*, int64_t> SequentialLR::active(int64_t step) const {
  const size_t index =
      size_t(std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin());
  return {schedulers_[index].get(), index == 0 ? step : step - milestones_[index - 1]};
}

double SequentialLR::lr_at(size_t group, double, int64_t step) const {
  const auto [scheduler, local] = active(step);
  return scheduler->lr_at(group, scheduler->base_lrs()[group], local);
}

void SequentialLR::set_other_options(ParamGroup& group, size_t index, int64_t step) const {
  const auto [scheduler, local] = active(step);
  scheduler->set_other_options(group, index, local);
}

// ---- ReduceLROnPlateau ----------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, PlateauOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  const PlateauOptions& o = options_;
  HG_CHECK(o.factor >= 0 && o.factor < 1, "ReduceLROnPlateau: expected factor in [0, 1), got {}",
           o.factor);
  HG_CHECK(o.mode == "min" || o.mode == "max",
           "ReduceLROnPlateau: expected mode \"min\" or \"max\", got \"{}\"", o.mode);
  HG_CHECK(o.threshold_mode == "rel" || o.threshold_mode == "abs",
           "ReduceLROnPlateau: expected threshold_mode \"rel\" or \"abs\", got \"{}\"",
           o.threshold_mode);
  HG_CHECK(o.patience >= 0 && o.cooldown >= 0,
           "ReduceLROnPlateau: expected patience and cooldown >= 0, got {} and {}", o.patience,
           o.cooldown);
  min_lrs_ = per_group(o.min_lr, optimizer.param_groups().size(), "ReduceLROnPlateau", "min_lr");
  best_ = o.mode == "min" ? std::numeric_limits<double>::infinity()
                          : -std::numeric_limits<double>::infinity();
  for (const ParamGroup& group : optimizer.param_groups())
    last_lr_.push_back(group.options.at("lr"));
}

bool ReduceLROnPlateau::is_better(double metric) const {
  const bool relative = options_.threshold_mode == "rel";
  if (options_.mode == "min") {
    return metric < (relative ? best_ * (1.0 - options_.threshold) : best_ - options_.threshold);
  }
  return metric > (relative ? best_ * (1.0 + options_.threshold) : best_ + options_.threshold);
}

void ReduceLROnPlateau::step(double metric, bool optimizer_stepped) {
  if (!optimizer_stepped) return;
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  HG_CHECK(groups.size() == min_lrs_.size(),
           "ReduceLROnPlateau: expected the optimizer's {} param groups, got {} (a group was "
           "added after the scheduler was made)",
           min_lrs_.size(), groups.size());
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;  // NaN too: it is never better
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options_.patience) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const double old_lr = groups[g].options.at("lr");
      const double new_lr = std::max(old_lr * options_.factor, min_lrs_[g]);
      if (old_lr - new_lr > options_.eps) groups[g].options["lr"] = new_lr;
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
    optimizer_.sync_device_options();  // NOTE [The lr on the device]
  }
  last_lr_.clear();
  for (const ParamGroup& group : groups) last_lr_.push_back(group.options.at("lr"));
}

PlateauStateDict ReduceLROnPlateau::state_dict() const {
  return {last_epoch_, best_, num_bad_epochs_, cooldown_counter_, last_lr_};
}

void ReduceLROnPlateau::load_state_dict(const PlateauStateDict& state_dict) {
  HG_CHECK(state_dict.last_epoch >= 0 && state_dict.num_bad_epochs >= 0 &&
               state_dict.cooldown_counter >= 0,
           "ReduceLROnPlateau load_state_dict: expected last_epoch, num_bad_epochs and "
           "cooldown_counter >= 0, got {}, {} and {}",
           state_dict.last_epoch, state_dict.num_bad_epochs, state_dict.cooldown_counter);
  last_epoch_ = state_dict.last_epoch;
  best_ = state_dict.best;
  num_bad_epochs_ = state_dict.num_bad_epochs;
  cooldown_counter_ = state_dict.cooldown_counter;
  if (!state_dict.last_lr.empty()) last_lr_ = state_dict.last_lr;
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

double CosineWithWarmup::lr_at(size_t, double base_lr, int64_t step) const {
  if (step < warmup_steps_) return base_lr * double(step) / double(warmup_steps_);
  const int64_t decay_steps = total_steps_ - warmup_steps_;
  const double progress =
      decay_steps == 0 ? 1.0 : std::min(1.0, double(step - warmup_steps_) / double(decay_steps));
  return min_lr_ + (base_lr - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace hg::optim
