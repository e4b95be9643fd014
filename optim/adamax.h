// Adamax, Adadelta, RAdam and NAdam: torch.optim's, on the optimizer skeleton (NOTE [Optimizer
// skeleton] in fused_optimizer.h), each an options struct, its state and its rule
// (kernel/update_rules.h). Per parameter with a gradient g, at step t (1, 2, ...), torch's
// updates (g = maximize ? -g : g first where there is maximize; then g += weight_decay * p):
//
//   Adamax:   m = beta1 * m + (1 - beta1) * g;   u = max(beta2 * u, |g| + eps)
//             p -= lr / (1 - beta1^t) * m / u
//   Adadelta: v = rho * v + (1 - rho) * g * g;   delta = sqrt(a + eps) / sqrt(v + eps) * g
//             a = rho * a + (1 - rho) * delta * delta;   p -= lr * delta
//   RAdam:    m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
//             rho_inf = 2 / (1 - beta2) - 1;   rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t)
//             rho_t > 5: p -= m / (1 - beta1^t) * lr * sqrt(1 - beta2^t) / (sqrt(v) + eps) * r,
//                        r = sqrt((rho_t - 4) (rho_t - 2) rho_inf / ((rho_inf - 4) (rho_inf - 2)
//                        rho_t))
//             else:      p -= m / (1 - beta1^t) * lr
//   NAdam:    mu_t = beta1 (1 - 0.5 * 0.96^(t * momentum_decay));   P = P * mu_t (float32)
//             m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
//             d = sqrt(v / (1 - beta2^t)) + eps
//             p -= lr (1 - mu_t) / (1 - P) * g / d + lr mu_{t+1} / (1 - P mu_{t+1}) * m / d
//             (with decoupled_weight_decay, p *= 1 - lr * weight_decay in place of g's term:
//             torch 2's NAdamW)
//
// State, as torch names it: "step" and "exp_avg", "exp_inf" (Adamax); "square_avg",
// "acc_delta" (Adadelta); "exp_avg", "exp_avg_sq" (RAdam, NAdam), of the parameter's dtype
// (float32 with bf16_params); NAdam's "mu_product" P, a 0-dim float32 tensor as torch keeps it. One
// fused pass per parameter on the CPU, one multi-tensor kernel per group and device on CUDA (NOTE
// [One fused step] in optimizer.h).
#pragma once

#include <array>

#include "halfgrad/optim/fused_optimizer.h"

namespace hg::optim {

struct AdamaxOptions {
  double lr = 2e-3;
  double beta1 = 0.9;  // torch's betas = (beta1, beta2)
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool maximize = false;
  // bfloat16 parameters without a float32 master copy (NOTE [bf16_params] in fused.h).
  bool bf16_params = false;
  Generator* generator = nullptr;  // bf16_params' random words; nullptr: default_generator()
};

struct AdadeltaOptions {
  double lr = 1.0;
  double rho = 0.9;
  double eps = 1e-6;
  double weight_decay = 0;
  bool maximize = false;
  bool bf16_params = false;  // as AdamaxOptions'
  Generator* generator = nullptr;
};

struct RAdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool bf16_params = false;  // as AdamaxOptions'
  Generator* generator = nullptr;
};

// torch 2's NAdam options (torch 1.13 has the first six).
struct NAdamOptions {
  double lr = 2e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum_decay = 4e-3;
  bool decoupled_weight_decay = false;
  bool maximize = false;
  bool bf16_params = false;  // as AdamaxOptions'
  Generator* generator = nullptr;
};

// The four share their shape: two state buffers and a step count per parameter.
template <class Tensors, class Args>
class TwoBufferOptimizer : public FusedOptimizer<Tensors, Args> {
 protected:
  using FusedOptimizer<Tensors, Args>::FusedOptimizer;
  std::vector<std::string> state_buffer_names(const ParamGroup& group) const override;
  bool keeps_step() const override { return true; }
  DType state_dtype(const Tensor& param) const override;
  // The two buffers' names, torch's.
  virtual std::array<const char*, 2> buffer_names() const = 0;
  // Appends the two buffers (made at zero when missing) to the rule's lists.
  void append_buffers(std::vector<Tensor>& first, std::vector<Tensor>& second,
                      std::vector<Tensor>& steps, const Tensor& param, ParamState& state);
};

// lr, eps, weight_decay >= 0 and betas in [0, 1), or hg::Error (for the defaults and every
// group's options; add_param_group and load_state_dict check the same).
class Adamax : public TwoBufferOptimizer<kernel::AdamaxTensors, kernel::AdamaxArgs> {
 public:
  Adamax(std::vector<Tensor> params, AdamaxOptions options = {});
  Adamax(std::vector<ParamGroup> groups, AdamaxOptions options = {});

 protected:
  std::array<const char*, 2> buffer_names() const override { return {"exp_avg", "exp_inf"}; }
  kernel::AdamaxArgs step_args(const ParamGroup& group) const override;
  void add_state(kernel::AdamaxTensors& tensors, const kernel::AdamaxArgs& args,
                 const Tensor& param, ParamState& state) override;
};

// lr, eps, weight_decay >= 0 and rho in [0, 1], or hg::Error (as Adamax's).
class Adadelta : public TwoBufferOptimizer<kernel::AdadeltaTensors, kernel::AdadeltaArgs> {
 public:
  Adadelta(std::vector<Tensor> params, AdadeltaOptions options = {});
  Adadelta(std::vector<ParamGroup> groups, AdadeltaOptions options = {});

 protected:
  std::array<const char*, 2> buffer_names() const override { return {"square_avg", "acc_delta"}; }
  kernel::AdadeltaArgs step_args(const ParamGroup& group) const override;
  void add_state(kernel::AdadeltaTensors& tensors, const kernel::AdadeltaArgs& args,
                 const Tensor& param, ParamState& state) override;
};

// lr, eps, weight_decay >= 0 and betas in [0, 1), or hg::Error (as Adamax's).
class RAdam : public TwoBufferOptimizer<kernel::RAdamTensors, kernel::RAdamArgs> {
 public:
  RAdam(std::vector<Tensor> params, RAdamOptions options = {});
  RAdam(std::vector<ParamGroup> groups, RAdamOptions options = {});

 protected:
  std::array<const char*, 2> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  kernel::RAdamArgs step_args(const ParamGroup& group) const override;
  void add_state(kernel::RAdamTensors& tensors, const kernel::RAdamArgs& args, const Tensor& param,
                 ParamState& state) override;
};

// lr, eps, weight_decay, momentum_decay >= 0 and betas in [0, 1), or hg::Error (as Adamax's).
class NAdam : public TwoBufferOptimizer<kernel::NAdamTensors, kernel::NAdamArgs> {
 public:
  NAdam(std::vector<Tensor> params, NAdamOptions options = {});
  NAdam(std::vector<ParamGroup> groups, NAdamOptions options = {});

 protected:
  std::vector<std::string> state_buffer_names(const ParamGroup& group) const override;
  bool is_scalar_state(const std::string& name) const override { return name == "mu_product"; }
  std::array<const char*, 2> buffer_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  kernel::NAdamArgs step_args(const ParamGroup& group) const override;
  void add_state(kernel::NAdamTensors& tensors, const kernel::NAdamArgs& args, const Tensor& param,
                 ParamState& state) override;
};

}  // namespace hg::optim
