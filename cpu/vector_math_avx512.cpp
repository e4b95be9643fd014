// vector_math.h's functions on 16-lane AVX-512 vectors. This file alone is compiled with
// -mavx512f, and runs only where the CPU has it (NOTE [Vector math]).
#include <immintrin.h>
#include <sleef.h>

#include <cstdint>

#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/kernel/constants.h"

namespace hg::cpu::detail {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16;
  static __mmask16 lanes(int n) { return __mmask16((1u << n) - 1); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V load_partial(const float* p, int n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
  static void store_partial(float* p, V v, int n) { _mm512_mask_storeu_ps(p, lanes(n), v); }
  static V set1(float v) { return _mm512_set1_ps(v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V neg(V x) {  // the sign bit flipped, as the scalar -x
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(int(0x80000000u))));
  }
  static V select_gt(V x, float bound, V if_greater, V otherwise) {  // an ordered compare
    return _mm512_mask_mov_ps(otherwise, _mm512_cmp_ps_mask(x, set1(bound), _CMP_GT_OQ),
                              if_greater);
  }
  static V exp(V x) { return Sleef_expf16_u10avx512f(x); }
  static V expm1(V x) { return Sleef_expm1f16_u10avx512f(x); }
  static V log(V x) { return Sleef_logf16_u10avx512f(x); }
  static V log1p(V x) { return Sleef_log1pf16_u10avx512f(x); }
  static V log2(V x) { return Sleef_log2f16_u10avx512f(x); }
  static V log10(V x) { return Sleef_log10f16_u10avx512f(x); }
  static V sin(V x) { return Sleef_sinf16_u10avx512f(x); }
  static V cos(V x) { return Sleef_cosf16_u10avx512f(x); }
  static V tanh(V x) { return Sleef_tanhf16_u10avx512f(x); }
  static V erf(V x) { return Sleef_erff16_u10avx512f(x); }
  static V erfc(V x) { return Sleef_erfcf16_u15avx512f(x); }
  static V pow(V x, V y) { return Sleef_powf16_u10avx512f(x, y); }
};

}  // namespace
}  // namespace hg::cpu::detail

#include "halfgrad/cpu/vector_math_formulas.inc"

namespace hg::cpu::detail {

void vector_map_avx512(VectorFn fn, const float* x, float* y, int64_t n) {
  map_fn<Avx512>(fn, x, y, n);
}

void vector_pow_avx512(const float* a, const float* b, float* y, int64_t n) {
  map_pow<Avx512>(a, b, y, n);
}

}  // namespace hg::cpu::detail
