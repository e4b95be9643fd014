// The CPU elementwise kernels (kernel/elementwise.h: the table cpu::elementwise_kernels):
// strided loops over contiguous runs, with 16-lane AVX-512 passes for float32 relu.
//
// NOTE [Loops, not Eigen] Elementwise ops and reductions here (and in reduce.cpp) are plain
// loops over for_each_row's contiguous runs, not Eigen: they handle halfgrad's strides,
// broadcasting and 16-bit storage directly, and the compiler vectorizes the contiguous case.
// Eigen runs the float64 GEMM, and float32 GEMMs in builds without oneDNN (cpu/eigen_gemm.cpp).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <optional>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "halfgrad/core/cast.h"
#include "halfgrad/core/convert.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/scalar_value.h"
#include "halfgrad/core/strided_loop.h"
#include "halfgrad/core/view.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/kernel/elementwise.h"
#include "halfgrad/kernel/formulas.h"
#include "halfgrad/kernel/index_checks.h"

namespace hg::cpu {

namespace {

using kernel::Binary;
using kernel::Compare;
using kernel::Unary;

// Byte strides of t read as `shape` (t broadcasts to it): 0 along broadcast dims. Cheaper
// than an expand() view on this hot path (no TensorImpl is made).
Shape broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  Shape strides(shape.size(), 0);
  const size_t lead = shape.size() - size_t(t.dim());
  for (size_t d = lead; d < shape.size(); ++d) {
    if (t.sizes()[d - lead] != 1) strides[d] = t.strides()[d - lead] * int64_t(t.element_size());
  }
  return strides;
}

// ---- unary ------------------------------------------------------------------------------------

// NOTE [AVX-512 relu passes] relu and its backward are the activations of small float32
// MLPs, where the baseline build's 4-lane SSE loops were a visible part of a training step.
// On CPUs with AVX-512 their contiguous float32 runs take a 16-lane pass instead (masked for
// the tail). Both are selects, not arithmetic, so the bits are the scalar loops' bits: 0 where
// the compared value is <= 0 (an ordered compare, false for NaN), else the value passed.
#if defined(__x86_64__)
// out[i] = keys[i] <= limit ? 0 : values[i]: relu is (values, keys) = (x, x), limit 0; its
// backward (grad, output).
__attribute__((target("avx512f"))) void zero_where_at_most_floats_avx512(float* out,
                                                                         const float* values,
                                                                         const float* keys,
                                                                         float limit, int64_t n) {
  const __m512 zero = _mm512_setzero_ps(), bound = _mm512_set1_ps(limit);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __mmask16 flat =
        _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(lanes, keys + i), bound, _CMP_LE_OQ);
    const __m512 v = _mm512_maskz_loadu_ps(lanes, values + i);
    _mm512_mask_storeu_ps(out + i, lanes, _mm512_mask_mov_ps(v, flat, zero));
  }
}
#endif

// out[i] = keys[i] <= 0 ? +0 : values[i] on the bits of float16 or bfloat16 values, with no
// conversion: the keys <= 0 are +0 (bits 0) and -0 up to -inf (bits 0x8000 to
// negative_infinity); NaNs, above -inf, are not, as `NaN <= 0` is false. relu and its backward
// in 16-bit (limit 0), in loops the compiler vectorizes on 16-bit lanes.
inline __attribute__((always_inline)) void zero_where_not_positive_16bit_body(
    uint16_t* out, const uint16_t* values, const uint16_t* keys, uint16_t negative_infinity,
    int64_t n) {
  // Bit arithmetic without branches, which the compiler turns into vector compares and ands.
  const uint16_t negative_span = uint16_t(negative_infinity - 0x8000u);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t k = keys[i];
    const uint16_t keep = uint16_t(k != 0) & uint16_t(uint16_t(k - 0x8000u) > negative_span);
    out[i] = uint16_t(values[i] & uint16_t(0u - keep));
  }
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) void zero_where_not_positive_16bit_avx2(uint16_t* out,
                                                                        const uint16_t* values,
                                                                        const uint16_t* keys,
                                                                        uint16_t negative_infinity,
                                                                        int64_t n) {
  zero_where_not_positive_16bit_body(out, values, keys, negative_infinity, n);
}
#endif
template <class T>
void zero_where_not_positive_16bit(T* out, const T* values, const T* keys, int64_t n) {
  static_assert(sizeof(T) == 2);
  const uint16_t negative_infinity = std::is_same_v<T, Half> ? 0xFC00 : 0xFF80;
  auto* o = reinterpret_cast<uint16_t*>(out);
  const auto* v = reinterpret_cast<const uint16_t*>(values);
  const auto* k = reinterpret_cast<const uint16_t*>(keys);
#if defined(__x86_64__)
  if (cpu_has_avx2_fma()) return zero_where_not_positive_16bit_avx2(o, v, k, negative_infinity, n);
#endif
  zero_where_not_positive_16bit_body(o, v, k, negative_infinity, n);
}

