// FusedOptimizer's members (fused_optimizer.h), included by the optimizers' sources, each of
// which instantiates the class for its own Tensors and Args (optim/ internal).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/stochastic_rounding.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/optim/fused.h"
#include "halfgrad/optim/fused_optimizer.h"

namespace hg::optim {

template <class Tensors, class Args>
FusedOptimizer<Tensors, Args>::FusedOptimizer(std::vector<ParamGroup> groups,
                                              std::map<std::string, double> defaults,
                                              const char* name, Kernel kernel, bool bf16_params,
                                              Generator* generator)
    : Optimizer(std::move(groups), std::move(defaults)),
      name_(name),
      range_name_(std::string("Optimizer.step#") + name + ".step"),
      kernel_(kernel),
      bf16_params_(bf16_params),
      generator_(generator) {}

template <class Tensors, class Args>
void FusedOptimizer<Tensors, Args>::check_constructed() const {
  check_options(defaults_);
  for (const ParamGroup& group : groups_) check_options(group.options);
  if (bf16_params_) detail::check_bf16_params(name_, groups_);
}

template <class Tensors, class Args>
void FusedOptimizer<Tensors, Args>::step_scaled(const Tensor& grad_scale, const Tensor& found_inf) {
  // A range of its own in a profile, as torch names it (NOTE [Recorded ranges]).
  const ops::RecordFunction range(range_name_);
  if (skipped_on_host(name_, grad_scale, found_inf)) return;
  if (bf16_params_) detail::check_bf16_params(name_, groups_);
  const bool on_cuda = has_cuda_params();
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    check_options(group.options);
    Args args = step_args(group);
    args.bf16_params = bf16_params_;
    check_warmed_up(name_, g);
    std::map<int, Tensors> by_device;
    std::vector<size_t> counted_here;  // CPU parameters: their counts advance on the host
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      if (on_cuda) check_cuda_param(name_, param, g, i);
      Tensor grad = checked_grad(name_, param);
      Tensors& tensors = by_device[param.device().index];
      tensors.params.push_back(param);
      tensors.grads.push_back(std::move(grad));
      add_state(tensors, args, param, state_at(g, i));
      if (!on_cuda && keeps_step()) counted_here.push_back(i);
      if (bf16_params_) {  // drawn in group and parameter order (NOTE [bf16_params])
        const Generator::State draw = reserve_rounding_words(generator_, param.numel());
        args.seed = draw.seed;
        tensors.first_blocks.push_back(draw.offset);
      }
    }
    for (const auto& [index, tensors] : by_device) {
      const Device device = on_cuda ? Device(kCUDA, index) : Device(kCPU);
      Args on_device = args;
      if (on_cuda) on_device.lr_device = device_lr(g, device);
      (kernel_for::multi_tensor(device).*kernel_)(tensors, on_device, scalar_on(grad_scale, device),
                                                  scalar_on(found_inf, device));
    }
    for (size_t i : counted_here) mutable_state(g, i).step += 1;
  }
}

}  // namespace hg::optim
