// RMSprop (rmsprop.h): options and their check, the state, and the step through the
// multi_tensor family's fused_rmsprop_ (kernel/multi_tensor.h) on the parameters' device.
#include "halfgrad/optim/rmsprop.h"

#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/optim/fused.h"

namespace hg::optim {
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

// A group's options, each looked up once.
struct RMSpropValues {
  double lr, alpha, eps, weight_decay, momentum, centered, maximize;
};
RMSpropValues rmsprop_values(const std::map<std::string, double>& o) {
  return {o.at("lr"),       o.at("alpha"),    o.at("eps"),     o.at("weight_decay"),
          o.at("momentum"), o.at("centered"), o.at("maximize")};
}

// NOTE [One check per option] in optimizer.h: torch.optim.RMSprop's checks (each value >= 0,
// so NaN is refused too), and the booleans.
void check_rmsprop_values(const RMSpropValues& v) {
  for (const auto& [name, value] :
       {std::pair{"lr", v.lr}, std::pair{"alpha", v.alpha}, std::pair{"eps", v.eps},
        std::pair{"weight_decay", v.weight_decay}, std::pair{"momentum", v.momentum}}) {
    HG_CHECK(value >= 0, "RMSprop: expected {} >= 0, got {}", name, value);
  }
  for (const auto& [flag, value] :
       {std::pair{"centered", v.centered}, std::pair{"maximize", v.maximize}}) {
    HG_CHECK(value == 0 || value == 1, "RMSprop: expected {} to be 0 or 1 (a bool), got {}", flag,
             value);
  }
}
void check_rmsprop_options(const std::map<std::string, double>& o) {
  check_rmsprop_values(rmsprop_values(o));
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : Optimizer(std::move(groups), rmsprop_defaults(options)),
      bf16_params_(options.bf16_params),
      generator_(options.generator) {
  check_rmsprop_options(defaults_);
  for (const ParamGroup& group : groups_) check_rmsprop_options(group.options);
  if (bf16_params_) detail::check_bf16_params("RMSprop", groups_);
}

void RMSprop::check_options(const std::map<std::string, double>& options) const {
  check_rmsprop_options(options);
}

std::vector<std::string> RMSprop::state_buffer_names(const ParamGroup& group) const {
  std::vector<std::string> names{"square_avg"};
  if (group.options.at("momentum") > 0) names.push_back("momentum_buffer");
  if (group.options.at("centered") != 0) names.push_back("grad_avg");
  return names;
}

DType RMSprop::state_dtype(const Tensor& param) const {
  return bf16_params_ && is_reduced_precision(param.dtype()) ? kFloat32 : param.dtype();
}

void RMSprop::step_scaled(const Tensor& grad_scale, const Tensor& found_inf) {
  // A range of its own in a profile, as torch names it (NOTE [Recorded ranges]).
  const ops::RecordFunction range("Optimizer.step#RMSprop.step");
  if (skipped_on_host("RMSprop", grad_scale, found_inf)) return;
  if (bf16_params_) detail::check_bf16_params("RMSprop", groups_);
  const bool on_cuda = has_cuda_params();
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    const RMSpropValues v = rmsprop_values(group.options);
    check_rmsprop_values(v);
    check_warmed_up("RMSprop", g);
    kernel::RMSpropArgs args{v.lr,       v.alpha,         v.eps,          v.weight_decay,
                             v.momentum, v.centered != 0, v.maximize != 0};
    args.bf16_params = bf16_params_;
    const std::vector<std::string> names = state_buffer_names(group);
    std::map<int, kernel::RMSpropTensors> by_device;
    std::vector<size_t> counted_here;  // CPU parameters: their counts advance on the host
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      if (on_cuda) check_cuda_param("RMSprop", param, g, i);
      Tensor grad = checked_grad("RMSprop", param);
      ParamState& state = mutable_state(g, i);
      for (const std::string& name : names) {
        if (state.buffers.count(name) == 0) {
          state.buffers[name] = zeros(param.sizes(), {state_dtype(param), param.device()});
        }
      }
      kernel::RMSpropTensors& tensors = by_device[param.device().index];
      tensors.params.push_back(param);
      tensors.grads.push_back(std::move(grad));
      tensors.square_avgs.push_back(state.buffers.at("square_avg"));
      if (args.centered) tensors.grad_avgs.push_back(state.buffers.at("grad_avg"));
      if (args.momentum > 0)
        tensors.momentum_buffers.push_back(state.buffers.at("momentum_buffer"));
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
      kernel::RMSpropArgs on_device = args;
      if (on_cuda) on_device.lr_device = device_lr(g, device);
      kernel_for::multi_tensor(device).fused_rmsprop_(
          tensors, on_device, scalar_on(grad_scale, device), scalar_on(found_inf, device));
    }
    for (size_t i : counted_here) mutable_state(g, i).step += 1;
  }
}

}  // namespace hg::optim
