// What the CPU kernels (cpu/) and the CUDA kernels (cuda/) share: the dispatch from a kind
// (kinds.h) or an element width to a compile-time value or type, the formulas of the
// elementwise kinds, and wrapping addition. Free of fmt, so .cu files include it too; the
// formulas are HG_HOST_DEVICE and use the std:: math functions, which CUDA device code has
// (the float overloads for float: nothing is computed in double).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "halfgrad/core/dtype.h"
#include "halfgrad/core/host_device.h"
#include "halfgrad/kernel/constants.h"
#include "halfgrad/kernel/kinds.h"

namespace hg::kernel {

// ---- dispatch ------------------------------------------------------------------------------

// Calls f(std::integral_constant<E, V>{}) for the V among Vs equal to value; the last V when
// none is (only a value outside its enum's list).
template <auto V, auto... Vs, class F>
decltype(auto) with_value(decltype(V) value, F&& f) {
  if constexpr (sizeof...(Vs) == 0) {
    return f(std::integral_constant<decltype(V), V>{});
  } else {
    if (value == V) return f(std::integral_constant<decltype(V), V>{});
    return with_value<Vs...>(value, f);
  }
}

// Calls f(std::integral_constant<Unary, K>{}) for the kind K equal to op (every line of
// unary.def).
template <class F>
decltype(auto) with_unary(Unary op, F&& f) {
  switch (op) {
#define HG_UNARY(kind, takes_integers, formula) \
  case Unary::kind:                             \
    return f(std::integral_constant<Unary, Unary::kind>{});
#include "halfgrad/kernel/unary.def"
#undef HG_UNARY
  }
  return f(std::integral_constant<Unary, Unary::Neg>{});  // not reached: op is a listed kind
}

template <class F>
decltype(auto) with_binary(Binary op, F&& f) {
  using B = Binary;
  return with_value<B::Add, B::Sub, B::Mul, B::Div, B::Pow, B::Maximum, B::Minimum, B::Fmod,
                    B::Remainder, B::Atan2, B::Hypot, B::FloorDiv, B::TruncDiv>(op, f);
}

// Calls f(TypeTag<U>{}) with U the unsigned integer as wide as one element (1, 2, 4 or 8
// bytes; any other width is taken as 8). Kernels that only move elements move these.
template <class F>
decltype(auto) visit_bits(size_t element_size, F&& f) {
  switch (element_size) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    default:
      return f(TypeTag<uint64_t>{});
  }
}

// ---- formulas ------------------------------------------------------------------------------

// The unsigned type an integer C's arithmetic wraps in: C's width, but at least 32 bits (an
// 8- or 16-bit unsigned value is promoted to int, where a product can overflow).
template <class C>
using wrap_t = std::conditional_t<(sizeof(C) < 4), uint32_t, std::make_unsigned_t<C>>;

// True for a divisor of -1 (never for unsigned C, where C(-1) is the largest value).
template <class C>
HG_HOST_DEVICE inline bool is_minus_one(C b) {
  if constexpr (std::is_signed_v<C>) {
    return b == C(-1);
  } else {
    return false;
  }
}

// Whether a value is below zero (never for unsigned C).
template <class C>
HG_HOST_DEVICE inline bool is_negative(C v) {
  if constexpr (std::is_signed_v<C> || !std::is_integral_v<C>) {
    return v < C(0);
  } else {
    return false;
  }
}

// Whether a unary kind is defined on integers (unary.def's takes_integers); the others take
// floating tensors only.
constexpr bool unary_takes_integers(Unary op) {
  switch (op) {
#define HG_UNARY(kind, takes_integers, formula) \
  case Unary::kind:                             \
    return takes_integers;
#include "halfgrad/kernel/unary.def"
#undef HG_UNARY
  }
  return false;
}

// The formulas unary.def names that take more than an expression, in the compute type C (their
// constants: constants.h).

