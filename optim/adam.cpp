// Adam and AdamW (adam.h): options and their checks, the update on the CPU, and the fused CUDA
// step that reads grad_scale and found_inf on the device.
#include "halfgrad/optim/adam.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/config.h"
#include "halfgrad/core/convert.h"
#include "halfgrad/core/cpu_features.h"
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

struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay, inv_scale;
  int64_t step;  // after the increment: 1 on the first step
  bool decoupled, amsgrad, maximize;
};

// The per-step constants of the update, in the compute type C. The scalars are computed in
// double, as torch does on the host.
template <class C>
struct AdamConstants {
  C step_size, bias_correction2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay,
      decay_factor, inv_scale;
  bool scaled;
  explicit AdamConstants(const AdamStep& s)
      : step_size(C(s.lr / (1 - std::pow(s.beta1, double(s.step))))),
        bias_correction2_sqrt(C(std::sqrt(1 - std::pow(s.beta2, double(s.step))))),
        one_minus_beta1(C(1 - s.beta1)),
        beta2(C(s.beta2)),
        one_minus_beta2(C(1 - s.beta2)),
        eps(C(s.eps)),
        weight_decay(C(s.weight_decay)),
        decay_factor(C(1 - s.lr * s.weight_decay)),
        inv_scale(C(s.inv_scale)),
        scaled(s.inv_scale != 1.0) {}
};

// T: parameter/gradient storage type; S: state storage type. With `draw`, the parameter
// (bfloat16) is stored with stochastic rounding (NOTE [bf16_params] in fused.h).
template <class T, class S>
void adam_pass(T* param, const T* grad, S* exp_avg, S* exp_avg_sq, S* max_exp_avg_sq, int64_t n,
               const AdamStep& s, const Generator::State* draw = nullptr) {
  using C = detail::compute_t<T>;
  const AdamConstants<C> k(s);
  // The new value of element i (its state stored on the way).
  const auto updated = [&](int64_t i) {
    C p = detail::load<C>(param, i);
    C g = detail::load<C>(grad, i);
    if (k.scaled) g *= k.inv_scale;
    if (s.maximize) g = -g;
    if (k.weight_decay != 0) {
      if (s.decoupled) {
        p *= k.decay_factor;
      } else {
        g += k.weight_decay * p;
      }
    }
    C m = detail::load<C>(exp_avg, i);
    m += k.one_minus_beta1 * (g - m);
    C v = k.beta2 * detail::load<C>(exp_avg_sq, i) + k.one_minus_beta2 * g * g;
    detail::store(exp_avg, i, m);
    detail::store(exp_avg_sq, i, v);
    m = detail::load<C>(exp_avg, i);  // the stored (rounded) state, as torch uses
    v = detail::load<C>(exp_avg_sq, i);
    if (s.amsgrad) {
      const C vmax = std::max(detail::load<C>(max_exp_avg_sq, i), v);
      detail::store(max_exp_avg_sq, i, vmax);
      v = detail::load<C>(max_exp_avg_sq, i);
    }
    const C denom = std::sqrt(v) / k.bias_correction2_sqrt + k.eps;
    return p - k.step_size * (m / denom);
  };
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (draw != nullptr) return detail::store_stochastic(param, n, *draw, updated);
  }
  parallel_for(n, n, [&](int64_t i) { detail::store(param, i, updated(i)); });
}

// NOTE [Vectorized Adam pass] float32 parameters with float32 state (the fp32 master weights
// of a mixed-precision run) take a 16-lane AVX-512 pass on CPUs that have it: without
// -march=native the loop above compiles to scalar SSE (one sqrtss and two divss per element)
// and the step of a 21M-parameter model was bound by them, not by memory. The vector pass does
// the same operations in the same order, each rounded (no fused multiply-add: it is compiled
// with fp-contract off), so its results are bit-identical to the scalar pass
// (tests/optim/adam_test.cpp checks that); masked loads and stores cover the tail.
std::atomic<bool> vector_pass_enabled{true};

