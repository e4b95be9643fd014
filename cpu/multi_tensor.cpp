// The CPU backend's multi_tensor table (kernel/multi_tensor.h): GradScaler's unscale and inf
// check, the fused optimizer steps (one pass per parameter, float32 through AVX-512 where the
// CPU has it), and the norms, clipping and checks (multi_tensor_norms.cpp). The CPU kernels
// read the scalar arguments (found_inf, grad_scale) where they run.
//
// NOTE [Fused optimizer pass] Each optimizer updates a parameter in ONE loop over its
// elements that reads the parameter, its gradient and the state buffers, computes the whole
// update in the compute type (float for float32/float16/bfloat16 storage, double for
// float64) and writes each value back once. PyTorch's for-each path runs one kernel per
// formula term and, for 16-bit parameters, rounds to the storage dtype after each term;
// here a 16-bit value is rounded once per step, so 16-bit results can differ from torch's in
// the last bit (never by more than the rounding of the stored value). Float32 and float64
// follow torch's formulas term by term. Elements are independent, so the loop is split over
// OpenMP threads for large parameters and the result does not depend on the thread count.
#include "halfgrad/cpu/multi_tensor.h"

#include <omp.h>

#include <atomic>
#include <cmath>
#include <type_traits>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/half.h"
#include "halfgrad/core/parallel.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/stochastic_rounding.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/multi_tensor_avx512.h"
#include "halfgrad/cpu/multi_tensor_norms.h"
#include "halfgrad/kernel/multi_tensor_checks.h"
#include "halfgrad/kernel/update_rules.h"

namespace hg::cpu {

namespace {

namespace rules = kernel::rules;
using multi_tensor_detail::clamp_;
using multi_tensor_detail::clip_by_total_norm_;
using multi_tensor_detail::non_finite_flag;
using multi_tensor_detail::scale_;
using multi_tensor_detail::total_norm;
using multi_tensor_detail::value_range;

// The AVX-512 passes, on unless a test switches them off (set_vector_passes).
std::atomic<bool> vector_passes_enabled{true};

template <class C, class T>
inline C load(const T* data, int64_t i) {
  return static_cast<C>(data[i]);
}
template <class T, class C>
inline void store(T* data, int64_t i, C value) {
  data[i] = T(value);
}

// blocks(first, last) over the 16-element blocks [0, (n + 15) / 16) of a vector pass: in one
// call below kParallelGrain elements, else split over the OpenMP threads. The pass's target
// function is called from here, not inlined into the region: an outlined parallel region would
// not carry its target attribute.
template <class Blocks>
void for_blocks_of_16(int64_t n, Blocks&& blocks) {
  const int64_t count = (n + 15) / 16;
  if (n < kParallelGrain) return blocks(int64_t(0), count);
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    blocks(count * thread / threads, count * (thread + 1) / threads);
  }
}

// param[i] = stochastic_round_bfloat16(value(i), word of element i) for i in [0, n), with the
// words of `draw` (NOTE [bf16_params] in optim/fused.h); split over threads like parallel_for.
template <class Value>
void store_stochastic(BFloat16* param, int64_t n, Generator::State draw, Value&& value) {
  parallel_for((n + 3) / 4, n, [&](int64_t block) {
    const PhiloxBlock words = random::philox_block(draw.seed, draw.offset + uint64_t(block));
    const int64_t first = block * 4;
    const int64_t count = n - first < 4 ? n - first : 4;
    for (int64_t k = 0; k < count; ++k) {
      param[first + k] = stochastic_round_bfloat16(value(first + k), words.x[k]);
    }
  });
}

// round_state for a state stored as S and computed in C (kernel/update_rules.h).
template <class S>
struct RoundThrough {
  template <class C>
  C operator()(C x) const {
    return C(S(x));
  }
};

// Stores value(i) into param[i] for i in [0, n): rounded to nearest, or with `draw` (bf16_params:
// T bfloat16) stochastically (NOTE [bf16_params] in optim/fused.h); split over threads.
template <class T, class Value>
void store_updates(T* param, int64_t n, const Generator::State* draw, Value&& value) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (draw != nullptr) return store_stochastic(param, n, *draw, value);
  }
  parallel_for(n, n, [&](int64_t i) { store(param, i, value(i)); });
}

