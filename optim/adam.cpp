// Adam and AdamW (adam.h): options and their checks, the state, and the step through the
// multi_tensor family's fused_adam_ (kernel/multi_tensor.h) on the parameters' device.
#include "halfgrad/optim/adam.h"

#include <algorithm>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/optim/fused.h"

namespace hg::optim {
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

// NOTE [One check per option] in optimizer.h: torch.optim.Adam's checks, and the booleans.
void check_adam_options(const char* name, const std::map<std::string, double>& o) {
  HG_CHECK(o.at("lr") >= 0, "{}: expected lr >= 0, got {}", name, o.at("lr"));
  HG_CHECK(o.at("eps") >= 0, "{}: expected eps >= 0, got {}", name, o.at("eps"));
  HG_CHECK(o.at("beta1") >= 0 && o.at("beta1") < 1, "{}: expected beta1 in [0, 1), got {}", name,
           o.at("beta1"));
  HG_CHECK(o.at("beta2") >= 0 && o.at("beta2") < 1, "{}: expected beta2 in [0, 1), got {}", name,
           o.at("beta2"));
  HG_CHECK(o.at("weight_decay") >= 0, "{}: expected weight_decay >= 0, got {}", name,
           o.at("weight_decay"));
  for (const char* flag : {"amsgrad", "maximize"}) {
    HG_CHECK(o.at(flag) == 0 || o.at(flag) == 1, "{}: expected {} to be 0 or 1 (a bool), got {}",
             name, flag, o.at(flag));
  }
}

}  // namespace

AdamBase::AdamBase(std::vector<ParamGroup> groups, std::map<std::string, double> defaults,
                   bool decoupled_weight_decay, bool float32_state, bool bf16_params,
                   Generator* generator, const char* name)
    : Optimizer(std::move(groups), std::move(defaults)),
      decoupled_weight_decay_(decoupled_weight_decay),
      float32_state_(float32_state),
      bf16_params_(bf16_params),
      generator_(generator),
      name_(name) {
  check_adam_options(name_, defaults_);
  for (const ParamGroup& group : groups_) check_adam_options(name_, group.options);
  if (bf16_params_) detail::check_bf16_params(name_, groups_);
}

void AdamBase::check_options(const std::map<std::string, double>& options) const {
  check_adam_options(name_, options);
}

std::vector<std::string> AdamBase::state_buffer_names(const ParamGroup& group) const {
  if (group.options.at("amsgrad") != 0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

DType AdamBase::state_dtype(const Tensor& param) const {
  return (float32_state_ || bf16_params_) && is_reduced_precision(param.dtype()) ? kFloat32
                                                                                 : param.dtype();
}

void AdamBase::step_scaled(const Tensor& grad_scale, const Tensor& found_inf) {
  // A range of its own in a profile, as torch names it (NOTE [Recorded ranges]).
  const ops::RecordFunction range(std::string_view(name_) == "AdamW" ? "Optimizer.step#AdamW.step"
                                                                     : "Optimizer.step#Adam.step");
  if (skipped_on_host(name_, grad_scale, found_inf)) return;
  if (bf16_params_) detail::check_bf16_params(name_, groups_);
  const bool on_cuda = has_cuda_params();
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    check_adam_options(name_, group.options);
    check_warmed_up(name_, g);
    kernel::AdamArgs args{group.options.at("lr"),           group.options.at("beta1"),
                          group.options.at("beta2"),        group.options.at("eps"),
                          group.options.at("weight_decay"), decoupled_weight_decay_,
                          group.options.at("amsgrad") != 0, group.options.at("maximize") != 0};
    args.bf16_params = bf16_params_;
    std::map<int, kernel::AdamTensors> by_device;
    std::vector<size_t> counted_here;  // CPU parameters: their counts advance on the host
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      if (on_cuda) check_cuda_param(name_, param, g, i);
      Tensor grad = checked_grad(name_, param);
      ParamState& state = mutable_state(g, i);
      const TensorOptions state_options{state_dtype(param), param.device()};
      for (const std::string& name : state_buffer_names(group)) {
        // A missing buffer starts at zero (max_exp_avg_sq too when amsgrad is switched on
        // later, as torch does on the first step).
        if (state.buffers.count(name) == 0) {
          state.buffers[name] = zeros(param.sizes(), state_options);
        }
      }
      kernel::AdamTensors& tensors = by_device[param.device().index];
      tensors.params.push_back(param);
      tensors.grads.push_back(std::move(grad));
      tensors.exp_avgs.push_back(state.buffers.at("exp_avg"));
      tensors.exp_avg_sqs.push_back(state.buffers.at("exp_avg_sq"));
      if (args.amsgrad) tensors.max_exp_avg_sqs.push_back(state.buffers.at("max_exp_avg_sq"));
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
      kernel::AdamArgs on_device = args;
      if (on_cuda) on_device.lr_device = device_lr(g, device);
      kernel_for::multi_tensor(device).fused_adam_(
          tensors, on_device, scalar_on(grad_scale, device), scalar_on(found_inf, device));
    }
    for (size_t i : counted_here) mutable_state(g, i).step += 1;
  }
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