// x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: 1 + erf(x / sqrt 2) would cancel for negative x
// and keep only a few correct digits in float.
template <class C>
HG_HOST_DEVICE inline C gelu_erf(C x) {
  return C(0.5) * x * std::erfc(-x * C(kSqrtHalf));
}
template <class C>
HG_HOST_DEVICE inline C gelu_erf_grad(C x) {
  const C cdf = C(0.5) * std::erfc(-x * C(kSqrtHalf));
  return cdf + x * C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
}
// 0.5 x (1 + tanh u) = x sigmoid(2u), which does not cancel for negative u.
template <class C>
HG_HOST_DEVICE inline C gelu_tanh(C x) {
  const C inner = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
  return x / (C(1) + std::exp(C(-2) * inner));
}
// Its derivative 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh u, in the same terms: with
// e = exp(-2u) and s = sigmoid(2u) = 1 / (1 + e), 0.5 (1 + t) = s and 0.5 (1 - t^2) = 2 e s^2 =
// 2 s / (1 + 1/e) (finite for e = 0 and e = inf). One exp, where tanh cost six (`hg-bench-ops
// --only vector_math`: SLEEF's vector tanh 102 us over 110k floats, its exp 17), and no 1 - t t
// cancelling as |t| -> 1.
template <class C>
HG_HOST_DEVICE inline C gelu_tanh_grad(C x) {
  const C inner = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
  const C e = std::exp(C(-2) * inner);
  const C s = C(1) / (C(1) + e);
  const C d_inner = C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCoef) * x * x);
  return s + C(2) * x * (s / (C(1) + C(1) / e)) * d_inner;
}

// The inverse of erf on (-1, 1): +-inf at +-1, NaN outside. On the GPU, CUDA's erfinvf and
// erfinv. On the host, in double: Giles's single-precision approximation ("Approximating the
// erfinv function", GPU Computing Gems, 2011) as the start, then two Newton steps on
// erf(x) - y, which take its 1e-7 relative error below double's rounding.
template <class C>
HG_HOST_DEVICE inline C erfinv_of(C y) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<C, double>) {
    return ::erfinv(y);
  } else {
    return C(::erfinvf(float(y)));
  }
#else
  const double v = double(y);
  if (!(v > -1.0 && v < 1.0)) {
    if (v == 1.0) return C(std::numeric_limits<double>::infinity());
    if (v == -1.0) return C(-std::numeric_limits<double>::infinity());
    return C(std::numeric_limits<double>::quiet_NaN());
  }
  double w = -std::log((1.0 - v) * (1.0 + v)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * v;
  for (int step = 0; step < 2; ++step) {
    x -= (std::erf(x) - v) / (kTwoOverSqrtPi * std::exp(-x * x));
  }
  return C(x);
#endif
}

// x relu6(x + 3) / 6, as torch's hardswish: 0 up to -3, x from 3, x (x + 3) / 6 between (NaN
// stays NaN).
template <class C>
HG_HOST_DEVICE inline C hardswish(C x) {
  if (x <= C(-3)) return C(0);
  if (x >= C(3)) return x;
  return x * (x + C(3)) / C(6);
}
// x tanh(softplus(x)), softplus with torch's threshold 20 (where it is x).
template <class C>
HG_HOST_DEVICE inline C mish(C x) {
  return x * std::tanh(x > C(20) ? x : std::log1p(std::exp(x)));
}

// The rounding kinds: integers pass as they are (torch keeps an integer tensor's values).
template <class C>
HG_HOST_DEVICE inline C floor_of(C x) {
  if constexpr (std::is_integral_v<C>) {
    return x;
  } else {
    return std::floor(x);
  }
}
template <class C>
HG_HOST_DEVICE inline C ceil_of(C x) {
  if constexpr (std::is_integral_v<C>) {
    return x;
  } else {
    return std::ceil(x);
  }
}
template <class C>
HG_HOST_DEVICE inline C trunc_of(C x) {
  if constexpr (std::is_integral_v<C>) {
    return x;
  } else {
    return std::trunc(x);
  }
}
// Round half to even, as torch.round (C's nearbyint in the default rounding mode), written
// without the rounding mode: floor, then up when the rest is above a half, or a half and the
// floor odd. x - floor(x) is exact in floating point. A zero result keeps x's sign (-0.3 ->
// -0); NaN and the infinities come back as they are.
template <class C>
HG_HOST_DEVICE inline C round_half_even(C x) {
  if constexpr (std::is_integral_v<C>) {
    return x;
  } else {
    const C low = std::floor(x), rest = x - low;
    const bool up = rest > C(0.5) || (rest == C(0.5) && std::fmod(low, C(2)) != C(0));
    const C rounded = up ? low + C(1) : low;
    return rounded == C(0) ? std::copysign(C(0), x) : rounded;
  }
}

