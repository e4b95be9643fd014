// Adamax, Adadelta, RAdam and NAdam (adamax.h): options and their checks, the state, and the
// steps through the multi_tensor family's fused_adamax_, fused_adadelta_, fused_radam_ and
// fused_nadam_.
#include "halfgrad/optim/adamax.h"

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/optim/fused_optimizer_impl.h"

namespace hg::optim {

template class FusedOptimizer<kernel::AdamaxTensors, kernel::AdamaxArgs>;
template class FusedOptimizer<kernel::AdadeltaTensors, kernel::AdadeltaArgs>;
template class FusedOptimizer<kernel::RAdamTensors, kernel::RAdamArgs>;
template class FusedOptimizer<kernel::NAdamTensors, kernel::NAdamArgs>;
template class TwoBufferOptimizer<kernel::AdamaxTensors, kernel::AdamaxArgs>;
template class TwoBufferOptimizer<kernel::AdadeltaTensors, kernel::AdadeltaArgs>;
template class TwoBufferOptimizer<kernel::RAdamTensors, kernel::RAdamArgs>;
template class TwoBufferOptimizer<kernel::NAdamTensors, kernel::NAdamArgs>;

namespace {

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  return {ParamGroup{std::move(params), {}}};
}

}  // namespace

// ---- the shared shape ------------------------------------------------------------------------

template <class Tensors, class Args>
std::vector<std::string> TwoBufferOptimizer<Tensors, Args>::state_buffer_names(
    const ParamGroup& /*group*/) const {
  const std::array<const char*, 2> names = buffer_names();
  return {names[0], names[1]};
}

template <class Tensors, class Args>
DType TwoBufferOptimizer<Tensors, Args>::state_dtype(const Tensor& param) const {
  return this->bf16_params() && is_reduced_precision(param.dtype()) ? kFloat32 : param.dtype();
}

template <class Tensors, class Args>
void TwoBufferOptimizer<Tensors, Args>::append_buffers(std::vector<Tensor>& first,
                                                       std::vector<Tensor>& second,
                                                       std::vector<Tensor>& steps,
                                                       const Tensor& param, ParamState& state) {
  const std::array<const char*, 2> names = buffer_names();
  for (const char* name : names) {
    if (state.buffers.count(name) == 0) {
      state.buffers[name] = zeros(param.sizes(), {state_dtype(param), param.device()});
    }
  }
  first.push_back(state.buffers.at(names[0]));
  second.push_back(state.buffers.at(names[1]));
  steps.push_back(this->fused_step_count(state, param));
}

// ---- Adamax ----------------------------------------------------------------------------------

Adamax::Adamax(std::vector<Tensor> params, AdamaxOptions options)
    : Adamax(one_group(std::move(params)), options) {}

Adamax::Adamax(std::vector<ParamGroup> groups, AdamaxOptions o)
    : TwoBufferOptimizer(std::move(groups),
                         {{"lr", o.lr},
                          {"beta1", o.beta1},
                          {"beta2", o.beta2},
                          {"eps", o.eps},
                          {"weight_decay", o.weight_decay},
                          {"maximize", o.maximize ? 1.0 : 0.0}},
                         "Adamax", &kernel::MultiTensorKernels::fused_adamax_, o.bf16_params,
                         o.generator) {
  check_constructed();
}

kernel::AdamaxArgs Adamax::step_args(const ParamGroup& group) const {
  const std::map<std::string, double>& o = group.options;
  return {o.at("lr"),  o.at("beta1"),        o.at("beta2"),
          o.at("eps"), o.at("weight_decay"), o.at("maximize") != 0};
}

void Adamax::add_state(kernel::AdamaxTensors& tensors, const kernel::AdamaxArgs& /*args*/,
                       const Tensor& param, ParamState& state) {
  append_buffers(tensors.exp_avgs, tensors.exp_infs, tensors.steps, param, state);
}

// ---- Adadelta --------------------------------------------------------------------------------

Adadelta::Adadelta(std::vector<Tensor> params, AdadeltaOptions options)
    : Adadelta(one_group(std::move(params)), options) {}

