// Whole-buffer float32 <-> float16/bfloat16 conversions (convert.h): the scalar loops and the
// F16C/AVX2 and AVX-512 ones, chosen once by what the CPU has.
#include "halfgrad/core/convert.h"

#include <array>
#include <cstring>

#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/x86_intrinsics.h"

// NOTE [bf16 vector rounding]
//
// AVX512-BF16 has an instruction for float32 -> bfloat16 (vcvtneps2bf16), but halfgrad does
// not use it: it treats subnormal float inputs as zero, whatever MXCSR says, while halfgrad
// keeps subnormals. bfloat16 has float32's exponent range, so float32 subnormals round to
// bfloat16 subnormals: 0x00010000 (2^-133) is 0x0001, and 0x007FFFFF rounds up to the
// smallest normal 0x0080, where the instruction gives 0x0000 for both. The vector paths
// instead do what detail::float_to_bfloat16_bits does, lane by lane, with integer ops:
//
//   rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16     RNE on the low 16 bits
//   NaN lanes ((bits & 0x7FFFFFFF) > 0x7F800000) take (bits >> 16) | 0x0040 instead
//
// Integer ops also make the result independent of MXCSR (rounding mode, FTZ, DAZ). The
// float16 paths use the F16C / AVX512F conversions with an explicit round-to-nearest-even
// immediate: they keep subnormals and quiet NaNs exactly as half.h does.

namespace hg::convert {

namespace {

// ---- Scalar ------------------------------------------------------------------------------

void float_to_half_scalar(const float* src, Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Half(src[i]);
}

void half_to_float_scalar(const Half* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}

void float_to_bfloat16_scalar(const float* src, BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16(src[i]);
}

void bfloat16_to_float_scalar(const BFloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
}

#if HG_X86

// ---- AVX2 + F16C: 8 lanes ------------------------------------------------------------------
//
// AVX2 has no masked 16-bit loads or stores, so a tail of fewer than 8 elements is converted
// one value at a time.

#define HG_TARGET_AVX2 __attribute__((target("avx2,f16c")))

HG_TARGET_AVX2 inline void float_to_half_block8(const float* src, Half* dst) {
  const __m256 x = _mm256_loadu_ps(src);
  const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), h);
}

HG_TARGET_AVX2 inline void half_to_float_block8(const Half* src, float* dst) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  _mm256_storeu_ps(dst, _mm256_cvtph_ps(h));
}

HG_TARGET_AVX2 inline void float_to_bfloat16_block8(const float* src, BFloat16* dst) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF)), odd), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  // The magnitude fits in 31 bits, so a signed compare orders it correctly.
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
  const __m256i result = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  // Every lane is <= 0xFFFF, so the saturating pack only narrows.
  const __m128i packed =
      _mm_packus_epi32(_mm256_castsi256_si128(result), _mm256_extracti128_si256(result, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), packed);
}

HG_TARGET_AVX2 inline void bfloat16_to_float_block8(const BFloat16* src, float* dst) {
  const __m128i narrow = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(narrow), 16);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F800000));
  const __m256i quiet = _mm256_and_si256(is_nan, _mm256_set1_epi32(0x00400000));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_or_si256(bits, quiet));
}

