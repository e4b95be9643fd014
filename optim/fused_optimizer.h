// FusedOptimizer: the skeleton SGD, Adam/AdamW, RMSprop, Adagrad, Adamax, Adadelta, RAdam and
// NAdam fill in.
//
// NOTE [Optimizer skeleton] An optimizer with a fused step is its options (their defaults,
// checked by the table of NOTE [One check per option] in optimizer.h), its state (buffer names,
// their dtype, whether it counts steps) and its rule (a Tensors/Args pair of the multi_tensor
// family and the kernel of the family's table that runs them, kernel/multi_tensor.h).
// FusedOptimizer<Tensors, Args> does the rest the same way for every one (NOTE [One fused step]
// in optimizer.h): step() is step_scaled(); step_scaled reads grad_scale and found_inf on the
// host for CPU parameters, checks bf16_params, and for each group checks its options and turns
// them into Args (step_args), gathers per device the parameters with a gradient, their
// gradients, their state (add_state makes what is missing and appends the buffers and step
// counts) and bf16_params' Philox blocks (drawn in group and parameter order), runs the rule's
// kernel once per device with the group's lr on the device for CUDA parameters, and advances
// the host step counts of CPU parameters. Adding an optimizer is its options, its state and its
// rule.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "halfgrad/core/random.h"
#include "halfgrad/kernel/multi_tensor.h"
#include "halfgrad/optim/optimizer.h"

namespace hg::optim {

template <class Tensors, class Args>
class FusedOptimizer : public Optimizer {
 public:
  void step() override { step_scaled(Tensor(), Tensor()); }
  bool supports_scaled_step() const override { return true; }
  const char* name() const override { return name_; }
  void step_scaled(const Tensor& grad_scale, const Tensor& found_inf) override;

 protected:
  // The rule's kernel in the family's table (&kernel::MultiTensorKernels::fused_<rule>_).
  using Kernel = void (*kernel::MultiTensorKernels::*)(const Tensors& tensors, const Args& args,
                                                       const Tensor& grad_scale,
                                                       const Tensor& found_inf);
  // name: torch's class name, which messages and the profile range use.
  FusedOptimizer(std::vector<ParamGroup> groups, std::map<std::string, double> defaults,
                 const char* name, Kernel kernel, bool bf16_params, Generator* generator);
  // The derived constructor's checks (check_options is virtual, so the base's constructor
  // cannot make them): the defaults, every group's options, bf16_params' dtypes.
  void check_constructed() const;

  // The group's options (checked) as the kernel's arguments (its Args' lr is the group's; the
  // skeleton sets lr_device, bf16_params and seed).
  virtual Args step_args(const ParamGroup& group) const = 0;
  // The state of parameter `index` of group `group` at a step (made empty when missing).
  virtual ParamState& state_at(size_t group, size_t index) { return mutable_state(group, index); }
  // Makes the state `param` lacks (buffers at zero, in state_dtype) and appends its buffers and
  // step count to `tensors` (the skeleton appends the parameter and its gradient).
  virtual void add_state(Tensors& tensors, const Args& args, const Tensor& param,
                         ParamState& state) = 0;
  bool bf16_params() const { return bf16_params_; }

 private:
  const char* name_;
  std::string range_name_;  // the step's profile range, made once
  Kernel kernel_;
  bool bf16_params_;
  Generator* generator_;
};

}  // namespace hg::optim
