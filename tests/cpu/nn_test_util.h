// Helpers shared by the CPU tests of the nn kernel families (tests/cpu/norm_test.cpp,
// conv_test.cpp, pool_test.cpp, embedding_test.cpp, dropout_test.cpp): seeded inputs, the
// tolerances and comparisons, and central finite differences in float64.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

namespace hg::testing {

inline constexpr DType kAllDTypes[] = {kFloat64, kFloat32, kFloat16, kBFloat16};
inline constexpr DType kLowDTypes[] = {kFloat32, kFloat16, kBFloat16};

// ---- inputs -------------------------------------------------------------------------------

// Seeded uniform values on [low, high), as a float64 tensor rounded to dtype.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = kFloat64,
                            double low = -1.0, double high = 1.0) {
  Generator gen(seed);
  std::vector<double> values(size_t(shape_numel(shape)));
  random::fill_uniform(kFloat64, values.data(), int64_t(values.size()), low, high, gen);
  return tensor(values, shape, kFloat64).to(dtype);
}

// The same values as t, laid out with the last two dims swapped in memory (not contiguous).
inline Tensor strided_copy(const Tensor& t) {
  Shape swapped = t.sizes();
  std::swap(swapped[t.dim() - 2], swapped[t.dim() - 1]);
  Tensor base = empty(swapped, t.dtype());
  Tensor view = base.transpose(-1, -2);
  view.copy_(t);
  return view;
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
inline Tensor f64(const Tensor& t) { return t.to(kFloat64); }

// ---- comparisons --------------------------------------------------------------------------

struct Tolerance {
  double atol;
  double rtol;
};

// Forward kernels see the same rounded inputs as the reference: what is left is float
// arithmetic and the one rounding of the output.
inline Tolerance forward_tolerance(DType dtype) {
  return per_dtype<Tolerance>(dtype, {1e-12, 1e-10}, {1e-5, 1e-5}, {1e-3, 2e-3}, {8e-3, 1.6e-2});
}

inline Tolerance backward_tolerance(DType dtype) {
  return per_dtype<Tolerance>(dtype, {1e-10, 1e-9}, {2e-5, 1e-4}, {2e-3, 4e-3}, {1.6e-2, 3.2e-2});
}

inline constexpr Tolerance kFiniteDifferenceTolerance{1e-6, 1e-5};

inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                         Tolerance tol, const std::string& what) {
  REQUIRE(actual.size() == expected.size());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const bool same_nan = std::isnan(actual[i]) && std::isnan(expected[i]);
    if (!same_nan &&
        !(std::abs(actual[i] - expected[i]) <= tol.atol + tol.rtol * std::abs(expected[i]))) {
      if (mismatches++ == 0) first = i;
    }
  }
  INFO(what << ": " << mismatches << " of " << actual.size() << " elements differ (atol "
            << tol.atol << ", rtol " << tol.rtol << ")");
  if (mismatches > 0) {
    INFO("first at element " << first << ": got " << actual[first] << ", expected "
                             << expected[first]);
    CHECK(mismatches == 0);
  } else {
    CHECK(mismatches == 0);
  }
}

inline void expect_close(const Tensor& actual, const Tensor& expected, Tolerance tol,
                         const std::string& what) {
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  CHECK(actual.sizes() == expected.sizes());
  expect_close(values(actual), values(expected), tol, what);
}

// A result tensor: contiguous, of the dtype and shape asked.
inline void expect_result(const Tensor& t, DType dtype, const Shape& shape) {
  REQUIRE(t.defined());
  CHECK(t.dtype() == dtype);
  CHECK(t.sizes() == shape);
  CHECK(t.is_contiguous());
}

// ---- finite differences -------------------------------------------------------------------

inline double weighted_sum(const Tensor& out, const std::vector<double>& weights) {
  const std::vector<double> v = values(out);
  REQUIRE(v.size() == weights.size());
  double total = 0;
  for (size_t i = 0; i < v.size(); ++i) total += v[i] * weights[i];
  return total;
}

// dL/d(input) by central differences, L = sum(forward() * R). `input` is a contiguous float64
// tensor that forward() reads; its values are perturbed one at a time and restored.
inline std::vector<double> numeric_gradient(const Tensor& input,
                                            const std::function<Tensor()>& forward,
                                            const Tensor& R) {
  constexpr double h = 1e-6;
  REQUIRE(input.dtype() == kFloat64);
  REQUIRE(input.is_contiguous());
  const std::vector<double> weights = values(R);
  double* p = input.data_ptr<double>();
  std::vector<double> gradient(size_t(input.numel()));
  for (int64_t i = 0; i < input.numel(); ++i) {
    const double saved = p[i];
    p[i] = saved + h;
    const double plus = weighted_sum(forward(), weights);
    p[i] = saved - h;
    const double minus = weighted_sum(forward(), weights);
    p[i] = saved;
    gradient[size_t(i)] = (plus - minus) / (2 * h);
  }
  return gradient;
}

inline void check_gradient(const std::string& name, const Tensor& input,
                           const std::function<Tensor()>& forward, const Tensor& R,
                           const Tensor& analytic) {
  REQUIRE(analytic.defined());
  CHECK(analytic.dtype() == kFloat64);
  CHECK(analytic.sizes() == input.sizes());
  expect_close(values(analytic), numeric_gradient(input, forward, R), kFiniteDifferenceTolerance,
               "d" + name + " vs finite differences");
}

// ---- references ---------------------------------------------------------------------------

inline int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= s[d];
  return n;
}

inline std::vector<double> optional_values(const Tensor& t) {
  return t.defined() ? values(t) : std::vector<double>();
}

}  // namespace hg::testing
