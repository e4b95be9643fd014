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

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
#include "halfgrad/cpu/multi_tensor_norms.h"

// NOTE [Vector passes without contraction] The AVX-512 passes below give the scalar loops'
// bits only if each operation is rounded on its own, as the scalar (SSE) code does: no fused
// multiply-add. GCC takes that for a region of functions (HG_NO_FP_CONTRACT_BEGIN and _END
// around them), clang inside a function body (HG_NO_FP_CONTRACT_HERE at its top).
#if defined(__clang__)
#define HG_NO_FP_CONTRACT_BEGIN
#define HG_NO_FP_CONTRACT_END
#define HG_NO_FP_CONTRACT_HERE _Pragma("clang fp contract(off)")
#else
#define HG_NO_FP_CONTRACT_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=off\")")
#define HG_NO_FP_CONTRACT_END _Pragma("GCC pop_options")
#define HG_NO_FP_CONTRACT_HERE
#endif

namespace hg::cpu {

namespace {

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
// (bfloat16) is stored with stochastic rounding (NOTE [bf16_params] in optim/fused.h).
template <class T, class S>
void adam_pass(T* param, const T* grad, S* exp_avg, S* exp_avg_sq, S* max_exp_avg_sq, int64_t n,
               const AdamStep& s, const Generator::State* draw = nullptr) {
  using C = compute_t<T>;
  const AdamConstants<C> k(s);
  // The new value of element i (its state stored on the way).
  const auto updated = [&](int64_t i) {
    C p = load<C>(param, i);
    C g = load<C>(grad, i);
    if (k.scaled) g *= k.inv_scale;
    if (s.maximize) g = -g;
    if (k.weight_decay != 0) {
      if (s.decoupled) {
        p *= k.decay_factor;
      } else {
        g += k.weight_decay * p;
      }
    }
    C m = load<C>(exp_avg, i);
    m += k.one_minus_beta1 * (g - m);
    C v = k.beta2 * load<C>(exp_avg_sq, i) + k.one_minus_beta2 * g * g;
    store(exp_avg, i, m);
    store(exp_avg_sq, i, v);
    m = load<C>(exp_avg, i);  // the stored (rounded) state, as torch uses
    v = load<C>(exp_avg_sq, i);
    if (s.amsgrad) {
      const C vmax = std::max(load<C>(max_exp_avg_sq, i), v);
      store(max_exp_avg_sq, i, vmax);
      v = load<C>(max_exp_avg_sq, i);
    }
    const C denom = std::sqrt(v) / k.bias_correction2_sqrt + k.eps;
    return p - k.step_size * (m / denom);
  };
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (draw != nullptr) return store_stochastic(param, n, *draw, updated);
  }
  parallel_for(n, n, [&](int64_t i) { store(param, i, updated(i)); });
}

// NOTE [Vectorized Adam pass] float32 parameters with float32 state (the fp32 master weights
// of a mixed-precision run) take a 16-lane AVX-512 pass on CPUs that have it: without
// -march=native the loop above compiles to scalar SSE (one sqrtss and two divss per element)
// and the step of a 21M-parameter model was bound by them, not by memory. The vector pass does
// the same operations in the same order, each rounded (no fused multiply-add: it is compiled
// with fp-contract off), so its results are bit-identical to the scalar pass
// (tests/optim/adam_test.cpp checks that); masked loads and stores cover the tail.

#if defined(__x86_64__)
HG_NO_FP_CONTRACT_BEGIN
// Blocks [first_block, last_block) of 16 elements of the n (for_blocks_of_16 splits
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
  for_blocks_of_16(n, [&](int64_t first, int64_t last) {
    adam_blocks_avx512(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, first, last, s, k);
  });
}
#endif

// The float32 pass: vectorized where the CPU allows (NOTE [Vectorized Adam pass]).
void adam_pass_float(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                     float* max_exp_avg_sq, int64_t n, const AdamStep& s) {
#if defined(__x86_64__)
  if (cpu_has_avx512f() && vector_passes_enabled.load(std::memory_order_relaxed)) {
    return adam_pass_float_avx512(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, s);
  }
#endif
  adam_pass<float, float>(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n, s);
}

