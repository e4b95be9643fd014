// Copies and conversions: to(dtype) for every pair of dtypes, copy_ with broadcasting and
// overlap, fill_, item and to_vector, and the errors that must leave data untouched.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

constexpr std::array<DType, 10> kAll = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64,
                                        kInt32,   kBool,    kUInt8,    kInt8,    kInt16};

// The value of a 16-bit pattern of float16 or bfloat16, computed from the format's fields
// (not through the library's conversion).
long double value_of_bits(uint16_t bits, bool bfloat) {
  const int mantissa_bits = bfloat ? 7 : 10;
  const int exponent_bits = bfloat ? 8 : 5;
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const bool negative = bits >> 15;
  const int exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  long double magnitude;
  if (exponent == (1 << exponent_bits) - 1) {
    magnitude = mantissa ? NAN : INFINITY;
  } else if (exponent == 0) {
    magnitude = std::ldexp((long double)mantissa, 1 - bias - mantissa_bits);
  } else {
    magnitude =
        std::ldexp((long double)(mantissa | (1 << mantissa_bits)), exponent - bias - mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// Is `bits` the round-to-nearest-even result of x in the 16-bit format? Checked from the
// definition: no neighbouring pattern is closer, and a tie goes to the even pattern. The
// overflow threshold is the midpoint between max and the next power of two.
bool correctly_rounded_16(long double x, uint16_t bits, bool bfloat) {
  const int mantissa_bits = bfloat ? 7 : 10;
  const uint16_t inf_bits = bfloat ? 0x7F80 : 0x7C00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const long double ax = std::fabs(x);
  const long double max = value_of_bits(inf_bits - 1, bfloat);
  const long double beyond = std::ldexp((long double)1, bfloat ? 128 : 16);  // "the next value"
  if ((bits & 0x8000) != sign && (bits & 0x7FFF) != 0) return false;
  const uint16_t magnitude_bits = bits & 0x7FFF;
  if (ax >= (max + beyond) / 2) return magnitude_bits == inf_bits;
  if (magnitude_bits >= inf_bits) return false;
  const long double value = value_of_bits(magnitude_bits, bfloat);
  const long double error = std::fabs(ax - value);
  const long double below = magnitude_bits > 0 ? value_of_bits(magnitude_bits - 1, bfloat) : -1.0L;
  const long double above =
      magnitude_bits + 1 < inf_bits ? value_of_bits(magnitude_bits + 1, bfloat) : beyond;
  const long double error_below = magnitude_bits > 0 ? std::fabs(ax - below) : INFINITY;
  const long double error_above = std::fabs(above - ax);
  if (error > error_below || error > error_above) return false;
  if (error == error_below || error == error_above) return (magnitude_bits & 1) == 0;  // tie
  (void)mantissa_bits;
  return true;
}

template <class T>
uint16_t bits_of(T value) {
  uint16_t bits;
  std::memcpy(&bits, &value, 2);
  return bits;
}

}  // namespace

TEST_CASE("to converts every pair of dtypes with the documented rules", "[tensor][copy]") {
  // Values every dtype can hold exactly, so each conversion must be exact (uint8 holds no
  // negative values).
  const std::vector<double> signed_values = {0.0, 1.0, -2.0, 3.0, 0.0, 1.0, 100.0, -7.0};
  const std::vector<double> unsigned_values = {0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 100.0, 7.0};
  for (DType from : kAll) {
    for (DType to : kAll) {
      CAPTURE(from, to);
      const std::vector<double>& exact =
          from == kUInt8 || to == kUInt8 ? unsigned_values : signed_values;
      std::vector<double> expected = exact;
      if (from == kBool || to == kBool) {
        for (double& v : expected) v = v != 0.0;
      }
      Tensor source = tensor(exact, kFloat64).to(from);
      Tensor converted = source.to(to);
      CHECK(converted.dtype() == to);
      CHECK(converted.sizes() == source.sizes());
      CHECK(converted.to_vector<double>() == expected);
      if (from == to) CHECK(converted.is_same(source));
    }
  }
}

TEST_CASE("float to integer truncates toward zero like C++", "[tensor][copy]") {
  Tensor t = tensor({2.7, -2.7, 0.5, -0.5, 1e9, -1e9});
  CHECK(t.to(kInt64).to_vector<int64_t>() ==
        std::vector<int64_t>{2, -2, 0, 0, 1000000000, -1000000000});
  CHECK(t.to(kInt32).to_vector<int32_t>() ==
        std::vector<int32_t>{2, -2, 0, 0, 1000000000, -1000000000});
  CHECK(t.narrow(0, 0, 4).to(kFloat16).to(kInt32).to_vector<int32_t>() ==
        std::vector<int32_t>{2, -2, 0, 0});
  CHECK_THROWS_WITH(t.to(kFloat16).to(kInt32),
                    Contains("float16 value inf"));  // 1e9 overflows float16
  CHECK(t.to(kBool).to_vector<bool>() == std::vector<bool>{true, true, true, true, true, true});
  CHECK(tensor({NAN}).to(kBool).item<bool>());  // NaN != 0
  // The exact ends of int32: -2^31 - 0.5 truncates to -2^31, which fits; 2^31 does not.
  CHECK(tensor({-2147483648.5}, kFloat64).to(kInt32).item<int32_t>() ==
        std::numeric_limits<int32_t>::min());
  CHECK_THROWS_WITH(tensor({2147483648.0}, kFloat64).to(kInt32),
                    Contains("outside the integer range"));
}

TEST_CASE("uint8 int8 and int16 convert as torch: integers wrap, floats must fit",
          "[tensor][copy]") {
  // Between integers the low bits are kept (torch.tensor([300, -1, 256, -129]).to(torch.uint8)
  // prints [44, 255, 0, 127]; .to(torch.int8) prints [44, -1, 0, 127]).
  const Tensor wide = tensor(std::vector<int64_t>{300, -1, 256, -129});
  CHECK(wide.to(kUInt8).to_vector<uint8_t>() == std::vector<uint8_t>{44, 255, 0, 127});
  CHECK(wide.to(kInt8).to_vector<int8_t>() == std::vector<int8_t>{44, -1, 0, 127});
  CHECK(tensor(std::vector<int64_t>{40000, -32769}).to(kInt16).to_vector<int16_t>() ==
        std::vector<int16_t>{-25536, 32767});
  CHECK(tensor(std::vector<int64_t>{200, 255}).to(kUInt8).to(kInt8).to_vector<int8_t>() ==
        std::vector<int8_t>{-56, -1});
  CHECK(tensor(std::vector<int64_t>{-56, -1}).to(kInt8).to(kUInt8).to_vector<uint8_t>() ==
        std::vector<uint8_t>{200, 255});
  // Bytes widen exactly to every float (image bytes load as they are).
  const Tensor bytes = arange(256, kInt64).to(kUInt8);
  for (DType to : {kFloat16, kBFloat16, kFloat32, kFloat64}) {
    const std::vector<double> widened = bytes.to(to).to_vector<double>();
    for (int v = 0; v < 256; ++v) CHECK(widened[size_t(v)] == double(v));
  }
  // Floats truncate toward zero and must land inside the range.
  CHECK(tensor({255.9, -0.9, 0.5}).to(kUInt8).to_vector<uint8_t>() ==
        std::vector<uint8_t>{255, 0, 0});
  CHECK(tensor({127.5, -128.9}).to(kInt8).to_vector<int8_t>() == std::vector<int8_t>{127, -128});
  CHECK(tensor({32767.5, -32768.5}, kFloat64).to(kInt16).to_vector<int16_t>() ==
        std::vector<int16_t>{32767, -32768});
  CHECK_THROWS_WITH(tensor({256.0}).to(kUInt8),
                    Contains("cannot convert float32 value 256 to uint8") &&
                        Contains("outside the integer range"));
  CHECK_THROWS_WITH(tensor({-1.0}).to(kUInt8), Contains("value -1 to uint8"));
  CHECK_THROWS_WITH(tensor({128.0}).to(kFloat16).to(kInt8), Contains("value 128 to int8"));
  CHECK_THROWS_WITH(tensor({NAN}).to(kInt16), Contains("NaN has no integer value"));
  // fill_ and full check an integer too: uint8 takes -255..255 (a negative one wraps), as
  // c10's checked conversion.
  CHECK(full({2}, -1, kUInt8).to_vector<uint8_t>() == std::vector<uint8_t>{255, 255});
  CHECK(full({1}, 127, kInt8).item<int8_t>() == 127);
  Tensor byte = full({2}, 7, kUInt8);
  CHECK_THROWS_WITH(byte.fill_(256), Contains("fill_: value 256 cannot be converted to uint8"));
  CHECK_THROWS_WITH(byte.fill_(-256), Contains("value -256 cannot be converted to uint8"));
  CHECK_THROWS_WITH(full({1}, 128, kInt8), Contains("value 128 cannot be converted to int8"));
  CHECK_THROWS_WITH(full({1}, -32769, kInt16), Contains("cannot be converted to int16"));
  CHECK_THROWS_WITH(full({1}, int64_t(1) << 31, kInt32), Contains("cannot be converted to int32"));
  CHECK(byte.to_vector<uint8_t>() == std::vector<uint8_t>{7, 7});
}

TEST_CASE("NaN inf and out of range values are errors when converted to integers",
          "[tensor][copy][errors]") {
  Tensor nan_source = tensor({1.0, NAN, 3.0});
  CHECK_THROWS_WITH(nan_source.to(kInt64), Contains("cannot convert float32 value nan to int64") &&
                                               Contains("NaN has no integer value"));
  CHECK_THROWS_WITH(tensor({INFINITY}).to(kInt32), Contains("value inf to int32"));
  CHECK_THROWS_WITH(tensor({1e20}).to(kInt64), Contains("outside the integer range"));
  CHECK_THROWS_WITH(tensor({NAN}).to(kFloat16).to(kInt32), Contains("float16 value nan"));

  // A failed copy_ leaves the destination untouched, and the source too.
  Tensor destination = full({3}, 5, kInt64);
  const uint64_t version = destination.version();
  CHECK_THROWS_AS(destination.copy_(nan_source), hg::Error);
  CHECK(destination.to_vector<int64_t>() == std::vector<int64_t>{5, 5, 5});
  CHECK(destination.version() == version);
  CHECK(std::isnan(nan_source.to_vector<float>()[1]));
  CHECK_THROWS_WITH(destination.fill_(NAN),
                    Contains("fill_: value nan cannot be converted to int64"));
  CHECK(destination.to_vector<int64_t>() == std::vector<int64_t>{5, 5, 5});
}

TEST_CASE("floating conversions round once to nearest even", "[tensor][copy]") {
  std::mt19937_64 rng(7);
  // float64 sources spread over every binade of float16/bfloat16 including subnormals,
  // overflow and ties; int64 sources above 2^53 (where a trip through double would round
  // twice).
  std::vector<double> doubles;
  std::vector<int64_t> integers;
  for (int i = 0; i < 20000; ++i) {
    const double mantissa = std::uniform_real_distribution<double>(1.0, 2.0)(rng);
    const int exponent = std::uniform_int_distribution<int>(-30, 20)(rng);
    doubles.push_back((i % 2 ? -1 : 1) * std::ldexp(mantissa, exponent));
    const int shift = std::uniform_int_distribution<int>(0, 62)(rng);
    integers.push_back(int64_t(rng() >> (63 - shift)) * (i % 3 ? 1 : -1));
  }
  // Exact ties of float16 and of bfloat16, and values just beside them.
  for (double tie : {1.0 + std::ldexp(1.0, -11), 1.0 + 3 * std::ldexp(1.0, -11),
                     1.0 + std::ldexp(1.0, -8), 65520.0, std::ldexp(3.0, -26)}) {
    doubles.push_back(tie);
    doubles.push_back(std::nextafter(tie, 0.0));
    doubles.push_back(std::nextafter(tie, 10.0 * tie));
  }
  integers.push_back((int64_t(1) << 60) + (int64_t(1) << 52) + 1);  // just above a bf16 tie

  for (bool bfloat : {false, true}) {
    const DType target = bfloat ? kBFloat16 : kFloat16;
    Tensor from_doubles = tensor(doubles, kFloat64).to(target);
    Tensor from_integers = tensor(integers).to(target);
    CHECK(from_integers.dtype() == target);
    for (size_t i = 0; i < doubles.size(); ++i) {
      const uint16_t bits = bfloat ? bits_of(from_doubles.to_vector<BFloat16>()[i])
                                   : bits_of(from_doubles.to_vector<Half>()[i]);
      CAPTURE(bfloat, doubles[i], bits);
      REQUIRE(correctly_rounded_16((long double)doubles[i], bits, bfloat));
    }
    const auto integer_bits = [&](size_t i) {
      return bfloat ? bits_of(from_integers.to_vector<BFloat16>()[i])
                    : bits_of(from_integers.to_vector<Half>()[i]);
    };
    for (size_t i = 0; i < integers.size(); ++i) {
      CAPTURE(bfloat, integers[i]);
      REQUIRE(correctly_rounded_16((long double)integers[i], integer_bits(i), bfloat));
    }
  }
}

TEST_CASE("copy_ broadcasts converts and writes through strides", "[tensor][copy]") {
  Tensor destination = zeros({2, 3}, kFloat16).t();  // [3, 2], not contiguous
  destination.copy_(tensor({1.0, 2.0}, kFloat64));   // [2] broadcast along dim 0
  CHECK(destination.to_vector<float>() == std::vector<float>{1, 2, 1, 2, 1, 2});
  CHECK_THROWS_WITH(
      destination.copy_(zeros({3})),
      Contains(
          "copy_: the source of shape [3] cannot be broadcast to the destination's shape [3, 2]"));
  CHECK_THROWS_WITH(destination.copy_(zeros({1, 3, 2})), Contains("cannot be broadcast"));
  CHECK_THROWS_WITH(zeros({1}).expand({4}).copy_(zeros({4})),
                    Contains("elements that share memory"));
  CHECK_THROWS_WITH(zeros({1}).expand({4}).fill_(1), Contains("elements that share memory"));
}

TEST_CASE("copy_ between overlapping views reads the source first", "[tensor][copy]") {
  Tensor x = arange(6, kFloat32);
  x.narrow(0, 1, 5).copy_(x.narrow(0, 0, 5));  // shift right by one
  CHECK(x.to_vector<float>() == std::vector<float>{0, 0, 1, 2, 3, 4});
  Tensor y = arange(9, kFloat32).reshape({3, 3});
  y.copy_(y.t());
  CHECK(y.to_vector<float>() == std::vector<float>{0, 3, 6, 1, 4, 7, 2, 5, 8});
}

TEST_CASE("large copies run in parallel and match", "[tensor][copy]") {
  Tensor big = randn({257, 1031});
  Tensor transposed = big.t().contiguous();
  const std::vector<float> a = big.to_vector<float>(), b = transposed.to_vector<float>();
  for (int64_t i = 0; i < 257; i += 13) {
    for (int64_t j = 0; j < 1031; j += 7) REQUIRE(a[i * 1031 + j] == b[j * 257 + i]);
  }
  Tensor halves = big.to(kFloat16);
  const std::vector<Half> h = halves.to_vector<Half>();
  for (size_t i = 0; i < a.size(); i += 101) REQUIRE(h[i].bits == Half(a[i]).bits);
}

TEST_CASE("casts of short-rowed views give each element's own rounding", "[tensor][copy]") {
  // NOTE [Short strided casts]: attention's head views, transposed, an inner stride other
  // than one and a broadcast source, in every float32 <-> 16-bit direction, against the
  // scalar conversion of each element; NaN, infinities, a subnormal and a tie among them.
  Tensor base = randn({4, 9, 3, 12}) * 1000.0;
  float* raw = base.data_ptr<float>();
  raw[1] = std::numeric_limits<float>::quiet_NaN();
  raw[14] = std::numeric_limits<float>::infinity();
  raw[27] = -std::numeric_limits<float>::infinity();
  raw[40] = 1e-41f;           // a float32 subnormal
  raw[53] = 1.0f + 0x1p-8f;   // halfway between two bfloat16 values: rounds to even
  raw[66] = 1.0f + 0x1p-11f;  // halfway between two float16 values
  const std::vector<Tensor> views = {
      base.transpose(1, 2),                         // rows of 12, [4, 3, 9, 12]
      base.transpose(2, 3),                         // inner stride 12
      base.narrow(3, 2, 7),                         // rows of 7 (tails only)
      base.narrow(3, 0, 1).expand({4, 9, 3, 20}),   // a broadcast source
  };
  for (const Tensor& view : views) {
    INFO("view " << view.sizes() << " strides " << view.strides());
    REQUIRE_FALSE(view.is_contiguous());
    const std::vector<float> expected = view.contiguous().to_vector<float>();
    for (DType dtype : {kFloat16, kBFloat16}) {
      INFO(dtype);
      const Tensor narrow = view.to(dtype);
      CHECK(narrow.is_contiguous());
      std::vector<uint16_t> got(expected.size());
      REQUIRE(narrow.numel() == int64_t(got.size()));
      std::memcpy(got.data(), narrow.data_ptr(), got.size() * sizeof(uint16_t));
      int64_t wrong = 0;
      for (size_t i = 0; i < expected.size(); ++i) {
        const uint16_t want =
            dtype == kFloat16 ? Half(expected[i]).bits : BFloat16(expected[i]).bits;
        if (got[i] != want && wrong++ < 5) {
          FAIL_CHECK("element " << i << ": " << got[i] << " != " << want);
        }
      }
      CHECK(wrong == 0);
      // And back: a view of the 16-bit tensor widened to float32.
      const Tensor narrow_view = narrow.reshape(view.contiguous().sizes()).transpose(0, 1);
      const std::vector<float> widened = narrow_view.to(kFloat32).to_vector<float>();
      const std::vector<float> reference = narrow_view.contiguous().to(kFloat32).to_vector<float>();
      REQUIRE(widened.size() == reference.size());
      CHECK(std::memcmp(widened.data(), reference.data(), widened.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("item and to_vector convert and check the element count", "[tensor][copy]") {
  CHECK(scalar_tensor(2.5).item<float>() == 2.5f);
  CHECK(scalar_tensor(2.5).item<int64_t>() == 2);
  CHECK(tensor({3.0}).item<double>() == 3.0);
  CHECK(scalar_tensor(int64_t(1) << 60).item<int64_t>() == int64_t(1) << 60);
  CHECK_THROWS_WITH(
      tensor({1.0, 2.0}).item<float>(),
      Contains("item: expected a tensor with one element, got 2 elements (shape [2])"));
  CHECK_THROWS_WITH(scalar_tensor(NAN).item<int32_t>(), Contains("NaN has no integer value"));
  CHECK_THROWS_WITH(tensor({1.0}).data_ptr<double>(),
                    Contains("data_ptr<float64>: the tensor's dtype is float32"));
}

TEST_CASE("clone is a deep copy with its own storage", "[tensor][copy]") {
  Tensor x = arange(4, kFloat32);
  Tensor y = x.clone();
  y.fill_(0);
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  CHECK_FALSE(y.shares_storage(x));
  CHECK(y.is_contiguous());
}

TEST_CASE("without a CUDA device, moving to one is refused with a clear message",
          "[tensor][copy][errors]") {
  if (cuda::is_available()) return;  // tests/cuda/ covers the moves themselves
  const Tensor x = arange(4.0);
  CHECK_THROWS_WITH(x.to(Device(kCUDA)), Contains("cannot move a tensor from cpu to cuda:0"));
  CHECK_THROWS_WITH(zeros({2}, {.device = Device(kCUDA, 1)}), Contains("cuda:1"));
  CHECK(x.to_vector<float>() == std::vector<float>{0, 1, 2, 3});  // untouched
}
