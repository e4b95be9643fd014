// to(dtype, Rounding::Stochastic): results are one of the two neighbours of the input, found in
// a sorted table of every value of the destination (decoded from all its bit patterns); the
// share that rounds up matches (x - lo) / (hi - lo) within a few binomial standard errors; the
// Philox words follow NOTE [Stochastic rounding]; special values, errors and the gradient.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/core/stochastic_rounding.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Matchers::Contains;

namespace {

constexpr DType kTargets[] = {kFloat16, kBFloat16, kFloat8_e4m3fn, kFloat8_e5m2};

// Every bit pattern of dtype (16 or 8 bits) as a float64 CPU tensor (the widening is exact).
std::vector<double> decoded_values(DType dtype) {
  const int64_t count = int64_t(1) << (8 * element_size(dtype));
  Tensor patterns = empty({count}, dtype);
  if (element_size(dtype) == 2) {
    auto* bits = static_cast<uint16_t*>(patterns.data_ptr());
    for (int64_t i = 0; i < count; ++i) bits[i] = uint16_t(i);
  } else {
    auto* bits = static_cast<uint8_t*>(patterns.data_ptr());
    for (int64_t i = 0; i < count; ++i) bits[i] = uint8_t(i);
  }
  return patterns.to(kFloat64).to_vector<double>();
}

// The finite values of dtype, ascending, without duplicates (+0 and -0 are one).
std::vector<double> finite_grid(DType dtype) {
  std::vector<double> grid;
  for (const double v : decoded_values(dtype)) {
    if (std::isfinite(v)) grid.push_back(v);
  }
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  return grid;
}

struct Neighbours {
  double lo, hi;
};

// The grid values around x (lo < x < hi), x strictly inside the finite range.
Neighbours neighbours(const std::vector<double>& grid, double x) {
  const auto above = std::upper_bound(grid.begin(), grid.end(), x);
  return {*(above - 1), *above};
}

// n copies of x in `from`, rounded to `to` with a generator seeded `seed`, as float64.
std::vector<double> round_copies(double x, DType from, DType to, int64_t n, uint64_t seed,
                                 CastOptions options = {}) {
  Generator gen(seed);
  options.rounding = Rounding::Stochastic;
  options.generator = &gen;
  return full({n}, x, {.dtype = from}).to(to, options).to(kFloat64).to_vector<double>();
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  std::memcpy(out.data(), t.contiguous().data_ptr(), out.size());
  return out;
}

}  // namespace

TEST_CASE("stochastic rounding picks a neighbour with probability proportional to the distance",
          "[stochastic_rounding]") {
  constexpr int64_t kCopies = 40000;
  for (const DType to : kTargets) {
    const std::vector<double> grid = finite_grid(to);
    const double max = grid.back();
    // Points in the normal range of every format, in its subnormal range, and negative ones.
    const double tiny = finfo(to).smallest_subnormal;
    const std::vector<double> anchors = {1.0, 3.0, -5.0, 0.3, max / 3, tiny * 2.0, -tiny * 5.0};
    for (const DType from : {kFloat32, kFloat64}) {
      uint64_t seed = 11;
      for (const double anchor : anchors) {
        for (const double position : {0.1, 0.25, 0.5, 0.8}) {
          const Neighbours around = neighbours(grid, anchor);
          // A point between the neighbours, then as the source dtype holds it.
          const double wanted = around.lo + position * (around.hi - around.lo);
          const double x = full({1}, wanted, {.dtype = from}).to(kFloat64).item<double>();
          const double p = (x - around.lo) / (around.hi - around.lo);
          INFO(dtype_name(from) << " -> " << dtype_name(to) << " x = " << x << " p = " << p);
          const std::vector<double> got = round_copies(x, from, to, kCopies, seed++);
          int64_t ups = 0;
          double sum = 0;
          for (const double v : got) {
            REQUIRE((v == around.lo || v == around.hi));
            ups += v == around.hi ? 1 : 0;
            sum += v;
          }
          const double share = double(ups) / kCopies;
          const double standard_error = std::sqrt(p * (1 - p) / kCopies);
          CHECK(std::abs(share - p) <= 5 * standard_error);
          // The mean is x within the same statistics (in units of the gap).
          CHECK(std::abs(sum / kCopies - x) <= 5 * standard_error * (around.hi - around.lo));
        }
      }
    }
  }
}

TEST_CASE("stochastic rounding from float16 and bfloat16 to float8 is unbiased",
          "[stochastic_rounding]") {
  constexpr int64_t kCopies = 40000;
  for (const DType to : {kFloat8_e4m3fn, kFloat8_e5m2}) {
    const std::vector<double> grid = finite_grid(to);
    for (const DType from : {kFloat16, kBFloat16}) {
      const double x = full({1}, 2.7, {.dtype = from}).to(kFloat64).item<double>();
      const Neighbours around = neighbours(grid, x);
      const double p = (x - around.lo) / (around.hi - around.lo);
      INFO(dtype_name(from) << " -> " << dtype_name(to) << " p = " << p);
      int64_t ups = 0;
      for (const double v : round_copies(x, from, to, kCopies, 5)) {
        REQUIRE((v == around.lo || v == around.hi));
        ups += v == around.hi ? 1 : 0;
      }
      CHECK(std::abs(double(ups) / kCopies - p) < 5 * std::sqrt(p * (1 - p) / kCopies));
    }
  }
}