// The vector function of a unary kind (NOTE [Vector math] in vector_math.h), if it has one.
constexpr std::optional<VectorFn> vector_fn_of(Unary op) {
  switch (op) {
    case Unary::Exp:
      return VectorFn::Exp;
    case Unary::Expm1:
      return VectorFn::Expm1;
    case Unary::Log:
      return VectorFn::Log;
    case Unary::Log1p:
      return VectorFn::Log1p;
    case Unary::Log2:
      return VectorFn::Log2;
    case Unary::Log10:
      return VectorFn::Log10;
    case Unary::Sin:
      return VectorFn::Sin;
    case Unary::Cos:
      return VectorFn::Cos;
    case Unary::Tanh:
      return VectorFn::Tanh;
    case Unary::Erf:
      return VectorFn::Erf;
    case Unary::Sigmoid:
      return VectorFn::Sigmoid;
    case Unary::Silu:
      return VectorFn::Silu;
    case Unary::Gelu:
      return VectorFn::Gelu;
    case Unary::GeluTanh:
      return VectorFn::GeluTanh;
    case Unary::GeluGrad:
      return VectorFn::GeluGrad;
    case Unary::GeluTanhGrad:
      return VectorFn::GeluTanhGrad;
    case Unary::Softplus:
      return VectorFn::Softplus;
    default:
      return std::nullopt;
  }
}

// 16-bit values to float32 and back, with the per-element casts' bits, in vectors
// (core/convert.h): the contiguous runs of the 16-bit kernels go through float32 chunks of
// kChunk values, which stay in the L1 cache.
constexpr int64_t kChunk = 256;
template <class T>
constexpr bool kSixteenBit = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

using convert::from_float;
using convert::to_float;

// o[i] = the 16-bit T of f's result on float(in[i]), for a contiguous run: widened in float32
// chunks, f(chunk, m) in place, rounded once on the way back.
template <class T, class F>
void over_float_chunks(T* o, const T* in, int64_t n, F&& f) {
  float chunk[kChunk];
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t m = std::min(kChunk, n - start);
    to_float(in + start, chunk, m);
    f(chunk, m);
    from_float(chunk, o + start, m);
  }
}

// o[i] = fn(in[i]) for a contiguous run through the vector pass `pass`: float32 directly,
// float16 and bfloat16 through float32 chunks, rounded once on the way back. False for other
// dtypes (the caller's scalar loop runs).
template <class T>
bool vector_unary_run(VectorMap pass, VectorFn fn, T* o, const T* in, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    pass(fn, in, o, n);
    return true;
  } else if constexpr (kSixteenBit<T>) {
    over_float_chunks(o, in, n, [&](float* chunk, int64_t m) { pass(fn, chunk, chunk, m); });
    return true;
  } else {
    (void)pass, (void)fn, (void)o, (void)in, (void)n;
    return false;
  }
}

