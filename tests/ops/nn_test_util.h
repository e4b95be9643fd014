// Helpers shared by the tests of the nn ops (tests/ops/norm_test.cpp, conv_test.cpp,
// pool_test.cpp, embedding_test.cpp, dropout_test.cpp, activation_test.cpp): seeded inputs, the
// tolerances and comparisons against float64 references, and the check of a rejected call.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

namespace hg::testing {

inline constexpr DType kDTypes[] = {kFloat32, kFloat16, kBFloat16};

// ---- inputs and comparisons -------------------------------------------------------------------

// Seeded standard normal values drawn in dtype (so already rounded to it), times scale.
inline Tensor random_input(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  manual_seed(seed);
  const Tensor x = randn(shape, dtype);
  return scale == 1.0 ? x : mul(x, scale);
}

// Seeded uniform values on [low, high) in dtype.
inline Tensor uniform_input(const Shape& shape, DType dtype, uint64_t seed, double low,
                            double high) {
  manual_seed(seed);
  return add(mul(rand(shape, dtype), high - low), low);
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

struct Tolerance {
  double atol;
  double rtol;
};

// What is left between a kernel and the reference on the same rounded inputs: float32
// arithmetic and one rounding of the output to dtype (half an ulp: 2^-11 relative for float16,
// 2^-8 for bfloat16). The outputs here are of order one, so the same bound serves as the
// absolute tolerance for values near zero.
inline Tolerance forward_tolerance(DType dtype) {
  return per_dtype<Tolerance>(dtype, {1e-12, 1e-12}, {1e-5, 1e-5}, {2e-3, 2e-3}, {1e-2, 1e-2});
}

// Gradients through a norm subtract means of the incoming gradient from it, so their values
// near zero come from cancellation between order-one terms: twice the forward bound.
inline Tolerance backward_tolerance(DType dtype) {
  const Tolerance t = forward_tolerance(dtype);
  return {2 * t.atol, 2 * t.rtol};
}

inline void expect_close(const Tensor& actual, const std::vector<double>& expected, Tolerance tol,
                         const std::string& what) {
  REQUIRE(actual.defined());
  const std::vector<double> got = values(actual);
  REQUIRE(got.size() == expected.size());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - expected[i]) <= tol.atol + tol.rtol * std::abs(expected[i]))) {
      if (mismatches++ == 0) first = i;
    }
  }
  INFO(what << ": " << mismatches << " of " << got.size() << " elements differ (atol " << tol.atol
            << ", rtol " << tol.rtol << ")");
  if (mismatches > 0) INFO("first at " << first << ": " << got[first] << " vs " << expected[first]);
  CHECK(mismatches == 0);
}

inline void expect_result(const Tensor& actual, DType dtype, const Shape& shape,
                          const std::vector<double>& expected, const std::string& what,
                          std::optional<Tolerance> tol = std::nullopt) {
  REQUIRE(actual.defined());
  INFO(what);
  CHECK(actual.dtype() == dtype);
  CHECK(actual.sizes() == shape);
  expect_close(actual, expected, tol.value_or(forward_tolerance(dtype)), what);
}

// ---- bad inputs ---------------------------------------------------------------------------

struct Snapshot {
  std::vector<double> data;
  uint64_t version;
};

// Runs f, which must throw an hg::Error whose message contains every one of `parts`, and
// checks that the tensors `inputs` kept their values and versions.
inline void expect_rejected(const std::function<void()>& f, const std::vector<Tensor>& inputs,
                            const std::vector<std::string>& parts) {
  std::vector<Snapshot> before;
  for (const Tensor& t : inputs) before.push_back({values(t), t.version()});
  const std::string message = error_message(f);
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  for (const std::string& part : parts) CHECK_THAT(message, Catch::Contains(part));
  for (size_t i = 0; i < inputs.size(); ++i) {
    CHECK(values(inputs[i]) == before[i].data);
    CHECK(inputs[i].version() == before[i].version);
  }
}

}  // namespace hg::testing
