// Float8_e4m3fn and Float8_e5m2 against a reference written here from the formats'
// definitions: every pattern decoded with ldexp on its fields, every float32 input (the
// [exhaustive] sweeps) and samples of float64, float16 and bfloat16 inputs rounded by a
// search of the sorted table of decoded values; then the float8 dtypes on tensors.
//
// NOTE [Float8 reference rounding] The reference never looks at the library's bit tricks: it
// finds the two representable neighbours of |x| in the ascending table of a format's finite
// magnitudes, extended by one value past the largest (480 for e4m3fn, 65536 for e5m2: where
// the next binade would start), takes the nearer, and on a tie the one with the even code
// (the mantissa's last bit is the code's). A result at or past the extension overflowed: NaN
// or inf when non-saturating, the largest finite value when saturating. The 2^32 sweeps walk
// the magnitudes in increasing order, so the neighbour index only moves forward (one table
// search per chunk), and check each negative input against the positive one's result.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Matchers::Contains;

namespace {

// A format as the reference sees it: field widths, bias, and which patterns are special.
struct Spec {
  const char* name;
  DType dtype;
  int mantissa_bits;
  int exponent_bits;
  int bias;
  bool has_inf;  // e5m2: exponent all ones is inf (mantissa 0) or NaN; e4m3fn: only S.1111.111
};
constexpr Spec kE4M3 = {"float8_e4m3fn", kFloat8_e4m3fn, 3, 4, 7, false};
constexpr Spec kE5M2 = {"float8_e5m2", kFloat8_e5m2, 2, 5, 15, true};

bool reference_is_nan(const Spec& f, uint8_t bits) {
  const int exponent = (bits & 0x7F) >> f.mantissa_bits;
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  const int all_ones = (1 << f.exponent_bits) - 1;
  if (f.has_inf) return exponent == all_ones && mantissa != 0;
  return exponent == all_ones && mantissa == (1 << f.mantissa_bits) - 1;
}

// The value of a non-NaN pattern, from its fields.
double reference_value(const Spec& f, uint8_t bits) {
  const double sign = (bits & 0x80) ? -1.0 : 1.0;
  const int exponent = (bits & 0x7F) >> f.mantissa_bits;
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  if (f.has_inf && exponent == (1 << f.exponent_bits) - 1) {
    return sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(double(mantissa), 1 - f.bias - f.mantissa_bits);
  return sign * std::ldexp(1.0 + std::ldexp(double(mantissa), -f.mantissa_bits), exponent - f.bias);
}

// The finite non-negative magnitudes in code order (ascending), then the extension.
struct Table {
  std::vector<double> values;
  int max_code = 0;  // index of the largest finite value
};

Table make_table(const Spec& f) {
  Table t;
  for (int code = 0; code < 0x80; ++code) {
    const double v = reference_value(f, uint8_t(code));
    if (reference_is_nan(f, uint8_t(code)) || std::isinf(v)) break;
    t.values.push_back(v);
  }
  t.max_code = int(t.values.size()) - 1;
  const double top = t.values.back();
  const double ulp = top - t.values[size_t(t.max_code - 1)];
  t.values.push_back(top + ulp);
  REQUIRE(std::is_sorted(t.values.begin(), t.values.end()));
  return t;
}

// Expected bits for a magnitude whose lower neighbour is values[k] (values[k] <= a), before
// the sign; see NOTE [Float8 reference rounding]. nan_code for NaN.
constexpr uint8_t kNanCode = 0x7F;

uint8_t nearest_code(const Table& t, size_t k, double a) {
  if (k + 1 >= t.values.size()) return uint8_t(t.values.size());  // at or past the extension
  const double below = a - t.values[k], above = t.values[k + 1] - a;
  if (below < above) return uint8_t(k);
  if (above < below) return uint8_t(k + 1);
  return uint8_t((k & 1) == 0 ? k : k + 1);
}

uint8_t overflowed_code(const Spec& f, const Table& t, bool saturate) {
  if (saturate) return uint8_t(t.max_code);
  return f.has_inf ? uint8_t(t.max_code + 1) : kNanCode;  // e5m2's inf follows its max
}

uint8_t finish(const Spec& f, const Table& t, uint8_t code, bool saturate) {
  return code > t.max_code ? overflowed_code(f, t, saturate) : code;
}

// The expected float8 bits for any double x.
uint8_t reference_round(const Spec& f, const Table& t, double x, bool saturate) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return uint8_t(sign | kNanCode);
  const double a = std::fabs(x);
  if (std::isinf(a)) return uint8_t(sign | overflowed_code(f, t, saturate));
  const size_t k =
      size_t(std::upper_bound(t.values.begin(), t.values.end(), a) - t.values.begin()) - 1;
  return uint8_t(sign | finish(f, t, nearest_code(t, k, a), saturate));
}

template <class F8, class From>
uint8_t convert_bits(From x, bool saturate) {
  return F8(x, saturate ? Overflow::Saturate : Overflow::NonFinite).bits;
}

// NaN patterns compare by NaN-ness and sign (e5m2 has several); others exactly.
bool same_result(const Spec& f, uint8_t got, uint8_t expected) {
  if (reference_is_nan(f, expected)) {
    return reference_is_nan(f, got) && (got & 0x80) == (expected & 0x80);
  }
  return got == expected;
}

template <class F8>
void check_every_pattern(const Spec& f) {
  int nans = 0;
  for (int code = 0; code < 256; ++code) {
    const uint8_t bits = uint8_t(code);
    INFO(f.name << " pattern 0x" << std::hex << code);
    const float widened = static_cast<float>(F8::from_bits(bits));
    const double widened_double = static_cast<double>(F8::from_bits(bits));
    if (reference_is_nan(f, bits)) {
      ++nans;
      CHECK(std::isnan(widened));
      CHECK(std::isnan(widened_double));
      CHECK(std::signbit(widened) == bool(bits & 0x80));
      continue;
    }
    const double expected = reference_value(f, bits);
    CHECK(double(widened) == expected);
    CHECK(widened_double == expected);
    CHECK(std::signbit(widened) == bool(bits & 0x80));  // -0 stays -0
    for (const bool saturate : {false, true}) {
      if (saturate && std::isinf(expected)) continue;  // saturating takes inf to the max
      CHECK(convert_bits<F8>(widened, saturate) == bits);
      CHECK(convert_bits<F8>(expected, saturate) == bits);
      CHECK(convert_bits<F8>(Half(widened), saturate) == bits);
      CHECK(convert_bits<F8>(BFloat16(widened), saturate) == bits);
    }
  }
  CHECK(nans == (f.has_inf ? 6 : 2));
}

// Inputs a float8 rounding is most likely to get wrong: every neighbour midpoint (a tie) and
// the doubles just beside it, each value itself, the max, the extension and past it, the
// smallest subnormal, half of it (a tie with zero) and just beside that, with both signs.
std::vector<double> edge_samples(const Table& t) {
  std::vector<double> out = {0.0,
                             1e-300,
                             1e300,
                             std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN(),
                             std::numeric_limits<double>::denorm_min()};
  const double smallest = t.values[1];
  for (const double x : {smallest, smallest / 2, smallest / 4, smallest * 0.75, smallest * 1.5}) {
    out.push_back(x);
  }
  for (size_t k = 0; k + 1 < t.values.size(); ++k) {
    const double lo = t.values[k], hi = t.values[k + 1], mid = (lo + hi) / 2;
    for (const double x : {lo, hi, mid}) {
      out.push_back(x);
      out.push_back(std::nextafter(x, 0.0));
      out.push_back(std::nextafter(x, INFINITY));
    }
  }
  out.push_back(t.values.back() * 2);
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) out.push_back(-out[i]);
  return out;
}