struct SGDStep {
  double lr, momentum, dampening, weight_decay, inv_scale;
  bool nesterov, maximize, first;
};
// T: parameter/gradient storage type; B: the buffer's (T, or float32 with bf16_params). With
// `draw`, the parameter (bfloat16) is stored with stochastic rounding (NOTE [bf16_params] in
// optim/fused.h).
template <class T, class B = T>
void sgd_pass(T* param, const T* grad, B* buffer, int64_t n, const SGDStep& s,
              const Generator::State* draw = nullptr) {
  using C = compute_t<T>;
  const C lr = C(s.lr), momentum = C(s.momentum), damp = C(1 - s.dampening);
  const C weight_decay = C(s.weight_decay), inv_scale = C(s.inv_scale);
  const bool scaled = s.inv_scale != 1.0;
  // The new value of element i (its buffer stored on the way).
  const auto updated = [&](int64_t i) {
    const C p = load<C>(param, i);
    C g = load<C>(grad, i);
    if (scaled) g *= inv_scale;
    if (s.maximize) g = -g;
    if (weight_decay != 0) g += weight_decay * p;
    if (buffer != nullptr) {
      C b = s.first ? g : momentum * load<C>(buffer, i) + damp * g;
      store(buffer, i, b);
      b = load<C>(buffer, i);  // torch uses the stored (rounded) buffer
      g = s.nesterov ? g + momentum * b : b;
    }
    return p - lr * g;
  };
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (draw != nullptr) return store_stochastic(param, n, *draw, updated);
  }
  if (buffer == nullptr && !s.maximize && weight_decay == 0) {
    // Plain SGD, the general loop's arithmetic without its per-element branches (so it
    // vectorizes): p - lr * g, g unscaled first when scaled.
    if (scaled) {
      parallel_for(n, n, [&](int64_t i) {
        const C g = load<C>(grad, i) * inv_scale;
        store(param, i, load<C>(param, i) - lr * g);
      });
    } else {
      parallel_for(n, n,
                   [&](int64_t i) { store(param, i, load<C>(param, i) - lr * load<C>(grad, i)); });
    }
    return;
  }
  parallel_for(n, n, [&](int64_t i) { store(param, i, updated(i)); });
}

// NOTE [Vectorized SGD pass] As for Adam (NOTE [Vectorized Adam pass]): float32 parameters
// take a 16-lane AVX-512 pass on CPUs that have it. The baseline build's loop above is SSE (4
// lanes), and in the tiny MLP's training step (hg-bench-train --only tiny) the update took about
// 0.3 of 5.1 us. The pass does the same operations in the same order, each rounded (fp-contract
// off, so no fused multiply-add), and negates by flipping the sign bit as the scalar -g does,
// so its results are bit-identical to the scalar pass (tests/optim/sgd_test.cpp checks that).

#if defined(__x86_64__)
HG_NO_FP_CONTRACT_BEGIN
// Blocks [first_block, last_block) of 16 elements of the n (for_blocks_of_16 splits
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
  for_blocks_of_16(n, [&](int64_t first, int64_t last) {
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
    if (cpu_has_avx512f() && vector_passes_enabled.load(std::memory_order_relaxed)) {
      return sgd_pass_float_avx512(param, grad, buffer, n, s);
    }
  }
#endif
  sgd_pass<T>(param, grad, buffer, n, s);
}