// Op(x) in the compute type C: unary.def's formula for Op.
template <Unary Op, class C>
HG_HOST_DEVICE inline C unary_fn(C x) {
#define HG_UNARY(kind, takes_integers, formula) \
  if constexpr (Op == Unary::kind) {            \
    return formula;                             \
  } else
#include "halfgrad/kernel/unary.def"
#undef HG_UNARY
  { static_assert(Op != Op, "a kind without a line in unary.def"); }
}

// Op(a, b) in the compute type C; alpha scales b for Add and Sub, and for Mul, Div and Pow of
// floating C (op(a, alpha * b); 1 * b is b exactly): NOTE [Number operands of 16-bit ops].
template <Binary Op, class C>
HG_HOST_DEVICE inline C binary_fn(C a, C b, C alpha) {
  if constexpr (Op == Binary::Add) {
    return a + alpha * b;
  } else if constexpr (Op == Binary::Sub) {
    return a - alpha * b;
  } else if constexpr (Op == Binary::Mul) {
    if constexpr (std::is_integral_v<C>) {
      return a * b;
    } else {
      return a * (alpha * b);
    }
  } else if constexpr (Op == Binary::Div) {
    if constexpr (std::is_integral_v<C>) {
      return a / b;
    } else {
      return a / (alpha * b);
    }
  } else if constexpr (Op == Binary::Pow) {
    if constexpr (!std::is_integral_v<C>) b = alpha * b;
    if constexpr (std::is_integral_v<C>) {
      C result = 1;
      for (C e = b; e > 0; --e) result *= a;
      return is_negative(b) ? C(a == 1 ? 1 : 0) : result;
    } else {
      return std::pow(a, b);
    }
  } else if constexpr (Op == Binary::Maximum) {
    if constexpr (!std::is_integral_v<C>) {
      if (a != a || b != b) return a + b;  // NaN propagates
    }
    return a > b ? a : b;
  } else if constexpr (Op == Binary::Minimum) {
    if constexpr (!std::is_integral_v<C>) {
      if (a != a || b != b) return a + b;
    }
    return a < b ? a : b;
  } else if constexpr (Op == Binary::Fmod || Op == Binary::Remainder) {
    C mod;
    if constexpr (std::is_integral_v<C>) {
      // The op layer refuses an integer divisor of 0; -1 divides everything (and the minimum
      // value % -1 would trap).
      if (b == C(0) || is_minus_one(b)) return C(0);
      mod = C(a % b);
    } else {
      mod = std::fmod(a, b);
    }
    if constexpr (Op == Binary::Remainder) {
      if (mod != C(0) && (is_negative(b) != is_negative(mod))) mod += b;
    }
    return mod;
  } else if constexpr (Op == Binary::Atan2) {
    if constexpr (std::is_integral_v<C>) {
      return C(std::atan2(double(a), double(b)));  // not reached: the op computes in floats
    } else {
      return std::atan2(a, b);
    }
  } else if constexpr (Op == Binary::Hypot) {
    if constexpr (std::is_integral_v<C>) {
      return C(std::hypot(double(a), double(b)));  // not reached: the op computes in floats
    } else {
      return std::hypot(a, b);
    }
  } else {
    static_assert(Op == Binary::FloorDiv || Op == Binary::TruncDiv);
    if constexpr (std::is_integral_v<C>) {
      // The op layer refuses a divisor of 0; -1 negates (wrapping the minimum value).
      if (b == C(0)) return C(0);
      if (is_minus_one(b)) {  // negation, wrapping the minimum value (no signed overflow)
        using U = wrap_t<C>;
        return C(U(0) - U(a));
      }
      C q = C(a / b);
      if (Op == Binary::FloorDiv && (a % b != C(0)) && (is_negative(a) != is_negative(b))) q -= 1;
      return q;
    } else if constexpr (Op == Binary::TruncDiv) {
      return trunc_of(a / b);
    } else {
      // torch's floor division: the exact quotient of a - fmod(a, b), rounded down, so that
      // a // b and fmod agree (floor(a / b) can round across a whole number).
      if (b == C(0)) return a / b;
      const C mod = std::fmod(a, b);
      C quotient = (a - mod) / b;
      if (mod != C(0) && ((b < C(0)) != (mod < C(0)))) quotient -= C(1);
      if (quotient == C(0)) return std::copysign(C(0), a / b);
      C floored = floor_of(quotient);
      if (quotient - floored > C(0.5)) floored += C(1);
      return floored;
    }
  }
}

