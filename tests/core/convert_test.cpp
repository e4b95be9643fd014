// The buffer conversions of convert.h: every supported path against the scalar path on edge
// and random inputs, at lengths around the vector widths (8 and 16 lanes) and at unaligned
// addresses; path selection and its errors. half_exhaustive_test.cpp sweeps every input.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/core/convert.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/half.h"
#include "halfgrad/core/x86_intrinsics.h"

namespace {

using hg::BFloat16;
using hg::Half;
namespace convert = hg::convert;
using convert::Isa;

constexpr int64_t kLengths[] = {0, 1, 7, 15, 16, 17, 31, 33, 1000};
constexpr int64_t kMaxOffset = 3;  // elements: every misalignment of a 16-byte vector
constexpr int64_t kGuard = 8;      // elements after the output that must stay untouched

uint32_t bits_of(float value) { return std::bit_cast<uint32_t>(value); }

// Float bit patterns where conversions have edges, each with its two neighbours and both
// signs: zeros and float subnormals, float16's subnormal unit and its ties, float16's range
// end (65504, the 65520 midpoint), bfloat16's ties and range end, inf and NaNs (signaling,
// quiet, with payloads in the kept and in the dropped bits).
std::vector<float> edge_floats() {
  const uint32_t anchors[] = {
      0x00000000, 0x00000001, 0x007FFFFF, 0x00800000,  // float: zero, subnormals, min normal
      0x00008000, 0x00018000, 0x00028000,              // bfloat16 subnormal ties
      0x33000000, 0x33800000, 0x33C00000, 0x38800000,  // 2^-25, 2^-24, 1.5 * 2^-24, 2^-14
      0x3F800000, 0x3F801000, 0x3F803000,              // 1, float16 ties above 1
      0x3F808000, 0x3F818000,                          // bfloat16 ties above 1
      0x477FE000, 0x477FEFFF, 0x477FF000,              // 65504, 65519.99, 65520
      0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF,              // bfloat16 range end, FLT_MAX
      0x7F800000, 0x7F800001, 0x7FA00000, 0x7FC00000,  // inf, signaling and quiet NaN
      0x7FC02000, 0x7FFFFFFF,                          // NaN payloads
  };
  std::vector<float> floats;
  for (uint32_t anchor : anchors) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      for (uint32_t neighbour : {anchor - 1, anchor, anchor + 1}) {
        floats.push_back(std::bit_cast<float>((neighbour & 0x7FFFFFFFu) | sign));
      }
    }
  }
  return floats;
}

// n floats drawn from the edge floats, random bit patterns (every class of float: NaNs,
// subnormals, ...) and random values of ordinary size, from a fixed seed.
std::vector<float> test_floats(int64_t n, uint32_t seed) {
  std::vector<float> floats = edge_floats();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> ordinary(-70000.0f, 70000.0f);
  while (int64_t(floats.size()) < n) {
    floats.push_back(floats.size() % 2 ? std::bit_cast<float>(uint32_t(rng())) : ordinary(rng));
  }
  std::shuffle(floats.begin(), floats.end(), rng);  // short lengths get a random few edges
  floats.resize(size_t(n));
  return floats;
}

// n 16-bit patterns drawn from a few special ones and random ones, from a fixed seed.
template <class T>
std::vector<T> test_patterns(int64_t n, uint32_t seed) {
  std::vector<T> patterns;
  for (uint16_t special : {0x0000, 0x8000, 0x0001, 0x83FF, 0x7C00, 0x7C01, 0x7E00, 0xFD00, 0x7F80,
                           0x7F81, 0x7FC0, 0xFFFF, 0x0080, 0x007F}) {
    patterns.push_back(T::from_bits(special));
  }
  std::mt19937 rng(seed);
  while (int64_t(patterns.size()) < n) patterns.push_back(T::from_bits(uint16_t(rng())));
  std::shuffle(patterns.begin(), patterns.end(), rng);
  patterns.resize(size_t(n));
  return patterns;
}

