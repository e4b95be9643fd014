// vector_math.h's functions on 8-lane AVX2 vectors. This file alone is compiled with -mavx2
// -mfma, and runs only where the CPU has both (NOTE [Vector math]).
#include <immintrin.h>
#include <sleef.h>

#include <cstdint>

#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/kernel/constants.h"

namespace hg::cpu::detail {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V load_partial(const float* p, int n) {  // zeros past n
    float padded[kLanes] = {};
    for (int i = 0; i < n; ++i) padded[i] = p[i];
    return _mm256_loadu_ps(padded);
  }
  static void store_partial(float* p, V v, int n) {
    float padded[kLanes];
    _mm256_storeu_ps(padded, v);
    for (int i = 0; i < n; ++i) p[i] = padded[i];
  }
  static V set1(float v) { return _mm256_set1_ps(v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V neg(V x) { return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f)); }  // the sign bit flipped
  static V select_gt(V x, float bound, V if_greater, V otherwise) {      // an ordered compare
    return _mm256_blendv_ps(otherwise, if_greater, _mm256_cmp_ps(x, set1(bound), _CMP_GT_OQ));
  }
  static V exp(V x) { return Sleef_expf8_u10avx2(x); }
  static V expm1(V x) { return Sleef_expm1f8_u10avx2(x); }
  static V log(V x) { return Sleef_logf8_u10avx2(x); }
  static V log1p(V x) { return Sleef_log1pf8_u10avx2(x); }
  static V log2(V x) { return Sleef_log2f8_u10avx2(x); }
  static V log10(V x) { return Sleef_log10f8_u10avx2(x); }
  static V sin(V x) { return Sleef_sinf8_u10avx2(x); }
  static V cos(V x) { return Sleef_cosf8_u10avx2(x); }
  static V tanh(V x) { return Sleef_tanhf8_u10avx2(x); }
  static V erf(V x) { return Sleef_erff8_u10avx2(x); }
  static V erfc(V x) { return Sleef_erfcf8_u15avx2(x); }
  static V pow(V x, V y) { return Sleef_powf8_u10avx2(x, y); }
};

}  // namespace
}  // namespace hg::cpu::detail

#include "halfgrad/cpu/vector_math_formulas.inc"

namespace hg::cpu::detail {

void vector_map_avx2(VectorFn fn, const float* x, float* y, int64_t n) {
  map_fn<Avx2>(fn, x, y, n);
}

void vector_pow_avx2(const float* a, const float* b, float* y, int64_t n) {
  map_pow<Avx2>(a, b, y, n);
}

}  // namespace hg::cpu::detail
