// SGD: torch.optim.SGD (momentum, dampening, weight decay, Nesterov, maximize).
//
//   optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
//
// Per parameter with a gradient g (PyTorch's update, `buf` the momentum buffer):
//   g = maximize ? -g : g;   g += weight_decay * p
//   buf = first step ? g : momentum * buf + (1 - dampening) * g     (only when momentum != 0)
//   g = nesterov ? g + momentum * buf : buf                         (only when momentum != 0)
//   p -= lr * g
// The whole update is one pass over p, grad and buf (NOTE [Fused optimizer pass]); parameters
// on a CUDA device take one multi-tensor kernel per group, with the same arithmetic, and
// step_scaled's grad_scale and found_inf read on the device.
#pragma once

#include "halfgrad/optim/fused_optimizer.h"

namespace hg::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  // Every parameter is bfloat16 and has no float32 master copy (llm.c-style training): the
  // momentum buffer is float32, the update is computed in float32 and stored with stochastic
  // rounding, words from `generator` (NOTE [bf16_params] in fused.h). A parameter of another
  // dtype is an hg::Error at construction (and at the step, for groups added later).
  bool bf16_params = false;
  Generator* generator = nullptr;  // bf16_params' random words; nullptr: default_generator()
};

class SGD : public FusedOptimizer<kernel::SGDTensors, kernel::SGDArgs> {
 public:
  // Nesterov needs momentum > 0 and dampening 0; lr, momentum, weight_decay must be >= 0, the
  // dampening finite (hg::Error otherwise, for the defaults and for every group's options;
  // add_param_group and load_state_dict check the same).
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});

 protected:
  void check_options(const std::map<std::string, double>& options) const override;
  std::vector<std::string> state_buffer_names(const ParamGroup& group) const override;
  bool keeps_step() const override { return false; }
  DType state_dtype(const Tensor& param) const override;
  kernel::SGDArgs step_args(const ParamGroup& group) const override;
  void add_state(kernel::SGDTensors& tensors, const kernel::SGDArgs& args, const Tensor& param,
                 ParamState& state) override;
};

}  // namespace hg::optim
