// Adagrad: torch.optim.Adagrad (lr decay, weight decay, initial accumulator value, maximize).
//
//   optim::Adagrad opt(params, {.lr = 0.1, .initial_accumulator_value = 0.1});
//
// Per parameter with a gradient g, at step t (1, 2, ...), PyTorch's update:
//   g = maximize ? -g : g;   g += weight_decay * p
//   clr = lr / (1 + (t - 1) * lr_decay)
//   sum += g * g
//   p -= clr * g / (sqrt(sum) + eps)
// One fused pass per parameter (NOTE [Fused optimizer pass]); parameters on a CUDA device take
// one multi-tensor kernel per group and device with the same arithmetic, their step counts on
// the device (NOTE [Step counts on the device]), and step_scaled's grad_scale and found_inf
// read there. "sum" is kept in the parameter's dtype (float32 with bf16_params).
//
// NOTE [Adagrad state from construction] As torch's Adagrad, the constructor gives every
// parameter its state: "step" 0 and "sum" filled with initial_accumulator_value, so state_dict()
// lists every parameter before any step and load_state_dict accepts a "sum" with a step of 0.
// A parameter with no state (added by add_param_group, or left without state by a loaded state
// dict) gets the same at its first step, from its group's initial_accumulator_value (torch
// fails there).
#pragma once

#include "halfgrad/optim/fused_optimizer.h"

namespace hg::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool maximize = false;
  // Every parameter is bfloat16 and has no float32 master copy (llm.c-style training): "sum"
  // is float32, the update is computed in float32 and stored with stochastic rounding, words
  // from `generator` (NOTE [bf16_params] in fused.h). A parameter of another dtype is an
  // hg::Error at construction (and at the step).
  bool bf16_params = false;
  Generator* generator = nullptr;  // bf16_params' random words; nullptr: default_generator()
};

class Adagrad : public FusedOptimizer<kernel::AdagradTensors, kernel::AdagradArgs> {
 public:
  // lr, lr_decay, weight_decay, initial_accumulator_value and eps must be >= 0 (torch's
  // checks), or hg::Error (for the defaults and every group's options; add_param_group and
  // load_state_dict check the same).
  Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  Adagrad(std::vector<ParamGroup> groups, AdagradOptions options = {});

 protected:
  std::vector<std::string> state_buffer_names(const ParamGroup& group) const override;
  bool keeps_step() const override { return true; }
  bool makes_state_when_constructed() const override { return true; }
  DType state_dtype(const Tensor& param) const override;
  kernel::AdagradArgs step_args(const ParamGroup& group) const override;
  // Parameter `index` of group `group`'s state, "sum" made from the group's
  // initial_accumulator_value when it has none (NOTE [Adagrad state from construction]).
  ParamState& state_at(size_t group, size_t index) override { return state_with_sum(group, index); }
  void add_state(kernel::AdagradTensors& tensors, const kernel::AdagradArgs& args,
                 const Tensor& param, ParamState& state) override;

 private:
  ParamState& state_with_sum(size_t group, size_t index);
};

}  // namespace hg::optim
