// <immintrin.h> for the files that call AVX-512 intrinsics. GCC 12's AVX-512 intrinsics start
// from _mm*_undefined_*() values, which its own -Wmaybe-uninitialized then reports inside the
// header when they are inlined (e.g. _mm512_cvtph_ps), and -Wuninitialized for the shuffles
// (_mm512_unpacklo_epi32): false positives, silenced here only.
// HG_X86 says whether the target is x86 (1) or not (0), for the code that has x86 paths.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define HG_X86 1
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#else
#define HG_X86 0
#endif
