// Half (IEEE binary16) and BFloat16 (bfloat16): 16-bit storage types.
//
// Both are plain structs of bits with no arithmetic operators, so nothing is ever computed
// in 16 bits by accident: kernels widen to float, compute, and round once on the way out.
//
// NOTE [Float formats]
//
//            sign  exponent   mantissa            bias  max            min normal  min subnormal
//   float32   1       8          23                127   3.40e38        2^-126      2^-149
//   float16   1       5          10                 15   65504          2^-14       2^-24
//   bfloat16  1       8           7                127   3.39e38        2^-126      2^-133
//
//   float32  s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm
//   float16  s    eeeee mmmmmmmmmm                 (narrowing drops 13 mantissa bits)
//   bfloat16 s eeeeeeee mmmmmmm                    (the top half of a float32)
//
// NOTE [Rounding to a narrower format]
//
// Narrowing keeps the top mantissa bits and rounds on the dropped ones, to nearest, ties to
// even (RNE). Example, float32 -> float16 for a normal result (13 dropped bits):
//
//   rebased  = bits - ((127 - 15) << 23)          move the exponent to float16's bias
//   rounded  = rebased + 0x0FFF + ((rebased >> 13) & 1)
//                        ^^^^^^   ^^^^^^^^^^^^^^^^^^^^
//                        just below half an ulp, plus 1 if the kept lsb is odd: a tie
//                        then carries up only from an odd value, so ties go to even
//   result   = rounded >> 13                      a mantissa carry may bump the exponent,
//                                                 which is exactly right (1.111.. -> 10.0)
//
// Results that come out at or above the infinity pattern overflow to inf (float16:
// everything >= 65520, the midpoint between 65504 and 2^16). Results below the smallest
// normal become subnormals: the value is divided by the subnormal unit (2^-24 for float16)
// and rounded to an integer with RNE; below half a unit they become a signed zero.
// NaN stays NaN, with its sign and its top payload bits, and is made quiet (the same bits
// x86's F16C instruction gives). Widening (16 -> 32 bits) is exact, and quiets NaN too.
//
// The same routine serves double -> float16 and double -> bfloat16, rounding once from
// the 53-bit value: going through float first could round twice and miss by one ulp.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace hg {

