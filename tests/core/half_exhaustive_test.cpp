// Every input of every conversion: the 65,536 patterns of each 16-bit format, and all 2^32
// float32 patterns narrowed to each, checked against independent references:
//   float -> float16    the x86 F16C instruction (128-bit vcvtps2ph)
//   float -> bfloat16   a reference written here from the definition of RNE, in double
//   vector paths        the scalar path, through the buffer API (convert.h)
//
// NOTE [Exhaustive sweeps] The 2^32 sweeps run in chunks of consecutive bit patterns, in
// parallel with OpenMP. The scalar float16 conversion is the slow part (about 1.3 ns per
// input, half the file's time), so each narrowing has one sweep that computes the scalar
// result once per input and compares it with every reference and every vector path. Catch2
// is not thread-safe: threads only count mismatches and keep the first few examples, and
// the counts are checked once at the end.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "halfgrad/core/convert.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/half.h"
#include "halfgrad/core/x86_intrinsics.h"

namespace {

using hg::BFloat16;
using hg::Half;
namespace convert = hg::convert;

constexpr int64_t kNumFloats = int64_t(1) << 32;
constexpr int64_t kChunk = int64_t(1) << 16;  // patterns per task: one bfloat16 `lo`
constexpr int64_t kNumChunks = kNumFloats / kChunk;

float float_from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t bits_of(float value) { return std::bit_cast<uint32_t>(value); }

bool is_float_nan(uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }
bool is_half_nan(uint16_t bits) { return (bits & 0x7FFFu) > 0x7C00u; }
bool is_bfloat16_nan(uint16_t bits) { return (bits & 0x7FFFu) > 0x7F80u; }

// The first few mismatches, for the failure message. Threads add to it rarely (only on a
// mismatch), so one lock is enough.
class Examples {
 public:
  void add(std::string example) {
#pragma omp critical(hg_exhaustive_examples)
    {
      if (examples_.size() < kMax) examples_.push_back(std::move(example));
    }
  }
  std::string str() const {
    std::string out;
    for (const std::string& e : examples_) out += e + "\n";
    return out.empty() ? "none" : out;
  }

 private:
  static constexpr size_t kMax = 8;
  std::vector<std::string> examples_;
};

// Value of a 16-bit pattern from its fields, in double: (-1)^s * 1.m * 2^(e - bias), or
// m * 2^(1 - bias - mantissa_bits) for subnormals. Not used for NaN.
double value_of_16_bits(uint16_t bits, int mantissa_bits, int bias) {
  const int exponent_field = (bits & 0x7FFF) >> mantissa_bits;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const int max_exponent_field = 0x7FFF >> mantissa_bits;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent_field == max_exponent_field) return sign * std::numeric_limits<double>::infinity();
  if (exponent_field == 0) return sign * std::ldexp(double(mantissa), 1 - bias - mantissa_bits);
  return sign *
         std::ldexp(double(mantissa + (1 << mantissa_bits)), exponent_field - bias - mantissa_bits);
}

// Counts the elements where `expected` and `actual` differ; on a difference, records the
// first few with their float inputs.
template <class T>
int64_t count_differences(const float* input, const T* expected, const T* actual, int64_t n,
                          std::string_view label, Examples& examples) {
  if (std::memcmp(expected, actual, size_t(n) * sizeof(T)) == 0) return 0;  // the usual case
  int64_t differences = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (expected[i].bits != actual[i].bits) {
      ++differences;
      examples.add(fmt::format("float 0x{:08X}: scalar 0x{:04X}, {} 0x{:04X}", bits_of(input[i]),
                               expected[i].bits, label, actual[i].bits));
    }
  }
  return differences;
}

// The vector paths to check (every supported path but Scalar).
std::vector<convert::Isa> vector_isas() {
  std::vector<convert::Isa> isas;
  for (convert::Isa isa : convert::supported_isas()) {
    if (isa != convert::Isa::Scalar) isas.push_back(isa);
  }
  return isas;
}
constexpr int kMaxIsas = 3;