struct RMSpropStep {
  double lr, alpha, eps, weight_decay, momentum, inv_scale;
  bool centered, maximize;
};
// T: parameter and gradient storage type; S: buffer storage type. grad_avg is null unless
// centered, momentum_buffer null unless momentum > 0. torch's order of operations: addcmul's
// value * a * b, addcdiv's value * a / b. With `draw`, the parameter (bfloat16) is stored with
// stochastic rounding (NOTE [bf16_params] in optim/fused.h).
template <class T, class S>
void rmsprop_pass(T* param, const T* grad, S* square_avg, S* grad_avg, S* momentum_buffer,
                  int64_t n, const RMSpropStep& s, const Generator::State* draw = nullptr) {
  using C = compute_t<T>;
  const C lr = C(s.lr), alpha = C(s.alpha), one_minus_alpha = C(1 - s.alpha), eps = C(s.eps);
  const C weight_decay = C(s.weight_decay), momentum = C(s.momentum), inv_scale = C(s.inv_scale);
  const bool scaled = s.inv_scale != 1.0, decay = s.weight_decay != 0;
  // The new value of element i (its state stored on the way).
  const auto updated = [&](int64_t i) {
    const C p = load<C>(param, i);
    C g = load<C>(grad, i);
    if (scaled) g *= inv_scale;
    if (s.maximize) g = -g;
    if (decay) g += weight_decay * p;
    store(square_avg, i, load<C>(square_avg, i) * alpha + one_minus_alpha * g * g);
    const C v = load<C>(square_avg, i);  // the stored (rounded) state, as torch uses
    C avg;
    if (grad_avg != nullptr) {
      store(grad_avg, i, load<C>(grad_avg, i) * alpha + one_minus_alpha * g);
      const C ga = load<C>(grad_avg, i);
      avg = std::sqrt(v - ga * ga) + eps;
    } else {
      avg = std::sqrt(v) + eps;
    }
    if (momentum_buffer != nullptr) {
      store(momentum_buffer, i, load<C>(momentum_buffer, i) * momentum + g / avg);
      return C(p - lr * load<C>(momentum_buffer, i));
    }
    return C(p - lr * g / avg);
  };
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (draw != nullptr) return store_stochastic(param, n, *draw, updated);
  }
  parallel_for(n, n, [&](int64_t i) { store(param, i, updated(i)); });
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
  using C = compute_t<T>;
  const C clr = C(s.lr / (1 + double(s.step - 1) * s.lr_decay));
  const C weight_decay = C(s.weight_decay), eps = C(s.eps), inv_scale = C(s.inv_scale);
  const bool scaled = s.inv_scale != 1.0, decay = s.weight_decay != 0;
  // The new value of element i ("sum" stored on the way).
  const auto updated = [&](int64_t i) {
    const C p = load<C>(param, i);
    C g = load<C>(grad, i);
    if (scaled) g *= inv_scale;
    if (s.maximize) g = -g;
    if (decay) g += weight_decay * p;
    store(sum, i, load<C>(sum, i) + g * g);
    const C std_dev = std::sqrt(load<C>(sum, i)) + eps;  // the stored (rounded) sum
    return C(p - clr * g / std_dev);
  };
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (draw != nullptr) return store_stochastic(param, n, *draw, updated);
  }
  parallel_for(n, n, [&](int64_t i) { store(param, i, updated(i)); });
}

// The unscale (NOTE [Unscale in one pass] in amp/grad_scaler.cpp): each tensor read and written
// once, the multiply in float32 (float64 for float64 tensors), a value read that is not finite
// recorded. float32 gradients, the bulk of a model's, go through an AVX-512 pass where the CPU
// has it, split over the OpenMP threads as the optimizers' passes are (for_blocks_of_16): the
// same multiply per element, so the same bits; x - x, 0 for a finite x and NaN for an infinite
// or NaN one, flags the values read.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) bool unscale_floats_avx512(float* data, int64_t n,
                                                              int64_t first_block,
                                                              int64_t last_block, float inv_scale) {
  const __m512 factor = _mm512_set1_ps(inv_scale), zero = _mm512_setzero_ps();
  __mmask16 non_finite = 0;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i = b * 16;
    const __mmask16 lanes = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(lanes, data + i);
    non_finite |= __mmask16(lanes & ~_mm512_cmp_ps_mask(_mm512_sub_ps(v, v), zero, _CMP_EQ_OQ));
    _mm512_mask_storeu_ps(data + i, lanes, _mm512_mul_ps(v, factor));
  }
  return non_finite != 0;
}

bool unscale_floats_vector(float* data, int64_t n, float inv_scale) {
  std::atomic<bool> non_finite{false};
  for_blocks_of_16(n, [&](int64_t first, int64_t last) {
    if (unscale_floats_avx512(data, n, first, last, inv_scale)) {
      non_finite.store(true, std::memory_order_relaxed);
    }
  });
  return non_finite.load();
}
#endif

template <class T>
bool unscale_contiguous(T* data, int64_t n, float inv_scale) {
  bool non_finite = false;
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (cpu_has_avx512f() && vector_passes_enabled.load(std::memory_order_relaxed)) {
      return unscale_floats_vector(data, n, inv_scale);
    }
  }
