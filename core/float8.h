// Float8_e4m3fn and Float8_e5m2: the two OCP 8-bit float formats, as storage types with
// exact widening and round-to-nearest-even narrowing, in a saturating and a non-saturating mode.
//
// NOTE [Float8 formats]
//
//                 sign exponent mantissa bias  max    min normal min subnormal inf  NaN
//   float8_e4m3fn  1      4        3       7   448    2^-6       2^-9          no   S.1111.111
//   float8_e5m2    1      5        2      15   57344  2^-14      2^-16         yes  S.11111.xx
//
// e4m3fn ("finite") gives up infinities for one more binade: only S.1111.111 is NaN, so
// S.1111.110 = 1.75 * 2^8 = 448 is the largest value. e5m2 is IEEE-like: the top 8 bits of a
// float16. Like Half and BFloat16 they are structs of bits with no arithmetic: halfgrad only
// converts them (NOTE [Float8 is conversion only] in dtype.h).
//
// Narrowing from float32 or float64 rounds once, to nearest with ties to even, as in
// NOTE [Rounding to a narrower format] (half.h), on the magnitude as if the exponent had no
// top; Half and BFloat16 inputs widen to float first (exactly). A result past the largest
// finite value then depends on the overflow mode:
//
//   Overflow::NonFinite  (torch's .to(), the default)  e4m3fn: NaN   e5m2: inf
//   Overflow::Saturate   (Transformer Engine's casts)  the largest finite value, same sign
//
// "Past the largest finite value" is after rounding: e4m3fn takes everything above 464 (the
// midpoint between 448 and the 480 it cannot hold) to NaN, and 464 itself to 448 (ties to
// the even mantissa 110); e5m2 takes 61440 and above to inf. An infinite input is past the
// range too: NaN or inf when non-saturating, the largest finite value when saturating. NaN
// stays NaN in both modes, with its sign (e4m3fn has one NaN; e5m2's is 0x7F, as torch's).
//
// The conversions are constexpr, so CUDA code (built with --expt-relaxed-constexpr) calls the
// same functions on the device and gets the same bits as the CPU.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "halfgrad/core/half.h"