TEST_CASE("stochastic rounding keeps every representable value exactly", "[stochastic_rounding]") {
  for (const DType to : kTargets) {
    INFO(dtype_name(to));
    // Every pattern of the destination, NaNs and infs included, widened to float32 and back.
    const int64_t count = int64_t(1) << (8 * element_size(to));
    Tensor patterns = empty({count}, to);
    for (int64_t i = 0; i < count; ++i) {
      if (element_size(to) == 2) {
        static_cast<uint16_t*>(patterns.data_ptr())[i] = uint16_t(i);
      } else {
        static_cast<uint8_t*>(patterns.data_ptr())[i] = uint8_t(i);
      }
    }
    Generator gen(3);
    const Tensor back = patterns.to(kFloat32).to(to, Rounding::Stochastic, &gen);
    const std::vector<double> want = patterns.to(kFloat64).to_vector<double>();
    const std::vector<double> got = back.to(kFloat64).to_vector<double>();
    for (int64_t i = 0; i < count; ++i) {
      INFO("pattern " << i);
      if (std::isnan(want[size_t(i)])) {
        CHECK(std::isnan(got[size_t(i)]));
      } else {
        CHECK(got[size_t(i)] == want[size_t(i)]);
        CHECK(std::signbit(got[size_t(i)]) == std::signbit(want[size_t(i)]));
      }
    }
  }
}

TEST_CASE("stochastic rounding of NaN inf and values past the largest finite one",
          "[stochastic_rounding]") {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (const DType to : kTargets) {
    INFO(dtype_name(to));
    const double max = finfo(to).max;
    const std::vector<double> grid = finite_grid(to);
    const double below_max = grid[grid.size() - 2];
    const double ulp = max - below_max;  // the top binade's spacing, continued past max
    const double overflowed = to == kFloat8_e4m3fn ? std::nan("") : kInf;
    Generator gen(9);
    const Tensor special = tensor({std::nan(""), kInf, -kInf}, kFloat32);
    const std::vector<double> got =
        special.to(to, Rounding::Stochastic, &gen).to(kFloat64).to_vector<double>();
    CHECK(std::isnan(got[0]));
    if (to == kFloat8_e4m3fn) {
      CHECK(std::isnan(got[1]));
      CHECK(std::isnan(got[2]));
    } else {
      CHECK(got[1] == kInf);
      CHECK(got[2] == -kInf);
    }
    // Between max and max + ulp: max or the overflow value, about as often as the distance says.
    const double x = max + 0.25 * ulp;
    constexpr int64_t kCopies = 20000;
    int64_t overflows = 0;
    for (const double v : round_copies(x, kFloat64, to, kCopies, 21)) {
      const bool is_overflow = std::isnan(overflowed) ? std::isnan(v) : v == overflowed;
      REQUIRE((v == max || is_overflow));
      overflows += is_overflow ? 1 : 0;
    }
    CHECK(std::abs(double(overflows) / kCopies - 0.25) < 5 * std::sqrt(0.25 * 0.75 / kCopies));
    // From max + ulp on, always past the range.
    for (const double v : round_copies(max + ulp, kFloat64, to, 64, 22)) {
      CHECK((std::isnan(overflowed) ? std::isnan(v) : v == overflowed));
    }
    if (is_float8(to)) {  // saturating: the largest finite value of the sign, inf included
      for (const double v : round_copies(x, kFloat64, to, 256, 23, {.saturate = true})) {
        CHECK(v == max);
      }
      for (const double v : round_copies(-kInf, kFloat32, to, 4, 24, {.saturate = true})) {
        CHECK(v == -max);
      }
    }
  }
}

TEST_CASE("stochastic rounding reads the Philox words the layout note gives",
          "[stochastic_rounding]") {
  // x halfway between two bfloat16 values rounds up iff its 32-bit word is below 2^31: element
  // i of a draw from (seed, offset) reads word i % 4 of block offset + i / 4.
  const double lo = 1.0, hi = 1.0 + 1.0 / 128;
  const int64_t n = 37;
  Generator gen(1234);
  gen.set_state({1234, 17});
  const std::vector<double> got =
      full({n}, (lo + hi) / 2, {.dtype = kFloat32}).to(kBFloat16, Rounding::Stochastic, &gen)
          .to(kFloat64)
          .to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t word = random::philox_block(1234, 17 + uint64_t(i / 4)).x[i % 4];
    CHECK(got[size_t(i)] == (word < 0x80000000u ? hi : lo));
  }
  // The generator advanced by ceil(n / 4) blocks.
  CHECK(gen.offset() == 17 + (n + 3) / 4);
}