// One value by the same conversion as a block of 8 (F16C's scalar forms for float16; for
// bfloat16 the scalar rounding, whose bits the vector code reproduces).
HG_TARGET_AVX2 inline void float_to_half_one(const float* src, Half* dst) {
  *dst = Half::from_bits(
      uint16_t(_cvtss_sh(*src, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
}

HG_TARGET_AVX2 inline void half_to_float_one(const Half* src, float* dst) {
  *dst = _cvtsh_ss(src->bits);
}

inline void float_to_bfloat16_one(const float* src, BFloat16* dst) { *dst = BFloat16(*src); }
inline void bfloat16_to_float_one(const BFloat16* src, float* dst) { *dst = float(*src); }

// Runs block8 over whole blocks, then one over the tail: a tail through a padded block of 8
// would cost two copies and a store-forwarding stall, paid on every row of a short-rowed view
// (an attention head's 12 values).
template <class Src, class Dst, void (*block8)(const Src*, Dst*), void (*one)(const Src*, Dst*)>
HG_TARGET_AVX2 void run_blocks8(const Src* src, Dst* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) block8(src + i, dst + i);
  for (; i < n; ++i) one(src + i, dst + i);
}

void float_to_half_avx2(const float* src, Half* dst, int64_t n) {
  run_blocks8<float, Half, float_to_half_block8, float_to_half_one>(src, dst, n);
}
void half_to_float_avx2(const Half* src, float* dst, int64_t n) {
  run_blocks8<Half, float, half_to_float_block8, half_to_float_one>(src, dst, n);
}
void float_to_bfloat16_avx2(const float* src, BFloat16* dst, int64_t n) {
  run_blocks8<float, BFloat16, float_to_bfloat16_block8, float_to_bfloat16_one>(src, dst, n);
}
void bfloat16_to_float_avx2(const BFloat16* src, float* dst, int64_t n) {
  run_blocks8<BFloat16, float, bfloat16_to_float_block8, bfloat16_to_float_one>(src, dst, n);
}

#undef HG_TARGET_AVX2

// ---- AVX512: 16 lanes ----------------------------------------------------------------------
//
// Whole vectors first, then one masked iteration for the tail: masked-off lanes are neither
// read nor written, so a buffer that ends at a page boundary is safe.

#define HG_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

HG_TARGET_AVX512 inline __mmask16 tail_mask(int64_t remaining) {
  return __mmask16((1u << remaining) - 1);  // remaining < 16
}

HG_TARGET_AVX512 inline __m256i float_to_half_lanes16(__m512 x) {
  return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

HG_TARGET_AVX512 void float_to_half_avx512(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = float_to_half_lanes16(_mm512_loadu_ps(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i == n) return;
  const __mmask16 mask = tail_mask(n - i);
  _mm256_mask_storeu_epi16(dst + i, mask,
                           float_to_half_lanes16(_mm512_maskz_loadu_ps(mask, src + i)));
}

HG_TARGET_AVX512 void half_to_float_avx512(const Half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
  if (i == n) return;
  const __mmask16 mask = tail_mask(n - i);
  _mm512_mask_storeu_ps(dst + i, mask, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, src + i)));
}

// 16 float32 bit patterns -> 16 bfloat16 patterns (NOTE [bf16 vector rounding]).
HG_TARGET_AVX512 inline __m256i float_to_bfloat16_lanes16(__m512i bits) {
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), odd), 16);
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7F800000));
  const __m512i result = _mm512_mask_or_epi32(rounded, is_nan, high, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(result);
}

HG_TARGET_AVX512 void float_to_bfloat16_avx512(const float* src, BFloat16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i b = float_to_bfloat16_lanes16(_mm512_loadu_si512(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), b);
  }
  if (i == n) return;
  const __mmask16 mask = tail_mask(n - i);
  _mm256_mask_storeu_epi16(dst + i, mask,
                           float_to_bfloat16_lanes16(_mm512_maskz_loadu_epi32(mask, src + i)));
}

// 16 bfloat16 patterns -> 16 float32 bit patterns: widen, shift up, quiet NaNs.
HG_TARGET_AVX512 inline __m512i bfloat16_to_float_lanes16(__m256i narrow) {
  const __m512i bits = _mm512_slli_epi32(_mm512_cvtepu16_epi32(narrow), 16);
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7F800000));
  return _mm512_mask_or_epi32(bits, is_nan, bits, _mm512_set1_epi32(0x00400000));
}

HG_TARGET_AVX512 void bfloat16_to_float_avx512(const BFloat16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i narrow = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, bfloat16_to_float_lanes16(narrow));
  }
  if (i == n) return;
  const __mmask16 mask = tail_mask(n - i);
  _mm512_mask_storeu_epi32(dst + i, mask,
                           bfloat16_to_float_lanes16(_mm256_maskz_loadu_epi16(mask, src + i)));
}

