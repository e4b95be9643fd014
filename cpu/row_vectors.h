// Row arithmetic on GCC vector types, for the CPU kernels whose rows end in reductions
// (cpu/attention.cpp, cpu/norm.cpp).
//
// NOTE [Row vectors] A loop that sums a float row in order cannot be vectorized by the compiler (its additions
// may not be reordered), and the baseline x86-64 build would use 4 SSE lanes if it could. The
// kernels here are written once as always-inline templates over a vector type V and compiled
// into entry points for AVX-512 (16 float lanes), AVX2 with FMA (8) and the baseline (4), with
// __attribute__((target)), as the small GEMM kernel is (NOTE [Small GEMM kernel] in
// cpu/small_gemm.cpp); row_vector_level() picks one at run time. A reduction keeps W partial
// sums, one per lane, over a row and adds them in lane order at its end, then the tail in
// order: one fixed order for a given ISA, whatever the thread count. Vectors are passed by
// reference, never by value across a call (a wider vector than the baseline's has no ABI in
// the baseline build). A vector compare (v > top) must be written in the per-ISA function
// itself: GCC 12 lowers a compare inside an always-inline helper for the baseline ISA, lane
// by lane, before the helper is inlined (arithmetic and shuffles survive; objdump shows
// vcomiss/seta where it happened). cpu/pool.cpp's max_pool_pairs follows this; the attention
// rows' scale_and_max does not yet.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "halfgrad/core/half.h"

