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

template <class V, class A = lane_t<V>>
HG_ROW_INLINE A lane_sum(const V& v) {
  A sum = 0;
  for (int i = 0; i < kLanes<V>; ++i) sum += v[i];
  return sum;
}

template <class V, class A = lane_t<V>>
HG_ROW_INLINE A row_sum(const A* x, int64_t n) {
  constexpr int W = kLanes<V>;
  V acc = V{};
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    V v;
    load_vec(v, x + j);
    acc += v;
  }
  A sum = lane_sum(acc);
  for (; j < n; ++j) sum += x[j];
  return sum;
}

// sum of (x[j] - c)^2 over j < n.
template <class V, class A = lane_t<V>>
HG_ROW_INLINE A row_squared_deviation(const A* x, int64_t n, A c) {
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
  for (; j < n; ++j) sum += (x[j] - c) * (x[j] - c);
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