#endif
  if constexpr (std::is_same_v<T, double>) {
    const double factor = inv_scale;
    for (int64_t i = 0; i < n; ++i) {
      non_finite |= !std::isfinite(data[i]);
      data[i] *= factor;
    }
  } else if constexpr (std::is_same_v<T, float>) {
    for (int64_t i = 0; i < n; ++i) {
      non_finite |= !std::isfinite(data[i]);
      data[i] *= inv_scale;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float value = static_cast<float>(data[i]);
      non_finite |= !std::isfinite(value);
      data[i] = T(value * inv_scale);
    }
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

// ---- checks ----------------------------------------------------------------------------------

std::string describe(const Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  return fmt::format("{} element(s) of {} on {}", t.numel(), t.dtype(), t.device());
}

// Throws unless every tensor is a defined floating CPU tensor; `what` names them in messages.
void check_floating_cpu(std::span<const Tensor> tensors, const char* op, const char* what) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    HG_CHECK(t.defined() && t.device().is_cpu() && t.is_floating_point(),
             "{}: expected {} to be floating tensors on the CPU, got {} (index {})", op, what,
             describe(t), i);
  }
}

// Throws unless t is a one-element float32 CPU tensor.
void check_scalar(const Tensor& t, const char* op, const char* what) {
  HG_CHECK(t.defined() && t.device().is_cpu() && t.numel() == 1 && t.dtype() == kFloat32,
           "{}: expected {} to be a one-element float32 tensor on the CPU, got {}", op, what,
           describe(t));
}
// The value of an optional scalar (check_scalar's kind), `absent` when undefined.
double read_scalar(const Tensor& t, const char* op, const char* what, double absent) {
  if (!t.defined()) return absent;
  check_scalar(t, op, what);
  return double(*static_cast<const float*>(t.data_ptr()));
}

// A step count (kernel/multi_tensor.h): a one-element float32 or int64 CPU tensor.
void check_step(const Tensor& step, const char* op, size_t i) {
  HG_CHECK(step.defined() && step.device().is_cpu() && step.numel() == 1 &&
               (step.dtype() == kFloat32 || step.dtype() == kInt64),
           "{}: expected the step count of parameter {} to be a one-element float32 or int64 "
           "tensor on the CPU, got {}",
           op, i, describe(step));
}
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

// A parameter and its gradient: contiguous, same dtype and shape, on the CPU.
void check_param(const Tensor& param, const Tensor& grad, const char* op, size_t i) {
  HG_CHECK(param.defined() && param.device().is_cpu() && param.is_floating_point() &&
               param.is_contiguous(),
           "{}: expected contiguous floating parameters on the CPU, got {} (parameter {})", op,
           describe(param), i);
  HG_CHECK(grad.defined() && grad.dtype() == param.dtype() && grad.sizes() == param.sizes() &&
               grad.device().is_cpu() && grad.is_contiguous(),
           "{}: expected a contiguous CPU gradient of the parameter's dtype {} and shape {}, got "
           "{} (parameter {})",
           op, param.dtype(), param.sizes(),
           grad.defined() ? fmt::format("{} {}", grad.dtype(), grad.sizes()) : "none", i);
}

void check_buffer(const Tensor& buffer, const Tensor& param, DType dtype, const char* op,
                  const char* name, size_t i) {
  HG_CHECK(buffer.defined() && buffer.device().is_cpu() && buffer.dtype() == dtype &&
               buffer.sizes() == param.sizes() && buffer.is_contiguous(),
           "{}: expected {} of parameter {} to be a contiguous {} tensor of shape {} on the CPU, "
           "got {}",
           op, name, i, dtype, param.sizes(), describe(buffer));
}

void check_first_blocks(bool bf16_params, size_t blocks, size_t n, const char* op) {
  HG_CHECK(!bf16_params || blocks == n,
           "{}: bf16_params expects a first Philox block per parameter ({}), got {}", op, n,
           blocks);
}

// bf16_params' parameter and state dtypes, or the parameter's dtype with `state` (its own, or
// float32 where `float32_state` allows it for a 16-bit parameter).
void check_bf16_param(bool bf16_params, const Tensor& param, const char* op, size_t i) {
  HG_CHECK(!bf16_params || param.dtype() == kBFloat16,
           "{}: bf16_params expects bfloat16 parameters, got {} (parameter {})", op, param.dtype(),
           i);
}

// ---- GradScaler ------------------------------------------------------------------------------

Tensor new_flag(Device device) {
  HG_CHECK(device.is_cpu(), "new_flag: expected the CPU, got {}", device);
  return zeros({1}, kFloat32);
}