template <Unary Op>
Tensor run_unary(const Tensor& x) {
  Tensor out = empty(x.sizes(), x.options());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      HG_ERROR("elementwise: bool tensors are not supported here");
    } else if constexpr (std::is_integral_v<T> && !kernel::unary_takes_integers(Op)) {
      HG_ERROR("elementwise: expected a floating tensor, got {}", x.dtype());
    } else {
      const VectorMap pass = vector_fn_of(Op).has_value() ? vector_mapper() : nullptr;
      for_each_row<2>(x.sizes(),
                      {static_cast<char*>(out.data_ptr()), static_cast<char*>(x.data_ptr())},
                      {byte_strides(out), byte_strides(x)},
                      [pass](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
                        (void)pass;  // kinds without a vector function do not read it
                        if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
                          T* o = reinterpret_cast<T*>(p[0]);
                          const T* in = reinterpret_cast<const T*>(p[1]);
#if defined(__x86_64__)
                          if constexpr (Op == Unary::Relu && std::is_same_v<T, float>) {
                            if (cpu_has_avx512f()) {
                              return zero_where_at_most_floats_avx512(o, in, in, 0.0f, n);
                            }
                          }
#endif
                          if constexpr (Op == Unary::Relu &&
                                        (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)) {
                            return zero_where_not_positive_16bit(o, in, in, n);
                          }
                          if constexpr (constexpr std::optional<VectorFn> fn = vector_fn_of(Op);
                                        fn.has_value()) {
                            if (pass != nullptr && vector_unary_run(pass, *fn, o, in, n)) return;
                          }
                          if constexpr (kSixteenBit<T>) {  // the same float math, in chunks
                            return over_float_chunks(o, in, n, [](float* chunk, int64_t m) {
                              for (int64_t i = 0; i < m; ++i) {
                                chunk[i] = kernel::unary_fn<Op, C>(chunk[i]);
                              }
                            });
                          }
                          for (int64_t i = 0; i < n; ++i) {
                            o[i] = cast_value<T>(kernel::unary_fn<Op, C>(cast_value<C>(in[i])));
                          }
                          return;
                        }
                        for (int64_t i = 0; i < n; ++i) {
                          const C v = cast_value<C>(load_bytes<T>(p[1] + i * s[1]));
                          store_bytes(p[0] + i * s[0], cast_value<T>(kernel::unary_fn<Op, C>(v)));
                        }
                      });
    }
  });
  return out;
}

// ---- binary -----------------------------------------------------------------------------------

// o[i] = pow(x[i], y[i]) (scale * y[0] for every i when scalar_exponent, where scale is 1
// otherwise) over n contiguous values of a float32, float16 or bfloat16 T, through the vector
// pow pass in float32 chunks.
template <class T>
void pow_run(VectorPow power, T* o, const T* x, const T* y, bool scalar_exponent, float scale,
             int64_t n) {
  float a[kChunk], b[kChunk];
  if (scalar_exponent) std::fill_n(b, kChunk, scale * cast_value<float>(y[0]));
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t m = std::min(kChunk, n - start);
    if constexpr (std::is_same_v<T, float>) {
      power(x + start, scalar_exponent ? b : y + start, o + start, m);
    } else {
      to_float(x + start, a, m);
      if (!scalar_exponent) to_float(y + start, b, m);
      power(a, b, a, m);
      from_float(a, o + start, m);
    }
  }
}

