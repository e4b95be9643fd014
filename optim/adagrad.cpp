// Adagrad (adagrad.h): options and their check, the state made at construction, the update on
// the CPU, and the fused CUDA step that reads grad_scale and found_inf on the device.
#include "halfgrad/optim/adagrad.h"

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

struct AdagradStep {
  double lr, lr_decay, weight_decay, eps, inv_scale;
  int64_t step;  // after the increment: 1 on the first step
  bool maximize;
};

// T: parameter and gradient storage type; S: "sum" storage type. torch's order of operations:
// addcdiv's value * a / b. The decayed lr is computed in double, as torch does on the host. With
// `draw`, the parameter (bfloat16) is stored with stochastic rounding (NOTE [bf16_params] in
// fused.h).
template <class T, class S>
void adagrad_pass(T* param, const T* grad, S* sum, int64_t n, const AdagradStep& s,
                  const Generator::State* draw = nullptr) {
  using C = detail::compute_t<T>;
  const C clr = C(s.lr / (1 + double(s.step - 1) * s.lr_decay));
  const C weight_decay = C(s.weight_decay), eps = C(s.eps), inv_scale = C(s.inv_scale);
  const bool scaled = s.inv_scale != 1.0, decay = s.weight_decay != 0;
  // The new value of element i ("sum" stored on the way).
  const auto updated = [&](int64_t i) {
    const C p = detail::load<C>(param, i);
    C g = detail::load<C>(grad, i);
    if (scaled) g *= inv_scale;
    if (s.maximize) g = -g;
    if (decay) g += weight_decay * p;
    detail::store(sum, i, detail::load<C>(sum, i) + g * g);
    const C std_dev = std::sqrt(detail::load<C>(sum, i)) + eps;  // the stored (rounded) sum
    return C(p - clr * g / std_dev);
  };
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (draw != nullptr) return detail::store_stochastic(param, n, *draw, updated);
  }
  parallel_for(n, n, [&](int64_t i) { detail::store(param, i, updated(i)); });
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
#if HALFGRAD_HAS_CUDA
  if (has_cuda_params()) return step_scaled_cuda(grad_scale, found_inf);
#endif
  const double scale = read_grad_scale(grad_scale);
  if (read_found_inf(found_inf)) return;
  HG_CHECK(scale != 0, "Adagrad: expected a nonzero grad_scale, got 0");
  if (bf16_params_) detail::check_bf16_params("Adagrad", groups_);
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    check_adagrad_options(group.options);
    AdagradStep s{group.options.at("lr"),
                  group.options.at("lr_decay"),
                  group.options.at("weight_decay"),
                  group.options.at("eps"),
                  1.0 / scale,
                  0,
                  group.options.at("maximize") != 0};
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      const Tensor grad = checked_grad("Adagrad", param);
      ParamState& state = state_with_sum(g, i);
      const Tensor& sum = state.buffers.at("sum");
      s.step = state.step + 1;
      if (bf16_params_) {
        const Generator::State draw = reserve_rounding_words(generator_, param.numel());
        adagrad_pass<BFloat16, float>(param.data_ptr<BFloat16>(), grad.data_ptr<BFloat16>(),
                                      sum.data_ptr<float>(), param.numel(), s, &draw);
      } else {
        visit_floating_dtype("Adagrad", param.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          adagrad_pass<T, T>(param.data_ptr<T>(), grad.data_ptr<T>(), sum.data_ptr<T>(),
                             param.numel(), s);
        });
      }
      state.step = s.step;
      param.bump_version();
      sum.bump_version();
    }
  }
}

#if HALFGRAD_HAS_CUDA
// The CPU loop's bookkeeping with the update one fused kernel per group and device; the decayed
// lr comes from the step count on the device. grad_scale and found_inf are read on the device
// (NOTE [No host sync in the step] in cuda/multi_tensor.h), so a zero grad_scale is not caught
// as on the CPU.
void Adagrad::step_scaled_cuda(const Tensor& grad_scale, const Tensor& found_inf) {
  check_scaled_step_args(grad_scale, found_inf);
  if (bf16_params_) detail::check_bf16_params("Adagrad", groups_);
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    check_adagrad_options(group.options);
    check_warmed_up("Adagrad", g);
    cuda::detail::AdagradArgs args{group.options.at("lr"), group.options.at("lr_decay"),
                                   group.options.at("weight_decay"), group.options.at("eps"),
                                   group.options.at("maximize") != 0};
    args.bf16_params = bf16_params_;
    std::map<int, cuda::AdagradTensors> by_device;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      check_cuda_param("Adagrad", param, g, i);
      Tensor grad = checked_grad("Adagrad", param);
      ParamState& state = state_with_sum(g, i);
      if (!state.device_step.defined()) {
        state.device_step =
            full({1}, double(state.step), {.dtype = kFloat32, .device = param.device()});
      }
      cuda::AdagradTensors& tensors = by_device[param.device().index];
      tensors.params.push_back(param);
      tensors.grads.push_back(std::move(grad));
      tensors.sums.push_back(state.buffers.at("sum"));
      tensors.steps.push_back(state.device_step);
      if (bf16_params_) {  // the CPU step's draws, in the same order (NOTE [bf16_params])
        const Generator::State draw = reserve_rounding_words(generator_, param.numel());
        args.seed = draw.seed;
        tensors.first_blocks.push_back(draw.offset);
      }
    }
    for (const auto& [index, tensors] : by_device) {
      const Device device(kCUDA, index);
      cuda::detail::AdagradArgs on_device = args;
      on_device.lr_device = device_lr(g, device);
      cuda::fused_adagrad_(tensors, on_device, scalar_on(grad_scale, device),
                           scalar_on(found_inf, device));
    }
  }
}
#endif

}  // namespace hg::optim