// f(std::true_type{}) or f(std::false_type{}): an option of a loop body fixed at compile time, so
// that the loop has no branch on it.
template <class F>
void with_option(bool on, F&& f) {
  if (on) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

// The passes: one loop per parameter over its elements, the rules of kernel/update_rules.h
// (NOTE [Update rules written once]). T: parameter and gradient storage type; S: state storage
// type (T, or float32). Each copies the constants into a local first: stores through the
// parameter and state pointers cannot alias it, so the constants stay in registers and the
// loops vectorize.

template <class T, class S>
void adam_pass(T* param, const T* grad, S* exp_avg, S* exp_avg_sq, S* max_exp_avg_sq, int64_t n,
               const rules::AdamConstants<compute_t<T>>& k, const Generator::State* draw) {
  using C = compute_t<T>;
  const auto c = k;
  with_option(c.amsgrad, [&](auto amsgrad) {
    store_updates(param, n, draw, [&](int64_t i) {
      C m = load<C>(exp_avg, i), v = load<C>(exp_avg_sq, i);
      C vmax = amsgrad ? load<C>(max_exp_avg_sq, i) : C(0);
      const C p = rules::adam_rule(load<C>(param, i), load<C>(grad, i), m, v,
                                   amsgrad ? &vmax : nullptr, c, RoundThrough<S>{});
      store(exp_avg, i, m);
      store(exp_avg_sq, i, v);
      if constexpr (amsgrad) store(max_exp_avg_sq, i, vmax);
      return p;
    });
  });
}

template <class T, class B>
void sgd_pass(T* param, const T* grad, B* buffer, int64_t n,
              const rules::SGDConstants<compute_t<T>>& k, const Generator::State* draw) {
  using C = compute_t<T>;
  const auto c = k;
  with_option(buffer != nullptr, [&](auto momentum) {
    store_updates(param, n, draw, [&](int64_t i) {
      if constexpr (momentum) {
        C b = c.first ? C(0) : load<C>(buffer, i);
        const C p = rules::sgd_rule(load<C>(param, i), load<C>(grad, i), &b, c, RoundThrough<B>{});
        store(buffer, i, b);
        return p;
      } else {
        return rules::sgd_rule(load<C>(param, i), load<C>(grad, i), static_cast<C*>(nullptr), c,
                               RoundThrough<B>{});
      }
    });
  });
}

template <class T, class S>
void rmsprop_pass(T* param, const T* grad, S* square_avg, S* grad_avg, S* momentum_buffer,
                  int64_t n, const rules::RMSpropConstants<compute_t<T>>& k,
                  const Generator::State* draw) {
  using C = compute_t<T>;
  const auto c = k;
  with_option(grad_avg != nullptr, [&](auto centered) {
    with_option(momentum_buffer != nullptr, [&](auto momentum) {
      store_updates(param, n, draw, [&](int64_t i) {
        C v = load<C>(square_avg, i);
        C ga = centered ? load<C>(grad_avg, i) : C(0);
        C b = momentum ? load<C>(momentum_buffer, i) : C(0);
        const C p =
            rules::rmsprop_rule(load<C>(param, i), load<C>(grad, i), v, centered ? &ga : nullptr,
                                momentum ? &b : nullptr, c, RoundThrough<S>{});
        store(square_avg, i, v);
        if constexpr (centered) store(grad_avg, i, ga);
        if constexpr (momentum) store(momentum_buffer, i, b);
        return p;
      });
    });
  });
}

template <class T, class S>
void adagrad_pass(T* param, const T* grad, S* sum, int64_t n,
                  const rules::AdagradConstants<compute_t<T>>& k, const Generator::State* draw) {
  using C = compute_t<T>;
  const auto c = k;
  store_updates(param, n, draw, [&](int64_t i) {
    C s = load<C>(sum, i);
    const C p = rules::adagrad_rule(load<C>(param, i), load<C>(grad, i), s, c, RoundThrough<S>{});
    store(sum, i, s);
    return p;
  });
}

// Adamax, Adadelta and RAdam: two state buffers each, `rule(p, g, a, b)` their rule with the
// constants and round_state bound.
template <class T, class S, class Rule>
void two_buffer_pass(T* param, const T* grad, S* first, S* second, int64_t n,
                     const Generator::State* draw, Rule rule) {
  using C = compute_t<T>;
  store_updates(param, n, draw, [&](int64_t i) {
    C a = load<C>(first, i), b = load<C>(second, i);
    const C p = rule(load<C>(param, i), load<C>(grad, i), a, b);
    store(first, i, a);
    store(second, i, b);
    return p;
  });
}

// The AVX-512 passes (NOTE [Vectorized optimizer passes] in multi_tensor_avx512.cpp) where the
// CPU has them and no test has switched them off.
bool use_vector_passes() {
#if defined(__x86_64__)
  return cpu_has_avx512f() && vector_passes_enabled.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// Parameters T and state S that the AVX-512 passes take: float32 both.
template <class T, class S>
constexpr bool kVectorPassTypes = std::is_same_v<T, float>&& std::is_same_v<S, float>;

void adam_pass_float(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                     float* max_exp_avg_sq, int64_t n, const rules::AdamConstants<float>& k) {
#if defined(__x86_64__)
  if (use_vector_passes()) {
    return for_blocks_of_16(n, [&](int64_t first, int64_t last) {
      detail::adam_blocks_avx512(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, first, last,
                                 k);
    });
  }
#endif
  adam_pass<float, float>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, k, nullptr);
}

template <class T>
void sgd_update(T* param, const T* grad, T* buffer, int64_t n,
                const rules::SGDConstants<compute_t<T>>& k) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (use_vector_passes()) {
      return for_blocks_of_16(n, [&](int64_t first, int64_t last) {
        detail::sgd_blocks_avx512(param, grad, buffer, n, first, last, k);
      });
    }
  }