template <class F8>
void check_edge_samples(const Spec& f) {
  const Table t = make_table(f);
  for (const double x : edge_samples(t)) {
    for (const bool saturate : {false, true}) {
      INFO(f.name << " from " << fmt::format("{:a}", x) << (saturate ? " saturating" : ""));
      // float64 rounds once, straight from 53 bits.
      CHECK(same_result(f, convert_bits<F8>(x, saturate), reference_round(f, t, x, saturate)));
      // float32, float16 and bfloat16 inputs: the value each holds after its own rounding.
      const float as_float = static_cast<float>(x);
      CHECK(same_result(f, convert_bits<F8>(as_float, saturate),
                        reference_round(f, t, double(as_float), saturate)));
    }
  }
}

// Every float16 and every bfloat16 pattern, rounded through the reference.
template <class F8, class Narrow>
void check_all_16_bit_inputs(const Spec& f) {
  const Table t = make_table(f);
  int mismatches = 0;
  for (uint32_t raw = 0; raw < 0x10000u; ++raw) {
    const Narrow x = Narrow::from_bits(uint16_t(raw));
    for (const bool saturate : {false, true}) {
      const uint8_t expected = reference_round(f, t, static_cast<double>(x), saturate);
      const uint8_t got = convert_bits<F8>(x, saturate);
      if (!same_result(f, got, expected) && ++mismatches <= 5) {
        FAIL_CHECK(f.name << " from 16-bit pattern 0x" << std::hex << raw << ": got 0x" << int(got)
                          << ", expected 0x" << int(expected));
      }
    }
  }
  CHECK(mismatches == 0);
}