namespace hg::cpu::row_vectors {

#define HG_ROW_INLINE inline __attribute__((always_inline))

using FloatVec4 = float __attribute__((vector_size(16)));
using FloatVec8 = float __attribute__((vector_size(32)));
using FloatVec16 = float __attribute__((vector_size(64)));
using DoubleVec2 = double __attribute__((vector_size(16)));

template <class V>
using lane_t = std::remove_cvref_t<decltype(V{}[0])>;
template <class V>
constexpr int kLanes = int(sizeof(V) / sizeof(lane_t<V>));

// The widest copy the CPU runs: 2 AVX-512, 1 AVX2 with FMA, 0 the baseline.
inline int row_vector_level() {
  static const int level = __builtin_cpu_supports("avx512f")                                 ? 2
                           : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1
                                                                                             : 0;
  return level;
}

template <class V>
HG_ROW_INLINE void load_vec(V& v, const lane_t<V>* p) {
  std::memcpy(&v, p, sizeof(V));
}
template <class V>
HG_ROW_INLINE void store_vec(lane_t<V>* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// ---- bfloat16 rows in float lanes ----------------------------------------------------------
//
// NOTE [bfloat16 in float lanes] A bfloat16 row is read straight into float lanes (its 16 bits
// become the float's high half: exact) and float lanes are rounded straight into bfloat16
// (round to nearest even; a NaN stays a NaN, quieted, its high half kept), so that a kernel
// reads and writes 16-bit rows without widening them into a buffer first. The rounding gives
// core/convert's bits for every input. Written in integer lanes without a compare (the NaN
// mask is the sign of 0x7F800000 - |bits|), so that it survives inlining into the per-ISA
// functions (above).
template <int W>
struct IntLanes;
template <>
struct IntLanes<4> {
  using U32 = uint32_t __attribute__((vector_size(16)));
  using I32 = int32_t __attribute__((vector_size(16)));
  using U16 = uint16_t __attribute__((vector_size(8)));
};
template <>
struct IntLanes<8> {
  using U32 = uint32_t __attribute__((vector_size(32)));
  using I32 = int32_t __attribute__((vector_size(32)));
  using U16 = uint16_t __attribute__((vector_size(16)));
};
template <>
struct IntLanes<16> {
  using U32 = uint32_t __attribute__((vector_size(64)));
  using I32 = int32_t __attribute__((vector_size(64)));
  using U16 = uint16_t __attribute__((vector_size(32)));
};
template <class V>
using U32Lanes = typename IntLanes<kLanes<V>>::U32;
template <class V>
using I32Lanes = typename IntLanes<kLanes<V>>::I32;
template <class V>
using U16Lanes = typename IntLanes<kLanes<V>>::U16;

template <class V>
HG_ROW_INLINE void load_vec(V& v, const BFloat16* p) {
  U16Lanes<V> narrow;
  std::memcpy(&narrow, static_cast<const void*>(p), sizeof(narrow));
  const U32Lanes<V> bits = __builtin_convertvector(narrow, U32Lanes<V>) << 16;
  std::memcpy(&v, &bits, sizeof(V));
}

template <class V>
HG_ROW_INLINE void store_vec(BFloat16* p, const V& v) {
  U32Lanes<V> bits;
  std::memcpy(&bits, &v, sizeof(V));
  const U32Lanes<V> high = bits >> 16;
  const U32Lanes<V> rounded = (bits + 0x7FFFu + (high & 1u)) >> 16;
  const U32Lanes<V> nan =
      U32Lanes<V>(I32Lanes<V>(0x7F800000u - (bits & 0x7FFFFFFFu)) >> 31);  // all ones for NaN
  const U32Lanes<V> result = (rounded & ~nan) | ((high | 0x40u) & nan);
  const U16Lanes<V> narrow = __builtin_convertvector(result, U16Lanes<V>);
  std::memcpy(static_cast<void*>(p), &narrow, sizeof(narrow));
}

// One value of a row as float, and a float stored as a row's type (the scalar tails).
HG_ROW_INLINE float widen(float x) { return x; }
HG_ROW_INLINE double widen(double x) { return x; }
HG_ROW_INLINE float widen(BFloat16 x) { return float(x); }
template <class E>
HG_ROW_INLINE E narrow_to(float x) {
  return E(x);
}

template <class V, class A = lane_t<V>>
HG_ROW_INLINE A lane_sum(const V& v) {
  A sum = 0;
  for (int i = 0; i < kLanes<V>; ++i) sum += v[i];
  return sum;
}

// The sum of x[j] over j < n; x of the lanes' type, or bfloat16 read into float lanes.
template <class V, class E, class A = lane_t<V>>
HG_ROW_INLINE A row_sum(const E* x, int64_t n) {
  constexpr int W = kLanes<V>;
  V acc = V{};
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    V v;
    load_vec(v, x + j);
    acc += v;
  }
  A sum = lane_sum(acc);
  for (; j < n; ++j) sum += A(widen(x[j]));
  return sum;
}

// sum of (x[j] - c)^2 over j < n.
template <class V, class E, class A = lane_t<V>>
HG_ROW_INLINE A row_squared_deviation(const E* x, int64_t n, A c) {
  constexpr int W = kLanes<V>;
  V acc = V{};
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    V v;
    load_vec(v, x + j);
    v -= c;
    acc += v * v;
  }
  A sum = lane_sum(acc);
  for (; j < n; ++j) {
    const A d = A(widen(x[j])) - c;
    sum += d * d;
  }
  return sum;
}

template <class V, class A = lane_t<V>>
HG_ROW_INLINE A row_dot(const A* x, const A* y, int64_t n) {
  constexpr int W = kLanes<V>;
  V acc = V{};
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    V a, b;
    load_vec(a, x + j);
    load_vec(b, y + j);
    acc += a * b;
  }
  A sum = lane_sum(acc);
  for (; j < n; ++j) sum += x[j] * y[j];
  return sum;
}

// The sum of n floats in vector lanes on the widest instruction set the CPU has, in blocks of
// 256 values summed on their own first (cpu/norm.cpp: batch_norm's sums; conv2d's bias
// gradient uses it too). One fixed order per instruction set.
float sum_floats(const float* x, int64_t n);

}  // namespace hg::cpu::row_vectors