// out = op(a, b) where a and b have out's dtype and broadcast to out's shape.
template <Binary Op>
void run_binary(const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  const Shape& shape = out.sizes();
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      HG_ERROR("elementwise: arithmetic on bool tensors is not supported; convert them first");
    } else {
      using C = compute_t<T>;
      const C scale = cast_value<C>(alpha);
      // pow's float32 runs (and 16-bit ones, widened) with a contiguous or broadcast exponent
      // go through the vector pow pass (NOTE [Vector math] in cpu/vector_math.h).
      const VectorPow power =
          Op == Binary::Pow && std::is_same_v<C, float> ? vector_power() : nullptr;
      for_each_row<3>(
          shape, {byte_data(out), byte_data(a), byte_data(b)},
          {byte_strides(out), broadcast_byte_strides(a, shape), broadcast_byte_strides(b, shape)},
          [scale, power](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
            (void)power;  // kinds other than pow do not read it
            if constexpr (Op == Binary::Pow && std::is_same_v<C, float>) {
              if (power != nullptr && s[0] == sizeof(T) && s[1] == sizeof(T) &&
                  (s[2] == 0 || (s[2] == sizeof(T) && scale == C(1)))) {
                return pow_run(power, reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]),
                               reinterpret_cast<const T*>(p[2]), s[2] == 0, scale, n);
              }
            }
            if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
              T* o = reinterpret_cast<T*>(p[0]);
              const T* x = reinterpret_cast<const T*>(p[1]);
              const T* y = reinterpret_cast<const T*>(p[2]);
              if constexpr (kSixteenBit<T>) {  // the same float math, widened in chunks
                float a[kChunk], b[kChunk];
                for (int64_t start = 0; start < n; start += kChunk) {
                  const int64_t m = std::min(kChunk, n - start);
                  to_float(x + start, a, m);
                  to_float(y + start, b, m);
                  for (int64_t i = 0; i < m; ++i)
                    a[i] = kernel::binary_fn<Op, C>(a[i], b[i], scale);
                  from_float(a, o + start, m);
                }
                return;
              }
              for (int64_t i = 0; i < n; ++i) {
                o[i] = cast_value<T>(
                    kernel::binary_fn<Op, C>(cast_value<C>(x[i]), cast_value<C>(y[i]), scale));
              }
              return;
            }
            for (int64_t i = 0; i < n; ++i) {
              const C x = cast_value<C>(load_bytes<T>(p[1] + i * s[1]));
              const C y = cast_value<C>(load_bytes<T>(p[2] + i * s[2]));
              store_bytes(p[0] + i * s[0], cast_value<T>(kernel::binary_fn<Op, C>(x, y, scale)));
            }
          });
    }
  });
}

Tensor as_dtype(const Tensor& t, DType dtype) { return core::to_dtype(t, dtype); }

Tensor unary(Unary op, const Tensor& x) {
  return kernel::with_unary(op, [&](auto tag) { return run_unary<decltype(tag)::value>(x); });
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b, DType dtype, double alpha) {
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes());
  Tensor out = empty(shape, {.dtype = dtype, .device = a.device()});
  const Tensor x = as_dtype(a, dtype), y = as_dtype(b, dtype);
  kernel::with_binary(op, [&](auto tag) { run_binary<decltype(tag)::value>(out, x, y, alpha); });
  return out;
}

void binary_(Binary op, const Tensor& self, const Tensor& other, double alpha) {
  HG_CHECK(broadcasts_to(other.sizes(), self.sizes()),
           "in-place op: the other operand of shape {} cannot be broadcast to the shape {} of the "
           "tensor written to",
           other.sizes(), self.sizes());
  // Read `other` in full first when it shares memory with self.
  Tensor y = as_dtype(other, self.dtype());
  if (y.shares_storage(self) && !y.is_same(self)) y = core::clone(y);
  kernel::with_binary(op,
                      [&](auto tag) { run_binary<decltype(tag)::value>(self, self, y, alpha); });
  self.bump_version();
}

Tensor compare(Compare op, const Tensor& a, const Tensor& b, DType dtype) {
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes());
  Tensor out = empty(shape, {.dtype = kBool, .device = a.device()});
  const Tensor x = core::expand(as_dtype(a, dtype), shape);
  const Tensor y = core::expand(as_dtype(b, dtype), shape);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    for_each_row<3>(shape,
                    {static_cast<char*>(out.data_ptr()), static_cast<char*>(x.data_ptr()),
                     static_cast<char*>(y.data_ptr())},
                    {byte_strides(out), byte_strides(x), byte_strides(y)},
                    [op](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
                      for (int64_t i = 0; i < n; ++i) {
                        const C u = cast_value<C>(load_bytes<T>(p[1] + i * s[1]));
                        const C v = cast_value<C>(load_bytes<T>(p[2] + i * s[2]));
                        bool r = false;
                        switch (op) {
                          case Compare::Eq:
                            r = u == v;
                            break;
                          case Compare::Ne:
                            r = u != v;
                            break;
                          case Compare::Lt:
                            r = u < v;
                            break;
                          case Compare::Le:
                            r = u <= v;
                            break;
                          case Compare::Gt:
                            r = u > v;
                            break;
                          case Compare::Ge:
                            r = u >= v;
                            break;
                        }
                        store_bytes(p[0] + i * s[0], r);
                      }
                    });
  });
  return out;
}