Tensor reciprocal_scale(const Tensor& scale) {
  check_scalar(scale, "reciprocal_scale", "the scale");
  return full({1}, double(float(1.0 / read_scalar(scale, "reciprocal_scale", "the scale", 1.0))),
              kFloat32);
}

// The dtypes in the order their groups are unscaled.
constexpr DType kFloatingDTypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};

void unscale_and_check_(std::span<const Tensor> tensors, const Tensor& inv_scale,
                        const Tensor& found_inf) {
  constexpr const char* kOp = "unscale_and_check_";
  if (tensors.empty()) return;
  check_floating_cpu(tensors, kOp, "tensors");
  const float factor = float(read_scalar(inv_scale, kOp, "inv_scale", 1.0));
  check_scalar(found_inf, kOp, "found_inf");
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
  for (const Tensor& flag : flags) sum += float(read_scalar(flag, "sum_flags", "every flag", 0.0));
  return full({1}, double(sum), kFloat32);
}

// ---- fused optimizer steps -------------------------------------------------------------------

void fused_adam_(const kernel::AdamTensors& t, const kernel::AdamArgs& args,
                 const Tensor& grad_scale, const Tensor& found_inf) {
  constexpr const char* kOp = "fused_adam_";
  const size_t n = t.params.size();
  HG_CHECK(t.grads.size() == n && t.exp_avgs.size() == n && t.exp_avg_sqs.size() == n &&
               t.steps.size() == n && t.max_exp_avg_sqs.size() == (args.amsgrad ? n : 0),
           "{}: expected one gradient, exp_avg, exp_avg_sq{} and step per parameter ({}), got "
           "{}, {}, {}, {} and {}",
           kOp, args.amsgrad ? ", max_exp_avg_sq" : "", n, t.grads.size(), t.exp_avgs.size(),
           t.exp_avg_sqs.size(), t.max_exp_avg_sqs.size(), t.steps.size());
  check_first_blocks(args.bf16_params, t.first_blocks.size(), n, kOp);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    check_param(param, t.grads[i], kOp, i);
    const DType state_dtype = t.exp_avgs[i].defined() ? t.exp_avgs[i].dtype() : param.dtype();
    HG_CHECK(!args.bf16_params || (param.dtype() == kBFloat16 && state_dtype == kFloat32),
             "{}: bf16_params expects bfloat16 parameters with float32 state, got {} with {} "
             "(parameter {})",
             kOp, param.dtype(), state_dtype, i);
    HG_CHECK(state_dtype == param.dtype() ||
                 (state_dtype == kFloat32 && is_reduced_precision(param.dtype())),
             "{}: expected the state of a {} parameter in {}{}, got {} (parameter {})", kOp,
             param.dtype(), param.dtype(), is_reduced_precision(param.dtype()) ? " or float32" : "",
             state_dtype, i);
    check_buffer(t.exp_avgs[i], param, state_dtype, kOp, "exp_avg", i);
    check_buffer(t.exp_avg_sqs[i], param, state_dtype, kOp, "exp_avg_sq", i);
    if (args.amsgrad) {
      check_buffer(t.max_exp_avg_sqs[i], param, state_dtype, kOp, "max_exp_avg_sq", i);
    }
    check_step(t.steps[i], kOp, i);
  }
  const double scale = read_scalar(grad_scale, kOp, "grad_scale", 1.0);
  if (read_scalar(found_inf, kOp, "found_inf", 0.0) != 0.0) return;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    const Tensor& grad = t.grads[i];
    const Tensor& exp_avg = t.exp_avgs[i];
    const Tensor& exp_avg_sq = t.exp_avg_sqs[i];
    const Tensor max_exp_avg_sq = args.amsgrad ? t.max_exp_avg_sqs[i] : Tensor();
    const AdamStep s{args.lr,
                     args.beta1,
                     args.beta2,
                     args.eps,
                     args.weight_decay,
                     1.0 / scale,
                     read_step(t.steps[i]) + 1,
                     args.decoupled_weight_decay,
                     args.amsgrad,
                     args.maximize};
    if (args.bf16_params) {
      const Generator::State draw{args.seed, t.first_blocks[i]};
      adam_pass<BFloat16, float>(param.data_ptr<BFloat16>(), grad.data_ptr<BFloat16>(),
                                 exp_avg.data_ptr<float>(), exp_avg_sq.data_ptr<float>(),
                                 s.amsgrad ? max_exp_avg_sq.data_ptr<float>() : nullptr,
                                 param.numel(), s, &draw);
    } else {
      visit_floating_dtype(kOp, param.dtype(), [&](auto tag) {
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
    advance_step(t.steps[i]);
    param.bump_version();
    exp_avg.bump_version();
    exp_avg_sq.bump_version();
    if (s.amsgrad) max_exp_avg_sq.bump_version();
  }
}

void fused_sgd_(const kernel::SGDTensors& t, const kernel::SGDArgs& args, const Tensor& grad_scale,
                const Tensor& found_inf) {
  constexpr const char* kOp = "fused_sgd_";
  const size_t n = t.params.size();
  const bool with_buffer = args.momentum != 0;
  const size_t buffers = with_buffer ? n : 0;
  HG_CHECK(t.grads.size() == n && t.momentum_buffers.size() == buffers && t.steps.size() == buffers,
           "{}: expected one gradient per parameter ({}) and {} momentum buffers and step counts, "
           "got {}, {} and {}",
           kOp, n, buffers, t.grads.size(), t.momentum_buffers.size(), t.steps.size());
  check_first_blocks(args.bf16_params, t.first_blocks.size(), n, kOp);
  for (size_t i = 0; i < n; ++i) {
    check_param(t.params[i], t.grads[i], kOp, i);
    check_bf16_param(args.bf16_params, t.params[i], kOp, i);
    if (with_buffer) {
      check_buffer(t.momentum_buffers[i], t.params[i],
                   args.bf16_params ? kFloat32 : t.params[i].dtype(), kOp, "momentum_buffer", i);
      check_step(t.steps[i], kOp, i);
    }
  }
  const double scale = read_scalar(grad_scale, kOp, "grad_scale", 1.0);
  if (read_scalar(found_inf, kOp, "found_inf", 0.0) != 0.0) return;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    const Tensor& grad = t.grads[i];
    const Tensor buffer = with_buffer ? t.momentum_buffers[i] : Tensor();
    const SGDStep s{
        args.lr,     args.momentum, args.dampening, args.weight_decay,
        1.0 / scale, args.nesterov, args.maximize,  with_buffer && read_step(t.steps[i]) == 0};
    if (args.bf16_params) {
      const Generator::State draw{args.seed, t.first_blocks[i]};
      sgd_pass<BFloat16, float>(param.data_ptr<BFloat16>(), grad.data_ptr<BFloat16>(),
                                with_buffer ? buffer.data_ptr<float>() : nullptr, param.numel(), s,
                                &draw);
    } else {
      visit_floating_dtype(kOp, param.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        sgd_update<T>(param.data_ptr<T>(), grad.data_ptr<T>(),
                      with_buffer ? buffer.data_ptr<T>() : nullptr, param.numel(), s);
      });
    }
    param.bump_version();
    if (with_buffer) {
      buffer.bump_version();
      advance_step(t.steps[i]);
    }
  }
}