TEST_CASE("stochastic rounding is deterministic for a seed and advances the generator",
          "[stochastic_rounding]") {
  manual_seed(3);
  const Tensor x = randn({1000});
  for (const DType to : kTargets) {
    INFO(dtype_name(to));
    Generator a(77), b(77), c(78);
    const Tensor first = x.to(to, Rounding::Stochastic, &a);
    CHECK(bytes_of(first) == bytes_of(x.to(to, Rounding::Stochastic, &b)));
    CHECK(bytes_of(first) != bytes_of(x.to(to, Rounding::Stochastic, &c)));
    // The next call continues the stream: another result.
    CHECK(a.offset() == 250);
    CHECK(bytes_of(first) != bytes_of(x.to(to, Rounding::Stochastic, &a)));
    // A shorter draw from the same state is a prefix of the longer one.
    Generator d(77);
    CHECK(bytes_of(x.slice(0, 0, 333).to(to, Rounding::Stochastic, &d)) ==
          bytes_of(first.slice(0, 0, 333)));
  }
  // Without a generator, the default one is used and advanced.
  manual_seed(5);
  const Tensor with_default = x.to(kBFloat16, Rounding::Stochastic);
  CHECK(default_generator().offset() == 250);
  Generator same(5);
  CHECK(bytes_of(with_default) == bytes_of(x.to(kBFloat16, Rounding::Stochastic, &same)));
}

TEST_CASE("stochastic rounding of a strided source follows its row-major order",
          "[stochastic_rounding]") {
  manual_seed(4);
  const Tensor x = randn({24, 17}).t();
  Generator a(6), b(6);
  CHECK(bytes_of(x.to(kFloat16, Rounding::Stochastic, &a)) ==
        bytes_of(x.contiguous().to(kFloat16, Rounding::Stochastic, &b)));
}

TEST_CASE("stochastic float32 to bfloat16 shortcut agrees with the general routine",
          "[stochastic_rounding]") {
  Generator gen(99);
  const Generator::State draw = gen.reserve_with_seed(1 << 16);
  uint64_t mismatches = 0;
  for (uint64_t b = 0; b < (1 << 16); ++b) {
    const PhiloxBlock words = random::philox_block(draw.seed, draw.offset + b);
    // Random float32 bit patterns: every exponent, subnormals, NaNs and infs among them.
    const float x = std::bit_cast<float>(words.x[0]);
    for (int k = 1; k < 4; ++k) {
      const BFloat16 fast = stochastic_round_bfloat16(x, words.x[k]);
      const BFloat16 general = stochastic_round<BFloat16>(double(x), words.x[k]);
      const bool both_nan = std::isnan(float(fast)) && std::isnan(float(general));
      mismatches += (fast.bits != general.bits && !both_nan) ? 1 : 0;
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("stochastic rounding is refused for casts that do not narrow", "[stochastic_rounding]") {
  const Tensor x64 = zeros({3}, kFloat64);
  CHECK_THROWS_WITH(x64.to(kFloat32, Rounding::Stochastic),
                    Contains("float16, bfloat16, float8_e4m3fn or float8_e5m2") &&
                        Contains("float32") && Contains("float64"));
  CHECK_THROWS_WITH(zeros({3}, kBFloat16).to(kBFloat16, Rounding::Stochastic),
                    Contains("narrowing") && Contains("bfloat16 to bfloat16"));
  CHECK_THROWS_WITH(zeros({3}, kFloat8_e4m3fn).to(kBFloat16, Rounding::Stochastic),
                    Contains("narrowing") && Contains("float8_e4m3fn to bfloat16"));
  CHECK_THROWS_WITH(zeros({3}, kInt32).to(kFloat16, Rounding::Stochastic),
                    Contains("floating source") && Contains("int32"));
  CHECK_THROWS_WITH(x64.to(kFloat16, {.saturate = true, .rounding = Rounding::Stochastic}),
                    Contains("saturate") && Contains("float16"));
  // A refused cast draws nothing.
  Generator gen(1);
  CHECK_THROWS(x64.to(kFloat32, Rounding::Stochastic, &gen));
  CHECK(gen.offset() == 0);
}

TEST_CASE("stochastic rounding passes the gradient straight through", "[stochastic_rounding]") {
  manual_seed(8);
  const Tensor x = randn({5, 3}).requires_grad_();
  const Tensor weights = randn({5, 3});
  Generator gen(2);
  const Tensor y = x.to(kBFloat16, Rounding::Stochastic, &gen);
  CHECK(y.dtype() == kBFloat16);
  sum(mul(y.to(kFloat32), weights)).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(bytes_of(x.grad()) == bytes_of(weights.to(kBFloat16).to(kFloat32)));
}