#endif
  sgd_pass<T, T>(param, grad, buffer, n, k, nullptr);
}

// The unscale (NOTE [Unscale in one pass] in amp/grad_scaler.cpp): each tensor read and written
// once, the multiply in float32 (float64 for float64 tensors), a value read that is not finite
// recorded. float32 gradients, the bulk of a model's, take the AVX-512 pass where the CPU has
// it, split over the OpenMP threads as the optimizers' passes are (for_blocks_of_16).
template <class T>
bool unscale_contiguous(T* data, int64_t n, float inv_scale) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (use_vector_passes()) {
      std::atomic<bool> non_finite{false};
      for_blocks_of_16(n, [&](int64_t first, int64_t last) {
        if (detail::unscale_blocks_avx512(data, n, first, last, inv_scale)) {
          non_finite.store(true, std::memory_order_relaxed);
        }
      });
      return non_finite.load();
    }
  }
#endif
  using C = compute_t<T>;
  const C factor = C(inv_scale);
  bool non_finite = false;
  for (int64_t i = 0; i < n; ++i) {
    const C value = load<C>(data, i);
    non_finite |= !std::isfinite(value);
    store(data, i, rules::unscale(value, factor));
  }
  return non_finite;
}

// Unscales every tensor of one dtype; returns whether any value read was not finite.
bool unscale_group(std::span<const Tensor> tensors, DType dtype, float inv_scale) {
  return visit_floating_dtype("unscale_and_check_", dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bool non_finite = false;
    for (const Tensor& t : tensors) {
      if (t.dtype() != dtype) continue;
      if (t.is_contiguous()) {
        non_finite |= unscale_contiguous(t.data_ptr<T>(), t.numel(), inv_scale);
        t.bump_version();
      } else {
        // A strided gradient (rare: the engine makes contiguous ones) goes through a
        // contiguous copy, still one multiply per element.
        Tensor dense = t.contiguous();
        non_finite |= unscale_contiguous(dense.data_ptr<T>(), dense.numel(), inv_scale);
        Tensor target = t;
        target.copy_(dense);
      }
    }
    return non_finite;
  });
}

// ---- checks (the backend's part: kernel/multi_tensor_checks.h has the rest) ---------------

// The value of an optional scalar that kernel::check_scalar accepted, `absent` when undefined.
double scalar_value(const Tensor& t, double absent) {
  return t.defined() ? double(*static_cast<const float*>(t.data_ptr())) : absent;
}
// A checked scalar's value.
double read_scalar(const Tensor& t, const char* op, const char* what) {
  kernel::check_scalar(t, kCPU, op, what);
  return scalar_value(t, 0.0);
}

// A step count (int64 or float32, checked): the steps taken before this one.
int64_t read_step(const Tensor& step) {
  if (step.dtype() == kInt64) return *static_cast<const int64_t*>(step.data_ptr());
  return int64_t(*static_cast<const float*>(step.data_ptr()));
}
void advance_step(const Tensor& step) {
  if (step.dtype() == kInt64) {
    *static_cast<int64_t*>(step.data_ptr()) += 1;
  } else {
    *static_cast<float*>(step.data_ptr()) += 1.0f;
  }
  step.bump_version();
}