Tensor threshold_backward(const Tensor& grad, const Tensor& x, double threshold) {
  HG_CHECK(grad.sizes() == x.sizes() && grad.dtype() == x.dtype(),
           "threshold_backward: expected a gradient of the input's shape {} and dtype {}, got {} "
           "and {}",
           x.sizes(), x.dtype(), grad.sizes(), grad.dtype());
  Tensor out = empty(x.sizes(), x.options());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      HG_ERROR("threshold_backward: bool tensors are not supported");
    } else {
      using C = compute_t<T>;
      const C limit = cast_value<C>(threshold);
      const T zero = cast_value<T>(C(0));
      for_each_row<3>(x.sizes(), {byte_data(out), byte_data(grad), byte_data(x)},
                      {byte_strides(out), byte_strides(grad), byte_strides(x)},
                      [=](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
                        if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
                          T* o = reinterpret_cast<T*>(p[0]);
                          const T* g = reinterpret_cast<const T*>(p[1]);
                          const T* v = reinterpret_cast<const T*>(p[2]);
#if defined(__x86_64__)
                          if constexpr (std::is_same_v<T, float>) {
                            if (cpu_has_avx512f()) {
                              return zero_where_at_most_floats_avx512(o, g, v, limit, n);
                            }
                          }
#endif
                          if constexpr ((std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)) {
                            if (limit == C(0)) return zero_where_not_positive_16bit(o, g, v, n);
                          }
                          for (int64_t i = 0; i < n; ++i) {
                            const T gi = g[i];  // read either way: a select, not a branch
                            o[i] = cast_value<C>(v[i]) <= limit ? zero : gi;
                          }
                          return;
                        }
                        for (int64_t i = 0; i < n; ++i) {
                          const T g = load_bytes<T>(p[1] + i * s[1]);
                          const C v = cast_value<C>(load_bytes<T>(p[2] + i * s[2]));
                          store_bytes(p[0] + i * s[0], v <= limit ? zero : g);
                        }
                      });
    }
  });
  return out;
}

Tensor clamp(const Tensor& x, std::optional<double> low, std::optional<double> high) {
  Tensor out = empty(x.sizes(), x.options());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      HG_ERROR("clamp: bool tensors are not supported");
    } else {
      using C = compute_t<T>;
      const bool has_low = low.has_value(), has_high = high.has_value();
      const C lo = has_low ? cast_value<C>(*low) : C(0);
      const C hi = has_high ? cast_value<C>(*high) : C(0);
      for_each_row<2>(x.sizes(),
                      {static_cast<char*>(out.data_ptr()), static_cast<char*>(x.data_ptr())},
                      {byte_strides(out), byte_strides(x)},
                      [=](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
                        for (int64_t i = 0; i < n; ++i) {
                          C v = cast_value<C>(load_bytes<T>(p[1] + i * s[1]));
                          if (has_low && v < lo) v = lo;
                          if (has_high && v > hi) v = hi;
                          store_bytes(p[0] + i * s[0], cast_value<T>(v));
                        }
                      });
    }
  });
  return out;
}

