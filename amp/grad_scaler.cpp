// GradScaler's entry points and host path: construction, scale(), the per-optimizer state machine
// of unscale_() and step(), update() with the host's update rule, and the state dict.
#include "halfgrad/amp/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <utility>

#include "halfgrad/amp/grad_scaler_detail.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/config.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/half.h"
#include "halfgrad/core/whole_number.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/observer.h"  // RecordFunction: NOTE [Recorded ranges]
#include "halfgrad/ops/ops.h"
#include "halfgrad/optim/optimizer.h"

namespace hg::amp {

// NOTE [Scaler checks] Each setting and state value of the scaler has one check, called by
// the constructor, the setters and load_state_dict alike (and update(new_scale) for the
// scale), so that a value rejected when constructed is rejected when loaded; `caller` starts
// the message, which names the value, what was given and the allowed range. Counters loaded as
// doubles are checked as whole numbers before they are converted (NOTE [Loaded integers]);
// the trackers are int32 on the device (cuda/scaler_state.h), hence their range.
namespace {

void check_growth_factor(double growth_factor, std::string_view caller) {
  HG_CHECK(growth_factor > 1.0, "{}: the growth factor must be > 1.0, got {}", caller,
           growth_factor);
}

void check_backoff_factor(double backoff_factor, std::string_view caller) {
  // torch checks < 1 only; 0 or less would make the scale 0 or negative on an overflow.
  HG_CHECK(backoff_factor > 0.0 && backoff_factor < 1.0,
           "{}: the backoff factor must be < 1.0 and > 0, got {}", caller, backoff_factor);
}

void check_growth_interval(int64_t growth_interval, std::string_view caller) {
  HG_CHECK(growth_interval >= 1, "{}: the growth interval must be >= 1, got {}", caller,
           growth_interval);
}

// Any scale the scaler can hold: finite and >= 0. Repeated back-offs without min_scale can
// take a float32 scale down to 0, and state_dict() must give a state load_state_dict() takes.
void check_scale(double scale, std::string_view caller, std::string_view name) {
  HG_CHECK(std::isfinite(scale) && scale >= 0.0, "{}: {} must be finite and >= 0, got {}", caller,
           name, scale);
}

constexpr int64_t kTrackerMax = INT32_MAX;

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(std::move(options)), warning_handler_(detail::print_to_stderr) {
  if (!options_.enabled) return;
  constexpr std::string_view kCaller = "GradScaler";
  check_growth_factor(options_.growth_factor, kCaller);
  check_backoff_factor(options_.backoff_factor, kCaller);
  check_growth_interval(options_.growth_interval, kCaller);
  HG_CHECK(options_.hysteresis >= 0, "GradScaler: hysteresis must be >= 0, got {}",
           options_.hysteresis);
  HG_CHECK(options_.alarm_after_consecutive_skips >= 0,
           "GradScaler: alarm_after_consecutive_skips must be >= 0 (0 disables the alarm), got {}",
           options_.alarm_after_consecutive_skips);
  if (options_.alarm_scale_floor) {
    HG_CHECK(*options_.alarm_scale_floor > 0.0, "GradScaler: alarm_scale_floor must be > 0, got {}",
             *options_.alarm_scale_floor);
  }
  // A scale of 0 can be reached and loaded, not started from.
  HG_CHECK(std::isfinite(options_.init_scale) && options_.init_scale > 0.0,
           "GradScaler: init_scale must be finite and > 0, got {}", options_.init_scale);
  if (options_.min_scale) {
    HG_CHECK(*options_.min_scale > 0.0 && *options_.min_scale <= options_.init_scale,
             "GradScaler: min_scale must be in (0, init_scale = {}], got {}", options_.init_scale,
             *options_.min_scale);
  }
  if (options_.max_scale) {
    HG_CHECK(*options_.max_scale >= options_.init_scale,
             "GradScaler: max_scale must be >= init_scale = {}, got {}", options_.init_scale,
             *options_.max_scale);
  }
}

void GradScaler::set_growth_factor(double growth_factor) {
  check_growth_factor(growth_factor, "GradScaler.set_growth_factor");
  options_.growth_factor = growth_factor;
}

void GradScaler::set_backoff_factor(double backoff_factor) {
  check_backoff_factor(backoff_factor, "GradScaler.set_backoff_factor");
  options_.backoff_factor = backoff_factor;
}

void GradScaler::set_growth_interval(int64_t growth_interval) {
  check_growth_interval(growth_interval, "GradScaler.set_growth_interval");
  options_.growth_interval = growth_interval;
}

GradScaler::~GradScaler() = default;

StepResult StepResult::pending(Tensor found_inf) {
  StepResult result;
  result.found_inf_ = std::move(found_inf);
  return result;
}

StepResult::operator bool() const {
  return found_inf_.defined() ? found_inf_.item<float>() == 0.0f : stepped_;
}

void GradScaler::check_scale_initialized(const char* method) const {
  HG_CHECK(scale_.defined(),
           "GradScaler: {} was called but the scale is not initialized yet (expected "
           "scaler.scale(loss) earlier in the iteration, got no call to scale())",
           method);
}

Tensor GradScaler::scale_one(const Tensor& output) {
  HG_CHECK(output.defined(), "GradScaler.scale: expected a defined tensor, got an undefined one");
  if (!scale_.defined()) lazy_init_scale(output.device());
  if (output.dtype() == kBFloat16 && !warned_bfloat16_) {
    warned_bfloat16_ = true;
    warning_handler_(
        "GradScaler.scale: the loss is bfloat16, whose exponent range is float32's; bfloat16 "
        "gradients do not underflow, so loss scaling is not needed (GradScaler(enabled=false))");
  }
  return output * scale_.to(output.device());
}

Tensor GradScaler::scale(const Tensor& outputs) {
  if (!options_.enabled) return outputs;
  return scale_all({outputs}).front();
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& outputs) {
  if (!options_.enabled) return outputs;
  return scale_all(outputs);
}

std::vector<Tensor> GradScaler::scale_all(const std::vector<Tensor>& outputs) {
  const ops::RecordFunction range("GradScaler.scale", ops::RangeKind::kLossScaling);
  std::vector<Tensor> scaled;
  scaled.reserve(outputs.size());
  for (const Tensor& output : outputs) scaled.push_back(scale_one(output));
  return scaled;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  const ops::RecordFunction range("GradScaler.unscale_", ops::RangeKind::kLossScaling);
  check_scale_initialized("unscale_()");
  OptimizerState& state = per_optimizer_states_[&optimizer];
  HG_CHECK(state.stage != Stage::kUnscaled,
           "GradScaler: unscale_() has already been called on this optimizer since the last "
           "update() (expected one unscale_() per optimizer per iteration, got a second)");
  HG_CHECK(state.stage != Stage::kStepped,
           "GradScaler: unscale_() is being called after step() (expected unscale_() before "
           "step() in an iteration, got it after)");

  // NOTE [Unscale in one pass] The gradients are collected by device, all checked before any
  // is modified; each device's are unscaled by the multi_tensor family's unscale_and_check_
  // (kernel/multi_tensor.h), which reads and writes each gradient once and sets that device's
  // found_inf flag when a value it read was not finite (torch checks the scaled value, before
  // the multiply). The multiply runs in float32 for float16/bfloat16/float32 gradients and in
  // float64 for float64 ones, by inv_scale, the float32 rounding of 1 / scale computed in float64
  // where the scale lives. On CUDA the flag and the reciprocal stay on the device.
  std::map<std::pair<int, int>, std::vector<Tensor>> by_device;
  std::map<std::pair<int, int>, Device> devices;
  for (optim::ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& param : group.params) {
      const Tensor& grad = param.grad();
      if (!grad.defined()) continue;
      HG_CHECK(grad.dtype() != kFloat16,
               "GradScaler.unscale_: attempting to unscale float16 gradients (expected "
               "float32 parameters, as autocast keeps them, got a float16 parameter of "
               "shape {})",
               param.sizes());
      HG_CHECK(grad.is_floating_point(), "GradScaler.unscale_: expected floating gradients, got {}",
               dtype_name(grad.dtype()));
      const std::pair<int, int> device_key{int(grad.device().type), int(grad.device().index)};
      devices.emplace(device_key, grad.device());
      by_device[device_key].push_back(grad);
    }
  }
  NoGradGuard no_grad;
  state.found_inf_per_device.clear();
  for (const auto& [key, grads] : by_device) {
    const Device device = devices.at(key);
    const kernel::MultiTensorKernels& kernels = kernel_for::multi_tensor(device);
    Tensor found_inf = kernels.new_flag(device);
    kernels.unscale_and_check_(grads, inv_scale_on(device), found_inf);
    state.found_inf_per_device.emplace_back(device, std::move(found_inf));
  }
  state.stage = Stage::kUnscaled;
}

void GradScaler::check_ready_for_closure(const optim::Optimizer& optimizer) const {
  if (!options_.enabled) return;
  const auto it = per_optimizer_states_.find(&optimizer);
  if (it == per_optimizer_states_.end() || it->second.stage == Stage::kReady) return;
  HG_ERROR(
      "GradScaler.step(optimizer, closure): expected the optimizer at the start of an iteration "
      "(the closure recomputes its gradients), got {} already called for it since the last "
      "update(); call unscale_ inside the closure, after backward",
      it->second.stage == Stage::kUnscaled ? "unscale_" : "step");
}

StepResult GradScaler::step(optim::Optimizer& optimizer) {
  const ops::RecordFunction range("GradScaler.step", ops::RangeKind::kLossScaling);
  if (!options_.enabled) {
    optimizer.step();
    last_step_ = StepResult(true);
    return last_step_;
  }
  check_scale_initialized("step()");
  HG_CHECK(per_optimizer_states_[&optimizer].stage != Stage::kStepped,
           "GradScaler: step() has already been called since the last update() (expected one "
           "step() per optimizer per iteration, got a second)");
  if (per_optimizer_states_[&optimizer].stage == Stage::kReady) unscale_(optimizer);
  OptimizerState& state = per_optimizer_states_[&optimizer];
  HG_CHECK(!state.found_inf_per_device.empty(),
           "GradScaler.step: no inf checks were recorded for this optimizer (expected at "
           "least one parameter with a gradient, got none)");
  for (const auto& [device, flag] : state.found_inf_per_device) {
    if (device.is_cuda()) return step_with_device_flags(optimizer, state);
  }

  // An optimizer with a scaled step (those of the fused skeleton) is handed the flag and skips by
  // itself, so its decision reads no host value; the grads are already unscaled (grad_scale
  // undefined). The bool returned here is read on the host. (Handing it grad_scale instead, and
  // skipping the separate unscale pass, is torch's fused path: one pass over the grads fewer.)
  double found_inf = 0.0;
  for (const auto& [device, flag] : state.found_inf_per_device) found_inf += flag.item<float>();
  const bool stepped = found_inf == 0.0;
  if (optimizer.supports_scaled_step()) {
    const Tensor& flag = state.found_inf_per_device.size() == 1
                             ? state.found_inf_per_device.front().second
                             : full({1}, found_inf, kFloat32);
    optimizer.step_scaled(Tensor(), flag);
  } else if (stepped) {
    optimizer.step();
  }
  state.stage = Stage::kStepped;
  last_step_ = StepResult(stepped);
  return last_step_;
}

double GradScaler::found_inf_sum() const {
  double sum = 0.0;
  for (const auto& [optimizer, state] : per_optimizer_states_) {
    for (const auto& [device, flag] : state.found_inf_per_device) sum += flag.item<float>();
  }
  return sum;
}

// PyTorch's _amp_update_scale_, in float32 for the scale, plus the optional hysteresis and
// bounds.
void GradScaler::apply_update_rule(bool found_inf) {
  const float scale = scale_.item<float>();
  const int32_t tracker = growth_tracker_.item<int32_t>();
  float new_scale = scale;
  int32_t new_tracker = tracker;
  if (found_inf) {
    new_tracker = 0;
    ++overflow_tracker_;
    if (overflow_tracker_ > options_.hysteresis) {
      new_scale = static_cast<float>(double(scale) * options_.backoff_factor);
      if (options_.min_scale && double(new_scale) < *options_.min_scale) {
        new_scale = static_cast<float>(*options_.min_scale);
      }
    }
  } else {
    overflow_tracker_ = 0;
    const int64_t successful = int64_t(tracker) + 1;
    if (successful == options_.growth_interval) {
      float grown = static_cast<float>(double(scale) * options_.growth_factor);
      if (options_.max_scale && double(grown) > *options_.max_scale) {
        grown = std::max(scale, static_cast<float>(*options_.max_scale));
      }
      if (std::isfinite(grown)) new_scale = grown;
      new_tracker = 0;
    } else {
      new_tracker = int32_t(successful);
    }
  }
  NoGradGuard no_grad;
  scale_.fill_(double(new_scale));
  growth_tracker_.fill_(int64_t(new_tracker));
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  const ops::RecordFunction range("GradScaler.update", ops::RangeKind::kLossScaling);
  check_scale_initialized("update()");
  if (scale_on_cuda()) return update_on_device(new_scale);
  bool any_inf_check = false;
  for (const auto& [optimizer, state] : per_optimizer_states_) {
    any_inf_check = any_inf_check || !state.found_inf_per_device.empty();
  }
  const double scale_used = options_.record_history ? double(scale_.item<float>()) : 0.0;
  bool skipped = false;
  if (new_scale) {
    check_scale(*new_scale, "GradScaler.update", "new_scale");
    if (any_inf_check) skipped = found_inf_sum() != 0.0;
    NoGradGuard no_grad;
    scale_.fill_(*new_scale);
  } else {
    HG_CHECK(any_inf_check,
             "GradScaler: no inf checks were recorded prior to update() (expected step() or "
             "unscale_() on at least one optimizer since the last update(), got none)");
    skipped = found_inf_sum() != 0.0;
    apply_update_rule(skipped);
  }
  if (options_.record_history) history_.push_back({update_count_, scale_used, skipped});
  ++update_count_;
  per_optimizer_states_.clear();
  check_collapse(skipped);  // last: in error mode it throws with the update done
}

void GradScaler::update(const Tensor& new_scale) {
  HG_CHECK(new_scale.defined() && new_scale.numel() == 1 && new_scale.dtype() == kFloat32 &&
               !new_scale.requires_grad(),
           "GradScaler.update: new_scale should be a float or a one-element float32 tensor with "
           "requires_grad false, got {}",
           new_scale.defined()
               ? fmt::format("a {} tensor of shape {}{}", new_scale.dtype(), new_scale.sizes(),
                             new_scale.requires_grad() ? " that requires grad" : "")
               : std::string("an undefined tensor"));
  update(std::optional<double>(new_scale.item<double>()));
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  if (!scale_.defined()) return options_.init_scale;
  return double(scale_.item<float>());
}

std::map<std::string, double> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  std::map<std::string, double> state{
      {"scale", get_scale()},
      {"growth_factor", options_.growth_factor},
      {"backoff_factor", options_.backoff_factor},
      {"growth_interval", double(options_.growth_interval)},
      {"_growth_tracker", growth_tracker_.defined() ? double(growth_tracker_.item<int32_t>())
                                                    : double(init_growth_tracker_)},
  };
  if (options_.hysteresis > 0) state["_overflow_tracker"] = double(overflow_tracker());
  return state;
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  if (!options_.enabled) return;
  HG_CHECK(!state.empty(),
           "GradScaler.load_state_dict: the state dict is empty, possibly saved from a disabled "
           "GradScaler (expected the keys scale, growth_factor, backoff_factor, growth_interval, "
           "_growth_tracker, got none)");
  for (const char* key :
       {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    HG_CHECK(state.count(key) == 1,
             "GradScaler.load_state_dict: expected the key \"{}\", got a state dict without it",
             key);
  }
  // NOTE [Scaler checks]: every value checked before anything changes.
  auto caller = [](const char* key) {
    return fmt::format("GradScaler.load_state_dict: \"{}\"", key);
  };
  const double scale = state.at("scale");
  check_scale(scale, "GradScaler.load_state_dict", "\"scale\"");
  check_growth_factor(state.at("growth_factor"), caller("growth_factor"));
  check_backoff_factor(state.at("backoff_factor"), caller("backoff_factor"));
  const int64_t growth_interval =
      checked_whole_number(state.at("growth_interval"), 1, INT64_MAX, caller("growth_interval"));
  check_growth_interval(growth_interval, caller("growth_interval"));
  const int64_t growth_tracker =
      checked_whole_number(state.at("_growth_tracker"), 0, kTrackerMax, caller("_growth_tracker"));
  const auto overflow = state.find("_overflow_tracker");
  const int64_t overflow_tracker =
      overflow == state.end()
          ? 0
          : checked_whole_number(overflow->second, 0, kTrackerMax, caller("_overflow_tracker"));

  options_.init_scale = scale;
  options_.growth_factor = state.at("growth_factor");
  options_.backoff_factor = state.at("backoff_factor");
  options_.growth_interval = growth_interval;
  // Before the first scale() the values wait for the lazy initialization, as in PyTorch.
  init_growth_tracker_ = growth_tracker;
  NoGradGuard no_grad;
  if (scale_.defined()) scale_.fill_(scale);
  if (growth_tracker_.defined()) growth_tracker_.fill_(init_growth_tracker_);
  set_overflow_tracker(overflow_tracker);
}

}  // namespace hg::amp
