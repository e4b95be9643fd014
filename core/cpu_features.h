// What the CPU running halfgrad supports, detected once, for the kernels that have a copy
// compiled for a wider instruction set than the build's baseline (x86-64: SSE2).
#pragma once

namespace hg {

// AVX-512 Foundation (16-lane float vectors and mask registers).
inline bool cpu_has_avx512f() {
#if defined(__x86_64__)
  static const bool supported = __builtin_cpu_supports("avx512f");
  return supported;
#else
  return false;
#endif
}

// AVX2 with FMA (8-lane float vectors).
inline bool cpu_has_avx2_fma() {
#if defined(__x86_64__)
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
#else
  return false;
#endif
}

}  // namespace hg