namespace detail {

// A binary floating-point format: kMantissa stored mantissa bits, kExponent exponent bits.
template <int kMantissa, int kExponent>
struct FloatFormat {
  static constexpr int mantissa_bits = kMantissa;
  static constexpr int exponent_bits = kExponent;
  static constexpr int bias = (1 << (kExponent - 1)) - 1;
};
using Float64Format = FloatFormat<52, 11>;
using Float32Format = FloatFormat<23, 8>;
using Float16Format = FloatFormat<10, 5>;
using BFloat16Format = FloatFormat<7, 8>;

// The two cases of rounding a Src magnitude (its bits without the sign) to a narrower format Dst,
// RNE, as described in NOTE [Rounding to a narrower format]; each gives Dst's bits without the
// sign. A normal (or overflowing) result, for magnitudes from Dst's smallest normal up: the
// exponent rebased to Dst's bias and the dropped mantissa bits rounded (a carry goes into the
// exponent; the caller checks for overflow).
template <class Src, class Dst, class SrcBits>
constexpr SrcBits round_normal_magnitude(SrcBits magnitude) {
  constexpr int kDrop = Src::mantissa_bits - Dst::mantissa_bits;
  constexpr SrcBits kOne = 1;
  constexpr int kRebias = Src::bias - Dst::bias;
  SrcBits rebased = magnitude - (SrcBits(kRebias) << Src::mantissa_bits);
  rebased += ((kOne << (kDrop - 1)) - 1) + ((rebased >> kDrop) & 1);
  return rebased >> kDrop;
}

// A subnormal (or zero) result, for magnitudes below Dst's smallest normal: the count of Dst's
// smallest subnormal, rounded to nearest even (a carry into the exponent is the smallest normal).
template <class Src, class Dst, class SrcBits>
constexpr SrcBits round_subnormal_magnitude(SrcBits magnitude) {
  constexpr int kDrop = Src::mantissa_bits - Dst::mantissa_bits;
  constexpr SrcBits kOne = 1;
  constexpr int kRebias = Src::bias - Dst::bias;
  int exponent = int(magnitude >> Src::mantissa_bits);
  SrcBits significand = magnitude & ((kOne << Src::mantissa_bits) - 1);
  if (exponent == 0) {
    exponent = 1;  // Src subnormal: no implicit bit
  } else {
    significand |= kOne << Src::mantissa_bits;
  }
  const int shift = kRebias + kDrop + 1 - exponent;  // >= kDrop + 1 here
  if (shift >= Src::mantissa_bits + 2) return 0;     // below half a unit: zero
  const SrcBits quotient = significand >> shift;
  const SrcBits remainder = significand & ((kOne << shift) - 1);
  const SrcBits halfway = kOne << (shift - 1);
  const bool round_up = remainder > halfway || (remainder == halfway && (quotient & 1));
  return quotient + (round_up ? 1 : 0);
}

// Rounds the bits of a wider format (Src) to a 16-bit format (Dst), RNE, as described in
// NOTE [Rounding to a narrower format].
template <class Src, class Dst, class SrcBits>
constexpr uint16_t round_to_16_bits(SrcBits bits) {
  constexpr int kDrop = Src::mantissa_bits - Dst::mantissa_bits;
  constexpr SrcBits kOne = 1;
  constexpr SrcBits kSrcSign = kOne << (Src::mantissa_bits + Src::exponent_bits);
  constexpr SrcBits kSrcInf = ((kOne << Src::exponent_bits) - 1) << Src::mantissa_bits;
  constexpr uint16_t kDstSign = uint16_t(1u << (Dst::mantissa_bits + Dst::exponent_bits));
  constexpr uint16_t kDstInf = uint16_t(((1u << Dst::exponent_bits) - 1) << Dst::mantissa_bits);
  constexpr uint16_t kDstQuiet = uint16_t(1u << (Dst::mantissa_bits - 1));
  constexpr uint16_t kDstMantissaMask = uint16_t((1u << Dst::mantissa_bits) - 1);
  // The smallest normal of Dst, as Src bits.
  constexpr SrcBits kDstMinNormal = SrcBits(Src::bias - Dst::bias + 1) << Src::mantissa_bits;

  const uint16_t sign = (bits & kSrcSign) ? kDstSign : uint16_t(0);
  const SrcBits magnitude = bits & ~kSrcSign;

  if (magnitude > kSrcInf) {  // NaN: keep sign and top payload, make it quiet
    return uint16_t(sign | kDstInf | kDstQuiet | ((magnitude >> kDrop) & kDstMantissaMask));
  }
  if (magnitude >= kDstMinNormal) {  // normal (or overflowing) result
    const SrcBits result = round_normal_magnitude<Src, Dst>(magnitude);
    return result >= kDstInf ? uint16_t(sign | kDstInf) : uint16_t(sign | result);
  }
  return uint16_t(sign | round_subnormal_magnitude<Src, Dst>(magnitude));
}

constexpr uint16_t float_to_half_bits(float value) {
  return round_to_16_bits<Float32Format, Float16Format>(std::bit_cast<uint32_t>(value));
}

constexpr uint16_t double_to_half_bits(double value) {
  return round_to_16_bits<Float64Format, Float16Format>(std::bit_cast<uint64_t>(value));
}

// float16 -> float32 is exact: rebias the exponent, normalise subnormals, quiet NaN.
constexpr float half_bits_to_float(uint16_t half) {
  const uint32_t sign = uint32_t(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1Fu;
  const uint32_t mantissa = half & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1F) {  // inf, or NaN made quiet
    bits = sign | 0x7F800000u | (mantissa << 13) | (mantissa ? 0x00400000u : 0u);
  } else if (exponent != 0) {  // normal: 127 - 15 = 112
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: mantissa * 2^-24 = 1.f * 2^(top - 24), top = index of the leading 1
    const int top = std::bit_width(mantissa) - 1;
    bits = sign | (uint32_t(top + 103) << 23) | ((mantissa << (23 - top)) & 0x7FFFFFu);
  }
  return std::bit_cast<float>(bits);
}

// float32 -> bfloat16 keeps the top 16 bits and rounds on the low 16. The exponent field is
// the same, so subnormals and overflow to inf fall out of the one addition.
constexpr uint16_t float_to_bfloat16_bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((bits >> 16) | 0x0040u);  // quiet NaN
  return uint16_t((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

constexpr uint16_t double_to_bfloat16_bits(double value) {
  return round_to_16_bits<Float64Format, BFloat16Format>(std::bit_cast<uint64_t>(value));
}

constexpr float bfloat16_bits_to_float(uint16_t bf16) {
  uint32_t bits = uint32_t(bf16) << 16;
  if ((bf16 & 0x7FFFu) > 0x7F80u) bits |= 0x00400000u;  // quiet NaN
  return std::bit_cast<float>(bits);
}

}  // namespace detail

struct Half {
  uint16_t bits = 0;

  Half() = default;
  constexpr explicit Half(float value) : bits(detail::float_to_half_bits(value)) {}
  constexpr explicit Half(double value) : bits(detail::double_to_half_bits(value)) {}
  constexpr explicit operator float() const { return detail::half_bits_to_float(bits); }
  constexpr explicit operator double() const { return detail::half_bits_to_float(bits); }

  static constexpr Half from_bits(uint16_t raw) {
    Half h;
    h.bits = raw;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  constexpr explicit BFloat16(float value) : bits(detail::float_to_bfloat16_bits(value)) {}
  constexpr explicit BFloat16(double value) : bits(detail::double_to_bfloat16_bits(value)) {}
  constexpr explicit operator float() const { return detail::bfloat16_bits_to_float(bits); }
  constexpr explicit operator double() const { return detail::bfloat16_bits_to_float(bits); }

  static constexpr BFloat16 from_bits(uint16_t raw) {
    BFloat16 b;
    b.bits = raw;
    return b;
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);
static_assert(std::is_trivially_copyable_v<Half> && std::is_trivially_copyable_v<BFloat16>);

}  // namespace hg

// numeric_limits, as for the built-in floating types (std::numeric_limits<hg::Half>::max()).
namespace hg::detail {
// What the two 16-bit formats share: signed binary floats with infinities, NaNs and subnormals,
// rounded to nearest.
struct Float16BitLimits {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_denorm_loss = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr bool has_signaling_NaN = true;
  static constexpr std::float_denorm_style has_denorm = std::denorm_present;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr bool traps = false;
  static constexpr bool tinyness_before = false;
  static constexpr int radix = 2;
};
}  // namespace hg::detail

template <>
class std::numeric_limits<hg::Half> : public hg::detail::Float16BitLimits {
 public:
  static constexpr bool is_iec559 = true;
  static constexpr int digits10 = 3;
  static constexpr int max_digits10 = 5;
  static constexpr int min_exponent10 = -4;
  static constexpr int max_exponent10 = 4;
  static constexpr int digits = 11;
  static constexpr int max_exponent = 16;
  static constexpr int min_exponent = -13;
  static constexpr hg::Half min() { return hg::Half::from_bits(0x0400); }      // 2^-14
  static constexpr hg::Half lowest() { return hg::Half::from_bits(0xFBFF); }   // -65504
  static constexpr hg::Half max() { return hg::Half::from_bits(0x7BFF); }      // 65504
  static constexpr hg::Half epsilon() { return hg::Half::from_bits(0x1400); }  // 2^-10
  static constexpr hg::Half infinity() { return hg::Half::from_bits(0x7C00); }
  static constexpr hg::Half quiet_NaN() { return hg::Half::from_bits(0x7E00); }
  static constexpr hg::Half denorm_min() { return hg::Half::from_bits(0x0001); }   // 2^-24
  static constexpr hg::Half round_error() { return hg::Half::from_bits(0x3800); }  // 0.5
  static constexpr hg::Half signaling_NaN() { return hg::Half::from_bits(0x7D00); }
};

template <>
class std::numeric_limits<hg::BFloat16> : public hg::detail::Float16BitLimits {
 public:
  static constexpr bool is_iec559 = false;
  static constexpr int digits10 = 2;
  static constexpr int max_digits10 = 4;
  static constexpr int min_exponent10 = -37;
  static constexpr int max_exponent10 = 38;
  static constexpr int digits = 8;
  static constexpr int max_exponent = 128;
  static constexpr int min_exponent = -125;
  static constexpr hg::BFloat16 min() { return hg::BFloat16::from_bits(0x0080); }  // 2^-126
  static constexpr hg::BFloat16 lowest() { return hg::BFloat16::from_bits(0xFF7F); }
  static constexpr hg::BFloat16 max() { return hg::BFloat16::from_bits(0x7F7F); }      // 3.39e38
  static constexpr hg::BFloat16 epsilon() { return hg::BFloat16::from_bits(0x3C00); }  // 2^-7
  static constexpr hg::BFloat16 infinity() { return hg::BFloat16::from_bits(0x7F80); }
  static constexpr hg::BFloat16 quiet_NaN() { return hg::BFloat16::from_bits(0x7FC0); }
  static constexpr hg::BFloat16 denorm_min() { return hg::BFloat16::from_bits(0x0001); }   // 2^-133
  static constexpr hg::BFloat16 round_error() { return hg::BFloat16::from_bits(0x3F00); }  // 0.5
  static constexpr hg::BFloat16 signaling_NaN() { return hg::BFloat16::from_bits(0x7FA0); }
};
