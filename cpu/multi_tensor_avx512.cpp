// The AVX-512 passes of the CPU multi_tensor kernels (multi_tensor_avx512.h). This file alone
// is compiled with -mavx512f (and -ffp-contract=off: no multiply-add the scalar loops would not
// make), and runs only where the CPU has it.
//
// NOTE [Vectorized optimizer passes] Float32 parameters with float32 state (the master weights
// of a mixed-precision run) take 16-lane passes, for every update rule and the unscale: without
// -march=native the scalar loops compile to SSE (Adam: one sqrtss and two divss per element;
// Adamax's NaN-propagating max not vectorized at all) and the step of a 21M-parameter model was
// bound by them, not by memory; in the tiny MLP's training step (hg-bench-train --only tiny)
// SGD's update took about 0.3 of 5.1 us. On 51M parameters the passes take each optimizer's
// step to 41-47 GB/s, 2x to 4.4x the scalar loops (NOTES.md, hg-bench-ops --only bandwidth).
// The passes instantiate the update rules of kernel/update_rules.h on Lanes, whose operations
// are one instruction each, every one rounded as the scalar operation is (negation flips the
// sign bit as the scalar -x does; max_of is std::max's choice, max_propagating_nan and absolute
// the scalar ones' choices, NaN included), so the results are the scalar loops' bits
// (tests/optim/adam_test.cpp, sgd_test.cpp and vector_passes_test.cpp compare them), but for
// the sign and payload of a NaN where two NaNs meet in an add: which one the add returns
// follows the operand order the compiler picked, which the two loops need not share. Every function
// instantiated here takes Lanes, a type of this file's anonymous namespace, so none of its AVX-512
// code can stand in for an inline function of another file.
#include "halfgrad/cpu/multi_tensor_avx512.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace hg::cpu::detail {
namespace {

// 16 float lanes with the operations the update rules use.
struct Lanes {
  __m512 x;
  Lanes() = default;
  explicit Lanes(__m512 v) : x(v) {}
  explicit Lanes(float v) : x(_mm512_set1_ps(v)) {}
};
Lanes operator+(Lanes a, Lanes b) { return Lanes(_mm512_add_ps(a.x, b.x)); }
Lanes operator-(Lanes a, Lanes b) { return Lanes(_mm512_sub_ps(a.x, b.x)); }
Lanes operator/(Lanes a, Lanes b) { return Lanes(_mm512_div_ps(a.x, b.x)); }
Lanes operator-(Lanes a) {
  return Lanes(_mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(a.x), _mm512_set1_epi32(int(0x80000000u)))));
}
Lanes mul(Lanes a, Lanes b) { return Lanes(_mm512_mul_ps(a.x, b.x)); }
// The all-lanes masked forms: GCC 12 warns that the plain ones' _mm512_undefined_ps() source may
// be used uninitialized.
constexpr __mmask16 kAllLanes = 0xFFFF;
Lanes square_root(Lanes a) { return Lanes(_mm512_maskz_sqrt_ps(kAllLanes, a.x)); }
// max_ps returns its second operand when either is NaN or both are zeros: previous, as
// std::max(previous, v) does.
Lanes max_of(Lanes previous, Lanes v) {
  return Lanes(_mm512_maskz_max_ps(kAllLanes, v.x, previous.x));
}
// The update rules' max_propagating_nan: a where a is NaN or a > b, else b.
Lanes max_propagating_nan(Lanes a, Lanes b) {
  const __mmask16 take_a =
      _mm512_cmp_ps_mask(a.x, a.x, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(a.x, b.x, _CMP_GT_OQ);
  return Lanes(_mm512_mask_blend_ps(take_a, b.x, a.x));
}
// The update rules' absolute: -x below zero, +0 for either zero, x otherwise (NaN as it is).
Lanes absolute(Lanes a) {
  const __m512 zero = _mm512_setzero_ps();
  const __mmask16 negative = _mm512_cmp_ps_mask(a.x, zero, _CMP_LT_OQ);
  const __mmask16 is_zero = _mm512_cmp_ps_mask(a.x, zero, _CMP_EQ_OQ);
  return Lanes(_mm512_mask_mov_ps(_mm512_mask_mov_ps(a.x, negative, (-a).x), is_zero, zero));
}

__mmask16 lanes_of(int64_t n, int64_t i) {
  return n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
}
Lanes load(__mmask16 mask, const float* p) { return Lanes(_mm512_maskz_loadu_ps(mask, p)); }
void store(__mmask16 mask, float* p, Lanes v) { _mm512_mask_storeu_ps(p, mask, v.x); }

}  // namespace

