// Value conversions between the dtypes' C++ types, and the compute type of each storage
// type. Every kernel converts through here, so there is one place where rounding happens.
//
// NOTE [Storage dtype is not compute dtype] float16 and bfloat16 are storage formats: a
// kernel loads them as float (compute_t<Half> is float), computes, and rounds once when it
// stores the result. float32/float64/integers compute in their own type.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "halfgrad/core/float8.h"
#include "halfgrad/core/half.h"

namespace hg {

template <class T>
struct ComputeType {
  using type = T;
};
template <>
struct ComputeType<Half> {
  using type = float;
};
template <>
struct ComputeType<BFloat16> {
  using type = float;
};
template <class T>
using compute_t = typename ComputeType<T>::type;

template <class T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
inline constexpr bool is_floating_v =
    std::is_floating_point_v<T> || is_reduced_float_v<T> || is_float8_v<T>;

namespace detail {

// int64 -> double rounding to odd: exact below 2^53; above, the dropped bits are folded into
// the last kept bit. A value rounded to odd at 53 bits rounds correctly to any format of at
// most 51 bits, so int64 -> float16/bfloat16 rounds once, like every other conversion.
constexpr double int64_to_double_round_to_odd(int64_t value) {
  const bool negative = value < 0;
  uint64_t magnitude = negative ? uint64_t(0) - uint64_t(value) : uint64_t(value);
  const int width = std::bit_width(magnitude);
  if (width <= 53) return negative ? -double(magnitude) : double(magnitude);
  const int shift = width - 53;
  const uint64_t dropped = magnitude & ((uint64_t(1) << shift) - 1);
  uint64_t kept = magnitude >> shift;
  if (dropped) kept |= 1;
  double result = double(kept);  // exact: kept < 2^53
  for (int i = 0; i < shift; ++i) result *= 2.0;
  return negative ? -result : result;
}

}  // namespace detail

// True when `value` (a floating value) converts to the integer type To without leaving its
// range: truncation toward zero must land inside To. NaN and inf never fit.
template <class To, class From>
constexpr bool fits_in_integer(From value) {
  static_assert(std::is_integral_v<To> && !std::is_same_v<To, bool>);
  const double v = static_cast<double>(value);
  if constexpr (std::is_same_v<To, int64_t>) {
    return v >= -9223372036854775808.0 && v < 9223372036854775808.0;  // [-2^63, 2^63)
  } else {  // truncation lands in [min, max]: min - 1 and max + 1 are exact in double
    return v > double(std::numeric_limits<To>::min()) - 1.0 &&
           v < double(std::numeric_limits<To>::max()) + 1.0;
  }
}

// True when an integer number (a Scalar, as fill_ and the ops' number operands take it) may
// be stored in the integer type To: within To's range, or for uint8 within [-255, 255] (a
// negative number wraps, as c10's checked conversion lets it, so x - 1 and x + (-1) agree).
template <class To>
constexpr bool integer_fits(int64_t value) {
  static_assert(std::is_integral_v<To> && !std::is_same_v<To, bool>);
  constexpr int64_t max = int64_t(std::numeric_limits<To>::max());
  if constexpr (std::is_same_v<To, int64_t>) {
    return true;
  } else if constexpr (std::is_unsigned_v<To>) {
    return value >= -max && value <= max;
  } else {
    return value >= int64_t(std::numeric_limits<To>::min()) && value <= max;
  }
}

// Converts value to To with the rules of NOTE [Float formats] in half.h: floating results
// are rounded once, to nearest even; floating -> integer truncates toward zero (callers check
// fits_in_integer first: out of range is an error, never undefined behaviour); integer ->
// narrower integer wraps modulo 2^n as in C++20; anything -> bool is `value != 0`. A float8
// result overflows as `overflow` says (NOTE [Float8 formats] in float8.h); other results
// ignore it.
template <class To, class From>
constexpr To cast_value(From value, Overflow overflow = Overflow::NonFinite) {
  static_cast<void>(overflow);  // read by the float8 branches only
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (is_reduced_float_v<From> || is_float8_v<From>) {
      return static_cast<float>(value) != 0.0f;
    } else {
      return value != From(0);
    }
  } else if constexpr (is_reduced_float_v<From> || is_float8_v<From>) {
    return cast_value<To>(static_cast<float>(value), overflow);  // widening is exact
  } else if constexpr (is_float8_v<To>) {
    if constexpr (std::is_same_v<From, float> || std::is_same_v<From, double>) {
      return To(value, overflow);
    } else if constexpr (std::is_same_v<From, int64_t>) {
      return To(detail::int64_to_double_round_to_odd(value), overflow);
    } else {
      return To(static_cast<double>(value), overflow);  // int32, int16, int8, uint8: exact
    }
  } else if constexpr (is_reduced_float_v<To>) {
    if constexpr (std::is_same_v<From, float> || std::is_same_v<From, double>) {
      return To(value);
    } else if constexpr (std::is_same_v<From, int64_t>) {
      return To(detail::int64_to_double_round_to_odd(value));
    } else {
      return To(static_cast<double>(value));  // int32, bool: exact in double
    }
  } else {
    return static_cast<To>(value);
  }
}

}  // namespace hg