namespace hg {

// What narrowing to a float8 format does with a value past its largest finite one.
enum class Overflow : uint8_t {
  NonFinite,  // NaN for float8_e4m3fn (it has no inf), inf for float8_e5m2
  Saturate,   // the largest finite value of the sign (inf too)
};

namespace detail {

// A float8 format: FloatFormat's fields plus the codes (sign bit clear) of its special values.
template <int kMantissa, int kExponent, uint8_t kMaxFinite, uint8_t kOverflow>
struct Float8Format : FloatFormat<kMantissa, kExponent> {
  static constexpr uint8_t max_finite_code = kMaxFinite;  // the largest finite magnitude
  static constexpr uint8_t overflow_code = kOverflow;     // where a non-saturating overflow goes
  static constexpr uint8_t nan_code = 0x7F;
};
using Float8E4M3FnFormat = Float8Format<3, 4, 0x7E, 0x7F>;  // overflow -> NaN
using Float8E5M2Format = Float8Format<2, 5, 0x7B, 0x7C>;    // overflow -> inf

// Rounds the bits of float32 or float64 (Src) to a float8 format (Dst), RNE, as described in
// NOTE [Float8 formats].
template <class Src, class Dst, class SrcBits>
constexpr uint8_t round_to_float8_bits(SrcBits bits, Overflow overflow) {
  constexpr SrcBits kOne = 1;
  constexpr SrcBits kSrcSign = kOne << (Src::mantissa_bits + Src::exponent_bits);
  constexpr SrcBits kSrcInf = ((kOne << Src::exponent_bits) - 1) << Src::mantissa_bits;
  constexpr SrcBits kDstMinNormal = SrcBits(Src::bias - Dst::bias + 1) << Src::mantissa_bits;

  const uint8_t sign = (bits & kSrcSign) ? uint8_t(0x80) : uint8_t(0);
  const SrcBits magnitude = bits & ~kSrcSign;
  const uint8_t overflowed =
      overflow == Overflow::Saturate ? Dst::max_finite_code : Dst::overflow_code;

  if (magnitude > kSrcInf) return uint8_t(sign | Dst::nan_code);
  if (magnitude == kSrcInf) return uint8_t(sign | overflowed);
  // A normal or overflowing result (the exponent has no top here), or a subnormal or zero one.
  const SrcBits code = magnitude >= kDstMinNormal ? round_normal_magnitude<Src, Dst>(magnitude)
                                                  : round_subnormal_magnitude<Src, Dst>(magnitude);
  return uint8_t(sign | (code > Dst::max_finite_code ? overflowed : uint8_t(code)));
}

// float8 -> float32 bits, exactly: rebase the exponent, normalise subnormals; NaN comes out
// quiet with its sign (and e5m2's payload bits). Integer operations only, so device code can
// call it too (then __uint_as_float).
template <class Format>
constexpr uint32_t float8_to_float32_bits(uint8_t value) {
  constexpr int kMantissa = Format::mantissa_bits;
  constexpr uint32_t kExponentMask = (1u << Format::exponent_bits) - 1;
  constexpr uint32_t kMantissaMask = (1u << kMantissa) - 1;
  constexpr bool kFinite = Format::overflow_code == Format::nan_code;  // e4m3fn: no inf
  const uint32_t sign = uint32_t(value & 0x80u) << 24;
  uint32_t exponent = (value >> kMantissa) & kExponentMask;
  uint32_t mantissa = value & kMantissaMask;
  const bool special = kFinite ? (value & 0x7Fu) == Format::nan_code : exponent == kExponentMask;
  if (special) {  // e4m3fn's NaN, e5m2's inf and NaNs
    const bool nan = kFinite || mantissa != 0;
    return sign | 0x7F800000u | (nan ? 0x00400000u | (mantissa << (23 - kMantissa)) : 0u);
  }
  if (exponent == 0) {
    if (mantissa == 0) return sign;
    // Subnormal: mantissa * 2^(1 - bias - M). Shift the leading 1 up to the implicit bit.
    exponent = 1;
    while ((mantissa & (1u << kMantissa)) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= kMantissaMask;
  }
  return sign | ((exponent + 127 - Format::bias) << 23) | (mantissa << (23 - kMantissa));
}

template <class Format>
constexpr float float8_bits_to_float(uint8_t value) {
  return std::bit_cast<float>(float8_to_float32_bits<Format>(value));
}

// float32 -> float8 as round_to_float8_bits computes it, without branches, so that a loop of
// casts vectorizes (the same bits for all 2^32 inputs in both modes: tests/core/float8_test.cpp
// checks this function through every float8 cast). Normal results round in the integers as
// there; below the smallest normal, adding 2^(23 + e) (2^-e being the format's smallest
// subnormal) to the magnitude makes the float adder round it to a multiple of 2^-e, to nearest
// even, and the sum's low bits are the code. The sum is at least 2^(23 + e), so neither
// flush-to-zero nor denormals-are-zero changes it (a float32 subnormal input gives code 0
// either way).
template <class Format>
constexpr uint8_t float_to_float8_bits(float value, Overflow overflow) {
  constexpr int kDrop = Float32Format::mantissa_bits - Format::mantissa_bits;
  constexpr uint32_t kRebias = uint32_t(Float32Format::bias - Format::bias);
  constexpr uint32_t kMinNormal = (kRebias + 1) << Float32Format::mantissa_bits;
  constexpr int kSubnormalExponent = Format::bias - 1 + Format::mantissa_bits;  // 2^-e
  constexpr float kMagic = float(1u << (Float32Format::mantissa_bits - kSubnormalExponent));
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  uint32_t rebased = magnitude - (kRebias << Float32Format::mantissa_bits);
  rebased += ((1u << (kDrop - 1)) - 1) + ((rebased >> kDrop) & 1u);
  const uint32_t normal = rebased >> kDrop;
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + kMagic) -
                             std::bit_cast<uint32_t>(kMagic);
  uint32_t code = magnitude < kMinNormal ? subnormal : normal;
  const uint32_t overflowed =
      overflow == Overflow::Saturate ? Format::max_finite_code : Format::overflow_code;
  code = code > Format::max_finite_code ? overflowed : code;
  code = magnitude > 0x7F800000u ? uint32_t(Format::nan_code) : code;  // NaN keeps its sign
  return uint8_t(sign | code);
}

template <class Format>
constexpr uint8_t double_to_float8_bits(double value, Overflow overflow) {
  return round_to_float8_bits<Float64Format, Format>(std::bit_cast<uint64_t>(value), overflow);
}

}  // namespace detail

// A float8 storage type: bits, exact widening, and narrowing from float, double, Half and
// BFloat16 (the 16-bit ones widen to float first, exactly). The two formats are its two
// instances, Float8_e4m3fn and Float8_e5m2.
template <class Format>
struct Float8 {
  using format = Format;
  uint8_t bits = 0;

  Float8() = default;
  constexpr explicit Float8(float value, Overflow overflow = Overflow::NonFinite)
      : bits(detail::float_to_float8_bits<Format>(value, overflow)) {}
  constexpr explicit Float8(double value, Overflow overflow = Overflow::NonFinite)
      : bits(detail::double_to_float8_bits<Format>(value, overflow)) {}
  constexpr explicit Float8(Half value, Overflow overflow = Overflow::NonFinite)
      : Float8(static_cast<float>(value), overflow) {}
  constexpr explicit Float8(BFloat16 value, Overflow overflow = Overflow::NonFinite)
      : Float8(static_cast<float>(value), overflow) {}
  constexpr explicit operator float() const { return detail::float8_bits_to_float<Format>(bits); }
  constexpr explicit operator double() const { return static_cast<float>(*this); }

  static constexpr Float8 from_bits(uint8_t raw) {
    Float8 value;
    value.bits = raw;
    return value;
  }
};

using Float8_e4m3fn = Float8<detail::Float8E4M3FnFormat>;
using Float8_e5m2 = Float8<detail::Float8E5M2Format>;

static_assert(sizeof(Float8_e4m3fn) == 1 && sizeof(Float8_e5m2) == 1);
static_assert(std::is_trivially_copyable_v<Float8_e4m3fn> &&
              std::is_trivially_copyable_v<Float8_e5m2>);

template <class T>
inline constexpr bool is_float8_v =
    std::is_same_v<T, Float8_e4m3fn> || std::is_same_v<T, Float8_e5m2>;

}  // namespace hg