// ---- GradScaler ------------------------------------------------------------------------------

Tensor new_flag(Device device) {
  HG_CHECK(device.is_cpu(), "new_flag: expected the CPU, got {}", device);
  return zeros({1}, kFloat32);
}

Tensor reciprocal_scale(const Tensor& scale) {
  return full({1}, double(float(1.0 / read_scalar(scale, "reciprocal_scale", "the scale"))),
              kFloat32);
}

// The dtypes in the order their groups are unscaled.
constexpr DType kFloatingDTypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};

void unscale_and_check_(std::span<const Tensor> tensors, const Tensor& inv_scale,
                        const Tensor& found_inf) {
  constexpr const char* kOp = "unscale_and_check_";
  if (tensors.empty()) return;
  kernel::common_device(tensors, kCPU, kOp, "tensors");
  const float factor = float(read_scalar(inv_scale, kOp, "inv_scale"));
  kernel::check_scalar(found_inf, kCPU, kOp, "found_inf");
  bool non_finite = false;
  for (DType dtype : kFloatingDTypes) non_finite |= unscale_group(tensors, dtype, factor);
  if (non_finite) {
    *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
    found_inf.bump_version();
  }
}

Tensor sum_flags(std::span<const Tensor> flags) {
  HG_CHECK(!flags.empty(), "sum_flags: expected at least one flag, got none");
  float sum = 0.0f;
  for (const Tensor& flag : flags) sum += float(read_scalar(flag, "sum_flags", "every flag"));
  return full({1}, double(sum), kFloat32);
}

// ---- fused optimizer steps -------------------------------------------------------------------

// A fused step's scalars, read after the checks: 1 / grad_scale (1 without one) and whether
// found_inf skips the step.
struct StepScalars {
  double inv_scale;
  bool scaled, skipped;
};
StepScalars read_step_scalars(const Tensor& grad_scale, const Tensor& found_inf) {
  const double inv_scale = 1.0 / scalar_value(grad_scale, 1.0);
  return {inv_scale, inv_scale != 1.0, scalar_value(found_inf, 0.0) != 0.0};
}

// Calls pass(TypeTag<T>, TypeTag<S>, draw) for one parameter: T its storage type, S its state's
// (state_dtype: the parameter's own, or float32 for a 16-bit parameter), draw null; with
// bf16_params T bfloat16, S float and draw the parameter's Philox words.
template <class Pass>
void dispatch_param(const char* op, const Tensor& param, DType state_dtype, bool bf16_params,
                    uint64_t seed, const std::vector<uint64_t>& first_blocks, size_t i,
                    Pass&& pass) {
  if (bf16_params) {
    const Generator::State draw{seed, first_blocks[i]};
    return pass(TypeTag<BFloat16>{}, TypeTag<float>{}, &draw);
  }
  const Generator::State* const no_draw = nullptr;
  visit_floating_dtype(op, param.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
      if (state_dtype == kFloat32) return pass(tag, TypeTag<float>{}, no_draw);
    }
    pass(tag, tag, no_draw);
  });
}

void fused_adam_(const kernel::AdamTensors& t, const kernel::AdamArgs& args,
                 const Tensor& grad_scale, const Tensor& found_inf) {
  kernel::check_adam_tensors(t, args, grad_scale, found_inf, kCPU, /*int64_steps=*/true);
  const StepScalars s = read_step_scalars(grad_scale, found_inf);
  if (s.skipped) return;
  for (size_t i = 0; i < t.params.size(); ++i) {
    const Tensor& param = t.params[i];
    const Tensor& exp_avg = t.exp_avgs[i];
    const Tensor& exp_avg_sq = t.exp_avg_sqs[i];
    const Tensor max_exp_avg_sq = args.amsgrad ? t.max_exp_avg_sqs[i] : Tensor();
    const double step = double(read_step(t.steps[i]) + 1);
    dispatch_param(
        "fused_adam_", param, exp_avg.dtype(), args.bf16_params, args.seed, t.first_blocks, i,
        [&](auto param_tag, auto state_tag, const Generator::State* draw) {
          using T = typename decltype(param_tag)::type;
          using S = typename decltype(state_tag)::type;
          const auto k =
              rules::adam_constants<compute_t<T>>(args, args.lr, s.scaled, s.inv_scale, step);
          T* const p = param.data_ptr<T>();
          const T* const g = t.grads[i].data_ptr<T>();
          S* const vmax = args.amsgrad ? max_exp_avg_sq.data_ptr<S>() : nullptr;
          if constexpr (std::is_same_v<T, float> && std::is_same_v<S, float>) {
            adam_pass_float(p, g, exp_avg.data_ptr<S>(), exp_avg_sq.data_ptr<S>(), vmax,
                            param.numel(), k);
          } else {
            adam_pass<T, S>(p, g, exp_avg.data_ptr<S>(), exp_avg_sq.data_ptr<S>(), vmax,
                            param.numel(), k, draw);
          }
        });
    advance_step(t.steps[i]);
    param.bump_version();
    exp_avg.bump_version();
    exp_avg_sq.bump_version();
    if (args.amsgrad) max_exp_avg_sq.bump_version();
  }
}

