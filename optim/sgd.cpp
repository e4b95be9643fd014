// SGD (sgd.h): momentum, dampening, weight decay, Nesterov and maximize, on the CPU and as the
// fused CUDA step.
#include "halfgrad/optim/sgd.h"

#include <atomic>
#include <cmath>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/config.h"
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

std::map<std::string, double> sgd_defaults(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

struct SGDStep {
  double lr, momentum, dampening, weight_decay, inv_scale;
  bool nesterov, maximize, first;
};

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

// A group's step parameters, checked.
SGDStep sgd_step_of(const std::map<std::string, double>& o, double inv_scale) {
  const SGDValues v = sgd_values(o);
  check_sgd_values(v);
  return {v.lr,      v.momentum,      v.dampening,     v.weight_decay,
          inv_scale, v.nesterov != 0, v.maximize != 0, false};
}

// T: parameter/gradient storage type; B: the buffer's (T, or float32 with bf16_params). With
// `draw`, the parameter (bfloat16) is stored with stochastic rounding (NOTE [bf16_params]).
template <class T, class B = T>
void sgd_pass(T* param, const T* grad, B* buffer, int64_t n, const SGDStep& s,
              const Generator::State* draw = nullptr) {
  using C = detail::compute_t<T>;
  const C lr = C(s.lr), momentum = C(s.momentum), damp = C(1 - s.dampening);
  const C weight_decay = C(s.weight_decay), inv_scale = C(s.inv_scale);
  const bool scaled = s.inv_scale != 1.0;
  // The new value of element i (its buffer stored on the way).
  const auto updated = [&](int64_t i) {
    const C p = detail::load<C>(param, i);
    C g = detail::load<C>(grad, i);
    if (scaled) g *= inv_scale;
    if (s.maximize) g = -g;
    if (weight_decay != 0) g += weight_decay * p;
    if (buffer != nullptr) {
      C b = s.first ? g : momentum * detail::load<C>(buffer, i) + damp * g;
      detail::store(buffer, i, b);
      b = detail::load<C>(buffer, i);  // torch uses the stored (rounded) buffer
      g = s.nesterov ? g + momentum * b : b;
    }
    return p - lr * g;
  };
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (draw != nullptr) return detail::store_stochastic(param, n, *draw, updated);
  }
  if (buffer == nullptr && !s.maximize && weight_decay == 0) {
    // Plain SGD, the general loop's arithmetic without its per-element branches (so it
    // vectorizes): p - lr * g, g unscaled first when scaled.
    if (scaled) {
      parallel_for(n, n, [&](int64_t i) {
        const C g = detail::load<C>(grad, i) * inv_scale;
        detail::store(param, i, detail::load<C>(param, i) - lr * g);
      });
    } else {
      parallel_for(n, n, [&](int64_t i) {
        detail::store(param, i, detail::load<C>(param, i) - lr * detail::load<C>(grad, i));
      });
    }
    return;
  }
  parallel_for(n, n, [&](int64_t i) { detail::store(param, i, updated(i)); });
}

// NOTE [Vectorized SGD pass] As for Adam (NOTE [Vectorized Adam pass]): float32 parameters
// take a 16-lane AVX-512 pass on CPUs that have it. The baseline build's loop above is SSE (4
// lanes), and in the tiny MLP's training step (hg-bench-train --only tiny) the update took about
// 0.3 of 5.1 us. The pass does the same operations in the same order, each rounded (fp-contract
// off, so no fused multiply-add), and negates by flipping the sign bit as the scalar -g does,
// so its results are bit-identical to the scalar pass (tests/optim/sgd_test.cpp checks that).
std::atomic<bool> vector_pass_enabled{true};

#if defined(__x86_64__)
HG_NO_FP_CONTRACT_BEGIN
// Blocks [first_block, last_block) of 16 elements of the n (detail::for_blocks_of_16 splits
// them over the threads).
__attribute__((target("avx512f"))) void sgd_blocks_avx512(float* param, const float* grad,
                                                          float* buffer, int64_t n,
                                                          int64_t first_block, int64_t last_block,
                                                          const SGDStep& s) {
  HG_NO_FP_CONTRACT_HERE
  const __m512 lr = _mm512_set1_ps(float(s.lr));
  const __m512 momentum = _mm512_set1_ps(float(s.momentum));
  const __m512 damp = _mm512_set1_ps(float(1 - s.dampening));
  const __m512 weight_decay = _mm512_set1_ps(float(s.weight_decay));
  const __m512 inv_scale = _mm512_set1_ps(float(s.inv_scale));
  const __m512i sign = _mm512_set1_epi32(int(0x80000000u));
  const bool scaled = s.inv_scale != 1.0, decay = float(s.weight_decay) != 0;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i = b * 16;
    const __mmask16 lanes = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 p = _mm512_maskz_loadu_ps(lanes, param + i);
    __m512 g = _mm512_maskz_loadu_ps(lanes, grad + i);
    if (scaled) g = _mm512_mul_ps(g, inv_scale);
    if (s.maximize) g = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign));
    if (decay) g = _mm512_add_ps(g, _mm512_mul_ps(weight_decay, p));
    if (buffer != nullptr) {
      const __m512 b_new =
          s.first ? g
                  : _mm512_add_ps(_mm512_mul_ps(momentum, _mm512_maskz_loadu_ps(lanes, buffer + i)),
                                  _mm512_mul_ps(damp, g));
      _mm512_mask_storeu_ps(buffer + i, lanes, b_new);
      g = s.nesterov ? _mm512_add_ps(g, _mm512_mul_ps(momentum, b_new)) : b_new;
    }
    _mm512_mask_storeu_ps(param + i, lanes, _mm512_sub_ps(p, _mm512_mul_ps(lr, g)));
  }
}
HG_NO_FP_CONTRACT_END