uint32_t bits_of_element(float value) { return bits_of(value); }
uint16_t bits_of_element(Half value) { return value.bits; }
uint16_t bits_of_element(BFloat16 value) { return value.bits; }

// A bit pattern to fill output buffers with: 0xA5A5..., recognisable in a dump.
template <class T>
T sentinel_value() {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<float>(0xA5A5A5A5u);
  } else {
    return T::from_bits(0xA5A5);
  }
}

// Converts `source` with `isa` at every element offset of source and destination, and
// checks each result against the Scalar path's, and that nothing after the output changed.
template <class Src, class Dst>
void check_path(void (*convert_fn)(const Src*, Dst*, int64_t, Isa), Isa isa,
                const std::vector<Src>& source) {
  const int64_t n = int64_t(source.size());
  std::vector<Dst> expected(source.size());
  convert_fn(source.data(), expected.data(), n, Isa::Scalar);

  for (int64_t src_offset = 0; src_offset <= kMaxOffset; ++src_offset) {
    for (int64_t dst_offset = 0; dst_offset <= kMaxOffset; ++dst_offset) {
      std::vector<Src> src(size_t(n + kMaxOffset));
      std::copy(source.begin(), source.end(), src.begin() + src_offset);
      // The elements before and after the output start as a sentinel and must keep it.
      const Dst sentinel = sentinel_value<Dst>();
      std::vector<Dst> dst(size_t(n + kMaxOffset + kGuard), sentinel);
      convert_fn(src.data() + src_offset, dst.data() + dst_offset, n, isa);

      CAPTURE(convert::isa_name(isa), n, src_offset, dst_offset);
      int64_t mismatches = 0;
      int64_t first_mismatch = -1;
      for (int64_t i = 0; i < n; ++i) {
        if (bits_of_element(dst[size_t(dst_offset + i)]) != bits_of_element(expected[size_t(i)])) {
          if (mismatches++ == 0) first_mismatch = i;
        }
      }
      CAPTURE(first_mismatch);
      CHECK(mismatches == 0);
      int64_t overwritten = 0;
      for (int64_t i = n; i < n + kGuard; ++i) {
        overwritten += bits_of_element(dst[size_t(dst_offset + i)]) != bits_of_element(sentinel);
      }
      for (int64_t i = 0; i < dst_offset; ++i) {
        overwritten += bits_of_element(dst[size_t(i)]) != bits_of_element(sentinel);
      }
      CHECK(overwritten == 0);
    }
  }
}

}  // namespace

TEST_CASE("convert: the Scalar path is the per-element conversion", "[convert]") {
  const std::vector<float> floats = test_floats(1000, 1);
  std::vector<Half> halves(floats.size());
  std::vector<BFloat16> bfloats(floats.size());
  convert::float_to_half(floats.data(), halves.data(), int64_t(floats.size()), Isa::Scalar);
  convert::float_to_bfloat16(floats.data(), bfloats.data(), int64_t(floats.size()), Isa::Scalar);
  for (size_t i = 0; i < floats.size(); ++i) {
    CAPTURE(i, bits_of(floats[i]));
    REQUIRE(halves[i].bits == Half(floats[i]).bits);
    REQUIRE(bfloats[i].bits == BFloat16(floats[i]).bits);
  }

  const std::vector<Half> half_patterns = test_patterns<Half>(1000, 2);
  const std::vector<BFloat16> bfloat_patterns = test_patterns<BFloat16>(1000, 3);
  std::vector<float> from_half(1000), from_bfloat(1000);
  convert::half_to_float(half_patterns.data(), from_half.data(), 1000, Isa::Scalar);
  convert::bfloat16_to_float(bfloat_patterns.data(), from_bfloat.data(), 1000, Isa::Scalar);
  for (size_t i = 0; i < 1000; ++i) {
    CAPTURE(i, half_patterns[i].bits, bfloat_patterns[i].bits);
    REQUIRE(bits_of(from_half[i]) == bits_of(float(half_patterns[i])));
    REQUIRE(bits_of(from_bfloat[i]) == bits_of(float(bfloat_patterns[i])));
  }
}