void adam_blocks_avx512(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                        float* max_exp_avg_sq, int64_t n, int64_t first_block, int64_t last_block,
                        const kernel::rules::AdamConstants<float>& constants) {
  const auto k = constants;  // a local the stores cannot alias: the constants stay in registers
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i = b * 16;
    const __mmask16 mask = lanes_of(n, i);
    Lanes m = load(mask, exp_avg + i), v = load(mask, exp_avg_sq + i);
    Lanes vmax = k.amsgrad ? load(mask, max_exp_avg_sq + i) : Lanes(0.0f);
    const Lanes p =
        kernel::rules::adam_rule(load(mask, param + i), load(mask, grad + i), m, v,
                                 k.amsgrad ? &vmax : nullptr, k, kernel::rules::KeepState{});
    store(mask, exp_avg + i, m);
    store(mask, exp_avg_sq + i, v);
    if (k.amsgrad) store(mask, max_exp_avg_sq + i, vmax);
    store(mask, param + i, p);
  }
}

void sgd_blocks_avx512(float* param, const float* grad, float* buffer, int64_t n,
                       int64_t first_block, int64_t last_block,
                       const kernel::rules::SGDConstants<float>& constants) {
  const auto k = constants;  // a local the stores cannot alias: the constants stay in registers
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i = b * 16;
    const __mmask16 mask = lanes_of(n, i);
    Lanes buf = buffer != nullptr && !k.first ? load(mask, buffer + i) : Lanes(0.0f);
    const Lanes p =
        kernel::rules::sgd_rule(load(mask, param + i), load(mask, grad + i),
                                buffer != nullptr ? &buf : nullptr, k, kernel::rules::KeepState{});
    if (buffer != nullptr) store(mask, buffer + i, buf);
    store(mask, param + i, p);
  }
}

void rmsprop_blocks_avx512(float* param, const float* grad, float* square_avg, float* grad_avg,
                           float* momentum_buffer, int64_t n, int64_t first_block,
                           int64_t last_block,
                           const kernel::rules::RMSpropConstants<float>& constants) {
  const auto k = constants;  // a local the stores cannot alias: the constants stay in registers
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i = b * 16;
    const __mmask16 mask = lanes_of(n, i);
    Lanes v = load(mask, square_avg + i);
    Lanes avg = grad_avg != nullptr ? load(mask, grad_avg + i) : Lanes(0.0f);
    Lanes buf = momentum_buffer != nullptr ? load(mask, momentum_buffer + i) : Lanes(0.0f);
    const Lanes p = kernel::rules::rmsprop_rule(
        load(mask, param + i), load(mask, grad + i), v, grad_avg != nullptr ? &avg : nullptr,
        momentum_buffer != nullptr ? &buf : nullptr, k, kernel::rules::KeepState{});
    store(mask, square_avg + i, v);
    if (grad_avg != nullptr) store(mask, grad_avg + i, avg);
    if (momentum_buffer != nullptr) store(mask, momentum_buffer + i, buf);
    store(mask, param + i, p);
  }
}

void adagrad_blocks_avx512(float* param, const float* grad, float* sum, int64_t n,
                           int64_t first_block, int64_t last_block,
                           const kernel::rules::AdagradConstants<float>& constants) {
  const auto k = constants;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i = b * 16;
    const __mmask16 mask = lanes_of(n, i);
    Lanes s = load(mask, sum + i);
    const Lanes p = kernel::rules::adagrad_rule(load(mask, param + i), load(mask, grad + i), s, k,
                                                kernel::rules::KeepState{});
    store(mask, sum + i, s);
    store(mask, param + i, p);
  }
}

