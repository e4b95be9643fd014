// The AVX-512 passes of the CPU multi_tensor kernels (multi_tensor_avx512.h). This file alone
// is compiled with -mavx512f (and -ffp-contract=off: no multiply-add the scalar loops would not
// make), and runs only where the CPU has it.
//
// NOTE [Vectorized optimizer passes] Float32 parameters with float32 state (the master weights
// of a mixed-precision run) take 16-lane passes: without -march=native the scalar loops compile
// to SSE (Adam: one sqrtss and two divss per element) and the step of a 21M-parameter model was
// bound by them, not by memory; in the tiny MLP's training step (hg-bench-train --only tiny)
// SGD's update took about 0.3 of 5.1 us. The passes instantiate the update rules of
// kernel/update_rules.h on Lanes, whose operations are one instruction each, every one rounded
// as the scalar operation is (negation flips the sign bit as the scalar -x does; max_of is
// std::max's choice, NaN included), so the results are the scalar loops' bits
// (tests/optim/adam_test.cpp and sgd_test.cpp compare them). Every function instantiated here
// takes Lanes, a type of this file's anonymous namespace, so none of its AVX-512 code can stand
// in for an inline function of another file.
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