// Per-thread buffers for one chunk. The sweeps start their input and output pointers a few
// elements in, by an amount that changes from chunk to chunk, so the vector loops run on
// unaligned addresses; kPad leaves room for that.
template <class Narrow>
struct ChunkBuffers {
  static constexpr int64_t kPad = 64;
  std::vector<float> input = std::vector<float>(kChunk + kPad);
  std::vector<Narrow> expected = std::vector<Narrow>(kChunk);
  std::vector<Narrow> reference = std::vector<Narrow>(kChunk);
  std::vector<Narrow> actual = std::vector<Narrow>(kChunk + kPad);
};

// Runs a narrowing path on a chunk in two calls split at `split`, so that the first call is
// short (often all tail) and the second starts mid-vector.
template <class Narrow>
void narrow_in_two_calls(void (*narrow)(const float*, Narrow*, int64_t, convert::Isa),
                         const float* input, Narrow* output, int64_t n, int64_t split,
                         convert::Isa isa) {
  narrow(input, output, split, isa);
  narrow(input + split, output + split, n - split, isa);
}

}  // namespace

// ---- The 65,536 patterns of each 16-bit format ---------------------------------------------

TEST_CASE("float16: every pattern widens exactly and narrows back to itself", "[exhaustive]") {
  int64_t mismatches = 0;
  Examples examples;
  for (uint32_t p = 0; p <= 0xFFFF; ++p) {
    const uint16_t pattern = uint16_t(p);
    const float wide = float(Half::from_bits(pattern));
    const uint16_t back = Half(wide).bits;
    bool ok;
    if (is_half_nan(pattern)) {
      // Quieted (bit 0x0200 set), sign and payload kept, both on the way out and back.
      const uint32_t expected_wide =
          (uint32_t(pattern & 0x8000) << 16) | 0x7FC00000u | (uint32_t(pattern & 0x03FF) << 13);
      ok = bits_of(wide) == expected_wide && back == (pattern | 0x0200);
    } else {
      ok = double(wide) == value_of_16_bits(pattern, 10, 15) &&
           std::signbit(wide) == bool(pattern & 0x8000) && back == pattern;
    }
    if (!ok) {
      ++mismatches;
      examples.add(
          fmt::format("0x{:04X} -> float 0x{:08X} -> 0x{:04X}", pattern, bits_of(wide), back));
    }
  }
  INFO(examples.str());
  REQUIRE(mismatches == 0);
}

TEST_CASE("bfloat16: every pattern widens exactly and narrows back to itself", "[exhaustive]") {
  int64_t mismatches = 0;
  Examples examples;
  for (uint32_t p = 0; p <= 0xFFFF; ++p) {
    const uint16_t pattern = uint16_t(p);
    const float wide = float(BFloat16::from_bits(pattern));
    const uint16_t back = BFloat16(wide).bits;
    bool ok;
    if (is_bfloat16_nan(pattern)) {
      ok = bits_of(wide) == ((uint32_t(pattern) << 16) | 0x00400000u) && back == (pattern | 0x0040);
    } else {
      ok = double(wide) == value_of_16_bits(pattern, 7, 127) &&
           std::signbit(wide) == bool(pattern & 0x8000) && back == pattern;
    }
    if (!ok) {
      ++mismatches;
      examples.add(
          fmt::format("0x{:04X} -> float 0x{:08X} -> 0x{:04X}", pattern, bits_of(wide), back));
    }
  }
  INFO(examples.str());
  REQUIRE(mismatches == 0);
}

// ---- All 2^32 floats -> float16 --------------------------------------------------------------

#if HG_X86
namespace {

// The hardware's float16 conversion, four at a time; n is a multiple of 4.
__attribute__((target("f16c"))) void f16c_float_to_half(const float* src, Half* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += 4) {
    const __m128i halves =
        _mm_cvtps_ph(_mm_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + i), halves);
  }
}

}  // namespace
#else
namespace {
void f16c_float_to_half(const float*, Half*, int64_t) {}
}  // namespace
#endif