void fused_rmsprop_(const kernel::RMSpropTensors& t, const kernel::RMSpropArgs& args,
                    const Tensor& grad_scale, const Tensor& found_inf) {
  constexpr const char* kOp = "fused_rmsprop_";
  const size_t n = t.params.size();
  const bool momentum = args.momentum > 0;
  HG_CHECK(t.grads.size() == n && t.square_avgs.size() == n && t.steps.size() == n &&
               t.grad_avgs.size() == (args.centered ? n : 0) &&
               t.momentum_buffers.size() == (momentum ? n : 0),
           "{}: expected one gradient, square_avg{}{} and step per parameter ({}), got {}, {}, "
           "{}, {} and {}",
           kOp, args.centered ? ", grad_avg" : "", momentum ? ", momentum_buffer" : "", n,
           t.grads.size(), t.square_avgs.size(), t.grad_avgs.size(), t.momentum_buffers.size(),
           t.steps.size());
  check_first_blocks(args.bf16_params, t.first_blocks.size(), n, kOp);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    check_param(param, t.grads[i], kOp, i);
    check_bf16_param(args.bf16_params, param, kOp, i);
    const DType state_dtype = args.bf16_params ? kFloat32 : param.dtype();
    check_buffer(t.square_avgs[i], param, state_dtype, kOp, "square_avg", i);
    if (args.centered) check_buffer(t.grad_avgs[i], param, state_dtype, kOp, "grad_avg", i);
    if (momentum) {
      check_buffer(t.momentum_buffers[i], param, state_dtype, kOp, "momentum_buffer", i);
    }
    check_step(t.steps[i], kOp, i);
  }
  const double scale = read_scalar(grad_scale, kOp, "grad_scale", 1.0);
  if (read_scalar(found_inf, kOp, "found_inf", 0.0) != 0.0) return;
  const RMSpropStep s{args.lr,       args.alpha,  args.eps,      args.weight_decay,
                      args.momentum, 1.0 / scale, args.centered, args.maximize};
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    const Tensor& grad = t.grads[i];
    const Tensor& square_avg = t.square_avgs[i];
    const Tensor grad_avg = args.centered ? t.grad_avgs[i] : Tensor();
    const Tensor momentum_buffer = momentum ? t.momentum_buffers[i] : Tensor();
    if (args.bf16_params) {
      const Generator::State draw{args.seed, t.first_blocks[i]};
      rmsprop_pass<BFloat16, float>(
          param.data_ptr<BFloat16>(), grad.data_ptr<BFloat16>(), square_avg.data_ptr<float>(),
          grad_avg.defined() ? grad_avg.data_ptr<float>() : nullptr,
          momentum_buffer.defined() ? momentum_buffer.data_ptr<float>() : nullptr, param.numel(), s,
          &draw);
    } else {
      visit_floating_dtype(kOp, param.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        rmsprop_pass<T, T>(param.data_ptr<T>(), grad.data_ptr<T>(), square_avg.data_ptr<T>(),
                           grad_avg.defined() ? grad_avg.data_ptr<T>() : nullptr,
                           momentum_buffer.defined() ? momentum_buffer.data_ptr<T>() : nullptr,
                           param.numel(), s);
      });
    }
    advance_step(t.steps[i]);
    param.bump_version();
    square_avg.bump_version();
    if (grad_avg.defined()) grad_avg.bump_version();
    if (momentum_buffer.defined()) momentum_buffer.bump_version();
  }
}