#if defined(__x86_64__)
HG_NO_FP_CONTRACT_BEGIN
// Blocks [first_block, last_block) of 16 elements of the n (detail::for_blocks_of_16 splits
// them over the threads).
__attribute__((target("avx512f"))) void adam_blocks_avx512(float* param, const float* grad,
                                                           float* exp_avg, float* exp_avg_sq,
                                                           float* max_exp_avg_sq, int64_t n,
                                                           int64_t first_block, int64_t last_block,
                                                           const AdamStep& s,
                                                           const AdamConstants<float>& k) {
  HG_NO_FP_CONTRACT_HERE
  const __m512 step_size = _mm512_set1_ps(k.step_size);
  const __m512 bias_correction2_sqrt = _mm512_set1_ps(k.bias_correction2_sqrt);
  const __m512 one_minus_beta1 = _mm512_set1_ps(k.one_minus_beta1);
  const __m512 beta2 = _mm512_set1_ps(k.beta2);
  const __m512 one_minus_beta2 = _mm512_set1_ps(k.one_minus_beta2);
  const __m512 eps = _mm512_set1_ps(k.eps);
  const __m512 weight_decay = _mm512_set1_ps(k.weight_decay);
  const __m512 decay_factor = _mm512_set1_ps(k.decay_factor);
  const __m512 inv_scale = _mm512_set1_ps(k.inv_scale);
  const bool decay = k.weight_decay != 0;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i = b * 16;
    const __mmask16 lanes = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512 p = _mm512_maskz_loadu_ps(lanes, param + i);
    __m512 g = _mm512_maskz_loadu_ps(lanes, grad + i);
    if (k.scaled) g = _mm512_mul_ps(g, inv_scale);
    if (s.maximize) g = _mm512_sub_ps(_mm512_setzero_ps(), g);
    if (decay) {
      if (s.decoupled) {
        p = _mm512_mul_ps(p, decay_factor);
      } else {
        g = _mm512_add_ps(g, _mm512_mul_ps(weight_decay, p));
      }
    }
    __m512 m = _mm512_maskz_loadu_ps(lanes, exp_avg + i);
    m = _mm512_add_ps(m, _mm512_mul_ps(one_minus_beta1, _mm512_sub_ps(g, m)));
    __m512 v = _mm512_maskz_loadu_ps(lanes, exp_avg_sq + i);
    v = _mm512_add_ps(_mm512_mul_ps(beta2, v), _mm512_mul_ps(_mm512_mul_ps(one_minus_beta2, g), g));
    _mm512_mask_storeu_ps(exp_avg + i, lanes, m);
    _mm512_mask_storeu_ps(exp_avg_sq + i, lanes, v);
    if (s.amsgrad) {
      // std::max(vmax, v) keeps vmax unless vmax < v; max_ps(v, vmax) keeps vmax unless v >
      // vmax: the same, NaN included.
      v = _mm512_maskz_max_ps(lanes, v, _mm512_maskz_loadu_ps(lanes, max_exp_avg_sq + i));
      _mm512_mask_storeu_ps(max_exp_avg_sq + i, lanes, v);
    }
    const __m512 denom =
        _mm512_add_ps(_mm512_div_ps(_mm512_maskz_sqrt_ps(lanes, v), bias_correction2_sqrt), eps);
    p = _mm512_sub_ps(p, _mm512_mul_ps(step_size, _mm512_div_ps(m, denom)));
    _mm512_mask_storeu_ps(param + i, lanes, p);
  }
}
HG_NO_FP_CONTRACT_END

void adam_pass_float_avx512(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                            float* max_exp_avg_sq, int64_t n, const AdamStep& s) {
  // The constants are computed here, as the scalar pass computes them: in the target function
  // clang contracted `1 - lr * weight_decay` into a fused multiply-add.
  const AdamConstants<float> k(s);
  detail::for_blocks_of_16(n, [&](int64_t first, int64_t last) {
    adam_blocks_avx512(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, first, last, s, k);
  });
}
#endif

// The float32 pass: vectorized where the CPU allows (NOTE [Vectorized Adam pass]).
void adam_pass_float(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                     float* max_exp_avg_sq, int64_t n, const AdamStep& s) {
#if defined(__x86_64__)
  if (cpu_has_avx512f() && vector_pass_enabled.load(std::memory_order_relaxed)) {
    return adam_pass_float_avx512(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, s);
  }
#endif
  adam_pass<float, float>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, s);
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
#if HALFGRAD_HAS_CUDA
  if (has_cuda_params()) return step_scaled_cuda(grad_scale, found_inf);
