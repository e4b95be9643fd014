// cpu/row_vectors.h: bfloat16 rows read into float lanes and float lanes rounded to bfloat16
// (NOTE [bfloat16 in float lanes]), against core/convert's conversions, which the core tests
// hold to the format's rounding rule.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/core/convert.h"
#include "halfgrad/cpu/row_vectors.h"

using namespace hg;
using namespace hg::cpu::row_vectors;

namespace {

float float_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// n values (a multiple of the lanes) through float lanes of vector type V: read with load_vec
// and written with store_vec, so bfloat16 on either side is widened or rounded there.
template <class V, class Src, class Dst>
HG_ROW_INLINE void copy_rows_body(const Src* src, Dst* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += kLanes<V>) {
    V v;
    load_vec(v, src + i);
    store_vec(dst + i, v);
  }
}

// The copies the kernels compile: the baseline's 4 lanes and AVX-512's 16, each in its own ISA.
void round_rows_base(const float* src, BFloat16* dst, int64_t n) {
  copy_rows_body<FloatVec4>(src, dst, n);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void round_rows_avx512(
    const float* src, BFloat16* dst, int64_t n) {
  copy_rows_body<FloatVec16>(src, dst, n);
}
void widen_rows_base(const BFloat16* src, float* dst, int64_t n) {
  copy_rows_body<FloatVec4>(src, dst, n);
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma"))) void widen_rows_avx512(
    const BFloat16* src, float* dst, int64_t n) {
  copy_rows_body<FloatVec16>(src, dst, n);
}

using RoundRows = void (*)(const float*, BFloat16*, int64_t);

std::vector<RoundRows> round_copies() {
  std::vector<RoundRows> copies{round_rows_base};
  if (row_vector_level() == 2) copies.push_back(round_rows_avx512);
  return copies;
}

// Every float32 whose high half is in [first, last) and low half one of `lows`, rounded by
// `round` and by core/convert; the first differing pattern is reported.
void check_rounding(RoundRows round, uint32_t first, uint32_t last,
                    const std::vector<uint32_t>& lows) {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<float> src;
  std::vector<BFloat16> got(kChunk), want(kChunk);
  src.reserve(kChunk);
  const auto flush = [&] {
    const int64_t n = int64_t(src.size());
    round(src.data(), got.data(), n);
    convert::float_to_bfloat16(src.data(), want.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (got[size_t(i)].bits != want[size_t(i)].bits) {
        uint32_t bits;
        std::memcpy(&bits, &src[size_t(i)], sizeof(bits));
        INFO("float bits " << std::hex << bits << ": got " << got[size_t(i)].bits << ", want "
                           << want[size_t(i)].bits);
        REQUIRE(got[size_t(i)].bits == want[size_t(i)].bits);
      }
    }
    src.clear();
  };
  for (uint32_t high = first; high < last; ++high) {
    for (uint32_t low : lows) {
      src.push_back(float_of(high << 16 | low));
      if (int64_t(src.size()) == kChunk) flush();
    }
  }
  flush();
}

}  // namespace

TEST_CASE("bfloat16 rows widen exactly into float lanes", "[row_vectors]") {
  std::vector<BFloat16> src(1 << 16);
  for (uint32_t i = 0; i < (1u << 16); ++i) src[i].bits = uint16_t(i);
  for (auto widen_rows : {widen_rows_base, widen_rows_avx512}) {
    if (widen_rows == widen_rows_avx512 && row_vector_level() != 2) continue;
    std::vector<float> got(src.size());
    widen_rows(src.data(), got.data(), int64_t(src.size()));
    for (uint32_t i = 0; i < (1u << 16); ++i) {
      const float want = float(src[i]);
      INFO("bfloat16 bits " << std::hex << i);
      if (std::isnan(want)) {
        REQUIRE(std::isnan(got[i]));
      } else {
        REQUIRE(std::memcmp(&got[i], &want, sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("float lanes round to bfloat16 with core/convert's bits", "[row_vectors]") {
  // Every high half (every sign, exponent and kept mantissa, NaN and infinity included) with
  // the low halves around the rounding decisions: below, at and above the halfway point.
  const std::vector<uint32_t> lows{0x0000, 0x0001, 0x3FFF, 0x7FFF, 0x8000,
                                   0x8001, 0xC000, 0xFFFF};
  for (RoundRows round : round_copies()) check_rounding(round, 0, 1u << 16, lows);
}

TEST_CASE("float lanes round to bfloat16 with core/convert's bits for every float32",
          "[row_vectors][exhaustive]") {
  std::vector<uint32_t> lows(1 << 16);
  for (uint32_t i = 0; i < lows.size(); ++i) lows[i] = i;
  // The widest copy the CPU runs (the baseline's is the same source on 4 lanes).
  check_rounding(round_copies().back(), 0, 1u << 16, lows);
}