void sgd_pass_float_avx512(float* param, const float* grad, float* buffer, int64_t n,
                           const SGDStep& s) {
  detail::for_blocks_of_16(n, [&](int64_t first, int64_t last) {
    sgd_blocks_avx512(param, grad, buffer, n, first, last, s);
  });
}
#endif

// One parameter's update: the float32 pass vectorized where the CPU allows (NOTE [Vectorized
// SGD pass]).
template <class T>
void sgd_update(T* param, const T* grad, T* buffer, int64_t n, const SGDStep& s) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_has_avx512f() && vector_pass_enabled.load(std::memory_order_relaxed)) {
      return sgd_pass_float_avx512(param, grad, buffer, n, s);
    }
  }
#endif
  sgd_pass<T>(param, grad, buffer, n, s);
}

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
#if HALFGRAD_HAS_CUDA
  if (has_cuda_params()) return step_scaled_cuda(grad_scale, found_inf);
#endif
  const double scale = read_grad_scale(grad_scale);
  if (read_found_inf(found_inf)) return;
  HG_CHECK(scale != 0, "SGD: expected a nonzero grad_scale, got 0");
  if (bf16_params_) detail::check_bf16_params("SGD", groups_);
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    SGDStep s = sgd_step_of(group.options, 1.0 / scale);
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      const Tensor grad = checked_grad("SGD", param);
      ParamState& state = mutable_state(g, i);
      Tensor buffer;
      if (s.momentum != 0) {
        auto found = state.buffers.find("momentum_buffer");
        s.first = found == state.buffers.end();
        if (s.first) {
          buffer = empty(param.sizes(), {.dtype = state_dtype(param), .device = param.device()});
          state.buffers["momentum_buffer"] = buffer;
        } else {
          buffer = found->second;
        }
      }
      if (bf16_params_) {
        const Generator::State draw =
            reserve_rounding_words(generator_, param.numel());
        sgd_pass<BFloat16, float>(param.data_ptr<BFloat16>(), grad.data_ptr<BFloat16>(),
                                  buffer.defined() ? buffer.data_ptr<float>() : nullptr,
                                  param.numel(), s, &draw);
      } else {
        visit_floating_dtype("SGD", param.dtype(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          sgd_update<T>(param.data_ptr<T>(), grad.data_ptr<T>(),
                        buffer.defined() ? buffer.data_ptr<T>() : nullptr, param.numel(), s);
        });
      }
      param.bump_version();
      if (buffer.defined()) buffer.bump_version();
    }
  }
}

#if HALFGRAD_HAS_CUDA
// The CPU loop's bookkeeping with one fused kernel per group and device; grad_scale and
// found_inf are read on the device. Whether a momentum buffer holds its first value is known
// only on the device (a first step may be skipped), so each buffer gets a step count there
// (NOTE [Step counts on the device] in optimizer.h): 0 until a step is taken.
void SGD::step_scaled_cuda(const Tensor& grad_scale, const Tensor& found_inf) {
  check_scaled_step_args(grad_scale, found_inf);
  if (bf16_params_) detail::check_bf16_params("SGD", groups_);
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    const SGDStep s = sgd_step_of(group.options, 1.0);
    check_warmed_up("SGD", g);
    cuda::detail::SGDArgs args{s.lr,           s.momentum, s.dampening,
                               s.weight_decay, s.nesterov, s.maximize};
    args.bf16_params = bf16_params_;
    std::map<int, cuda::SGDTensors> by_device;
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      check_cuda_param("SGD", param, g, i);
      Tensor grad = checked_grad("SGD", param);
      cuda::SGDTensors& tensors = by_device[param.device().index];
      tensors.params.push_back(param);
      tensors.grads.push_back(std::move(grad));
      if (bf16_params_) {  // the CPU step's draws, in the same order (NOTE [bf16_params])
        const Generator::State draw = reserve_rounding_words(generator_, param.numel());
        args.seed = draw.seed;
        tensors.first_blocks.push_back(draw.offset);
      }
      if (s.momentum == 0) continue;
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
      if (created || !state.device_step.defined()) {
        // A buffer from a CPU step or load_state_dict holds a first value already.
        state.device_step =
            full({1}, created ? 0.0 : 1.0, {.dtype = kFloat32, .device = param.device()});
      }
      tensors.momentum_buffers.push_back(found->second);
      tensors.steps.push_back(state.device_step);
    }
    for (const auto& [index, tensors] : by_device) {
      const Device device(kCUDA, index);
      cuda::detail::SGDArgs on_device = args;
      on_device.lr_device = device_lr(g, device);
      cuda::fused_sgd_(tensors, on_device, scalar_on(grad_scale, device),
                       scalar_on(found_inf, device));
    }
  }
}
#endif

namespace detail {
bool set_sgd_vector_pass(bool enabled) { return vector_pass_enabled.exchange(enabled); }
}  // namespace detail

}  // namespace hg::optim