Adadelta::Adadelta(std::vector<ParamGroup> groups, AdadeltaOptions o)
    : TwoBufferOptimizer(std::move(groups),
                         {{"lr", o.lr},
                          {"rho", o.rho},
                          {"eps", o.eps},
                          {"weight_decay", o.weight_decay},
                          {"maximize", o.maximize ? 1.0 : 0.0}},
                         "Adadelta", &kernel::MultiTensorKernels::fused_adadelta_, o.bf16_params,
                         o.generator) {
  check_constructed();
}

kernel::AdadeltaArgs Adadelta::step_args(const ParamGroup& group) const {
  const std::map<std::string, double>& o = group.options;
  return {o.at("lr"), o.at("rho"), o.at("eps"), o.at("weight_decay"), o.at("maximize") != 0};
}

void Adadelta::add_state(kernel::AdadeltaTensors& tensors, const kernel::AdadeltaArgs& /*args*/,
                         const Tensor& param, ParamState& state) {
  append_buffers(tensors.square_avgs, tensors.acc_deltas, tensors.steps, param, state);
}

// ---- RAdam -----------------------------------------------------------------------------------

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions options)
    : RAdam(one_group(std::move(params)), options) {}

RAdam::RAdam(std::vector<ParamGroup> groups, RAdamOptions o)
    : TwoBufferOptimizer(std::move(groups),
                         {{"lr", o.lr},
                          {"beta1", o.beta1},
                          {"beta2", o.beta2},
                          {"eps", o.eps},
                          {"weight_decay", o.weight_decay}},
                         "RAdam", &kernel::MultiTensorKernels::fused_radam_, o.bf16_params,
                         o.generator) {
  check_constructed();
}

kernel::RAdamArgs RAdam::step_args(const ParamGroup& group) const {
  const std::map<std::string, double>& o = group.options;
  return {o.at("lr"), o.at("beta1"), o.at("beta2"), o.at("eps"), o.at("weight_decay")};
}

void RAdam::add_state(kernel::RAdamTensors& tensors, const kernel::RAdamArgs& /*args*/,
                      const Tensor& param, ParamState& state) {
  append_buffers(tensors.exp_avgs, tensors.exp_avg_sqs, tensors.steps, param, state);
}

// ---- NAdam -----------------------------------------------------------------------------------

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions options)
    : NAdam(one_group(std::move(params)), options) {}

NAdam::NAdam(std::vector<ParamGroup> groups, NAdamOptions o)
    : TwoBufferOptimizer(std::move(groups),
                         {{"lr", o.lr},
                          {"beta1", o.beta1},
                          {"beta2", o.beta2},
                          {"eps", o.eps},
                          {"weight_decay", o.weight_decay},
                          {"momentum_decay", o.momentum_decay},
                          {"decoupled_weight_decay", o.decoupled_weight_decay ? 1.0 : 0.0},
                          {"maximize", o.maximize ? 1.0 : 0.0}},
                         "NAdam", &kernel::MultiTensorKernels::fused_nadam_, o.bf16_params,
                         o.generator) {
  check_constructed();
}

std::vector<std::string> NAdam::state_buffer_names(const ParamGroup& /*group*/) const {
  return {"exp_avg", "exp_avg_sq", "mu_product"};
}

kernel::NAdamArgs NAdam::step_args(const ParamGroup& group) const {
  const std::map<std::string, double>& o = group.options;
  return {o.at("lr"),
          o.at("beta1"),
          o.at("beta2"),
          o.at("eps"),
          o.at("weight_decay"),
          o.at("momentum_decay"),
          o.at("decoupled_weight_decay") != 0,
          o.at("maximize") != 0};
}

void NAdam::add_state(kernel::NAdamTensors& tensors, const kernel::NAdamArgs& /*args*/,
                      const Tensor& param, ParamState& state) {
  append_buffers(tensors.exp_avgs, tensors.exp_avg_sqs, tensors.steps, param, state);
  auto [product, added] = state.buffers.try_emplace("mu_product");
  if (added) product->second = full({}, 1.0, {.dtype = kFloat32, .device = param.device()});
  tensors.mu_products.push_back(product->second);
}

}  // namespace hg::optim
