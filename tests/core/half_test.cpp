// Half and BFloat16: known values checked against bit patterns derived by hand, rounding
// from double done once, numeric_limits and finfo. The exhaustive sweeps are in
// half_exhaustive_test.cpp.
//
// Bit layouts (NOTE [Float formats] in half.h):
//   float16   s eeeee mmmmmmmmmm       value = 1.m * 2^(e - 15), subnormal m * 2^-24
//   bfloat16  s eeeeeeee mmmmmmm       value = 1.m * 2^(e - 127), subnormal m * 2^-133
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <catch2/catch.hpp>

#include "halfgrad/core/dtype.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/half.h"

namespace {

using hg::BFloat16;
using hg::Half;

float float_from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t bits_of(float value) { return std::bit_cast<uint32_t>(value); }

uint16_t half_bits(float value) { return Half(value).bits; }
uint16_t half_bits(double value) { return Half(value).bits; }
uint16_t bfloat16_bits(float value) { return BFloat16(value).bits; }
uint16_t bfloat16_bits(double value) { return BFloat16(value).bits; }

}  // namespace

TEST_CASE("float -> float16: known values", "[half]") {
  // 1.0 = 1.0 * 2^0: e = 0 + 15 = 01111, m = 0          -> 0 01111 0000000000 = 0x3C00
  CHECK(half_bits(1.0f) == 0x3C00);
  // -2.0 = -1.0 * 2^1: e = 16 = 10000                    -> 1 10000 0000000000 = 0xC000
  CHECK(half_bits(-2.0f) == 0xC000);
  // 65504 = (2 - 2^-10) * 2^15: e = 30 = 11110, m = all ones -> 0x7BFF, the largest finite
  CHECK(half_bits(65504.0f) == 0x7BFF);
  // Above 65504 the next step (ulp 32) would be 65536 = 2^16, the infinity pattern 0x7C00.
  // 65519 is below the midpoint 65520, so it rounds down to 65504.
  CHECK(half_bits(65519.0f) == 0x7BFF);
  // 65520 is the midpoint: a tie, and 0x7BFF is odd, so it goes to the even 0x7C00 = inf.
  CHECK(half_bits(65520.0f) == 0x7C00);
  CHECK(half_bits(-65520.0f) == 0xFC00);
  // 0.1f = 0x3DCCCCCD = 1.6000000238 * 2^-4: e = -4 + 15 = 01011; m = 0.6000000238 * 1024 =
  // 614.4 -> 614 = 0x266 (the dropped 0.4 is below half)   -> 0 01011 1001100110 = 0x2E66
  CHECK(half_bits(0.1f) == 0x2E66);
  // -0.0 keeps its sign bit.
  CHECK(half_bits(-0.0f) == 0x8000);
  CHECK(half_bits(0.0f) == 0x0000);
  CHECK(half_bits(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(half_bits(-std::numeric_limits<float>::infinity()) == 0xFC00);
}

TEST_CASE("float -> float16: subnormals and ties", "[half]") {
  // Subnormal results count units of 2^-24 (0x0001), rounded to nearest, ties to even.
  // 2^-24 is exactly one unit.
  CHECK(half_bits(std::ldexp(1.0f, -24)) == 0x0001);
  // 1e-8 = 0.168 units: below half a unit, so +0.
  CHECK(half_bits(1e-8f) == 0x0000);
  CHECK(half_bits(-1e-8f) == 0x8000);
  // 1e-7 = 1.678 units -> 2.
  CHECK(half_bits(1e-7f) == 0x0002);
  // 2^-25 = 0.5 units: a tie between 0 and 1; 0 is even.
  CHECK(half_bits(std::ldexp(1.0f, -25)) == 0x0000);
  // 3 * 2^-26 = 0.75 units: above the tie, so 1.
  CHECK(half_bits(3.0f * std::ldexp(1.0f, -26)) == 0x0001);
  // 3 * 2^-25 = 1.5 units: a tie between 1 and 2, goes up to the even 2.
  CHECK(half_bits(3.0f * std::ldexp(1.0f, -25)) == 0x0002);
  // 5 * 2^-25 = 2.5 units: a tie between 2 and 3, goes down to the even 2.
  CHECK(half_bits(5.0f * std::ldexp(1.0f, -25)) == 0x0002);
  // 2^-14 - 2^-25 = 1023.5 units: a tie between 1023 (0x03FF) and 1024, which is 0x0400, the
  // smallest normal; 1024 is even, so the result carries into the exponent.
  CHECK(half_bits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400);
  // Normal ties, ulp 2^-10 at 1.0: 1 + 2^-11 is halfway between 0x3C00 and 0x3C01 -> even
  // 0x3C00 (down); 1 + 3 * 2^-11 is halfway between 0x3C01 and 0x3C02 -> even 0x3C02 (up).
  CHECK(half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  CHECK(half_bits(1.0f + 3.0f * std::ldexp(1.0f, -11)) == 0x3C02);
  // The smallest float subnormal is far below half a unit: a signed zero.
  CHECK(half_bits(float_from_bits(0x00000001)) == 0x0000);
  CHECK(half_bits(float_from_bits(0x80000001)) == 0x8000);
}

TEST_CASE("float -> float16: NaN is quieted, keeps its sign and top payload bits", "[half]") {
  // NaN -> sign | 0x7C00 (exponent all ones) | 0x0200 (quiet bit) | top 10 payload bits.
  // 0x7F800001: a signaling NaN whose payload is only in the low 13 bits, which are dropped;
  // the quiet bit keeps it a NaN.
  CHECK(half_bits(float_from_bits(0x7F800001)) == 0x7E00);
  // 0xFFA00000: negative signaling NaN, mantissa 0x200000 -> 0x200000 >> 13 = 0x100.
  CHECK(half_bits(float_from_bits(0xFFA00000)) == 0xFF00);
  // 0x7FC02000: quiet NaN, mantissa 0x402000 -> 0x402000 >> 13 = 0x201.
  CHECK(half_bits(float_from_bits(0x7FC02000)) == 0x7E01);
  CHECK(half_bits(std::numeric_limits<float>::quiet_NaN()) == 0x7E00);
}

TEST_CASE("float16 -> float: exact, NaN quieted", "[half]") {
  CHECK(float(Half::from_bits(0x3C00)) == 1.0f);
  CHECK(float(Half::from_bits(0xC000)) == -2.0f);
  CHECK(float(Half::from_bits(0x7BFF)) == 65504.0f);
  CHECK(float(Half::from_bits(0x0001)) == std::ldexp(1.0f, -24));
  CHECK(float(Half::from_bits(0x03FF)) == 1023.0f * std::ldexp(1.0f, -24));
  CHECK(bits_of(float(Half::from_bits(0x8000))) == 0x80000000u);
  CHECK(bits_of(float(Half::from_bits(0x7C00))) == 0x7F800000u);
  // 0x7C01: signaling NaN, payload 1 -> mantissa 1 << 13, plus the quiet bit 0x00400000.
  CHECK(bits_of(float(Half::from_bits(0x7C01))) == 0x7FC02000u);
  // 0xFD00: negative signaling NaN, payload 0x100 -> 0x100 << 13 = 0x200000, quieted.
  CHECK(bits_of(float(Half::from_bits(0xFD00))) == 0xFFE00000u);
}

TEST_CASE("float -> bfloat16: known values", "[half]") {
  // bfloat16 is the top half of a float32, rounded on the low 16 bits.
  // 1.0f = 0x3F800000 -> 0x3F80; -2.0f = 0xC0000000 -> 0xC000.
  CHECK(bfloat16_bits(1.0f) == 0x3F80);
  CHECK(bfloat16_bits(-2.0f) == 0xC000);
  // 0.1f = 0x3DCCCCCD: low half 0xCCCD > 0x8000, so round up -> 0x3DCD.
  CHECK(bfloat16_bits(0.1f) == 0x3DCD);
  // 1e-8f = 0x322BCC77: low half 0xCC77 > 0x8000 -> 0x322C (bfloat16 has float32's range,
  // so 1e-8 is an ordinary normal here).
  CHECK(bits_of(1e-8f) == 0x322BCC77u);
  CHECK(bfloat16_bits(1e-8f) == 0x322C);
  // 65504 = 0x477FE000: low half 0xE000 -> up to 0x4780 = 65536.
  CHECK(bfloat16_bits(65504.0f) == 0x4780);
  // The largest finite bfloat16 0x7F7F = (2 - 2^-7) * 2^127. Above it, halfway to 2^128
  // (the infinity pattern 0x7F80) is 0x7F7F8000: just below stays, the tie goes to the even
  // 0x7F80 = inf, and so does FLT_MAX (0x7F7FFFFF).
  CHECK(bfloat16_bits(float_from_bits(0x7F7F7FFF)) == 0x7F7F);
  CHECK(bfloat16_bits(float_from_bits(0x7F7F8000)) == 0x7F80);
  CHECK(bfloat16_bits(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(bfloat16_bits(-std::numeric_limits<float>::max()) == 0xFF80);
  // Normal ties, ulp 2^-7 at 1.0: 1 + 2^-8 (0x3F808000) -> even 0x3F80 (down);
  // 1 + 3 * 2^-8 (0x3F818000) -> even 0x3F82 (up).
  CHECK(bfloat16_bits(float_from_bits(0x3F808000)) == 0x3F80);
  CHECK(bfloat16_bits(float_from_bits(0x3F818000)) == 0x3F82);
  CHECK(bfloat16_bits(-0.0f) == 0x8000);
  CHECK(bfloat16_bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(bfloat16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
}

TEST_CASE("float -> bfloat16: subnormals are kept, ties to even", "[half]") {
  // bfloat16 subnormal units are 2^-133 = float bits 0x00010000.
  CHECK(bfloat16_bits(std::ldexp(1.0f, -133)) == 0x0001);
  // 2^-134 = 0x00008000 is half a unit: a tie between 0 and 1 -> 0.
  CHECK(bfloat16_bits(std::ldexp(1.0f, -134)) == 0x0000);
  // 3 * 2^-134 = 1.5 units -> even 2 (up); 5 * 2^-134 = 2.5 units -> even 2 (down).
  CHECK(bfloat16_bits(float_from_bits(0x00018000)) == 0x0002);
  CHECK(bfloat16_bits(float_from_bits(0x00028000)) == 0x0002);
  // Just above half a unit rounds up: not flushed to zero.
  CHECK(bfloat16_bits(float_from_bits(0x00008001)) == 0x0001);
  CHECK(bfloat16_bits(float_from_bits(0x80008001)) == 0x8001);
  // The smallest float subnormal (2^-149) is below half a unit: a signed zero.
  CHECK(bfloat16_bits(float_from_bits(0x00000001)) == 0x0000);
  CHECK(bfloat16_bits(float_from_bits(0x80000001)) == 0x8000);
  // The largest bfloat16 subnormal rounds up into the smallest normal 0x0080 (2^-126).
  CHECK(bfloat16_bits(float_from_bits(0x007FFFFF)) == 0x0080);
}

TEST_CASE("bfloat16 NaN: quieted both ways, sign and payload kept", "[half]") {
  // float -> bfloat16: (bits >> 16) | 0x0040.
  // 0x7F800001: payload only in the dropped half; the quiet bit keeps it a NaN.
  CHECK(bfloat16_bits(float_from_bits(0x7F800001)) == 0x7FC0);
  // 0xFF810000: negative signaling NaN, payload 1 in the kept half.
  CHECK(bfloat16_bits(float_from_bits(0xFF810000)) == 0xFFC1);
  // bfloat16 -> float: bits << 16, quiet bit 0x00400000 set on NaN.
  CHECK(bits_of(float(BFloat16::from_bits(0x7F81))) == 0x7FC10000u);
  CHECK(bits_of(float(BFloat16::from_bits(0xFFC0))) == 0xFFC00000u);
  CHECK(bits_of(float(BFloat16::from_bits(0x7F80))) == 0x7F800000u);
  CHECK(bits_of(float(BFloat16::from_bits(0x0001))) == 0x00010000u);
}

TEST_CASE("double -> float16 / bfloat16 rounds once", "[half]") {
  // Rounding a double to float first and then to 16 bits can land on a 16-bit tie that the
  // double was not on. Each case below is a double just above a 16-bit midpoint M, so the
  // right answer rounds up; but the double is within half a float ulp of M, so float(d) == M
  // exactly, and rounding M ties to even, which is down here.
  SECTION("float16, normal") {
    // Between 0x3C00 (1) and 0x3C01 (1 + 2^-10) the midpoint is 1 + 2^-11. d = M + 2^-40;
    // float's ulp at 1 is 2^-23 and 2^-40 < 2^-24, so float(d) = M, whose tie goes to the
    // even 0x3C00. Rounding d itself: above the midpoint, 0x3C01.
    const double midpoint = 1.0 + std::ldexp(1.0, -11);
    const double d = midpoint + std::ldexp(1.0, -40);
    REQUIRE(double(float(d)) == midpoint);
    CHECK(half_bits(float(d)) == 0x3C00);  // the double-rounding answer
    CHECK(half_bits(d) == 0x3C01);
    CHECK(half_bits(-d) == 0xBC01);
  }
  SECTION("float16, subnormal") {
    // 2^-25 is the midpoint between 0 and 0x0001 (2^-24). d = 2^-25 + 2^-60: float's ulp at
    // 2^-25 is 2^-48, so float(d) = 2^-25, which ties to 0. d itself rounds up to 0x0001.
    const double midpoint = std::ldexp(1.0, -25);
    const double d = midpoint + std::ldexp(1.0, -60);
    REQUIRE(double(float(d)) == midpoint);
    CHECK(half_bits(float(d)) == 0x0000);
    CHECK(half_bits(d) == 0x0001);
  }
  SECTION("bfloat16, normal") {
    // Between 0x3F80 (1) and 0x3F81 (1 + 2^-7) the midpoint is 1 + 2^-8. d = M + 2^-40:
    // float(d) = M, which ties to the even 0x3F80; d rounds up to 0x3F81.
    const double midpoint = 1.0 + std::ldexp(1.0, -8);
    const double d = midpoint + std::ldexp(1.0, -40);
    REQUIRE(double(float(d)) == midpoint);
    CHECK(bfloat16_bits(float(d)) == 0x3F80);
    CHECK(bfloat16_bits(d) == 0x3F81);
  }
  SECTION("bfloat16, subnormal") {
    // 2^-134 is the midpoint between 0 and 0x0001 (2^-133). d = 2^-134 + 2^-170: float is
    // itself subnormal there with ulp 2^-149, so float(d) = 2^-134, which ties to 0.
    const double midpoint = std::ldexp(1.0, -134);
    const double d = midpoint + std::ldexp(1.0, -170);
    REQUIRE(double(float(d)) == midpoint);
    CHECK(bfloat16_bits(float(d)) == 0x0000);
    CHECK(bfloat16_bits(d) == 0x0001);
  }
}

TEST_CASE("double -> float16 / bfloat16: range and specials", "[half]") {
  // Values a float could hold give the float path's answer.
  CHECK(half_bits(0.1) == 0x2E66);  // 0.1 = 1.6 * 2^-4, m = 614.4 -> 614
  CHECK(half_bits(65519.0) == 0x7BFF);
  CHECK(half_bits(65520.0) == 0x7C00);
  CHECK(bfloat16_bits(0.1) == 0x3DCD);
  // Beyond float's range: infinity, not a wrapped exponent.
  CHECK(half_bits(1e300) == 0x7C00);
  CHECK(bfloat16_bits(1e300) == 0x7F80);
  CHECK(bfloat16_bits(-1e300) == 0xFF80);
  // Below every subnormal (double subnormals too): signed zeros.
  CHECK(half_bits(-1e-300) == 0x8000);
  CHECK(bfloat16_bits(std::numeric_limits<double>::denorm_min()) == 0x0000);
  CHECK(bfloat16_bits(-std::numeric_limits<double>::denorm_min()) == 0x8000);
  // The largest finite bfloat16 as a double stays finite; halfway to 2^128 ties to inf.
  CHECK(bfloat16_bits(std::ldexp(255.0, 120)) == 0x7F7F);
  CHECK(bfloat16_bits(std::ldexp(511.0, 119)) == 0x7F80);
  CHECK(bfloat16_bits(std::ldexp(511.0, 119) - std::ldexp(1.0, 100)) == 0x7F7F);
  // Double NaN: 0x7FF4000000000000 has mantissa bit 50 set, which is the float16 mantissa's
  // bit 8 (0x100) after dropping 42 bits, and the bfloat16 mantissa's bit 5 (0x20) after 45.
  const double nan_with_payload = std::bit_cast<double>(uint64_t(0x7FF4000000000000));
  CHECK(half_bits(nan_with_payload) == 0x7F00);
  CHECK(bfloat16_bits(nan_with_payload) == 0x7FE0);
  CHECK(half_bits(-nan_with_payload) == 0xFF00);
}

TEST_CASE("conversions are constexpr", "[half]") {
  static_assert(Half(1.0f).bits == 0x3C00);
  static_assert(Half(65520.0f).bits == 0x7C00);
  static_assert(Half(1.0 + 0x1p-11 + 0x1p-40).bits == 0x3C01);
  static_assert(float(Half::from_bits(0x3555)) == 0x1.554p-2f);
  static_assert(BFloat16(1.0f).bits == 0x3F80);
  static_assert(BFloat16(0x1p-134).bits == 0x0000);
  static_assert(float(BFloat16::from_bits(0xC000)) == -2.0f);
  static_assert(double(BFloat16::from_bits(0x3DCD)) == double(0x1.9Ap-4f));
  SUCCEED("checked at compile time");
}

TEST_CASE("numeric_limits<Half> and numeric_limits<BFloat16>", "[half]") {
  using HalfLimits = std::numeric_limits<Half>;
  CHECK(float(HalfLimits::max()) == 65504.0f);
  CHECK(float(HalfLimits::lowest()) == -65504.0f);
  CHECK(float(HalfLimits::min()) == std::ldexp(1.0f, -14));
  CHECK(float(HalfLimits::denorm_min()) == std::ldexp(1.0f, -24));
  CHECK(float(HalfLimits::epsilon()) == std::ldexp(1.0f, -10));
  // epsilon is the gap from 1 to the next representable value.
  CHECK(float(Half::from_bits(0x3C01)) - 1.0f == float(HalfLimits::epsilon()));
  CHECK(std::isinf(float(HalfLimits::infinity())));
  CHECK(std::isnan(float(HalfLimits::quiet_NaN())));
  // digits counts the implicit bit; max < 2^max_exponent; min = 2^(min_exponent - 1).
  CHECK(HalfLimits::digits == 11);
  CHECK(float(HalfLimits::max()) < std::ldexp(1.0f, HalfLimits::max_exponent));
  CHECK(float(HalfLimits::max()) >= std::ldexp(1.0f, HalfLimits::max_exponent - 1));
  CHECK(float(HalfLimits::min()) == std::ldexp(1.0f, HalfLimits::min_exponent - 1));

  using BFloat16Limits = std::numeric_limits<BFloat16>;
  CHECK(float(BFloat16Limits::max()) == std::ldexp(255.0f, 120));
  CHECK(float(BFloat16Limits::lowest()) == -std::ldexp(255.0f, 120));
  CHECK(float(BFloat16Limits::min()) == std::ldexp(1.0f, -126));
  CHECK(float(BFloat16Limits::denorm_min()) == std::ldexp(1.0f, -133));
  CHECK(float(BFloat16Limits::epsilon()) == std::ldexp(1.0f, -7));
  CHECK(float(BFloat16::from_bits(0x3F81)) - 1.0f == float(BFloat16Limits::epsilon()));
  CHECK(std::isinf(float(BFloat16Limits::infinity())));
  CHECK(std::isnan(float(BFloat16Limits::quiet_NaN())));
  CHECK(BFloat16Limits::digits == 8);
  CHECK(float(BFloat16Limits::max()) < std::ldexp(1.0f, BFloat16Limits::max_exponent));
  CHECK(float(BFloat16Limits::max()) >= std::ldexp(1.0f, BFloat16Limits::max_exponent - 1));
  CHECK(float(BFloat16Limits::min()) == std::ldexp(1.0f, BFloat16Limits::min_exponent - 1));
}

namespace {

template <class T>
void check_finfo_matches_numeric_limits(hg::DType dtype) {
  using Limits = std::numeric_limits<T>;
  const hg::FInfo info = hg::finfo(dtype);
  CAPTURE(hg::dtype_name(dtype));
  CHECK(info.bits == int(8 * sizeof(T)));
  CHECK(info.eps == static_cast<double>(Limits::epsilon()));
  CHECK(info.max == static_cast<double>(Limits::max()));
  CHECK(info.min == static_cast<double>(Limits::lowest()));
  CHECK(info.tiny == static_cast<double>(Limits::min()));
  CHECK(info.smallest_subnormal == static_cast<double>(Limits::denorm_min()));
}

}  // namespace

TEST_CASE("finfo agrees with numeric_limits", "[half]") {
  check_finfo_matches_numeric_limits<Half>(hg::kFloat16);
  check_finfo_matches_numeric_limits<BFloat16>(hg::kBFloat16);
  check_finfo_matches_numeric_limits<float>(hg::kFloat32);
  check_finfo_matches_numeric_limits<double>(hg::kFloat64);
  CHECK_THROWS_AS(hg::finfo(hg::kInt32), hg::Error);
}

TEST_CASE("numeric_limits members follow from the formats", "[half]") {
  using HL = std::numeric_limits<Half>;
  using BL = std::numeric_limits<BFloat16>;
  // digits10 = floor((digits - 1) log10 2), max_digits10 = ceil(digits log10 2 + 1).
  CHECK(HL::digits10 == int(std::floor((HL::digits - 1) * std::log10(2.0))));
  CHECK(BL::digits10 == int(std::floor((BL::digits - 1) * std::log10(2.0))));
  CHECK(HL::max_digits10 == int(std::ceil(HL::digits * std::log10(2.0) + 1)));
  CHECK(BL::max_digits10 == int(std::ceil(BL::digits * std::log10(2.0) + 1)));
  // The decimal exponent range: 10^min_exponent10 is normal, 10^max_exponent10 is finite.
  CHECK(HL::min_exponent10 == int(std::ceil(std::log10(double(static_cast<float>(HL::min()))))));
  CHECK(BL::min_exponent10 == int(std::ceil(std::log10(double(static_cast<float>(BL::min()))))));
  CHECK(HL::max_exponent10 == int(std::floor(std::log10(double(static_cast<float>(HL::max()))))));
  CHECK(BL::max_exponent10 == int(std::floor(std::log10(double(static_cast<float>(BL::max()))))));
  CHECK(static_cast<float>(HL::round_error()) == 0.5f);
  CHECK(static_cast<float>(BL::round_error()) == 0.5f);
  // A signaling NaN is a NaN whose quiet bit (the top mantissa bit) is clear; converting it
  // to float quiets it.
  CHECK(std::isnan(static_cast<float>(HL::signaling_NaN())));
  CHECK((HL::signaling_NaN().bits & 0x0200) == 0);
  CHECK(std::isnan(static_cast<float>(BL::signaling_NaN())));
  CHECK((BL::signaling_NaN().bits & 0x0040) == 0);
  CHECK(HL::radix == 2);
  CHECK(HL::has_denorm == std::denorm_present);
}
