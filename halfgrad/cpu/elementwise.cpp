#include "halfgrad/cpu/elementwise.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "halfgrad/core/cast.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/strided_loop.h"
#include "halfgrad/core/view.h"

namespace hg::cpu {

namespace {

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

char* address(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

template <class T>
T load(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <class T>
void store(char* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

// ---- unary ------------------------------------------------------------------------------------

template <Unary Op, class C>
C unary_fn(C x) {
  constexpr double kSqrtHalf = 0.70710678118654752440;
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  constexpr double kSqrt2OverPi = 0.79788456080286535588;
  constexpr double kGeluCoef = 0.044715;
  if constexpr (Op == Unary::Neg) {
    return -x;
  } else if constexpr (Op == Unary::Abs) {
    return x < C(0) ? C(-x) : x;
  } else if constexpr (Op == Unary::Sign) {
    return C((C(0) < x) - (x < C(0)));
  } else if constexpr (Op == Unary::Relu) {
    return x <= C(0) ? C(0) : x;  // NaN stays NaN, as in torch
  } else if constexpr (Op == Unary::Square) {
    return x * x;
  } else if constexpr (Op == Unary::Exp) {
    return std::exp(x);
  } else if constexpr (Op == Unary::Log) {
    return std::log(x);
  } else if constexpr (Op == Unary::Log1p) {
    return std::log1p(x);
  } else if constexpr (Op == Unary::Sqrt) {
    return std::sqrt(x);
  } else if constexpr (Op == Unary::Rsqrt) {
    return C(1) / std::sqrt(x);
  } else if constexpr (Op == Unary::Reciprocal) {
    return C(1) / x;
  } else if constexpr (Op == Unary::Sin) {
    return std::sin(x);
  } else if constexpr (Op == Unary::Cos) {
    return std::cos(x);
  } else if constexpr (Op == Unary::Tanh) {
    return std::tanh(x);
  } else if constexpr (Op == Unary::Sigmoid) {
    return C(1) / (C(1) + std::exp(-x));
  } else if constexpr (Op == Unary::Silu) {
    return x / (C(1) + std::exp(-x));
  } else if constexpr (Op == Unary::Softplus) {  // beta 1, threshold 20 (torch's defaults)
    return x > C(20) ? x : std::log1p(std::exp(x));
  } else if constexpr (Op == Unary::Erf) {
    return std::erf(x);
  } else if constexpr (Op == Unary::Gelu) {
    // x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: 1 + erf(x / sqrt 2) would cancel for
    // negative x and keep only a few correct digits in float.
    return C(0.5) * x * std::erfc(-x * C(kSqrtHalf));
  } else if constexpr (Op == Unary::GeluGrad) {
    const C cdf = C(0.5) * std::erfc(-x * C(kSqrtHalf));
    return cdf + x * C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
  } else if constexpr (Op == Unary::GeluTanh) {
    // 0.5 x (1 + tanh u) = x sigmoid(2u), which does not cancel for negative u.
    const C inner = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
    return x / (C(1) + std::exp(C(-2) * inner));
  } else {  // GeluTanhGrad
    const C inner = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
    const C t = std::tanh(inner);
    const C d_inner = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCoef) * x * x);
    return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * d_inner;
  }
}

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

template <Unary Op>
Tensor run_unary(const Tensor& x) {
  Tensor out = empty(x.sizes(), x.options());
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (std::is_same_v<T, bool>) {
      HG_ERROR("elementwise: bool tensors are not supported here");
    } else if constexpr (std::is_integral_v<T> &&
                         !(Op == Unary::Neg || Op == Unary::Abs || Op == Unary::Sign ||
                           Op == Unary::Relu || Op == Unary::Square)) {
      HG_ERROR("elementwise: expected a floating tensor, got {}", x.dtype());
    } else {
      for_each_row<2>(x.sizes(),
                      {static_cast<char*>(out.data_ptr()), static_cast<char*>(x.data_ptr())},
                      {byte_strides(out), byte_strides(x)},
                      [](std::array<char*, 2> p, std::array<int64_t, 2> s, int64_t n) {
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
                          for (int64_t i = 0; i < n; ++i) {
                            o[i] = cast_value<T>(unary_fn<Op, C>(cast_value<C>(in[i])));
                          }
                          return;
                        }
                        for (int64_t i = 0; i < n; ++i) {
                          const C v = cast_value<C>(load<T>(p[1] + i * s[1]));
                          store(p[0] + i * s[0], cast_value<T>(unary_fn<Op, C>(v)));
                        }
                      });
    }
  });
  return out;
}

// ---- binary -----------------------------------------------------------------------------------

