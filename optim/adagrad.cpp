// Adagrad (adagrad.h): options and their check, the state made at construction, and the step
// through the multi_tensor family's fused_adagrad_ (kernel/multi_tensor.h) on the parameters'
// device.
#include "halfgrad/optim/adagrad.h"

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/optim/fused_optimizer_impl.h"

namespace hg::optim {

template class FusedOptimizer<kernel::AdagradTensors, kernel::AdagradArgs>;

namespace {

std::map<std::string, double> adagrad_defaults(const AdagradOptions& o) {
  return {{"lr", o.lr},
          {"lr_decay", o.lr_decay},
          {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value},
          {"eps", o.eps},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options)
    : FusedOptimizer(std::move(groups), adagrad_defaults(options), "Adagrad",
                     &kernel::MultiTensorKernels::fused_adagrad_, options.bf16_params,
                     options.generator) {
  check_constructed();
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) state_with_sum(g, i);
  }
}

std::vector<std::string> Adagrad::state_buffer_names(const ParamGroup& /*group*/) const {
  return {"sum"};
}

DType Adagrad::state_dtype(const Tensor& param) const {
  return bf16_params() && is_reduced_precision(param.dtype()) ? kFloat32 : param.dtype();
}

ParamState& Adagrad::state_with_sum(size_t group, size_t index) {
  ParamState& state = mutable_state(group, index);
  if (state.buffers.count("sum") == 0) {
    const Tensor& param = groups_[group].params[index];
    const double initial = groups_[group].options.at("initial_accumulator_value");
    state.buffers["sum"] = full(param.sizes(), initial, {state_dtype(param), param.device()});
  }
  return state;
}

kernel::AdagradArgs Adagrad::step_args(const ParamGroup& group) const {
  const std::map<std::string, double>& o = group.options;
  return {o.at("lr"), o.at("lr_decay"), o.at("weight_decay"), o.at("eps"), o.at("maximize") != 0};
}

void Adagrad::add_state(kernel::AdagradTensors& tensors, const kernel::AdagradArgs& /*args*/,
                        const Tensor& param, ParamState& state) {
  tensors.sums.push_back(state.buffers.at("sum"));
  tensors.steps.push_back(fused_step_count(state, param));
}

}  // namespace hg::optim