TEST_CASE("float -> float16: all 2^32 inputs, scalar vs F16C, every vector path vs scalar",
          "[exhaustive]") {
  const bool has_f16c = hg::cpu_has_f16c();
  if (!has_f16c) WARN("this CPU has no F16C: the scalar path is not checked against hardware");
  const std::vector<convert::Isa> isas = vector_isas();
  const int num_isas = int(isas.size());

  int64_t nan_lost = 0;  // NaN inputs that did not give a NaN
  int64_t f16c_mismatches = 0;
  int64_t path_mismatches[kMaxIsas] = {};
  Examples examples;
#pragma omp parallel reduction(+ : nan_lost, f16c_mismatches, path_mismatches[:kMaxIsas])
  {
    ChunkBuffers<Half> buffers;
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < kNumChunks; ++chunk) {
      const uint32_t first = uint32_t(chunk * kChunk);
      float* input = buffers.input.data() + chunk % 17;
      for (uint32_t i = 0; i < uint32_t(kChunk); ++i) input[i] = float_from_bits(first + i);
      Half* expected = buffers.expected.data();
      convert::float_to_half(input, expected, kChunk, convert::Isa::Scalar);

      if ((first & 0x7FFFFFFFu) >= 0x7F800000u) {  // the chunks above inf hold the NaNs
        for (int64_t i = 0; i < kChunk; ++i) {
          nan_lost += is_float_nan(first + uint32_t(i)) && !is_half_nan(expected[i].bits);
        }
      }
      if (has_f16c) {
        Half* hardware = buffers.reference.data();
        f16c_float_to_half(input, hardware, kChunk);
        f16c_mismatches += count_differences(input, expected, hardware, kChunk, "F16C", examples);
      }
      for (int k = 0; k < num_isas; ++k) {
        Half* actual = buffers.actual.data() + chunk % 31;
        narrow_in_two_calls(convert::float_to_half, input, actual, kChunk, chunk % 67, isas[k]);
        path_mismatches[k] += count_differences(input, expected, actual, kChunk,
                                                convert::isa_name(isas[k]), examples);
      }
    }
  }
  INFO("first mismatches:\n" << examples.str());
  CHECK(nan_lost == 0);
  CHECK(f16c_mismatches == 0);
  for (int k = 0; k < num_isas; ++k) {
    CAPTURE(convert::isa_name(isas[k]));
    CHECK(path_mismatches[k] == 0);
  }
}

// ---- All 2^32 floats -> bfloat16 -------------------------------------------------------------

namespace {

bool is_quiet_bfloat16_nan(uint16_t bits) { return is_bfloat16_nan(bits) && (bits & 0x0040); }

// Round-to-nearest-even to bfloat16 from the definition rather than from bit tricks, for the
// 2^16 consecutive float patterns of one chunk. All of them share a sign and a truncation
// toward zero `lo` (their top 16 bits), so the two candidates are the same for the whole
// chunk: lo, and the next bfloat16 away from zero, hi = lo + 1 (sign-magnitude). For each
// input the nearer candidate wins and a tie goes to the one whose last bit is 0. Values and
// distances are in double, where they are exact: each distance is below 2^16 float ulps.
// When hi is the infinity pattern its value is taken as 2^128, as if the exponent were
// unbounded, so that rounding up there overflows to inf. The chunk of +-inf and NaNs gives
// inf for the (exact) inf and leaves NaN lanes to the caller.
void reference_float_to_bfloat16(uint32_t first, const float* input, BFloat16* out, int64_t n) {
  const uint16_t sign = uint16_t((first >> 16) & 0x8000);
  const uint16_t lo = uint16_t((first >> 16) & 0x7FFF);
  const uint16_t hi = uint16_t(lo + 1);
  if (lo == 0x7F80) {
    for (int64_t i = 0; i < n; ++i) out[i].bits = sign | lo;
    return;
  }
  const double lo_value = double(float_from_bits(uint32_t(lo) << 16));
  const double hi_value =
      hi == 0x7F80 ? std::ldexp(1.0, 128) : double(float_from_bits(uint32_t(hi) << 16));
  const bool tie_goes_up = (lo & 1) != 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = std::fabs(double(input[i]));
    const double below = x - lo_value;
    const double above = hi_value - x;
    const bool up = (above < below) | ((above == below) & tie_goes_up);
    out[i].bits = sign | (up ? hi : lo);
  }
}

}  // namespace