// All 2^32 float32 inputs in both modes, as NOTE [Float8 reference rounding] describes.
template <class F8>
void check_all_floats(const Spec& f) {
  const Table t = make_table(f);
  constexpr int64_t kMagnitudes = int64_t(1) << 31;
  constexpr int64_t kChunk = int64_t(1) << 20;
  int64_t mismatches = 0;
  uint32_t first_bad = 0;
#pragma omp parallel for schedule(dynamic, 16) reduction(+ : mismatches)
  for (int64_t chunk = 0; chunk < kMagnitudes / kChunk; ++chunk) {
    const uint32_t begin = uint32_t(chunk * kChunk);
    size_t k = 0;  // lower neighbour of the current magnitude (finite inputs)
    bool k_found = false;
    for (uint32_t m = begin; m < begin + uint32_t(kChunk); ++m) {
      const float x = std::bit_cast<float>(m);
      uint8_t plain, saturated;
      if (m > 0x7F800000u) {
        plain = saturated = kNanCode;
      } else if (m == 0x7F800000u) {
        plain = overflowed_code(f, t, false);
        saturated = overflowed_code(f, t, true);
      } else {
        const double a = double(x);
        if (!k_found) {
          k = size_t(std::upper_bound(t.values.begin(), t.values.end(), a) - t.values.begin()) - 1;
          k_found = true;
        }
        while (k + 1 < t.values.size() && t.values[k + 1] <= a) ++k;
        const uint8_t code = nearest_code(t, k, a);
        plain = finish(f, t, code, false);
        saturated = finish(f, t, code, true);
      }
      const float negative = std::bit_cast<float>(m | 0x80000000u);
      const bool ok = same_result(f, convert_bits<F8>(x, false), plain) &&
                      same_result(f, convert_bits<F8>(x, true), saturated) &&
                      same_result(f, convert_bits<F8>(negative, false), uint8_t(plain | 0x80)) &&
                      same_result(f, convert_bits<F8>(negative, true), uint8_t(saturated | 0x80));
      if (!ok) {
        ++mismatches;
#pragma omp critical(hg_float8_first_bad)
        if (first_bad == 0 || m < first_bad) first_bad = m;
      }
    }
  }
  INFO(f.name << ": first mismatching float32 magnitude 0x" << std::hex << first_bad);
  CHECK(mismatches == 0);
}

std::vector<float> bits_as_floats(const std::vector<uint8_t>& codes, const Spec& f) {
  std::vector<float> out;
  for (const uint8_t c : codes) {
    out.push_back(reference_is_nan(f, c) ? NAN : float(reference_value(f, c)));
  }
  return out;
}

}  // namespace

// ---- scalars ----------------------------------------------------------------------------------

TEST_CASE("float8_e4m3fn: every pattern decodes and round trips", "[float8]") {
  check_every_pattern<Float8_e4m3fn>(kE4M3);
  CHECK(static_cast<float>(Float8_e4m3fn::from_bits(0x7E)) == 448.0f);
  CHECK(static_cast<float>(Float8_e4m3fn::from_bits(0x01)) == std::ldexp(1.0f, -9));
}

