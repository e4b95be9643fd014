// Where GradScaler's scale lives, and the CUDA path: the scale, growth tracker and counters made
// on the first outputs' device; on a GPU, the step and the update that never wait for it.
#include "halfgrad/amp/grad_scaler.h"

#include <memory>
#include <vector>

#include "halfgrad/amp/grad_scaler_detail.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/config.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/optim/optimizer.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/scaler_state.h"
#endif

namespace hg::amp {

// NOTE [Scale update on the device] With the scale on a CUDA device, update() is one kernel
// (cuda::update_scale_) doing what apply_update_rule and check_collapse do on the CPU, with the
// state they keep on the host kept on the device instead (cuda::detail::ScalerCounter): the
// hysteresis's overflow count, the consecutive skips, whether the scale is below the alarm
// floor, the alarms raised. The kernel publishes each alarm to mapped host memory
// (cuda::ScalerMonitorSlot), where update() finds it without waiting (NOTE [GradScaler on
// CUDA] in grad_scaler.h).

void GradScaler::lazy_init_scale(Device device) {
  // PyTorch creates the scale on the device of the first outputs it scales.
  scale_ = full({1}, options_.init_scale, {.dtype = kFloat32, .device = device});
  growth_tracker_ = full({1}, init_growth_tracker_, {.dtype = kInt32, .device = device});
#if HALFGRAD_HAS_CUDA
  if (device.is_cuda()) {
    // The host's counters so far (a load_state_dict before the first scale()) move over.
    Tensor counters = empty({int64_t(cuda::detail::kScalerCounters)}, kInt32);
    int32_t* values = counters.data_ptr<int32_t>();
    values[cuda::detail::kOverflowTracker] = int32_t(overflow_tracker_);
    values[cuda::detail::kConsecutiveSkips] = int32_t(consecutive_skips_);
    values[cuda::detail::kBelowFloor] = below_floor_ ? 1 : 0;
    values[cuda::detail::kAlarms] = 0;
    device_ = std::make_unique<DeviceState>();
    device_->counters = counters.to(device);
    device_->monitor = std::make_unique<cuda::ScalerMonitorSlot>(device.index);
  }
#endif
}

bool GradScaler::scale_on_cuda() const { return device_ != nullptr; }

Tensor GradScaler::inv_scale_on(Device device) const {
  // Computed where the scale lives (a CUDA scale is not read on the host), then moved.
  const Tensor inv_scale = kernel_for::multi_tensor(scale_).reciprocal_scale(scale_);
  return inv_scale.device() == device ? inv_scale : inv_scale.to(device);
}

// A flag on a CUDA device: the optimizer's scaled step reads it there. Several flags (several
// devices) are summed on the first CUDA one.
StepResult GradScaler::step_with_device_flags(optim::Optimizer& optimizer, OptimizerState& state) {
  NoGradGuard no_grad;
  Tensor found_inf;
  if (state.found_inf_per_device.size() == 1) {
    found_inf = state.found_inf_per_device.front().second;
  } else {
    Device target = kCPU;
    for (const auto& [device, flag] : state.found_inf_per_device) {
      if (device.is_cuda()) {
        target = device;
        break;
      }
    }
    std::vector<Tensor> flags;
    for (const auto& [device, flag] : state.found_inf_per_device) {
      flags.push_back(device == target ? flag : flag.to(target));
    }
    found_inf = kernel_for::multi_tensor(target).sum_flags(flags);
  }
  if (optimizer.supports_scaled_step()) {
    optimizer.step_scaled(Tensor(), found_inf);
    state.stage = Stage::kStepped;
    last_step_ = StepResult::pending(found_inf);
    return last_step_;
  }
  // An optimizer that cannot skip on its own: the host decides, as PyTorch's non-fused path
  // does (a wait for the device).
  const bool stepped = found_inf.item<float>() == 0.0f;
  if (stepped) optimizer.step();
  state.stage = Stage::kStepped;
  last_step_ = StepResult(stepped);
  return last_step_;
}

// The update on the device (NOTE [Scale update on the device]): one kernel, and no wait
// unless the history is recorded.
void GradScaler::update_on_device(std::optional<double> new_scale) {
#if HALFGRAD_HAS_CUDA
  NoGradGuard no_grad;
  const Device device = scale_.device();
  std::vector<Tensor> flags;
  for (const auto& [optimizer, state] : per_optimizer_states_) {
    for (const auto& [flag_device, flag] : state.found_inf_per_device) {
      flags.push_back(flag_device == device ? flag : flag.to(device));
    }
  }
  HG_CHECK(new_scale || !flags.empty(),
           "GradScaler: no inf checks were recorded prior to update() (expected step() or "
           "unscale_() on at least one optimizer since the last update(), got none)");
  // The history holds host values: recording it waits for the device (off by default).
  const double scale_used = options_.record_history ? get_scale() : 0.0;
  const Tensor found_inf = flags.empty()       ? Tensor()
                           : flags.size() == 1 ? flags.front()
                                               : kernel_for::multi_tensor(device).sum_flags(flags);
  cuda::detail::ScaleUpdateArgs args;
  args.growth_factor = options_.growth_factor;
  args.backoff_factor = options_.backoff_factor;
  args.growth_interval = options_.growth_interval;
  args.has_min_scale = options_.min_scale.has_value();
  args.min_scale = options_.min_scale.value_or(0.0);
  args.has_max_scale = options_.max_scale.has_value();
  args.max_scale = options_.max_scale.value_or(0.0);
  args.hysteresis = options_.hysteresis;
  args.alarm_after_consecutive_skips = options_.alarm_after_consecutive_skips;
  args.has_alarm_floor = options_.alarm_scale_floor.has_value();
  args.alarm_floor = options_.alarm_scale_floor.value_or(0.0);
  args.set_scale = new_scale.has_value();
  args.new_scale = new_scale.value_or(0.0);
  cuda::update_scale_(scale_, growth_tracker_, device_->counters, found_inf, args,
                      device_->monitor->device_pointer());
  if (options_.record_history) {
    const bool skipped = found_inf.defined() && found_inf.item<float>() != 0.0f;
    history_.push_back({update_count_, scale_used, skipped});
  }
  ++update_count_;
  per_optimizer_states_.clear();
  raise_device_alarms();  // last: in error mode it throws with the update done
#else
  (void)new_scale;
#endif
}

void GradScaler::raise_device_alarms() {
#if HALFGRAD_HAS_CUDA
  const cuda::detail::ScalerMonitor seen = device_->monitor->read();
  if (seen.alarms == device_->alarms_reported) return;
  // Alarms raised since the last report; the monitor holds the latest one's values.
  device_->alarms_reported = seen.alarms;
  raise_alarm(seen.kind == 1 ? detail::skips_alarm(seen.consecutive_skips, double(seen.scale))
                             : detail::floor_alarm(double(seen.scale),
                                                   options_.alarm_scale_floor.value_or(0.0)));
#endif
}

// The counters the update keeps: on the device when the scale is on one (reading them waits for
// it), on the host otherwise.
int64_t GradScaler::consecutive_skipped_iterations() const {
#if HALFGRAD_HAS_CUDA
  if (scale_on_cuda()) {
    return device_->counters.to(kCPU).data_ptr<int32_t>()[cuda::detail::kConsecutiveSkips];
  }
#endif
  return consecutive_skips_;
}

int64_t GradScaler::overflow_tracker() const {
#if HALFGRAD_HAS_CUDA
  if (scale_on_cuda()) {
    return device_->counters.to(kCPU).data_ptr<int32_t>()[cuda::detail::kOverflowTracker];
  }
#endif
  return overflow_tracker_;
}

void GradScaler::set_overflow_tracker(int64_t overflow_tracker) {
  overflow_tracker_ = overflow_tracker;
#if HALFGRAD_HAS_CUDA
  if (scale_on_cuda()) {
    Tensor tracker = device_->counters.select(0, cuda::detail::kOverflowTracker);
    tracker.fill_(overflow_tracker_);
  }
#endif
}

}  // namespace hg::amp