TEST_CASE("float -> bfloat16: all 2^32 inputs, scalar vs reference, every vector path vs scalar",
          "[exhaustive]") {
  const std::vector<convert::Isa> isas = vector_isas();
  const int num_isas = int(isas.size());

  int64_t reference_mismatches = 0;
  int64_t path_mismatches[kMaxIsas] = {};
  Examples examples;
#pragma omp parallel reduction(+ : reference_mismatches, path_mismatches[:kMaxIsas])
  {
    ChunkBuffers<BFloat16> buffers;
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < kNumChunks; ++chunk) {
      const uint32_t first = uint32_t(chunk * kChunk);
      float* input = buffers.input.data() + chunk % 17;
      for (uint32_t i = 0; i < uint32_t(kChunk); ++i) input[i] = float_from_bits(first + i);
      BFloat16* expected = buffers.expected.data();
      convert::float_to_bfloat16(input, expected, kChunk, convert::Isa::Scalar);

      // NaN inputs may give any quiet NaN, others must give the reference's bits. NaN lanes
      // (only in the chunks above inf) take the scalar result when it is a quiet NaN, and a
      // non-NaN 0 otherwise, so one comparison covers both.
      BFloat16* reference = buffers.reference.data();
      reference_float_to_bfloat16(first, input, reference, kChunk);
      if ((first & 0x7FFFFFFFu) >= 0x7F800000u) {
        for (int64_t i = 0; i < kChunk; ++i) {
          if (is_float_nan(first + uint32_t(i))) {
            reference[i].bits = is_quiet_bfloat16_nan(expected[i].bits) ? expected[i].bits : 0;
          }
        }
      }
      reference_mismatches +=
          count_differences(input, expected, reference, kChunk, "reference", examples);

      for (int k = 0; k < num_isas; ++k) {
        BFloat16* actual = buffers.actual.data() + chunk % 31;
        narrow_in_two_calls(convert::float_to_bfloat16, input, actual, kChunk, chunk % 67, isas[k]);
        path_mismatches[k] += count_differences(input, expected, actual, kChunk,
                                                convert::isa_name(isas[k]), examples);
      }
    }
  }
  INFO("first mismatches:\n" << examples.str());
  CHECK(reference_mismatches == 0);
  for (int k = 0; k < num_isas; ++k) {
    CAPTURE(convert::isa_name(isas[k]));
    CHECK(path_mismatches[k] == 0);
  }
}

// ---- Widening: all 65,536 patterns through every vector path -------------------------------

namespace {

// Widens all 65,536 patterns with `isa` and with Scalar, in calls of many lengths, at an
// unaligned source and an aligned or unaligned destination, and compares the float bits.
template <class Src>
void check_widening_path(void (*widen)(const Src*, float*, int64_t, convert::Isa),
                         convert::Isa isa) {
  constexpr int64_t kPatterns = 1 << 16;
  constexpr int64_t kLengths[] = {0, 1, 7, 15, 16, 17, 31, 33, 1000, 4093};
  std::vector<Src> input(kPatterns + 1);
  for (int64_t p = 0; p < kPatterns; ++p) input[p + 1] = Src::from_bits(uint16_t(p));
  const Src* in = input.data() + 1;
  std::vector<float> expected(kPatterns);
  widen(in, expected.data(), kPatterns, convert::Isa::Scalar);

  std::vector<float> actual(kPatterns + 1);
  for (int offset = 0; offset <= 1; ++offset) {
    float* out = actual.data() + offset;
    int64_t done = 0;
    for (int64_t call = 0; done < kPatterns; ++call) {
      const int64_t length = std::min(kLengths[call % std::size(kLengths)], kPatterns - done);
      widen(in + done, out + done, length, isa);
      done += length;
    }
    int64_t mismatches = 0;
    Examples examples;
    for (int64_t p = 0; p < kPatterns; ++p) {
      if (bits_of(out[p]) != bits_of(expected[p])) {
        ++mismatches;
        examples.add(fmt::format("0x{:04X}: scalar 0x{:08X}, {} 0x{:08X}", p, bits_of(expected[p]),
                                 convert::isa_name(isa), bits_of(out[p])));
      }
    }
    INFO("first mismatches:\n" << examples.str());
    CHECK(mismatches == 0);
  }
}

}  // namespace

TEST_CASE("float16 / bfloat16 -> float: every vector path matches scalar on all patterns",
          "[exhaustive]") {
  for (convert::Isa isa : vector_isas()) {
    CAPTURE(convert::isa_name(isa));
    check_widening_path<Half>(convert::half_to_float, isa);
    check_widening_path<BFloat16>(convert::bfloat16_to_float, isa);
  }
}