TEST_CASE("float8_e5m2: every pattern decodes and round trips", "[float8]") {
  check_every_pattern<Float8_e5m2>(kE5M2);
  CHECK(static_cast<float>(Float8_e5m2::from_bits(0x7B)) == 57344.0f);
  CHECK(std::isinf(static_cast<float>(Float8_e5m2::from_bits(0xFC))));
  CHECK(static_cast<float>(Float8_e5m2::from_bits(0x01)) == std::ldexp(1.0f, -16));
}

TEST_CASE("float8: overflow in each mode as the formats define it", "[float8]") {
  // e4m3fn: 464 is the tie between 448 (mantissa 110, even) and 480; anything above is NaN.
  CHECK(Float8_e4m3fn(464.0f).bits == 0x7E);
  CHECK(Float8_e4m3fn(464.0001f).bits == 0x7F);
  CHECK(Float8_e4m3fn(-1e6f).bits == 0xFF);
  CHECK(Float8_e4m3fn(INFINITY).bits == 0x7F);
  CHECK(Float8_e4m3fn(-INFINITY, Overflow::Saturate).bits == 0xFE);
  CHECK(Float8_e4m3fn(1e6f, Overflow::Saturate).bits == 0x7E);
  CHECK(Float8_e4m3fn(NAN, Overflow::Saturate).bits == 0x7F);
  // e5m2: 61440 ties between 57344 (mantissa 11, odd) and 65536, so it goes to inf.
  CHECK(Float8_e5m2(61439.0f).bits == 0x7B);
  CHECK(Float8_e5m2(61440.0f).bits == 0x7C);
  CHECK(Float8_e5m2(-INFINITY).bits == 0xFC);
  CHECK(Float8_e5m2(INFINITY, Overflow::Saturate).bits == 0x7B);
  CHECK(Float8_e5m2(-1e30, Overflow::Saturate).bits == 0xFB);
  CHECK(std::isnan(static_cast<float>(Float8_e5m2(NAN, Overflow::Saturate))));
}

TEST_CASE("float8: float64 float32 float16 and bfloat16 edge inputs round as the reference",
          "[float8]") {
  check_edge_samples<Float8_e4m3fn>(kE4M3);
  check_edge_samples<Float8_e5m2>(kE5M2);
}

TEST_CASE("float8: a float64 input rounds once and not through float32", "[float8]") {
  // Just above the tie 1.0625 between 1.0 and 1.125: float32 would round it to the tie, which
  // goes to even (1.0); from the double it is above the tie, so 1.125.
  const double above_tie = 1.0625 + std::ldexp(1.0, -40);
  REQUIRE(static_cast<float>(above_tie) == 1.0625f);
  CHECK(static_cast<float>(Float8_e4m3fn(above_tie)) == 1.125f);
  CHECK(static_cast<float>(Float8_e4m3fn(static_cast<float>(above_tie))) == 1.0f);
}

TEST_CASE("float8: every float16 and bfloat16 pattern rounds as the reference", "[float8]") {
  check_all_16_bit_inputs<Float8_e4m3fn, Half>(kE4M3);
  check_all_16_bit_inputs<Float8_e4m3fn, BFloat16>(kE4M3);
  check_all_16_bit_inputs<Float8_e5m2, Half>(kE5M2);
  check_all_16_bit_inputs<Float8_e5m2, BFloat16>(kE5M2);
}

TEST_CASE("float -> float8_e4m3fn: all 2^32 inputs in both modes against the reference",
          "[float8][exhaustive]") {
  check_all_floats<Float8_e4m3fn>(kE4M3);
}

TEST_CASE("float -> float8_e5m2: all 2^32 inputs in both modes against the reference",
          "[float8][exhaustive]") {
  check_all_floats<Float8_e5m2>(kE5M2);
}

// ---- dtypes and tensors ----------------------------------------------------------------------

