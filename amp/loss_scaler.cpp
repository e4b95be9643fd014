// The apex-style loss scalers (loss_scaler.h): a static LossScaler and a DynamicLossScaler
// that backs off on overflow and grows after a window of clean steps, with their state dicts.
#include "halfgrad/amp/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/whole_number.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/ops/ops.h"

namespace hg::amp {

bool grads_have_inf_or_nan(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  std::map<std::pair<DeviceType, int>, std::vector<Tensor>> grads_by_device;
  for (const Tensor& p : params) {
    if (p.defined() && p.grad().defined()) {
      grads_by_device[{p.grad().device().type, p.grad().device().index}].push_back(p.grad());
    }
  }
  // One check per device where the gradients live; the host reads one flag each (apex's recipe
  // decides on the host, so on CUDA this waits for the device).
  for (const auto& [device, grads] : grads_by_device) {
    if (kernel_for::multi_tensor(grads.front()).non_finite_flag(grads).item<float>() != 0.0f) {
      return true;
    }
  }
  return false;
}

LossScaler::LossScaler(double scale) : cur_scale_(scale) {
  HG_CHECK(std::isfinite(scale) && scale > 0,
           "LossScaler: expected a positive finite scale, got {}", scale);
}

bool LossScaler::has_overflow(const std::vector<Tensor>& /*params*/) const { return false; }

void LossScaler::update_scale(bool /*overflow*/) { ++cur_iter_; }

void LossScaler::set_loss_scale(double scale) {
  HG_CHECK(std::isfinite(scale) && scale > 0,
           "loss_scale: expected a positive finite scale, got {}", scale);
  cur_scale_ = scale;
}

Tensor LossScaler::scale_loss(const Tensor& loss) const {
  HG_CHECK(loss.defined(), "scale_loss: expected a defined loss tensor, got an undefined one");
  // The scaler's own op (NOTE [Recorded ranges]): an overflow here is the scale's, on purpose.
  const ops::RecordFunction range("LossScaler.scale_loss", ops::RangeKind::kLossScaling);
  return loss.to(kFloat32) * Scalar(cur_scale_);
}

namespace {
double need(const std::map<std::string, double>& state, const char* key) {
  auto it = state.find(key);
  HG_CHECK(it != state.end(), "LossScaler.load_state_dict: expected key '{}', missing", key);
  return it->second;
}
}  // namespace

std::map<std::string, double> LossScaler::state_dict() const {
  return {{"cur_scale", cur_scale_}, {"cur_iter", double(cur_iter_)}};
}

void LossScaler::load_state_dict(const std::map<std::string, double>& state) {
  double scale = need(state, "cur_scale");
  double iter = need(state, "cur_iter");
  HG_CHECK(std::isfinite(scale) && scale > 0,
           "LossScaler.load_state_dict: expected a positive finite cur_scale, got {}", scale);
  // Checked before converting: NOTE [Loaded integers] in core/whole_number.h.
  const int64_t checked_iter =
      checked_whole_number(iter, 0, INT64_MAX, "LossScaler.load_state_dict: 'cur_iter'");
  cur_scale_ = scale;
  cur_iter_ = checked_iter;
}

DynamicLossScaler::DynamicLossScaler(double init_scale, double scale_factor, int64_t scale_window,
                                     std::optional<double> max_scale)
    : LossScaler(init_scale),
      scale_factor_(scale_factor),
      scale_window_(scale_window),
      max_scale_(max_scale) {
  HG_CHECK(scale_factor > 1, "DynamicLossScaler: expected scale_factor > 1, got {}", scale_factor);
  HG_CHECK(scale_window > 0, "DynamicLossScaler: expected scale_window > 0, got {}", scale_window);
  HG_CHECK(!max_scale || *max_scale > 0,
           "DynamicLossScaler: expected max_scale > 0 (or none), got {}", max_scale.value_or(0));
}

bool DynamicLossScaler::has_overflow(const std::vector<Tensor>& params) const {
  return grads_have_inf_or_nan(params);
}

void DynamicLossScaler::update_scale(bool overflow) {
  if (overflow) {
    cur_scale_ = std::max(cur_scale_ / scale_factor_, 1.0);
    last_overflow_iter_ = cur_iter_;
  } else if ((cur_iter_ - last_overflow_iter_) % scale_window_ == 0) {
    cur_scale_ *= scale_factor_;
    if (max_scale_) cur_scale_ = std::min(cur_scale_, *max_scale_);
  }
  ++cur_iter_;
}

std::map<std::string, double> DynamicLossScaler::state_dict() const {
  std::map<std::string, double> out = LossScaler::state_dict();
  out["last_overflow_iter"] = double(last_overflow_iter_);
  out["scale_factor"] = scale_factor_;
  out["scale_window"] = double(scale_window_);
  return out;
}

void DynamicLossScaler::load_state_dict(const std::map<std::string, double>& state) {
  double last = need(state, "last_overflow_iter");
  double factor = need(state, "scale_factor");
  double window = need(state, "scale_window");
  HG_CHECK(factor > 1, "DynamicLossScaler.load_state_dict: expected scale_factor > 1, got {}",
           factor);
  HG_CHECK(window >= 1, "DynamicLossScaler.load_state_dict: expected scale_window >= 1, got {}",
           window);
  // -1: no overflow yet. Checked before converting: NOTE [Loaded integers] in
  // core/whole_number.h.
  const int64_t checked_last = checked_whole_number(
      last, -1, INT64_MAX, "DynamicLossScaler.load_state_dict: 'last_overflow_iter'");
  const int64_t checked_window = checked_whole_number(
      window, 1, INT64_MAX, "DynamicLossScaler.load_state_dict: 'scale_window'");
  LossScaler::load_state_dict(state);  // checks its keys before changing anything
  last_overflow_iter_ = checked_last;
  scale_factor_ = factor;
  scale_window_ = checked_window;
}

}  // namespace hg::amp