#undef HG_TARGET_AVX512

#endif  // HG_X86

// ---- Dispatch ------------------------------------------------------------------------------

struct Kernels {
  void (*float_to_half)(const float*, Half*, int64_t);
  void (*half_to_float)(const Half*, float*, int64_t);
  void (*float_to_bfloat16)(const float*, BFloat16*, int64_t);
  void (*bfloat16_to_float)(const BFloat16*, float*, int64_t);
};

constexpr int kNumIsas = 3;

// Indexed by Isa. A path this build cannot compile is left null and never reported as
// supported.
constexpr std::array<Kernels, kNumIsas> kKernels = {{
    {float_to_half_scalar, half_to_float_scalar, float_to_bfloat16_scalar,
     bfloat16_to_float_scalar},
#if HG_X86
    {float_to_half_avx2, half_to_float_avx2, float_to_bfloat16_avx2, bfloat16_to_float_avx2},
    {float_to_half_avx512, half_to_float_avx512, float_to_bfloat16_avx512,
     bfloat16_to_float_avx512},
#else
    {},
    {},
#endif
}};

bool cpu_supports(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return true;
#if HG_X86
    case Isa::Avx2F16c:
      return __builtin_cpu_supports("avx2") && cpu_has_f16c();
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#endif
    default:
      return false;
  }
}

// What the CPU supports, detected once.
const std::vector<Isa>& supported() {
  static const std::vector<Isa> isas = [] {
    std::vector<Isa> found;
    for (int i = 0; i < kNumIsas; ++i) {
      if (cpu_supports(Isa(i))) found.push_back(Isa(i));
    }
    return found;
  }();
  return isas;
}

bool is_supported(Isa isa) {
  for (Isa s : supported()) {
    if (s == isa) return true;
  }
  return false;
}

const Kernels& kernels_for(Isa isa, std::string_view function) {
  HG_CHECK(is_supported(isa), "convert::{}: expected a path this CPU supports (best: {}), got {}",
           function, isa_name(best_isa()), isa_name(isa));
  return kKernels[size_t(isa)];
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2F16c:
      return "avx2+f16c";
    case Isa::Avx512:
      return "avx512";
  }
  return "unknown";
}

Isa best_isa() {
  static const Isa best = supported().back();
  return best;
}

std::vector<Isa> supported_isas() { return supported(); }

void float_to_half(const float* src, Half* dst, int64_t n, Isa isa) {
  kernels_for(isa, "float_to_half").float_to_half(src, dst, n);
}
void half_to_float(const Half* src, float* dst, int64_t n, Isa isa) {
  kernels_for(isa, "half_to_float").half_to_float(src, dst, n);
}
void float_to_bfloat16(const float* src, BFloat16* dst, int64_t n, Isa isa) {
  kernels_for(isa, "float_to_bfloat16").float_to_bfloat16(src, dst, n);
}
void bfloat16_to_float(const BFloat16* src, float* dst, int64_t n, Isa isa) {
  kernels_for(isa, "bfloat16_to_float").bfloat16_to_float(src, dst, n);
}

void float_to_half(const float* src, Half* dst, int64_t n) {
  kKernels[size_t(best_isa())].float_to_half(src, dst, n);
}
void half_to_float(const Half* src, float* dst, int64_t n) {
  kKernels[size_t(best_isa())].half_to_float(src, dst, n);
}
void float_to_bfloat16(const float* src, BFloat16* dst, int64_t n) {
  kKernels[size_t(best_isa())].float_to_bfloat16(src, dst, n);
}
void bfloat16_to_float(const BFloat16* src, float* dst, int64_t n) {
  kKernels[size_t(best_isa())].bfloat16_to_float(src, dst, n);
}

}  // namespace hg::convert