void fused_adagrad_(const kernel::AdagradTensors& t, const kernel::AdagradArgs& args,
                    const Tensor& grad_scale, const Tensor& found_inf) {
  constexpr const char* kOp = "fused_adagrad_";
  const size_t n = t.params.size();
  HG_CHECK(t.grads.size() == n && t.sums.size() == n && t.steps.size() == n,
           "{}: expected one gradient, sum and step per parameter ({}), got {}, {} and {}", kOp, n,
           t.grads.size(), t.sums.size(), t.steps.size());
  check_first_blocks(args.bf16_params, t.first_blocks.size(), n, kOp);
  for (size_t i = 0; i < n; ++i) {
    check_param(t.params[i], t.grads[i], kOp, i);
    check_bf16_param(args.bf16_params, t.params[i], kOp, i);
    check_buffer(t.sums[i], t.params[i], args.bf16_params ? kFloat32 : t.params[i].dtype(), kOp,
                 "sum", i);
    check_step(t.steps[i], kOp, i);
  }
  const double scale = read_scalar(grad_scale, kOp, "grad_scale", 1.0);
  if (read_scalar(found_inf, kOp, "found_inf", 0.0) != 0.0) return;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    const Tensor& grad = t.grads[i];
    const Tensor& sum = t.sums[i];
    const AdagradStep s{args.lr,      args.lr_decay, args.weight_decay,
                        args.eps,     1.0 / scale,   read_step(t.steps[i]) + 1,
                        args.maximize};
    if (args.bf16_params) {
      const Generator::State draw{args.seed, t.first_blocks[i]};
      adagrad_pass<BFloat16, float>(param.data_ptr<BFloat16>(), grad.data_ptr<BFloat16>(),
                                    sum.data_ptr<float>(), param.numel(), s, &draw);
    } else {
      visit_floating_dtype(kOp, param.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        adagrad_pass<T, T>(param.data_ptr<T>(), grad.data_ptr<T>(), sum.data_ptr<T>(),
                           param.numel(), s);
      });
    }
    advance_step(t.steps[i]);
    param.bump_version();
    sum.bump_version();
  }
}

}  // namespace

const kernel::MultiTensorKernels multi_tensor_kernels = HG_MULTI_TENSOR_KERNELS;

namespace detail {
bool set_vector_passes(bool enabled) { return vector_passes_enabled.exchange(enabled); }
}  // namespace detail

}  // namespace hg::cpu