template <bool kDivide>
Tensor addc(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype) {
  const Shape shape = broadcast_shapes(broadcast_shapes(self.sizes(), t1.sizes()), t2.sizes());
  Tensor out = empty(shape, {.dtype = dtype, .device = self.device()});
  const Tensor a = core::expand(as_dtype(self, dtype), shape);
  const Tensor b = core::expand(as_dtype(t1, dtype), shape);
  const Tensor c = core::expand(as_dtype(t2, dtype), shape);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      HG_ERROR("{}: bool tensors are not supported", kDivide ? "addcdiv" : "addcmul");
    } else {
      using C = compute_t<T>;
      const C v = cast_value<C>(value);
      for_each_row<4>(shape,
                      {static_cast<char*>(out.data_ptr()), static_cast<char*>(a.data_ptr()),
                       static_cast<char*>(b.data_ptr()), static_cast<char*>(c.data_ptr())},
                      {byte_strides(out), byte_strides(a), byte_strides(b), byte_strides(c)},
                      [v](std::array<char*, 4> p, std::array<int64_t, 4> s, int64_t n) {
                        for (int64_t i = 0; i < n; ++i) {
                          const C x = cast_value<C>(load_bytes<T>(p[1] + i * s[1]));
                          const C y = cast_value<C>(load_bytes<T>(p[2] + i * s[2]));
                          const C z = cast_value<C>(load_bytes<T>(p[3] + i * s[3]));
                          store_bytes(p[0] + i * s[0],
                                      cast_value<T>(kDivide ? x + v * y / z : x + v * y * z));
                        }
                      });
    }
  });
  return out;
}

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype) {
  return addc<false>(self, t1, t2, value, dtype);
}

Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype) {
  return addc<true>(self, t1, t2, value, dtype);
}

// ---- masked_fill, where ---------------------------------------------------------------------

// Pure data movement for where: elements copied as unsigned integers of their width.

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  kernel::index_checks::check_tensor(x, "masked_fill", "input", kCPU);
  kernel::index_checks::check_tensor(mask, "masked_fill", "mask", kCPU);
  const Shape shape = kernel::index_checks::masked_fill_shape(x, mask);
  Tensor out = empty(shape, x.dtype());
  if (out.numel() == 0) return out;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T fill = scalar_value_as<T>(value, "masked_fill");
    const auto row = [fill](std::array<char*, 3> ptrs, std::array<int64_t, 3> step, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        const bool masked = load_bytes<bool>(ptrs[2] + k * step[2]);
        store_bytes<T>(ptrs[0] + k * step[0], masked ? fill : load_bytes<T>(ptrs[1] + k * step[1]));
      }
    };
    const Tensor x_spread = x.expand(shape), mask_spread = mask.expand(shape);
    for_each_row<3>(shape, {byte_data(out), byte_data(x_spread), byte_data(mask_spread)},
                    {byte_strides(out), byte_strides(x_spread), byte_strides(mask_spread)}, row);
  });
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  kernel::index_checks::check_tensor(condition, "where", "condition", kCPU);
  kernel::index_checks::check_tensor(a, "where", "a", kCPU);
  kernel::index_checks::check_tensor(b, "where", "b", kCPU);
  const Shape shape = kernel::index_checks::where_shape(condition, a, b);
  Tensor out = empty(shape, a.dtype());
  if (out.numel() == 0) return out;
  const Tensor c_spread = condition.expand(shape), a_spread = a.expand(shape),
               b_spread = b.expand(shape);
  kernel::visit_bits(a.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const auto row = [](std::array<char*, 4> ptrs, std::array<int64_t, 4> step, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        const bool pick_a = load_bytes<bool>(ptrs[1] + k * step[1]);
        const char* src = pick_a ? ptrs[2] + k * step[2] : ptrs[3] + k * step[3];
        store_bytes<U>(ptrs[0] + k * step[0], load_bytes<U>(src));
      }
    };
    for_each_row<4>(
        shape, {byte_data(out), byte_data(c_spread), byte_data(a_spread), byte_data(b_spread)},
        {byte_strides(out), byte_strides(c_spread), byte_strides(a_spread), byte_strides(b_spread)},
        row);
  });
  return out;
}

}  // namespace

const kernel::ElementwiseKernels elementwise_kernels = HG_ELEMENTWISE_KERNELS;

}  // namespace hg::cpu
