// What the CPU running halfgrad supports, detected once, for the kernels that have a copy
// compiled for a wider instruction set than the build's baseline (x86-64: SSE2).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

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

// AVX512-BF16 (vdpbf16ps: pairs of bfloat16 products summed into float32 lanes) with the
// AVX-512 BW and VL that every CPU with it has (16-bit masked loads and stores), read from CPUID
// leaf 7 subleaf 1 directly: clang 14 does not accept "avx512bf16" in __builtin_cpu_supports.
inline bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
           (eax & (1u << 5)) != 0;
  }();
  return supported;
#else
  return false;
#endif
}

// F16C (the float16 conversions of 4 and 8 lanes), read from CPUID leaf 1 directly: clang
// before 16 does not accept "f16c" in __builtin_cpu_supports. F16C uses the YMM state, which
// the "avx" check says the OS saves.
inline bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) &&
           (ecx & bit_F16C) != 0;
  }();
  return supported;
#else
  return false;
#endif
}

}  // namespace hg