#endif
  const double scale = read_grad_scale(grad_scale);
  if (read_found_inf(found_inf)) return;
  HG_CHECK(scale != 0, "{}: expected a nonzero grad_scale, got 0", name_);
  if (bf16_params_) detail::check_bf16_params(name_, groups_);
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    check_adam_options(name_, group.options);
    AdamStep s{group.options.at("lr"),
               group.options.at("beta1"),
               group.options.at("beta2"),
               group.options.at("eps"),
               group.options.at("weight_decay"),
               1.0 / scale,
               0,
               decoupled_weight_decay_,
               group.options.at("amsgrad") != 0,
               group.options.at("maximize") != 0};
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      const Tensor grad = checked_grad(name_, param);
      ParamState& state = mutable_state(g, i);
      const TensorOptions state_options{state_dtype(param), param.device()};
      for (const std::string& name : state_buffer_names(group)) {
        // A missing buffer starts at zero (max_exp_avg_sq too when amsgrad is switched on
        // later, as torch does on the first step).
        if (state.buffers.count(name) == 0)
          state.buffers[name] = zeros(param.sizes(), state_options);
      }
      s.step = state.step + 1;
      Tensor& exp_avg = state.buffers.at("exp_avg");
      Tensor& exp_avg_sq = state.buffers.at("exp_avg_sq");
      Tensor max_exp_avg_sq = s.amsgrad ? state.buffers.at("max_exp_avg_sq") : Tensor();
      if (bf16_params_) {
        const Generator::State draw =
            reserve_rounding_words(generator_, param.numel());
        adam_pass<BFloat16, float>(
            param.data_ptr<BFloat16>(), grad.data_ptr<BFloat16>(), exp_avg.data_ptr<float>(),
            exp_avg_sq.data_ptr<float>(), s.amsgrad ? max_exp_avg_sq.data_ptr<float>() : nullptr,
            param.numel(), s, &draw);
      } else {
        visit_floating_dtype(name_, param.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          auto run = [&](auto state_tag) {
            using S = typename decltype(state_tag)::type;
            S* const max_state = s.amsgrad ? max_exp_avg_sq.data_ptr<S>() : nullptr;
            if constexpr (std::is_same_v<T, float> && std::is_same_v<S, float>) {
              adam_pass_float(param.data_ptr<T>(), grad.data_ptr<T>(), exp_avg.data_ptr<S>(),
                              exp_avg_sq.data_ptr<S>(), max_state, param.numel(), s);
            } else {
              adam_pass<T, S>(param.data_ptr<T>(), grad.data_ptr<T>(), exp_avg.data_ptr<S>(),
                              exp_avg_sq.data_ptr<S>(), max_state, param.numel(), s);
            }
          };
          if (exp_avg.dtype() == kFloat32 && param.dtype() != kFloat32) {
            run(TypeTag<float>{});
          } else {
            run(TypeTag<T>{});
          }
        });
      }
      state.step = s.step;
      param.bump_version();
      exp_avg.bump_version();
      exp_avg_sq.bump_version();
      if (s.amsgrad) max_exp_avg_sq.bump_version();
    }
  }
}

#if HALFGRAD_HAS_CUDA
// The CPU loop's bookkeeping (buffers created at zero on the first step, the state dtype), with
// the update itself one fused kernel per group and device. grad_scale and found_inf are not
// read here: the kernels read them on the device (NOTE [No host sync in the step] in
// cuda/multi_tensor.h), so a zero grad_scale is not caught as on the CPU (every update would
// be inf).
void AdamBase::step_scaled_cuda(const Tensor& grad_scale, const Tensor& found_inf) {
  check_scaled_step_args(grad_scale, found_inf);
  if (bf16_params_) detail::check_bf16_params(name_, groups_);
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    check_adam_options(name_, group.options);
    check_warmed_up(name_, g);
    cuda::detail::AdamArgs args{
        group.options.at("lr"),           group.options.at("beta1"),
        group.options.at("beta2"),        group.options.at("eps"),
        group.options.at("weight_decay"), decoupled_weight_decay_,
        group.options.at("amsgrad") != 0, group.options.at("maximize") != 0};
    args.bf16_params = bf16_params_;
    std::map<int, cuda::AdamTensors> by_device;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      check_cuda_param(name_, param, g, i);
      Tensor grad = checked_grad(name_, param);
      ParamState& state = mutable_state(g, i);
      const TensorOptions state_options{state_dtype(param), param.device()};
      for (const std::string& name : state_buffer_names(group)) {
        if (state.buffers.count(name) == 0) {
          state.buffers[name] = zeros(param.sizes(), state_options);
        }
      }
      if (!state.device_step.defined()) {
        state.device_step =
            full({1}, double(state.step), {.dtype = kFloat32, .device = param.device()});
      }
      cuda::AdamTensors& tensors = by_device[param.device().index];
      tensors.params.push_back(param);
      tensors.grads.push_back(std::move(grad));
      tensors.exp_avgs.push_back(state.buffers.at("exp_avg"));
      tensors.exp_avg_sqs.push_back(state.buffers.at("exp_avg_sq"));
      if (args.amsgrad) tensors.max_exp_avg_sqs.push_back(state.buffers.at("max_exp_avg_sq"));
      tensors.steps.push_back(state.device_step);
      if (bf16_params_) {  // the CPU step's draws, in the same order (NOTE [bf16_params])
        const Generator::State draw = reserve_rounding_words(generator_, param.numel());
        args.seed = draw.seed;
        tensors.first_blocks.push_back(draw.offset);
      }
    }
    for (const auto& [index, tensors] : by_device) {
      const Device device(kCUDA, index);
      cuda::detail::AdamArgs on_device = args;
      on_device.lr_device = device_lr(g, device);
      cuda::fused_adam_(tensors, on_device, scalar_on(grad_scale, device),
                        scalar_on(found_inf, device));
    }
  }
}
#endif

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

namespace detail {

bool set_adam_vector_pass(bool enabled) { return vector_pass_enabled.exchange(enabled); }

}  // namespace detail

}  // namespace hg::optim