template <Binary Op, class C>
C binary_fn(C a, C b, C alpha) {
  if constexpr (Op == Binary::Add) {
    return a + alpha * b;
  } else if constexpr (Op == Binary::Sub) {
    return a - alpha * b;
  } else if constexpr (Op == Binary::Mul) {
    return a * b;
  } else if constexpr (Op == Binary::Div) {
    return a / b;
  } else if constexpr (Op == Binary::Pow) {
    if constexpr (std::is_integral_v<C>) {
      C result = 1;
      for (C e = b; e > 0; --e) result *= a;
      return b < 0 ? C(a == 1 ? 1 : 0) : result;
    } else {
      return std::pow(a, b);
    }
  } else if constexpr (Op == Binary::Maximum) {
    if constexpr (!std::is_integral_v<C>) {
      if (a != a || b != b) return a + b;  // NaN propagates
    }
    return a > b ? a : b;
  } else {
    if constexpr (!std::is_integral_v<C>) {
      if (a != a || b != b) return a + b;
    }
    return a < b ? a : b;
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
      for_each_row<3>(
          shape, {address(out), address(a), address(b)},
          {byte_strides(out), broadcast_byte_strides(a, shape), broadcast_byte_strides(b, shape)},
          [scale](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
            if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
              T* o = reinterpret_cast<T*>(p[0]);
              const T* x = reinterpret_cast<const T*>(p[1]);
              const T* y = reinterpret_cast<const T*>(p[2]);
              for (int64_t i = 0; i < n; ++i) {
                o[i] = cast_value<T>(
                    binary_fn<Op, C>(cast_value<C>(x[i]), cast_value<C>(y[i]), scale));
              }
              return;
            }
            for (int64_t i = 0; i < n; ++i) {
              const C x = cast_value<C>(load<T>(p[1] + i * s[1]));
              const C y = cast_value<C>(load<T>(p[2] + i * s[2]));
              store(p[0] + i * s[0], cast_value<T>(binary_fn<Op, C>(x, y, scale)));
            }
          });
    }
  });
}

template <class F>
decltype(auto) with_binary(Binary op, F&& f) {
  switch (op) {
    case Binary::Add:
      return f(std::integral_constant<Binary, Binary::Add>{});
    case Binary::Sub:
      return f(std::integral_constant<Binary, Binary::Sub>{});
    case Binary::Mul:
      return f(std::integral_constant<Binary, Binary::Mul>{});
    case Binary::Div:
      return f(std::integral_constant<Binary, Binary::Div>{});
    case Binary::Pow:
      return f(std::integral_constant<Binary, Binary::Pow>{});
    case Binary::Maximum:
      return f(std::integral_constant<Binary, Binary::Maximum>{});
    default:
      return f(std::integral_constant<Binary, Binary::Minimum>{});
  }
}

Tensor as_dtype(const Tensor& t, DType dtype) { return core::to_dtype(t, dtype); }

}  // namespace

Tensor unary(Unary op, const Tensor& x) {
  switch (op) {
#define HG_UNARY_CASE(name) \
  case Unary::name:         \
    return run_unary<Unary::name>(x);
    HG_UNARY_CASE(Neg)
    HG_UNARY_CASE(Exp)
    HG_UNARY_CASE(Log)
    HG_UNARY_CASE(Log1p)
    HG_UNARY_CASE(Sqrt)
    HG_UNARY_CASE(Rsqrt)
    HG_UNARY_CASE(Reciprocal)
    HG_UNARY_CASE(Abs)
    HG_UNARY_CASE(Sin)
    HG_UNARY_CASE(Cos)
    HG_UNARY_CASE(Tanh)
    HG_UNARY_CASE(Sigmoid)
    HG_UNARY_CASE(Relu)
    HG_UNARY_CASE(Gelu)
    HG_UNARY_CASE(GeluTanh)
    HG_UNARY_CASE(Silu)
    HG_UNARY_CASE(Softplus)
    HG_UNARY_CASE(Sign)
    HG_UNARY_CASE(Erf)
    HG_UNARY_CASE(Square)
    HG_UNARY_CASE(GeluGrad)
    HG_UNARY_CASE(GeluTanhGrad)
#undef HG_UNARY_CASE
  }
  __builtin_unreachable();
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b, DType dtype, double alpha) {
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes());
  Tensor out = empty(shape, {.dtype = dtype, .device = a.device()});
  const Tensor x = as_dtype(a, dtype), y = as_dtype(b, dtype);
  with_binary(op, [&](auto tag) { run_binary<decltype(tag)::value>(out, x, y, alpha); });
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
  with_binary(op, [&](auto tag) { run_binary<decltype(tag)::value>(self, self, y, alpha); });
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
                        const C u = cast_value<C>(load<T>(p[1] + i * s[1]));
                        const C v = cast_value<C>(load<T>(p[2] + i * s[2]));
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
                        store(p[0] + i * s[0], r);
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
      for_each_row<3>(x.sizes(), {address(out), address(grad), address(x)},
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
                          for (int64_t i = 0; i < n; ++i) {
                            const T gi = g[i];  // read either way: a select, not a branch
                            o[i] = cast_value<C>(v[i]) <= limit ? zero : gi;
                          }
                          return;
                        }
                        for (int64_t i = 0; i < n; ++i) {
                          const T g = load<T>(p[1] + i * s[1]);
                          const C v = cast_value<C>(load<T>(p[2] + i * s[2]));
                          store(p[0] + i * s[0], v <= limit ? zero : g);
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
                          C v = cast_value<C>(load<T>(p[1] + i * s[1]));
                          if (has_low && v < lo) v = lo;
                          if (has_high && v > hi) v = hi;
                          store(p[0] + i * s[0], cast_value<T>(v));
                        }
                      });
    }
  });
  return out;
}

namespace {

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
                          const C x = cast_value<C>(load<T>(p[1] + i * s[1]));
                          const C y = cast_value<C>(load<T>(p[2] + i * s[2]));
                          const C z = cast_value<C>(load<T>(p[3] + i * s[3]));
                          store(p[0] + i * s[0],
                                cast_value<T>(kDivide ? x + v * y / z : x + v * y * z));
                        }
                      });
    }
  });
  return out;
}

}  // namespace

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype) {
  return addc<false>(self, t1, t2, value, dtype);
}

Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, DType dtype) {
  return addc<true>(self, t1, t2, value, dtype);
}

}  // namespace hg::cpu
