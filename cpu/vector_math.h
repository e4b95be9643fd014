// Vector math for contiguous float32 runs: SLEEF's 16-lane AVX-512 and 8-lane AVX2 functions,
// chosen at run time (NOTE [Vector math]). The elementwise kernels take vector_mapper() for the
// unary kinds below, float16 and bfloat16 runs in float32 chunks; softmax and log_softmax over
// the last dim (cpu/norm.cpp) take it for their exponentials.
//
// NOTE [Vector math] Per element, scalar libm (expf, tanhf, erfcf, ...) was most of a small
// model's activations and losses on the CPU, in loops the compiler cannot vectorize. SLEEF
// (Debian's libsleef, the library PyTorch vectorizes with) has the same functions on whole
// vectors with a bounded error: 1.0 ulp for the u10 functions used here, 1.5 for erfc. The
// formulas built from them (sigmoid, silu, the GELUs and their derivatives, softplus) are
// unary.def's, operation for operation, with the vector function in place of the scalar one.
// The functions for each instruction set live in a file of their own compiled for it
// (vector_math_avx512.cpp, vector_math_avx2.cpp), and vector_map runs one only on a CPU that
// has it. Those files include nothing but intrinsics, SLEEF and this header, which holds no
// inline code: an inline function compiled there for AVX-512 could otherwise be the copy the
// linker keeps for the whole program. The tail of a run goes through the same vector
// function (masked, or through a zero-padded buffer), so every element of a tensor gets the
// same function wherever it sits. tests/cpu/vector_math_test.cpp bounds each function's
// error against float64.
#pragma once

#include <cstdint>

namespace hg::cpu {

enum class VectorFn : int {
  Exp,
  Expm1,
  Log,
  Log1p,
  Log2,
  Log10,
  Sin,
  Cos,
  Tanh,
  Erf,
  Sigmoid,
  Silu,
  Gelu,
  GeluTanh,
  GeluGrad,
  GeluTanhGrad,
  Softplus,
};
inline constexpr int kVectorFnCount = 17;

// A pass y[i] = fn(x[i]) for i < n (y may be x).
using VectorMap = void (*)(VectorFn fn, const float* x, float* y, int64_t n);

// The pass on the widest of AVX-512 and AVX2 with FMA the CPU has, or null when it has
// neither or vector math is turned off (the caller runs its scalar loop). A kernel takes it
// once and uses it for the whole tensor.
VectorMap vector_mapper();

// vector_mapper()'s pass over one run; false, with nothing written, where there is none.
bool vector_map(VectorFn fn, const float* x, float* y, int64_t n);

// y[i] = pow(a[i], b[i]) for i < n (y may be a or b): SLEEF's powf (1.0 ulp; C's special
// cases, as std::pow: pow(x, 0) = 1 and pow(1, y) = 1 even for NaN, pow(-x, non-integer) =
// NaN). The binary pow kernel's float32 runs, float16/bfloat16 ones in float32 chunks.
using VectorPow = void (*)(const float* a, const float* b, float* y, int64_t n);
// The pow pass for the ISA vector_mapper() uses, or null where that has none.
VectorPow vector_power();

// Whether vector_map has a path on this CPU, and its name ("avx512", "avx2" or "none").
const char* vector_math_isa();

// Turns vector_map off (false) or on again: for the tests and benchmarks that compare it with
// the scalar loops.
void set_vector_math_enabled(bool enabled);

namespace detail {
// The per-ISA passes; call only where the CPU has the instruction set.
void vector_map_avx512(VectorFn fn, const float* x, float* y, int64_t n);
void vector_map_avx2(VectorFn fn, const float* x, float* y, int64_t n);
void vector_pow_avx512(const float* a, const float* b, float* y, int64_t n);
void vector_pow_avx2(const float* a, const float* b, float* y, int64_t n);
}  // namespace detail

}  // namespace hg::cpu