namespace {

// The two-buffer rules by their constants' type.
Lanes two_buffer_rule(Lanes p, Lanes g, Lanes& a, Lanes& b,
                      const kernel::rules::AdamaxConstants<float>& k) {
  return kernel::rules::adamax_rule(p, g, a, b, k, kernel::rules::KeepState{});
}
Lanes two_buffer_rule(Lanes p, Lanes g, Lanes& a, Lanes& b,
                      const kernel::rules::AdadeltaConstants<float>& k) {
  return kernel::rules::adadelta_rule(p, g, a, b, k, kernel::rules::KeepState{});
}
Lanes two_buffer_rule(Lanes p, Lanes g, Lanes& a, Lanes& b,
                      const kernel::rules::RAdamConstants<float>& k) {
  return kernel::rules::radam_rule(p, g, a, b, k, kernel::rules::KeepState{});
}
Lanes two_buffer_rule(Lanes p, Lanes g, Lanes& a, Lanes& b,
                      const kernel::rules::NAdamConstants<float>& k) {
  return kernel::rules::nadam_rule(p, g, a, b, k, kernel::rules::KeepState{});
}

template <class Constants>
void two_buffer_blocks(float* param, const float* grad, float* first, float* second, int64_t n,
                       int64_t first_block, int64_t last_block, const Constants& constants) {
  const auto k = constants;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i = b * 16;
    const __mmask16 mask = lanes_of(n, i);
    Lanes x = load(mask, first + i), y = load(mask, second + i);
    const Lanes p = two_buffer_rule(load(mask, param + i), load(mask, grad + i), x, y, k);
    store(mask, first + i, x);
    store(mask, second + i, y);
    store(mask, param + i, p);
  }
}

}  // namespace

void two_buffer_blocks_avx512(float* param, const float* grad, float* first, float* second,
                              int64_t n, int64_t first_block, int64_t last_block,
                              const kernel::rules::AdamaxConstants<float>& k) {
  two_buffer_blocks(param, grad, first, second, n, first_block, last_block, k);
}
void two_buffer_blocks_avx512(float* param, const float* grad, float* first, float* second,
                              int64_t n, int64_t first_block, int64_t last_block,
                              const kernel::rules::AdadeltaConstants<float>& k) {
  two_buffer_blocks(param, grad, first, second, n, first_block, last_block, k);
}
void two_buffer_blocks_avx512(float* param, const float* grad, float* first, float* second,
                              int64_t n, int64_t first_block, int64_t last_block,
                              const kernel::rules::RAdamConstants<float>& k) {
  two_buffer_blocks(param, grad, first, second, n, first_block, last_block, k);
}
void two_buffer_blocks_avx512(float* param, const float* grad, float* first, float* second,
                              int64_t n, int64_t first_block, int64_t last_block,
                              const kernel::rules::NAdamConstants<float>& k) {
  two_buffer_blocks(param, grad, first, second, n, first_block, last_block, k);
}

bool unscale_blocks_avx512(float* data, int64_t n, int64_t first_block, int64_t last_block,
                           float inv_scale) {
  const Lanes factor(inv_scale);
  const __m512 zero = _mm512_setzero_ps();
  __mmask16 non_finite = 0;
  for (int64_t b = first_block; b < last_block; ++b) {
    const int64_t i = b * 16;
    const __mmask16 mask = lanes_of(n, i);
    const Lanes v = load(mask, data + i);
    // x - x: 0 for a finite x, NaN for an infinite or NaN one.
    non_finite |= __mmask16(mask & ~_mm512_cmp_ps_mask(_mm512_sub_ps(v.x, v.x), zero, _CMP_EQ_OQ));
    store(mask, data + i, kernel::rules::unscale(v, factor));
  }
  return non_finite != 0;
}

}  // namespace hg::cpu::detail
#endif  // defined(__x86_64__)
