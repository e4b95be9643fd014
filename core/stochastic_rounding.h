// Stochastic rounding of one value to float16, bfloat16 or a float8 format, from one 32-bit
// Philox word: the functions to(dtype, Rounding::Stochastic) and the bf16_params optimizers use.
//
// NOTE [Stochastic rounding]
//
// A finite x between the neighbouring values lo < hi of the destination (its grid taken with
// an unbounded exponent, as in NOTE [Rounding to a narrower format]) rounds to the one of
// larger magnitude with probability (|x| - |near|) / (hi - lo), |near| the smaller magnitude,
// else to the smaller: E[result] = x. The decision reads one 32-bit word w of the Philox
// stream: with frac = (|x| - |near|) / ulp in [0, 1), the magnitude goes up iff w < frac * 2^32.
// That happens with probability ceil(frac * 2^32) / 2^32: exactly frac when frac has at most
// 32 fraction bits, which holds for every float32, float16 or bfloat16 source whose result is
// normal (at most 21 bits are dropped), and within 2^-32 of frac otherwise (float64 sources,
// float32 values far below the destination's smallest normal).
//
//   exact:         a representable x comes out unchanged (frac = 0), its sign kept (-0 too)
//   NaN, inf:      as the round-to-nearest cast (NaN stays NaN; inf is inf, or for float8 what
//                  its overflow mode makes of inf: NaN / inf, or the largest finite value)
//   past the max:  between the largest finite value M and the next grid point M + ulp the
//                  rounding picks M or M + ulp as above; M + ulp (and anything from there on)
//                  is past the range and becomes what the round-to-nearest cast makes of it:
//                  inf for float16 and bfloat16, NaN (e4m3fn) or inf (e5m2) for float8, or M
//                  with saturate. So only values past M can leave the finite range, and the
//                  probability they do grows linearly from 0 at M to 1 at M + ulp.
//   tiny values:   the subnormal grid continues down to 0: below the smallest subnormal s, x
//                  rounds to s with probability |x| / s, else to a zero of x's sign.
//
// Stream. A cast of n elements reserves ceil(n / 4) counter blocks of the generator, like a
// float32 uniform draw (NOTE [Philox stream layout] in random.h): element i (row-major order of
// the source) reads word i % 4 of block first + i / 4, all 32 bits of it. The CPU loop and the
// CUDA kernel call the same functions below on the same words, so they give the same bits.
//
// float32 -> bfloat16 has a shortcut (stochastic_round_bfloat16): the word's top 16 bits
// against the 16 bits the rounding drops, u < dropped, the same decision as the general
// routine's w < frac * 2^32 (both sides are multiples of 2^16), so the same bits.
#pragma once

#include <bit>
#include <cstdint>

#include "halfgrad/core/float8.h"
#include "halfgrad/core/half.h"
#include "halfgrad/core/random.h"

namespace hg {

namespace detail {

// The destination format of a stochastic rounding, and its round-to-nearest cast from double
// (exact for the grid values the rounding produces; past the range per `overflow`).
template <class To>
struct StochasticTarget;
template <>
struct StochasticTarget<Half> {
  using format = Float16Format;
  static constexpr Half nearest(double x, Overflow) { return Half(x); }
};
template <>
struct StochasticTarget<BFloat16> {
  using format = BFloat16Format;
  static constexpr BFloat16 nearest(double x, Overflow) { return BFloat16(x); }
};
template <class Format>
struct StochasticTarget<Float8<Format>> {
  using format = Format;
  static constexpr Float8<Format> nearest(double x, Overflow overflow) {
    return Float8<Format>(x, overflow);
  }
};

// 2^exponent for exponent in [-1022, 1023], built from its bits (exact, no libm).
HG_HOST_DEVICE constexpr double power_of_two(int exponent) {
  return std::bit_cast<double>(uint64_t(exponent + 1023) << 52);
}

}  // namespace detail

// x rounded stochastically to To (Half, BFloat16, Float8_e4m3fn, Float8_e5m2) with the random
// word `word`, per NOTE [Stochastic rounding]; `overflow` applies to float8 destinations.
template <class To>
HG_HOST_DEVICE constexpr To stochastic_round(double x, uint32_t word,
                                             Overflow overflow = Overflow::NonFinite) {
  using Target = detail::StochasticTarget<To>;
  using Format = typename Target::format;
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  const uint64_t magnitude_bits = bits & ~(uint64_t(1) << 63);
  if (magnitude_bits >= (uint64_t(0x7FF) << 52)) return Target::nearest(x, overflow);  // inf, NaN
  // The grid spacing (ulp) at |x|: 2^(e - M) in x's binade e, no finer than the subnormal
  // spacing. A subnormal double lies far below every destination's grid, so -1022 serves it.
  const int biased = int(magnitude_bits >> 52);
  const int exponent = biased == 0 ? -1022 : biased - 1023;
  constexpr int kMinExponent = 1 - Format::bias;
  const int ulp_exponent = (exponent > kMinExponent ? exponent : kMinExponent) -
                           Format::mantissa_bits;
  // |x| in ulps: exact (a power-of-two scaling) and below 2^(M + 1).
  const double in_ulps = std::bit_cast<double>(magnitude_bits) * detail::power_of_two(-ulp_exponent);
  const uint64_t below = uint64_t(in_ulps);
  const double frac = in_ulps - double(below);  // exact
  const bool up = double(word) < frac * 0x1p32;
  const double magnitude = double(below + (up ? 1 : 0)) * detail::power_of_two(ulp_exponent);
  return Target::nearest((bits >> 63) ? -magnitude : magnitude, overflow);
}

// The words a stochastic rounding of n elements reads (NOTE [Stochastic rounding]): ceil(n / 4)
// counter blocks reserved from `generator`, default_generator() when null. The casts on both
// backends and the bf16_params optimizers reserve through here, so they draw alike.
inline Generator::State reserve_rounding_words(Generator* generator, int64_t n) {
  Generator& source = generator != nullptr ? *generator : default_generator();
  return source.reserve_with_seed(uint64_t((n + 3) / 4));
}

// float32 -> bfloat16, the same bits as stochastic_round<BFloat16>(x, word) with integer
// operations only: the dropped 16 bits against the word's top 16 (NOTE [Stochastic rounding]).
HG_HOST_DEVICE constexpr BFloat16 stochastic_round_bfloat16(float x, uint32_t word) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return BFloat16(x);  // NaN stays NaN
  const uint32_t up = (word >> 16) < (bits & 0xFFFFu) ? 1u : 0u;
  return BFloat16::from_bits(uint16_t((bits >> 16) + up));  // a carry moves up a binade, or to inf
}

}  // namespace hg
