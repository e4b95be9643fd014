// Adam and AdamW (adam.h): options and their checks, the state, and the step through the
// multi_tensor family's fused_adam_ (kernel/multi_tensor.h) on the parameters' device.
#include "halfgrad/optim/adam.h"

#include <string_view>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/optim/fused_optimizer_impl.h"

namespace hg::optim {

template class FusedOptimizer<kernel::AdamTensors, kernel::AdamArgs>;

namespace {

template <class Options>
std::map<std::string, double> adam_defaults(const Options& o) {
  return {{"lr", o.lr},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

AdamBase::AdamBase(std::vector<ParamGroup> groups, std::map<std::string, double> defaults,
                   bool decoupled_weight_decay, bool float32_state, bool bf16_params,
                   Generator* generator, const char* name)
    : FusedOptimizer(std::move(groups), std::move(defaults), name,
                     &kernel::MultiTensorKernels::fused_adam_, bf16_params, generator),
      decoupled_weight_decay_(decoupled_weight_decay),
      float32_state_(float32_state) {
  check_constructed();
}

std::vector<std::string> AdamBase::state_buffer_names(const ParamGroup& group) const {
  if (group.options.at("amsgrad") != 0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

DType AdamBase::state_dtype(const Tensor& param) const {
  return (float32_state_ || bf16_params()) && is_reduced_precision(param.dtype()) ? kFloat32
                                                                                  : param.dtype();
}

kernel::AdamArgs AdamBase::step_args(const ParamGroup& group) const {
  const std::map<std::string, double>& o = group.options;
  return {o.at("lr"),           o.at("beta1"),        o.at("beta2"),
          o.at("eps"),          o.at("weight_decay"), decoupled_weight_decay_,
          o.at("amsgrad") != 0, o.at("maximize") != 0};
}

void AdamBase::add_state(kernel::AdamTensors& tensors, const kernel::AdamArgs& args,
                         const Tensor& param, ParamState& state) {
  const TensorOptions state_options{state_dtype(param), param.device()};
  for (const char* name : {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}) {
    // A missing buffer starts at zero (max_exp_avg_sq too when amsgrad is switched on later,
    // as torch does on the first step).
    if (!args.amsgrad && std::string_view(name) == "max_exp_avg_sq") continue;
    if (state.buffers.count(name) == 0) state.buffers[name] = zeros(param.sizes(), state_options);
  }
  tensors.exp_avgs.push_back(state.buffers.at("exp_avg"));
  tensors.exp_avg_sqs.push_back(state.buffers.at("exp_avg_sq"));
  if (args.amsgrad) tensors.max_exp_avg_sqs.push_back(state.buffers.at("max_exp_avg_sq"));
  tensors.steps.push_back(fused_step_count(state, param));
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : AdamBase(std::move(groups), adam_defaults(options), false, options.float32_state,
               options.bf16_params, options.generator, "Adam") {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : AdamBase(std::move(groups), adam_defaults(options), true, options.float32_state,
               options.bf16_params, options.generator, "AdamW") {}

}  // namespace hg::optim
