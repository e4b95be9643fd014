// RMSprop: torch.optim.RMSprop (smoothing constant alpha, centered, momentum, weight decay,
// maximize).
//
//   optim::RMSprop opt(params, {.lr = 1e-3, .momentum = 0.9, .centered = true});
//
// Per parameter with a gradient g (PyTorch's update, in its order of operations):
//   g = maximize ? -g : g;   g += weight_decay * p
//   v = alpha * v + (1 - alpha) * g * g                  (square_avg)
//   centered:  ga = alpha * ga + (1 - alpha) * g        (grad_avg)
//              avg = sqrt(v - ga * ga) + eps
//   otherwise: avg = sqrt(v) + eps
//   momentum > 0:  buf = momentum * buf + g / avg;  p -= lr * buf   (momentum_buffer)
//   otherwise:     p -= lr * g / avg
// The buffers start at zero on a parameter's first step (a buffer an option switched on later
// starts at zero on the next step), and "step" counts the steps taken, as torch keeps it. The
// whole update is one pass over p, grad and the buffers (NOTE [Fused optimizer pass]);
// parameters on a CUDA device take one multi-tensor kernel per group and device with the same
// arithmetic, their step counts on the device (NOTE [Step counts on the device]), and
// step_scaled's grad_scale and found_inf read there. Buffers are kept in the parameter's dtype
// (float32 with bf16_params).
#pragma once

#include "halfgrad/optim/fused_optimizer.h"

namespace hg::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
  // Every parameter is bfloat16 and has no float32 master copy (llm.c-style training):
  // square_avg, grad_avg and momentum_buffer are float32, the update is computed in float32 and
  // stored with stochastic rounding, words from `generator` (NOTE [bf16_params] in fused.h). A
  // parameter of another dtype is an hg::Error at construction (and at the step).
  bool bf16_params = false;
  Generator* generator = nullptr;  // bf16_params' random words; nullptr: default_generator()
};

class RMSprop : public FusedOptimizer<kernel::RMSpropTensors, kernel::RMSpropArgs> {
 public:
  // lr, alpha, eps, weight_decay and momentum must be >= 0 (torch's checks), or hg::Error (for
  // the defaults and every group's options; add_param_group and load_state_dict check the same).
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options = {});

 protected:
  // "square_avg", with "momentum_buffer" when momentum > 0 and "grad_avg" when centered.
  std::vector<std::string> state_buffer_names(const ParamGroup& group) const override;
  bool keeps_step() const override { return true; }
  DType state_dtype(const Tensor& param) const override;
  kernel::RMSpropArgs step_args(const ParamGroup& group) const override;
  void add_state(kernel::RMSpropTensors& tensors, const kernel::RMSpropArgs& args,
                 const Tensor& param, ParamState& state) override;
};

}  // namespace hg::optim