TEST_CASE("float8 dtypes: names sizes finfo and promotion", "[float8][dtype]") {
  CHECK(dtype_name(kFloat8_e4m3fn) == "float8_e4m3fn");
  CHECK(dtype_name(kFloat8_e5m2) == "float8_e5m2");
  CHECK(element_size(kFloat8_e4m3fn) == 1);
  CHECK(element_size(kFloat8_e5m2) == 1);
  CHECK(is_floating_point(kFloat8_e4m3fn));
  CHECK(is_floating_point(kFloat8_e5m2));
  CHECK_FALSE(is_reduced_precision(kFloat8_e5m2));
  // Conversion code visits float8; the visitor every computing kernel uses refuses it.
  const auto size_of = [](auto tag) { return sizeof(typename decltype(tag)::type); };
  CHECK(visit_any_dtype(kFloat8_e5m2, size_of) == 1);
  CHECK_THROWS_WITH(visit_dtype(kFloat8_e5m2, size_of),
                    Contains("float8_e5m2 tensors support conversion only"));
  CHECK_THROWS_WITH(visit_floating_dtype("softmax", kFloat8_e4m3fn, size_of),
                    Contains("softmax: float8_e4m3fn tensors support conversion only"));
  for (const Spec& f : {kE4M3, kE5M2}) {
    const Table t = make_table(f);
    const FInfo info = finfo(f.dtype);
    CHECK(info.bits == 8);
    CHECK(info.max == t.values[size_t(t.max_code)]);
    CHECK(info.min == -info.max);
    CHECK(info.smallest_subnormal == t.values[1]);
    CHECK(info.tiny == t.values[size_t(1) << f.mantissa_bits]);
    CHECK(info.eps == std::ldexp(1.0, -f.mantissa_bits));
  }
  CHECK(promote_types(kFloat8_e4m3fn, kFloat8_e4m3fn) == kFloat8_e4m3fn);
  CHECK_THROWS_WITH(promote_types(kFloat8_e4m3fn, kFloat32),
                    Contains("Promotion for Float8 Types is not supported") &&
                        Contains("float8_e4m3fn and float32"));
  CHECK_THROWS_WITH(promote_types(kInt64, kFloat8_e5m2),
                    Contains("Promotion for Float8 Types is not supported"));
  CHECK_THROWS_AS(promote_types(kFloat8_e4m3fn, kFloat8_e5m2), Error);
}

TEST_CASE("float8 tensors: to() from every dtype and back in both modes", "[float8]") {
  const std::vector<double> values = {0.1, -3.3, 500.0, 60000.0, -1e-3, 0.0, 2.0, 7e4, 17.0};
  for (const Spec& f : {kE4M3, kE5M2}) {
    const Table t = make_table(f);
    for (const DType from : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      const Tensor x = tensor(values, from);
      const std::vector<double> held = x.to(kFloat64).to_vector<double>();
      for (const bool saturate : {false, true}) {
        INFO(f.name << " from " << dtype_name(from) << (saturate ? " saturating" : ""));
        const Tensor x8 = x.to(f.dtype, {.saturate = saturate});
        REQUIRE(x8.dtype() == f.dtype);
        std::vector<uint8_t> expected;
        for (const double v : held) expected.push_back(reference_round(f, t, v, saturate));
        const std::vector<float> back = x8.to(kFloat32).to_vector<float>();
        const std::vector<float> want = bits_as_floats(expected, f);
        for (size_t i = 0; i < values.size(); ++i) {
          INFO("element " << i << ": " << held[i]);
          if (std::isnan(want[i])) {
            CHECK(std::isnan(back[i]));
          } else {
            CHECK(back[i] == want[i]);
          }
        }
        // float8 -> float16, bfloat16 and float64 agree with float8 -> float32 (exact widening).
        for (const DType to : {kFloat16, kBFloat16, kFloat64}) {
          const std::vector<double> wide = x8.to(to).to(kFloat64).to_vector<double>();
          for (size_t i = 0; i < values.size(); ++i) {
            CHECK((std::isnan(wide[i]) ? std::isnan(back[i]) : wide[i] == double(back[i])));
          }
        }
      }
    }
  }
  // Integers convert both ways (the float8 value truncates toward zero).
  const Tensor ints = tensor(std::vector<int64_t>{-7, 300, 1000});
  CHECK(ints.to(kFloat8_e4m3fn).to(kFloat32).to_vector<float>()[1] == 288.0f);
  CHECK(tensor({-2.5, 3.5}).to(kFloat8_e5m2).to(kInt32).to_vector<int32_t>() ==
        std::vector<int32_t>{-2, 3});
}

