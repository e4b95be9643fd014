// RMSprop (rmsprop.h): options and their check, the update on the CPU, and the fused CUDA step
// that reads grad_scale and found_inf on the device.
#include "halfgrad/optim/rmsprop.h"

#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/config.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/parallel.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/optim/fused.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/multi_tensor.h"
#endif

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

struct RMSpropStep {
  double lr, alpha, eps, weight_decay, momentum, inv_scale;
  bool centered, maximize;
};

// A group's step parameters, checked.
RMSpropStep rmsprop_step_of(const std::map<std::string, double>& o, double inv_scale) {
  const RMSpropValues v = rmsprop_values(o);
  check_rmsprop_values(v);
  return {v.lr,       v.alpha,   v.eps,           v.weight_decay,
          v.momentum, inv_scale, v.centered != 0, v.maximize != 0};
}

// T: parameter and gradient storage type; S: buffer storage type. grad_avg is null unless
// centered, momentum_buffer null unless momentum > 0. torch's order of operations: addcmul's
// value * a * b, addcdiv's value * a / b. With `draw`, the parameter (bfloat16) is stored with
// stochastic rounding (NOTE [bf16_params] in fused.h).
template <class T, class S>
void rmsprop_pass(T* param, const T* grad, S* square_avg, S* grad_avg, S* momentum_buffer,
                  int64_t n, const RMSpropStep& s, const Generator::State* draw = nullptr) {
  using C = detail::compute_t<T>;
  const C lr = C(s.lr), alpha = C(s.alpha), one_minus_alpha = C(1 - s.alpha), eps = C(s.eps);
  const C weight_decay = C(s.weight_decay), momentum = C(s.momentum), inv_scale = C(s.inv_scale);
  const bool scaled = s.inv_scale != 1.0, decay = s.weight_decay != 0;
  // The new value of element i (its state stored on the way).
  const auto updated = [&](int64_t i) {
    const C p = detail::load<C>(param, i);
    C g = detail::load<C>(grad, i);
    if (scaled) g *= inv_scale;
    if (s.maximize) g = -g;
    if (decay) g += weight_decay * p;
    detail::store(square_avg, i, detail::load<C>(square_avg, i) * alpha + one_minus_alpha * g * g);
    const C v = detail::load<C>(square_avg, i);  // the stored (rounded) state, as torch uses
    C avg;
    if (grad_avg != nullptr) {
      detail::store(grad_avg, i, detail::load<C>(grad_avg, i) * alpha + one_minus_alpha * g);
      const C ga = detail::load<C>(grad_avg, i);
      avg = std::sqrt(v - ga * ga) + eps;
    } else {
      avg = std::sqrt(v) + eps;
    }
    if (momentum_buffer != nullptr) {
      detail::store(momentum_buffer, i, detail::load<C>(momentum_buffer, i) * momentum + g / avg);
      return C(p - lr * detail::load<C>(momentum_buffer, i));
    }
    return C(p - lr * g / avg);
  };
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (draw != nullptr) return detail::store_stochastic(param, n, *draw, updated);
  }
  parallel_for(n, n, [&](int64_t i) { detail::store(param, i, updated(i)); });
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
#if HALFGRAD_HAS_CUDA
  if (has_cuda_params()) return step_scaled_cuda(grad_scale, found_inf);
