// Adagrad (adagrad.h): options and their check, the state made at construction, and the step
// through the multi_tensor family's fused_adagrad_ (kernel/multi_tensor.h) on the parameters'
// device.
#include "halfgrad/optim/adagrad.h"

#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/optim/fused.h"

namespace hg::optim {
namespace {

std::map<std::string, double> adagrad_defaults(const AdagradOptions& o) {
  return {{"lr", o.lr},
          {"lr_decay", o.lr_decay},
          {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value},
          {"eps", o.eps},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// NOTE [One check per option] in optimizer.h: torch.optim.Adagrad's checks (each value >= 0,
// so NaN is refused too), and the boolean.
void check_adagrad_options(const std::map<std::string, double>& o) {
  for (const char* name : {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"}) {
    HG_CHECK(o.at(name) >= 0, "Adagrad: expected {} >= 0, got {}", name, o.at(name));
  }
  HG_CHECK(o.at("maximize") == 0 || o.at("maximize") == 1,
           "Adagrad: expected maximize to be 0 or 1 (a bool), got {}", o.at("maximize"));
}

}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options)
    : Optimizer(std::move(groups), adagrad_defaults(options)),
      bf16_params_(options.bf16_params),
      generator_(options.generator) {
  check_adagrad_options(defaults_);
  for (const ParamGroup& group : groups_) check_adagrad_options(group.options);
  if (bf16_params_) detail::check_bf16_params("Adagrad", groups_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) state_with_sum(g, i);
  }
}

void Adagrad::check_options(const std::map<std::string, double>& options) const {
  check_adagrad_options(options);
}

std::vector<std::string> Adagrad::state_buffer_names(const ParamGroup& /*group*/) const {
  return {"sum"};
}

DType Adagrad::state_dtype(const Tensor& param) const {
  return bf16_params_ && is_reduced_precision(param.dtype()) ? kFloat32 : param.dtype();
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

void Adagrad::step_scaled(const Tensor& grad_scale, const Tensor& found_inf) {
  // A range of its own in a profile, as torch names it (NOTE [Recorded ranges]).
  const ops::RecordFunction range("Optimizer.step#Adagrad.step");
  if (skipped_on_host("Adagrad", grad_scale, found_inf)) return;
  if (bf16_params_) detail::check_bf16_params("Adagrad", groups_);
  const bool on_cuda = has_cuda_params();
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    check_adagrad_options(group.options);
    check_warmed_up("Adagrad", g);
    kernel::AdagradArgs args{group.options.at("lr"), group.options.at("lr_decay"),
                             group.options.at("weight_decay"), group.options.at("eps"),
                             group.options.at("maximize") != 0};
    args.bf16_params = bf16_params_;
    std::map<int, kernel::AdagradTensors> by_device;
    std::vector<size_t> counted_here;  // CPU parameters: their counts advance on the host
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      if (on_cuda) check_cuda_param("Adagrad", param, g, i);
      Tensor grad = checked_grad("Adagrad", param);
      ParamState& state = state_with_sum(g, i);
      kernel::AdagradTensors& tensors = by_device[param.device().index];
      tensors.params.push_back(param);
      tensors.grads.push_back(std::move(grad));
      tensors.sums.push_back(state.buffers.at("sum"));
      tensors.steps.push_back(fused_step_count(state, param));
      if (!on_cuda) counted_here.push_back(i);
      if (bf16_params_) {  // drawn in group and parameter order (NOTE [bf16_params])
        const Generator::State draw = reserve_rounding_words(generator_, param.numel());
        args.seed = draw.seed;
        tensors.first_blocks.push_back(draw.offset);
      }
    }
    for (const auto& [index, tensors] : by_device) {
      const Device device = on_cuda ? Device(kCUDA, index) : Device(kCPU);
      kernel::AdagradArgs on_device = args;
      if (on_cuda) on_device.lr_device = device_lr(g, device);
      kernel_for::multi_tensor(device).fused_adagrad_(
          tensors, on_device, scalar_on(grad_scale, device), scalar_on(found_inf, device));
    }
    for (size_t i : counted_here) mutable_state(g, i).step += 1;
  }
}

}  // namespace hg::optim
