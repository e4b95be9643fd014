// Adam and AdamW: torch.optim.Adam / torch.optim.AdamW.
//
//   optim::AdamW opt(params, {.lr = 1e-3, .weight_decay = 0.01});
//
// Per parameter with a gradient g, at step t (1, 2, ...), PyTorch's formulas:
//   g = maximize ? -g : g
//   Adam:  g += weight_decay * p            AdamW: p *= 1 - lr * weight_decay
//   m = m + (1 - beta1) * (g - m)           (exp_avg; torch's lerp)
//   v = beta2 * v + (1 - beta2) * g * g     (exp_avg_sq)
//   vmax = max(vmax, v)                      (max_exp_avg_sq, amsgrad only; used instead of v)
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p -= lr / (1 - beta1^t) * m / denom
// One fused pass per parameter (NOTE [Fused optimizer pass]). A parameter without a
// gradient is skipped (its step count does not advance). Parameters on a CUDA device take one
// multi-tensor kernel per group instead, with the same arithmetic; their step counts live on
// the device (NOTE [Step counts on the device] in optimizer.h), and step_scaled's grad_scale
// and found_inf are read there, so a skipped step costs the host nothing.
//
// State dtype: the buffers are kept in the parameter's dtype, as torch.optim.Adam does.
// With `.float32_state = true`, 16-bit parameters (float16, bfloat16) keep exp_avg,
// exp_avg_sq and max_exp_avg_sq in float32 instead (what apex's and torch's fused 16-bit
// paths do); the parameter itself stays 16-bit. Float32/float64 parameters are unaffected.
#pragma once

#include "halfgrad/optim/fused_optimizer.h"

namespace hg::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;  // torch's betas = (beta1, beta2)
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;
  bool float32_state = false;
  // Every parameter is bfloat16 and has no float32 master copy (llm.c-style training):
  // exp_avg, exp_avg_sq (and max_exp_avg_sq) are float32, the update is computed in float32
  // and stored with stochastic rounding, words from `generator` (NOTE [bf16_params] in
  // fused.h). A parameter of another dtype is an hg::Error at construction (and at the step).
  bool bf16_params = false;
  Generator* generator = nullptr;  // bf16_params' random words; nullptr: default_generator()
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool amsgrad = false;
  bool maximize = false;
  bool float32_state = false;
  // Every parameter is bfloat16 and has no float32 master copy (llm.c-style training):
  // exp_avg, exp_avg_sq (and max_exp_avg_sq) are float32, the update is computed in float32
  // and stored with stochastic rounding, words from `generator` (NOTE [bf16_params] in
  // fused.h). A parameter of another dtype is an hg::Error at construction (and at the step).
  bool bf16_params = false;
  Generator* generator = nullptr;  // bf16_params' random words; nullptr: default_generator()
};

// The shared implementation; `decoupled_weight_decay` picks AdamW's weight decay.
class AdamBase : public FusedOptimizer<kernel::AdamTensors, kernel::AdamArgs> {
 protected:
  AdamBase(std::vector<ParamGroup> groups, std::map<std::string, double> defaults,
           bool decoupled_weight_decay, bool float32_state, bool bf16_params, Generator* generator,
           const char* name);
  std::vector<std::string> state_buffer_names(const ParamGroup& group) const override;
  bool keeps_step() const override { return true; }
  DType state_dtype(const Tensor& param) const override;
  kernel::AdamArgs step_args(const ParamGroup& group) const override;
  void add_state(kernel::AdamTensors& tensors, const kernel::AdamArgs& args, const Tensor& param,
                 ParamState& state) override;

 private:
  bool decoupled_weight_decay_;
  bool float32_state_;
};

class Adam : public AdamBase {
 public:
  // lr, eps, weight_decay >= 0 and betas in [0, 1), or hg::Error (for the defaults and for
  // every group's options; add_param_group and load_state_dict check the same).
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
};

class AdamW : public AdamBase {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {});
};

}  // namespace hg::optim