void fused_sgd_(const kernel::SGDTensors& t, const kernel::SGDArgs& args, const Tensor& grad_scale,
                const Tensor& found_inf) {
  kernel::check_sgd_tensors(t, args, grad_scale, found_inf, kCPU, /*int64_steps=*/true);
  const StepScalars s = read_step_scalars(grad_scale, found_inf);
  if (s.skipped) return;
  const bool with_buffer = args.momentum != 0;
  for (size_t i = 0; i < t.params.size(); ++i) {
    const Tensor& param = t.params[i];
    const Tensor buffer = with_buffer ? t.momentum_buffers[i] : Tensor();
    const bool first = with_buffer && read_step(t.steps[i]) == 0;
    const DType state_dtype = with_buffer ? buffer.dtype() : param.dtype();
    dispatch_param("fused_sgd_", param, state_dtype, args.bf16_params, args.seed, t.first_blocks, i,
                   [&](auto param_tag, auto state_tag, const Generator::State* draw) {
                     using T = typename decltype(param_tag)::type;
                     using S = typename decltype(state_tag)::type;
                     const auto k = rules::sgd_constants<compute_t<T>>(args, args.lr, s.scaled,
                                                                       s.inv_scale, first);
                     T* const p = param.data_ptr<T>();
                     const T* const g = t.grads[i].data_ptr<T>();
                     S* const b = with_buffer ? buffer.data_ptr<S>() : nullptr;
                     if constexpr (std::is_same_v<T, S>) {
                       if (draw == nullptr) return sgd_update<T>(p, g, b, param.numel(), k);
                     }
                     sgd_pass<T, S>(p, g, b, param.numel(), k, draw);
                   });
    param.bump_version();
    if (with_buffer) {
      buffer.bump_version();
      advance_step(t.steps[i]);
    }
  }
}

void fused_rmsprop_(const kernel::RMSpropTensors& t, const kernel::RMSpropArgs& args,
                    const Tensor& grad_scale, const Tensor& found_inf) {
  kernel::check_rmsprop_tensors(t, args, grad_scale, found_inf, kCPU, /*int64_steps=*/true);
  const StepScalars s = read_step_scalars(grad_scale, found_inf);
  if (s.skipped) return;
  for (size_t i = 0; i < t.params.size(); ++i) {
    const Tensor& param = t.params[i];
    const Tensor& square_avg = t.square_avgs[i];
    const Tensor grad_avg = args.centered ? t.grad_avgs[i] : Tensor();
    const Tensor buffer = args.momentum > 0 ? t.momentum_buffers[i] : Tensor();
    dispatch_param(
        "fused_rmsprop_", param, square_avg.dtype(), args.bf16_params, args.seed, t.first_blocks, i,
        [&](auto param_tag, auto state_tag, const Generator::State* draw) {
          using T = typename decltype(param_tag)::type;
          using S = typename decltype(state_tag)::type;
          const auto k =
              rules::rmsprop_constants<compute_t<T>>(args, args.lr, s.scaled, s.inv_scale);
          T* p = param.data_ptr<T>();
          const T* g = t.grads[i].data_ptr<T>();
          S* v = square_avg.data_ptr<S>();
          S* avg = grad_avg.defined() ? grad_avg.data_ptr<S>() : nullptr;
          S* buf = buffer.defined() ? buffer.data_ptr<S>() : nullptr;
          const int64_t n = param.numel();
#if defined(__x86_64__)
          if constexpr (kVectorPassTypes<T, S>) {
            if (use_vector_passes()) {
              return for_blocks_of_16(n, [&](int64_t first, int64_t last) {
                detail::rmsprop_blocks_avx512(p, g, v, avg, buf, n, first, last, k);
              });
            }
          }
#endif
          rmsprop_pass<T, S>(p, g, v, avg, buf, n, k, draw);
        });
    advance_step(t.steps[i]);
    param.bump_version();
    square_avg.bump_version();
    if (grad_avg.defined()) grad_avg.bump_version();
    if (buffer.defined()) buffer.bump_version();
  }
}