TEST_CASE("convert: every path matches Scalar at every length and alignment", "[convert]") {
  for (Isa isa : convert::supported_isas()) {
    for (int64_t n : kLengths) {
      const uint32_t seed = uint32_t(10000 * int(isa) + n);
      check_path(convert::float_to_half, isa, test_floats(n, seed));
      check_path(convert::float_to_bfloat16, isa, test_floats(n, seed + 1));
      check_path(convert::half_to_float, isa, test_patterns<Half>(n, seed + 2));
      check_path(convert::bfloat16_to_float, isa, test_patterns<BFloat16>(n, seed + 3));
    }
  }
}

TEST_CASE("convert: the default overloads run best_isa()", "[convert]") {
  const std::vector<float> floats = test_floats(1000, 4);
  std::vector<Half> by_default(floats.size()), by_best(floats.size());
  convert::float_to_half(floats.data(), by_default.data(), 1000);
  convert::float_to_half(floats.data(), by_best.data(), 1000, convert::best_isa());
  std::vector<BFloat16> bf_by_default(floats.size()), bf_by_best(floats.size());
  convert::float_to_bfloat16(floats.data(), bf_by_default.data(), 1000);
  convert::float_to_bfloat16(floats.data(), bf_by_best.data(), 1000, convert::best_isa());
  std::vector<float> wide_by_default(floats.size()), wide_by_best(floats.size());
  convert::half_to_float(by_best.data(), wide_by_default.data(), 1000);
  convert::half_to_float(by_best.data(), wide_by_best.data(), 1000, convert::best_isa());
  std::vector<float> bf_wide_by_default(floats.size()), bf_wide_by_best(floats.size());
  convert::bfloat16_to_float(bf_by_best.data(), bf_wide_by_default.data(), 1000);
  convert::bfloat16_to_float(bf_by_best.data(), bf_wide_by_best.data(), 1000, convert::best_isa());
  for (size_t i = 0; i < floats.size(); ++i) {
    CAPTURE(i);
    REQUIRE(by_default[i].bits == by_best[i].bits);
    REQUIRE(bf_by_default[i].bits == bf_by_best[i].bits);
    REQUIRE(bits_of(wide_by_default[i]) == bits_of(wide_by_best[i]));
    REQUIRE(bits_of(bf_wide_by_default[i]) == bits_of(bf_wide_by_best[i]));
  }
}

TEST_CASE("convert: path names and the supported list", "[convert]") {
  CHECK(convert::isa_name(Isa::Scalar) == "scalar");
  CHECK(convert::isa_name(Isa::Avx2F16c) == "avx2+f16c");
  CHECK(convert::isa_name(Isa::Avx512) == "avx512");

  const std::vector<Isa> isas = convert::supported_isas();
  REQUIRE(!isas.empty());
  CHECK(isas.front() == Isa::Scalar);
  CHECK(isas.back() == convert::best_isa());  // in increasing order, so the best is last
  for (size_t i = 1; i < isas.size(); ++i) CHECK(int(isas[i - 1]) < int(isas[i]));
  CHECK(convert::best_isa() == convert::best_isa());  // detected once, stable
#if HG_X86
  // The paths' needs, as the CPU reports them.
  const bool has_avx2 = __builtin_cpu_supports("avx2") && hg::cpu_has_f16c();
  const bool has_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  const auto listed = [&](Isa isa) {
    return std::find(isas.begin(), isas.end(), isa) != isas.end();
  };
  CHECK(listed(Isa::Avx2F16c) == has_avx2);
  CHECK(listed(Isa::Avx512) == has_avx512);
#endif
}

