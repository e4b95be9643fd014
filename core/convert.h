// Whole-buffer conversions between float32 and the 16-bit storage types, as used by
// Tensor::to(dtype).
//
//   std::vector<float> x = ...;
//   std::vector<Half> h(x.size());
//   hg::convert::float_to_half(x.data(), h.data(), int64_t(x.size()));
//
// Each conversion has a scalar path (the per-element functions of half.h) and vector paths
// chosen at run time from what the CPU supports; the library itself is built for a baseline
// x86-64, so a binary runs everywhere and still uses AVX512 where it is there. Every path
// gives exactly the scalar path's bits for every input: NaNs included (quieted, sign and top
// payload kept) and subnormals kept (never flushed to zero), whatever MXCSR's FTZ/DAZ say.
//
// Pointers need no alignment; n == 0 is allowed. The functions run on the calling thread:
// callers that want parallelism split the buffer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "halfgrad/core/half.h"

namespace hg::convert {

// An instruction-set path. Later paths need more of the CPU.
enum class Isa {
  Scalar,    // portable C++, always available
  Avx2F16c,  // 8 lanes: F16C for float16, AVX2 integer ops for bfloat16
  Avx512,    // 16 lanes: AVX512F/BW/VL, masked tails
};

// "scalar", "avx2+f16c", "avx512".
std::string_view isa_name(Isa isa);

// The best path this CPU supports (detected once).
Isa best_isa();

// Every path this CPU can run, Scalar first, in increasing order.
std::vector<Isa> supported_isas();

// On best_isa().
void float_to_half(const float* src, Half* dst, int64_t n);
void half_to_float(const Half* src, float* dst, int64_t n);
void float_to_bfloat16(const float* src, BFloat16* dst, int64_t n);
void bfloat16_to_float(const BFloat16* src, float* dst, int64_t n);

// The same on best_isa(), overloaded by the storage type for templated kernels (float32 is a
// copy, src and dst distinct).
inline void to_float(const Half* src, float* dst, int64_t n) { half_to_float(src, dst, n); }
inline void to_float(const BFloat16* src, float* dst, int64_t n) { bfloat16_to_float(src, dst, n); }
inline void to_float(const float* src, float* dst, int64_t n) { std::copy_n(src, n, dst); }
inline void from_float(const float* src, Half* dst, int64_t n) { float_to_half(src, dst, n); }
inline void from_float(const float* src, BFloat16* dst, int64_t n) {
  float_to_bfloat16(src, dst, n);
}
inline void from_float(const float* src, float* dst, int64_t n) { std::copy_n(src, n, dst); }

// On an explicit path, so that tests can compare every path with Scalar. Throws hg::Error
// when the CPU does not support `isa`.
void float_to_half(const float* src, Half* dst, int64_t n, Isa isa);
void half_to_float(const Half* src, float* dst, int64_t n, Isa isa);
void float_to_bfloat16(const float* src, BFloat16* dst, int64_t n, Isa isa);
void bfloat16_to_float(const BFloat16* src, float* dst, int64_t n, Isa isa);

}  // namespace hg::convert