void fused_adagrad_(const kernel::AdagradTensors& t, const kernel::AdagradArgs& args,
                    const Tensor& grad_scale, const Tensor& found_inf) {
  kernel::check_adagrad_tensors(t, args, grad_scale, found_inf, kCPU, /*int64_steps=*/true);
  const StepScalars s = read_step_scalars(grad_scale, found_inf);
  if (s.skipped) return;
  for (size_t i = 0; i < t.params.size(); ++i) {
    const Tensor& param = t.params[i];
    const Tensor& sum = t.sums[i];
    const double step = double(read_step(t.steps[i]) + 1);
    dispatch_param(
        "fused_adagrad_", param, sum.dtype(), args.bf16_params, args.seed, t.first_blocks, i,
        [&](auto param_tag, auto state_tag, const Generator::State* draw) {
          using T = typename decltype(param_tag)::type;
          using S = typename decltype(state_tag)::type;
          const auto k =
              rules::adagrad_constants<compute_t<T>>(args, args.lr, s.scaled, s.inv_scale, step);
          T* p = param.data_ptr<T>();
          const T* g = t.grads[i].data_ptr<T>();
          S* acc = sum.data_ptr<S>();
          const int64_t n = param.numel();
#if defined(__x86_64__)
          if constexpr (kVectorPassTypes<T, S>) {
            if (use_vector_passes()) {
              return for_blocks_of_16(n, [&](int64_t first, int64_t last) {
                detail::adagrad_blocks_avx512(p, g, acc, n, first, last, k);
              });
            }
          }
#endif
          adagrad_pass<T, S>(p, g, acc, n, k, draw);
        });
    advance_step(t.steps[i]);
    param.bump_version();
    sum.bump_version();
  }
}

// The Adamax, Adadelta, RAdam and NAdam steps: two buffers per parameter, `constants(T tag,
// step, i)` the rule's constants for parameter i, of storage type T, taking step `step`, `rule`
// the rule.
template <class Tensors, class Args, class Constants, class Rule>
void two_buffer_step(const Tensors& t, const std::vector<Tensor>& first,
                     const std::vector<Tensor>& second, const Args& args, const char* op,
                     Constants&& constants, Rule&& rule) {
  for (size_t i = 0; i < t.params.size(); ++i) {
    const Tensor& param = t.params[i];
    const Tensor& grad = t.grads[i];
    const double step = double(read_step(t.steps[i]) + 1);
    dispatch_param(op, param, first[i].dtype(), args.bf16_params, args.seed, t.first_blocks, i,
                   [&](auto param_tag, auto state_tag, const Generator::State* draw) {
                     using T = typename decltype(param_tag)::type;
                     using S = typename decltype(state_tag)::type;
                     using C = compute_t<T>;
                     const auto k = constants(param_tag, step, i);
                     T* p = param.data_ptr<T>();
                     const T* g = grad.data_ptr<T>();
                     S* a = first[i].data_ptr<S>();
                     S* b = second[i].data_ptr<S>();
                     const int64_t n = param.numel();
#if defined(__x86_64__)
                     if constexpr (kVectorPassTypes<T, S>) {
                       if (use_vector_passes()) {
                         return for_blocks_of_16(n, [&](int64_t first_block, int64_t last_block) {
                           detail::two_buffer_blocks_avx512(p, g, a, b, n, first_block, last_block,
                                                            k);
                         });
                       }
                     }
#endif
                     two_buffer_pass<T, S>(p, g, a, b, n, draw, [k, &rule](C p, C g, C& a, C& b) {
                       return rule(p, g, a, b, k, RoundThrough<S>{});
                     });
                   });
    advance_step(t.steps[i]);
    param.bump_version();
    first[i].bump_version();
    second[i].bump_version();
  }
}