TEST_CASE("convert: an unsupported path throws, naming it", "[convert]") {
  const std::vector<Isa> isas = convert::supported_isas();
  float in[1] = {1.0f};
  Half half_out[1];
  BFloat16 bfloat_out[1];
  float float_out[1];
  for (Isa isa : {Isa::Avx2F16c, Isa::Avx512}) {
    if (std::find(isas.begin(), isas.end(), isa) != isas.end()) continue;
    const std::string name(convert::isa_name(isa));
    CAPTURE(name);
    CHECK_THROWS_AS(convert::float_to_half(in, half_out, 1, isa), hg::Error);
    CHECK_THROWS_WITH(convert::float_to_half(in, half_out, 1, isa),
                      Catch::Matchers::Contains(name));
    CHECK_THROWS_AS(convert::float_to_bfloat16(in, bfloat_out, 1, isa), hg::Error);
    CHECK_THROWS_AS(convert::half_to_float(half_out, float_out, 1, isa), hg::Error);
    CHECK_THROWS_AS(convert::bfloat16_to_float(bfloat_out, float_out, 1, isa), hg::Error);
  }
  // A value outside the enum is never supported, whatever the CPU.
  const Isa bogus = Isa(42);
  CHECK(convert::isa_name(bogus) == "unknown");
  CHECK_THROWS_AS(convert::float_to_half(in, half_out, 1, bogus), hg::Error);
  CHECK_THROWS_WITH(
      convert::float_to_half(in, half_out, 1, bogus),
      Catch::Matchers::Contains("float_to_half") && Catch::Matchers::Contains("unknown"));
  CHECK_THROWS_AS(convert::bfloat16_to_float(bfloat_out, float_out, 1, bogus), hg::Error);
}

#if HG_X86
namespace {

// Sets MXCSR's flush-to-zero and denormals-are-zero bits for a scope.
class FlushDenormalsGuard {
 public:
  FlushDenormalsGuard() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushDenormalsGuard() { _mm_setcsr(saved_); }
  FlushDenormalsGuard(const FlushDenormalsGuard&) = delete;
  FlushDenormalsGuard& operator=(const FlushDenormalsGuard&) = delete;

 private:
  static constexpr unsigned kFtz = 0x8000;
  static constexpr unsigned kDaz = 0x0040;
  unsigned saved_;
};

}  // namespace

TEST_CASE("convert: FTZ/DAZ do not change any path's results", "[convert]") {
  // A program built with -ffast-math sets these bits; subnormal inputs and results (float16
  // has many) must still convert exactly.
  const std::vector<float> floats = test_floats(1000, 5);
  const std::vector<Half> halves = test_patterns<Half>(1000, 6);
  const std::vector<BFloat16> bfloats = test_patterns<BFloat16>(1000, 7);
  std::vector<Half> half_expected(1000);
  std::vector<BFloat16> bfloat_expected(1000);
  std::vector<float> from_half_expected(1000), from_bfloat_expected(1000);
  convert::float_to_half(floats.data(), half_expected.data(), 1000, Isa::Scalar);
  convert::float_to_bfloat16(floats.data(), bfloat_expected.data(), 1000, Isa::Scalar);
  convert::half_to_float(halves.data(), from_half_expected.data(), 1000, Isa::Scalar);
  convert::bfloat16_to_float(bfloats.data(), from_bfloat_expected.data(), 1000, Isa::Scalar);

  for (Isa isa : convert::supported_isas()) {
    CAPTURE(convert::isa_name(isa));
    std::vector<Half> half_out(1000);
    std::vector<BFloat16> bfloat_out(1000);
    std::vector<float> from_half(1000), from_bfloat(1000);
    {
      FlushDenormalsGuard flush;
      convert::float_to_half(floats.data(), half_out.data(), 1000, isa);
      convert::float_to_bfloat16(floats.data(), bfloat_out.data(), 1000, isa);
      convert::half_to_float(halves.data(), from_half.data(), 1000, isa);
      convert::bfloat16_to_float(bfloats.data(), from_bfloat.data(), 1000, isa);
    }
    int64_t mismatches = 0;
    for (size_t i = 0; i < 1000; ++i) {
      mismatches += half_out[i].bits != half_expected[i].bits;
      mismatches += bfloat_out[i].bits != bfloat_expected[i].bits;
      mismatches += bits_of(from_half[i]) != bits_of(from_half_expected[i]);
      mismatches += bits_of(from_bfloat[i]) != bits_of(from_bfloat_expected[i]);
    }
    CHECK(mismatches == 0);
  }
}
#endif
