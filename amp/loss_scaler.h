// Loss scalers of the apex.fp16_utils recipe (apex's LossScaler / DynamicLossScaler), used by
// FP16Optimizer:
//
//   amp::DynamicLossScaler scaler;                  // 2^32, factor 2, window 1000
//   Tensor scaled = scaler.scale_loss(loss);        // loss.float() * scale
//   scaled.backward();
//   bool overflow = scaler.has_overflow(model->parameters());
//   scaler.update_scale(overflow);                  // skip the step when overflow
//
// The scale is a host double (apex keeps a Python float).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::amp {

// Whether any defined gradient of `params` holds an inf or a NaN (a host read).
bool grads_have_inf_or_nan(const std::vector<Tensor>& params);

// A static loss scale: has_overflow() is always false and update_scale() only counts
// iterations, as apex's LossScaler.
class LossScaler {
 public:
  explicit LossScaler(double scale = 1.0);
  virtual ~LossScaler() = default;

  virtual bool has_overflow(const std::vector<Tensor>& params) const;
  virtual void update_scale(bool overflow);
  virtual bool is_dynamic() const { return false; }

  double loss_scale() const { return cur_scale_; }
  void set_loss_scale(double scale);
  int64_t cur_iter() const { return cur_iter_; }

  // loss converted to float32, times the scale.
  Tensor scale_loss(const Tensor& loss) const;

  // "cur_scale", "cur_iter" (and, when dynamic, "last_overflow_iter", "scale_factor",
  // "scale_window"). load_state_dict checks every key before changing anything.
  virtual std::map<std::string, double> state_dict() const;
  virtual void load_state_dict(const std::map<std::string, double>& state);

 protected:
  double cur_scale_;
  int64_t cur_iter_ = 0;
};

// apex's dynamic rule: on overflow scale = max(scale / scale_factor, 1) and the iteration is
// remembered; when (iter - last_overflow_iter) is a multiple of scale_window on a clean
// iteration, scale *= scale_factor (so the scale grows after scale_window clean iterations).
// With max_scale (Apex amp's max_loss_scale; apex.fp16_utils has none) growth stops there:
// scale = min(scale * scale_factor, max_scale). The ceiling is configuration: state_dict does
// not hold it and load_state_dict keeps it.
class DynamicLossScaler : public LossScaler {
 public:
  explicit DynamicLossScaler(double init_scale = 4294967296.0, double scale_factor = 2.0,
                             int64_t scale_window = 1000,
                             std::optional<double> max_scale = std::nullopt);

  bool has_overflow(const std::vector<Tensor>& params) const override;
  void update_scale(bool overflow) override;
  bool is_dynamic() const override { return true; }

  double scale_factor() const { return scale_factor_; }
  int64_t scale_window() const { return scale_window_; }
  int64_t last_overflow_iter() const { return last_overflow_iter_; }
  std::optional<double> max_scale() const { return max_scale_; }

  std::map<std::string, double> state_dict() const override;
  void load_state_dict(const std::map<std::string, double>& state) override;

 private:
  double scale_factor_;
  int64_t scale_window_;
  int64_t last_overflow_iter_ = -1;
  std::optional<double> max_scale_;
};

}  // namespace hg::amp