TEST_CASE("float8 tensors: strided sources views copy_ fill and item", "[float8]") {
  const Tensor x = arange(12.0).reshape({3, 4});
  const Tensor x8 = x.t().to(kFloat8_e4m3fn);  // a transposed source
  CHECK(x8.to(kFloat32).to_vector<float>() == x.t().contiguous().to_vector<float>());
  const Tensor view = x8.transpose(0, 1).reshape({12}).slice(0, 2, 6);
  CHECK(view.dtype() == kFloat8_e4m3fn);
  CHECK(view.to(kFloat32).to_vector<float>() == std::vector<float>{2, 3, 4, 5});
  Tensor target = zeros({4}, kFloat8_e5m2);
  CHECK(target.to(kFloat32).to_vector<float>() == std::vector<float>{0, 0, 0, 0});
  target.copy_(tensor({1.0, -0.5, 3.0, 1e9}));
  const std::vector<float> copied = target.to(kFloat32).to_vector<float>();
  CHECK(copied[0] == 1.0f);
  CHECK(copied[1] == -0.5f);
  CHECK(copied[2] == 3.0f);
  CHECK(std::isinf(copied[3]));
  target.fill_(2.5);
  CHECK(target.to(kFloat32).to_vector<float>() == std::vector<float>{2.5, 2.5, 2.5, 2.5});
  CHECK(static_cast<float>(full({1}, 0.3, kFloat8_e4m3fn).item<Float8_e4m3fn>()) ==
        static_cast<float>(Float8_e4m3fn(0.3)));
  CHECK(fmt::format("{}", Float8_e5m2(1.5f)) == "1.5");
}

TEST_CASE("float8 tensors: saturate needs a float8 destination", "[float8][errors]") {
  const Tensor x = tensor({1.0, 2.0});
  CHECK_THROWS_WITH(x.to(kFloat16, {.saturate = true}),
                    Contains("saturate applies to float8 destinations") && Contains("float16"));
  CHECK_THROWS_WITH(x.to(kFloat32, {.saturate = true}), Contains("got float32"));
  CHECK(x.to(kFloat8_e4m3fn, {.saturate = true}).dtype() == kFloat8_e4m3fn);
}

TEST_CASE("float8 tensors print as their float32 values", "[float8][format]") {
  const Tensor x8 = tensor({0.5, -1.25, 448.0, 3.0}).to(kFloat8_e4m3fn);
  std::string expected = fmt::format("{}", x8.to(kFloat32));
  expected.replace(expected.find("float32"), 7, "float8_e4m3fn");
  CHECK(fmt::format("{}", x8) == expected);
}

TEST_CASE("float8 tensors refuse arithmetic naming the dtype", "[float8][errors]") {
  const Tensor x8 = tensor({1.0, 2.0}).to(kFloat8_e4m3fn);
  const Tensor y8 = tensor({1.0, 2.0}).to(kFloat8_e5m2);
  const std::string refused =
      "float8_e4m3fn tensors support conversion only; convert to a wider dtype first";
  CHECK_THROWS_WITH(add(x8, x8), Contains("add: " + refused));
  CHECK_THROWS_WITH(mul(x8, 2.0), Contains(refused));
  CHECK_THROWS_WITH(relu(x8), Contains(refused));
  CHECK_THROWS_WITH(sum(x8), Contains(refused));
  CHECK_THROWS_WITH(matmul(x8.reshape({1, 2}), x8.reshape({2, 1})), Contains(refused));
  CHECK_THROWS_WITH(add(y8, tensor({1.0, 1.0})),
                    Contains("float8_e5m2 tensors support conversion"));
  CHECK_THROWS_WITH(cat({x8, x8}), Contains(refused));
  // The inputs are untouched.
  CHECK(x8.to(kFloat32).to_vector<float>() == std::vector<float>{1, 2});
}
