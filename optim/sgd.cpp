// SGD (sgd.h): momentum, dampening, weight decay, Nesterov and maximize: options and their check,
// the momentum buffers, and the step through the multi_tensor family's fused_sgd_
// (kernel/multi_tensor.h) on the parameters' device.
#include "halfgrad/optim/sgd.h"

#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/optim/fused.h"

namespace hg::optim {
namespace {

std::map<std::string, double> sgd_defaults(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

// A group's options, each looked up once (the step reads them every iteration).
struct SGDValues {
  double lr, momentum, dampening, weight_decay, nesterov, maximize;
};
SGDValues sgd_values(const std::map<std::string, double>& o) {
  return {o.at("lr"),           o.at("momentum"), o.at("dampening"),
          o.at("weight_decay"), o.at("nesterov"), o.at("maximize")};
}

// NOTE [One check per option] in optimizer.h: torch.optim.SGD's checks, the booleans, and a
// finite dampening (torch does not check it; a NaN one would make every update NaN).
void check_sgd_values(const SGDValues& v) {
  HG_CHECK(v.lr >= 0, "SGD: expected lr >= 0, got {}", v.lr);
  HG_CHECK(v.momentum >= 0, "SGD: expected momentum >= 0, got {}", v.momentum);
  HG_CHECK(v.weight_decay >= 0, "SGD: expected weight_decay >= 0, got {}", v.weight_decay);
  HG_CHECK(std::isfinite(v.dampening), "SGD: expected a finite dampening, got {}", v.dampening);
  for (const auto& [flag, value] :
       {std::pair{"nesterov", v.nesterov}, std::pair{"maximize", v.maximize}}) {
    HG_CHECK(value == 0 || value == 1, "SGD: expected {} to be 0 or 1 (a bool), got {}", flag,
             value);
  }
  HG_CHECK(v.nesterov == 0 || (v.momentum > 0 && v.dampening == 0),
           "SGD: Nesterov momentum expects momentum > 0 and dampening 0, got momentum {} and "
           "dampening {}",
           v.momentum, v.dampening);
}
void check_sgd_options(const std::map<std::string, double>& o) { check_sgd_values(sgd_values(o)); }

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer(std::move(groups), sgd_defaults(options)),
      bf16_params_(options.bf16_params),
      generator_(options.generator) {
  check_sgd_options(defaults_);
  for (const ParamGroup& group : groups_) check_sgd_options(group.options);
  if (bf16_params_) detail::check_bf16_params("SGD", groups_);
}

DType SGD::state_dtype(const Tensor& param) const {
  return bf16_params_ ? kFloat32 : param.dtype();
}

void SGD::check_options(const std::map<std::string, double>& options) const {
  check_sgd_options(options);
}

std::vector<std::string> SGD::state_buffer_names(const ParamGroup& /*group*/) const {
  return {"momentum_buffer"};
}

void SGD::step_scaled(const Tensor& grad_scale, const Tensor& found_inf) {
  // A range of its own in a profile, as torch names it (NOTE [Recorded ranges]).
  const ops::RecordFunction range("Optimizer.step#SGD.step");
  if (skipped_on_host("SGD", grad_scale, found_inf)) return;
  if (bf16_params_) detail::check_bf16_params("SGD", groups_);
  const bool on_cuda = has_cuda_params();
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    const SGDValues v = sgd_values(group.options);
    check_sgd_values(v);
    check_warmed_up("SGD", g);
    kernel::SGDArgs args{v.lr,           v.momentum,      v.dampening,
                         v.weight_decay, v.nesterov != 0, v.maximize != 0};
    args.bf16_params = bf16_params_;
    std::map<int, kernel::SGDTensors> by_device;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      if (on_cuda) check_cuda_param("SGD", param, g, i);
      Tensor grad = checked_grad("SGD", param);
      kernel::SGDTensors& tensors = by_device[param.device().index];
      tensors.params.push_back(param);
      tensors.grads.push_back(std::move(grad));
      if (bf16_params_) {  // drawn in group and parameter order (NOTE [bf16_params])
        const Generator::State draw = reserve_rounding_words(generator_, param.numel());
        args.seed = draw.seed;
        tensors.first_blocks.push_back(draw.offset);
      }
      if (v.momentum == 0) continue;
      // The buffer's step count says whether it holds a value yet (0: torch's first step sets
      // it to the gradient); on CUDA only the device knows, as a first step may be skipped
      // there (NOTE [Step counts on the device] in optimizer.h).
      ParamState& state = mutable_state(g, i);
      auto found = state.buffers.find("momentum_buffer");
      const bool created = found == state.buffers.end();
      if (created) {
        // Zeros rather than garbage until the first step taken writes it.
        found = state.buffers
                    .emplace("momentum_buffer",
                             zeros(param.sizes(),
                                   {.dtype = state_dtype(param), .device = param.device()}))
                    .first;
      }
      const double count = created ? 0.0 : 1.0;  // a loaded buffer holds a value
      if (param.is_cuda() && (created || !state.device_step.defined())) {
        state.device_step = full({1}, count, {.dtype = kFloat32, .device = param.device()});
      }
      tensors.momentum_buffers.push_back(found->second);
      tensors.steps.push_back(param.is_cuda() ? state.device_step : full({1}, count, kInt64));
    }
    for (const auto& [index, tensors] : by_device) {
      const Device device = on_cuda ? Device(kCUDA, index) : Device(kCPU);
      kernel::SGDArgs on_device = args;
      if (on_cuda) on_device.lr_device = device_lr(g, device);
      kernel_for::multi_tensor(device).fused_sgd_(tensors, on_device, scalar_on(grad_scale, device),
                                                  scalar_on(found_inf, device));
    }
  }
}

}  // namespace hg::optim