void fused_adamax_(const kernel::AdamaxTensors& t, const kernel::AdamaxArgs& args,
                   const Tensor& grad_scale, const Tensor& found_inf) {
  kernel::check_adamax_tensors(t, args, grad_scale, found_inf, kCPU, /*int64_steps=*/true);
  const StepScalars s = read_step_scalars(grad_scale, found_inf);
  if (s.skipped) return;
  two_buffer_step(
      t, t.exp_avgs, t.exp_infs, args, "fused_adamax_",
      [&](auto tag, double step, size_t /*i*/) {
        using C = compute_t<typename decltype(tag)::type>;
        return rules::adamax_constants<C>(args, args.lr, s.scaled, s.inv_scale, step);
      },
      [](auto p, auto g, auto& m, auto& u, const auto& k, auto round_state) {
        return rules::adamax_rule(p, g, m, u, k, round_state);
      });
}

void fused_adadelta_(const kernel::AdadeltaTensors& t, const kernel::AdadeltaArgs& args,
                     const Tensor& grad_scale, const Tensor& found_inf) {
  kernel::check_adadelta_tensors(t, args, grad_scale, found_inf, kCPU, /*int64_steps=*/true);
  const StepScalars s = read_step_scalars(grad_scale, found_inf);
  if (s.skipped) return;
  two_buffer_step(
      t, t.square_avgs, t.acc_deltas, args, "fused_adadelta_",
      [&](auto tag, double /*step*/, size_t /*i*/) {
        using C = compute_t<typename decltype(tag)::type>;
        return rules::adadelta_constants<C>(args, args.lr, s.scaled, s.inv_scale);
      },
      [](auto p, auto g, auto& square_avg, auto& acc_delta, const auto& k, auto round_state) {
        return rules::adadelta_rule(p, g, square_avg, acc_delta, k, round_state);
      });
}

void fused_radam_(const kernel::RAdamTensors& t, const kernel::RAdamArgs& args,
                  const Tensor& grad_scale, const Tensor& found_inf) {
  kernel::check_radam_tensors(t, args, grad_scale, found_inf, kCPU, /*int64_steps=*/true);
  const StepScalars s = read_step_scalars(grad_scale, found_inf);
  if (s.skipped) return;
  two_buffer_step(
      t, t.exp_avgs, t.exp_avg_sqs, args, "fused_radam_",
      [&](auto tag, double step, size_t /*i*/) {
        using C = compute_t<typename decltype(tag)::type>;
        return rules::radam_constants<C>(args, args.lr, s.scaled, s.inv_scale, step);
      },
      [](auto p, auto g, auto& m, auto& v, const auto& k, auto round_state) {
        return rules::radam_rule(p, g, m, v, k, round_state);
      });
}

void fused_nadam_(const kernel::NAdamTensors& t, const kernel::NAdamArgs& args,
                  const Tensor& grad_scale, const Tensor& found_inf) {
  kernel::check_nadam_tensors(t, args, grad_scale, found_inf, kCPU, /*int64_steps=*/true);
  const StepScalars s = read_step_scalars(grad_scale, found_inf);
  if (s.skipped) return;
  std::vector<float> products(t.params.size());  // each mu_product after this step
  two_buffer_step(
      t, t.exp_avgs, t.exp_avg_sqs, args, "fused_nadam_",
      [&](auto tag, double step, size_t i) {
        using C = compute_t<typename decltype(tag)::type>;
        const auto k = rules::nadam_constants<C>(args, args.lr, s.scaled, s.inv_scale, step,
                                                 t.mu_products[i].data_ptr<float>()[0]);
        products[i] = k.mu_product;
        return k;
      },
      [](auto p, auto g, auto& m, auto& v, const auto& k, auto round_state) {
        return rules::nadam_rule(p, g, m, v, k, round_state);
      });
  for (size_t i = 0; i < products.size(); ++i) {
    t.mu_products[i].data_ptr<float>()[0] = products[i];
    t.mu_products[i].bump_version();
  }
}

}  // namespace

const kernel::MultiTensorKernels multi_tensor_kernels = HG_MULTI_TENSOR_KERNELS;

namespace detail {
bool set_vector_passes(bool enabled) { return vector_passes_enabled.exchange(enabled); }
}  // namespace detail

}  // namespace hg::cpu