#endif
  const double scale = read_grad_scale(grad_scale);
  if (read_found_inf(found_inf)) return;
  HG_CHECK(scale != 0, "RMSprop: expected a nonzero grad_scale, got 0");
  if (bf16_params_) detail::check_bf16_params("RMSprop", groups_);
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    const RMSpropStep s = rmsprop_step_of(group.options, 1.0 / scale);
    const std::vector<std::string> names = state_buffer_names(group);
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      const Tensor grad = checked_grad("RMSprop", param);
      ParamState& state = mutable_state(g, i);
      for (const std::string& name : names) {
        if (state.buffers.count(name) == 0) {
          state.buffers[name] = zeros(param.sizes(), {state_dtype(param), param.device()});
        }
      }
      const Tensor& square_avg = state.buffers.at("square_avg");
      const Tensor grad_avg = s.centered ? state.buffers.at("grad_avg") : Tensor();
      const Tensor momentum_buffer =
          s.momentum > 0 ? state.buffers.at("momentum_buffer") : Tensor();
      if (bf16_params_) {
        const Generator::State draw = reserve_rounding_words(generator_, param.numel());
        rmsprop_pass<BFloat16, float>(
            param.data_ptr<BFloat16>(), grad.data_ptr<BFloat16>(), square_avg.data_ptr<float>(),
            grad_avg.defined() ? grad_avg.data_ptr<float>() : nullptr,
            momentum_buffer.defined() ? momentum_buffer.data_ptr<float>() : nullptr, param.numel(),
            s, &draw);
      } else {
        visit_floating_dtype("RMSprop", param.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          rmsprop_pass<T, T>(param.data_ptr<T>(), grad.data_ptr<T>(), square_avg.data_ptr<T>(),
                             grad_avg.defined() ? grad_avg.data_ptr<T>() : nullptr,
                             momentum_buffer.defined() ? momentum_buffer.data_ptr<T>() : nullptr,
                             param.numel(), s);
        });
      }
      state.step += 1;
      param.bump_version();
      for (const std::string& name : names) state.buffers.at(name).bump_version();
    }
  }
}

#if HALFGRAD_HAS_CUDA
// The CPU loop's bookkeeping (buffers created at zero), with the update one fused kernel per
// group and device. grad_scale and found_inf are read on the device (NOTE [No host sync in the
// step] in cuda/multi_tensor.h), so a zero grad_scale is not caught as on the CPU.
void RMSprop::step_scaled_cuda(const Tensor& grad_scale, const Tensor& found_inf) {
  check_scaled_step_args(grad_scale, found_inf);
  if (bf16_params_) detail::check_bf16_params("RMSprop", groups_);
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    const RMSpropStep s = rmsprop_step_of(group.options, 1.0);
    check_warmed_up("RMSprop", g);
    cuda::detail::RMSpropArgs args{s.lr,       s.alpha,    s.eps,     s.weight_decay,
                                   s.momentum, s.centered, s.maximize};
    args.bf16_params = bf16_params_;
    const std::vector<std::string> names = state_buffer_names(group);
    std::map<int, cuda::RMSpropTensors> by_device;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      check_cuda_param("RMSprop", param, g, i);
      Tensor grad = checked_grad("RMSprop", param);
      ParamState& state = mutable_state(g, i);
      for (const std::string& name : names) {
        if (state.buffers.count(name) == 0) {
          state.buffers[name] = zeros(param.sizes(), {state_dtype(param), param.device()});
        }
      }
      if (!state.device_step.defined()) {
        state.device_step =
            full({1}, double(state.step), {.dtype = kFloat32, .device = param.device()});
      }
      cuda::RMSpropTensors& tensors = by_device[param.device().index];
      tensors.params.push_back(param);
      tensors.grads.push_back(std::move(grad));
      tensors.square_avgs.push_back(state.buffers.at("square_avg"));
      if (s.centered) tensors.grad_avgs.push_back(state.buffers.at("grad_avg"));
      if (s.momentum > 0) tensors.momentum_buffers.push_back(state.buffers.at("momentum_buffer"));
      tensors.steps.push_back(state.device_step);
      if (bf16_params_) {  // the CPU step's draws, in the same order (NOTE [bf16_params])
        const Generator::State draw = reserve_rounding_words(generator_, param.numel());
        args.seed = draw.seed;
        tensors.first_blocks.push_back(draw.offset);
      }
    }
    for (const auto& [index, tensors] : by_device) {
      const Device device(kCUDA, index);
      cuda::detail::RMSpropArgs on_device = args;
      on_device.lr_device = device_lr(g, device);
      cuda::fused_rmsprop_(tensors, on_device, scalar_on(grad_scale, device),
                           scalar_on(found_inf, device));
    }
  }
}
#endif

}  // namespace hg::optim