// NOTE [Sort keys] The unsigned key whose order is the sort order of an element of `dtype`
// given as its bits (the low element_size bytes of `bits`): -inf < ... < -0 == +0 < ... < inf <
// NaN for the floating dtypes (NaN the largest, every NaN equal, as torch's sort), two's
// complement order for signed integers, the bits' order for uint8, false < true. Descending flips
// the key within its width, so that a stable sort of the keys keeps equal elements in their order
// either way. Both backends sort these keys: the CPU and CUDA orders are one order.
HG_HOST_DEVICE inline uint64_t sort_key(uint64_t bits, DType dtype, bool descending) {
  const int width = int(element_size(dtype)) * 8;
  const uint64_t mask = width == 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
  const uint64_t sign = uint64_t(1) << (width - 1);
  bits &= mask;
  uint64_t key;
  if (dtype == kBool) {
    key = bits != 0 ? 1 : 0;
  } else if (is_floating_point(dtype)) {
    const uint64_t infinity = dtype == kFloat16    ? 0x7c00u
                              : dtype == kBFloat16 ? 0x7f80u
                              : dtype == kFloat32  ? 0x7f800000u
                                                   : 0x7ff0000000000000u;
    const uint64_t magnitude = bits & (sign - 1);
    if (magnitude > infinity) {
      key = mask;  // NaN
    } else if (magnitude == 0) {
      key = sign;  // either zero
    } else {
      key = (bits & sign) != 0 ? (~bits & mask) : (bits | sign);
    }
  } else if (is_unsigned(dtype)) {
    key = bits;
  } else {
    key = bits ^ sign;
  }
  return descending ? (~key & mask) : key;
}

// a + b in an accumulation type: bool adds as `or`, integers wrap modulo 2^n (as PyTorch's
// do, without C++'s undefined signed overflow).
template <class A>
HG_HOST_DEVICE inline A add_wrapping(A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    return a || b;
  } else if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return A(U(a) + U(b));
  } else {
    return a + b;
  }
}

// ---- scans -----------------------------------------------------------------------------------

// The op a scan kind runs under (in its errors).
constexpr const char* scan_name(Scan kind) {
  return kind == Scan::Sum ? "cumsum" : kind == Scan::Prod ? "cumprod" : "logcumsumexp";
}

template <class F>
decltype(auto) with_scan(Scan kind, F&& f) {
  return with_value<Scan::Sum, Scan::Prod, Scan::LogSumExp>(kind, f);
}

// A scan's running value before the first element, and the step that folds one more in, in
// the accumulator type A (float, double or int64; LogSumExp takes floating A only). Integers
// wrap modulo 2^64 (as PyTorch's do). LogSumExp is log(e^a + e^b) as max + log1p(e^-|a - b|):
// -inf is its identity, equal infinities stay infinite, NaN propagates.
template <Scan K, class A>
HG_HOST_DEVICE inline A scan_identity() {
  if constexpr (K == Scan::Sum) {
    return A(0);
  } else if constexpr (K == Scan::Prod) {
    return A(1);
  } else {
    return -std::numeric_limits<A>::infinity();
  }
}
template <Scan K, class A>
HG_HOST_DEVICE inline A scan_combine(A a, A b) {
  if constexpr (K == Scan::Sum) {
    return add_wrapping(a, b);
  } else if constexpr (K == Scan::Prod) {
    if constexpr (std::is_integral_v<A>) {
      return A(uint64_t(a) * uint64_t(b));
    } else {
      return a * b;
    }
  } else {
    static_assert(!std::is_integral_v<A>, "logcumsumexp takes floating values");
    if (a != a || b != b) return a + b;
    if (a == b) return a + A(0.69314718055994530942);  // log 2; -inf and inf stay
    const A high = a > b ? a : b, low = a > b ? b : a;
    return high + std::log1p(std::exp(low - high));
  }
}

}  // namespace hg::kernel
