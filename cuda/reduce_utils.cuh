// Device helpers of the kernels that reduce (reduce.cu, norm.cu): values loaded for
// accumulation, float/double math by overload, NaN and inf tests, 16-byte packs, launch
// arithmetic, and the group reduction over warp shuffles and shared memory.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "halfgrad/cuda/device_utils.cuh"

namespace hg::cuda::detail {

// ---- values ---------------------------------------------------------------------------------

// x (storage type T) as the accumulation type V: through T's compute type, so that the 16-bit
// floats widen exactly.
template <class V, class T>
__device__ __forceinline__ V to_value(T x) {
  return static_cast<V>(convert<compute_t<T>>(x));
}

// The math of float and double accumulators, chosen by overload.
__device__ __forceinline__ float abs_value(float x) { return fabsf(x); }
__device__ __forceinline__ double abs_value(double x) { return fabs(x); }
__device__ __forceinline__ float exp_value(float x) { return expf(x); }
__device__ __forceinline__ double exp_value(double x) { return exp(x); }
__device__ __forceinline__ float log_value(float x) { return logf(x); }
__device__ __forceinline__ double log_value(double x) { return log(x); }
__device__ __forceinline__ float sqrt_value(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_value(double x) { return sqrt(x); }
__device__ __forceinline__ float pow_value(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double pow_value(double x, double y) { return pow(x, y); }

template <class V>
__device__ __forceinline__ bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) {
    return v != v;
  } else {
    return false;
  }
}
template <class V>
__device__ __forceinline__ bool is_inf(V v) {
  if constexpr (std::is_floating_point_v<V>) {
    return v == std::numeric_limits<V>::infinity() || v == -std::numeric_limits<V>::infinity();
  } else {
    return false;  // (numeric_limits<int>::infinity() is 0)
  }
}

// ---- launch arithmetic ----------------------------------------------------------------------

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// ---- shuffles and group reductions ----------------------------------------------------------

// A value's shuffle; a file adds overloads for its accumulator structs (found by argument-
// dependent lookup from group_allreduce).
template <class V>
__device__ __forceinline__ V shfl_xor(V v, int mask, int width) {
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
}

// Combines acc over a group of `group` threads (a power of two up to 32, or the whole block
// with group == blockDim.x, a multiple of 32) with combine(a, b), which must be commutative
// (the shuffles combine in any order); every thread of the group gets the result. Every thread
// of the block must call it. shared: 32 accumulators.
template <class Acc, class Combine>
__device__ Acc group_allreduce(Acc acc, const Combine& combine, int group, Acc* shared) {
  const int width = group < 32 ? group : 32;
  for (int mask = width / 2; mask > 0; mask /= 2) acc = combine(acc, shfl_xor(acc, mask, width));
  if (group <= 32) return acc;
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = acc;
  __syncthreads();
  acc = shared[0];
  for (int w = 1; w < group / 32; ++w) acc = combine(acc, shared[w]);
  __syncthreads();  // shared is reused by the next call
  return acc;
}

}  // namespace hg::cuda::detail
