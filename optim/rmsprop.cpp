// RMSprop (rmsprop.h): options and their check, the state, and the step through the
// multi_tensor family's fused_rmsprop_ (kernel/multi_tensor.h) on the parameters' device.
#include "halfgrad/optim/rmsprop.h"

#include <string_view>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/optim/fused_optimizer_impl.h"

namespace hg::optim {

template class FusedOptimizer<kernel::RMSpropTensors, kernel::RMSpropArgs>;

namespace {

std::map<std::string, double> rmsprop_defaults(const RMSpropOptions& o) {
  return {{"lr", o.lr},
          {"alpha", o.alpha},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum},
          {"centered", o.centered ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : FusedOptimizer(std::move(groups), rmsprop_defaults(options), "RMSprop",
                     &kernel::MultiTensorKernels::fused_rmsprop_, options.bf16_params,
                     options.generator) {
  check_constructed();
}

std::vector<std::string> RMSprop::state_buffer_names(const ParamGroup& group) const {
  std::vector<std::string> names{"square_avg"};
  if (group.options.at("momentum") > 0) names.push_back("momentum_buffer");
  if (group.options.at("centered") != 0) names.push_back("grad_avg");
  return names;
}

DType RMSprop::state_dtype(const Tensor& param) const {
  return bf16_params() && is_reduced_precision(param.dtype()) ? kFloat32 : param.dtype();
}

kernel::RMSpropArgs RMSprop::step_args(const ParamGroup& group) const {
  const std::map<std::string, double>& o = group.options;
  return {o.at("lr"),       o.at("alpha"),         o.at("eps"),          o.at("weight_decay"),
          o.at("momentum"), o.at("centered") != 0, o.at("maximize") != 0};
}

void RMSprop::add_state(kernel::RMSpropTensors& tensors, const kernel::RMSpropArgs& args,
                        const Tensor& param, ParamState& state) {
  for (const char* name : {"square_avg", "grad_avg", "momentum_buffer"}) {
    const bool kept = std::string_view(name) == "square_avg" ||
                      (std::string_view(name) == "grad_avg" ? args.centered : args.momentum > 0);
    if (kept && state.buffers.count(name) == 0) {
      state.buffers[name] = zeros(param.sizes(), {state_dtype(param), param.device()});
    }
  }
  tensors.square_avgs.push_back(state.buffers.at("square_avg"));
  if (args.centered) tensors.grad_avgs.push_back(state.buffers.at("grad_avg"));
  if (args.momentum > 0) tensors.momentum_buffers.push_back(state.buffers.at("momentum_buffer"));
  tensors.steps.push_back(fused_step_count(state, param));
}

}  // namespace hg::optim
