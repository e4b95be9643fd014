// Tests for cpu::reduce_kernels (kernel/reduce.h): every kernel against a float64 reference
// computed here with plain loops, over dtypes, shapes (0-d, size-1 dims, odd sizes, sizes large
// enough to run in parallel and in pieces), strided inputs, dim sets and keepdim; then NaN and
// inf, empty reductions, errors, accuracy of float16 sums and determinism across thread counts.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/random.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/kernel/checks.h"

using namespace hg;
using Catch::Contains;
using kernel::Reduction;

namespace {

const kernel::ReduceKernels& K = cpu::reduce_kernels;

constexpr std::array<DType, 4> kFloatTypes = {kFloat32, kFloat16, kBFloat16, kFloat64};
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- Tolerances -----------------------------------------------------------------------------

// Relative rounding of one accumulation step: float for every floating input but float64.
double accumulate_eps(DType input) {
  if (input == kFloat64) return 0x1p-53;
  return is_floating_point(input) ? 0x1p-24 : 0.0;
}

// Relative rounding of the result to `out` (with some room: the 16-bit types round the
// reference's neighbours too).
double output_eps(DType out) {
  switch (out) {
    case kFloat16:
      return 1e-3;
    case kBFloat16:
      return 8e-3;
    case kFloat32:
      return 2e-7;
    case kFloat64:
      return 4e-16;
    default:
      return 0.0;
  }
}

struct Expected {
  double value;
  double tol = 0.0;  // |got - value| <= tol; NaN must be NaN, infinities equal
};

// ---- The reference: plain loops in long double ---------------------------------------------

// The logical values of x (row-major), grouped by the output they reduce into.
struct Groups {
  Shape out_shape;
  std::vector<std::vector<double>> values;
};

Groups group_by_output(const Tensor& x, const Shape& dims, bool keepdim) {
  const int64_t ndim = x.dim();
  std::vector<bool> reduced(size_t(ndim), dims.empty());
  for (int64_t d : dims) {
    if (ndim > 0) reduced[size_t(d < 0 ? d + ndim : d)] = true;
  }
  Groups groups;
  int64_t outputs = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    if (!reduced[d]) {
      groups.out_shape.push_back(x.size(d));
      outputs *= x.size(d);
    } else if (keepdim) {
      groups.out_shape.push_back(1);
    }
  }
  groups.values.resize(size_t(outputs));
  const std::vector<double> values = x.to_vector<double>();
  for (int64_t i = 0; i < int64_t(values.size()); ++i) {
    int64_t rest = i, out = 0, out_scale = 1;
    for (int64_t d = ndim - 1; d >= 0; --d) {
      const int64_t index = rest % x.size(d);
      rest /= x.size(d);
      if (!reduced[d]) {
        out += index * out_scale;
        out_scale *= x.size(d);
      }
    }
    groups.values[size_t(out)].push_back(values[size_t(i)]);
  }
  return groups;
}

Expected reference(Reduction op, const std::vector<double>& v, DType in, DType out, double p) {
  const double n = double(v.size());
  const double acc = accumulate_eps(in), rounding = output_eps(out);
  const double growth = 16.0 + std::sqrt(n);
  long double sum = 0, sum_abs = 0;
  for (double x : v) {
    sum += x;
    sum_abs += std::fabs(x);
  }
  switch (op) {
    case Reduction::Sum:
      return {double(sum), rounding * std::fabs(double(sum)) + acc * growth * double(sum_abs)};
    case Reduction::Mean: {
      const double mean = double(sum / n);
      return {mean, rounding * std::fabs(mean) + acc * growth * double(sum_abs) / n};
    }
    case Reduction::Prod: {
      long double prod = 1;
      for (double x : v) prod *= x;
      return {double(prod), (rounding + acc * (4.0 + n)) * std::fabs(double(prod))};
    }
    case Reduction::Amax:
    case Reduction::Amin: {
      double best = op == Reduction::Amax ? -kInf : kInf;
      for (double x : v) {
        if (std::isnan(x)) return {kNaN};
        best = op == Reduction::Amax ? std::max(best, x) : std::min(best, x);
      }
      return {best, rounding * std::fabs(best)};
    }
    case Reduction::LogSumExp: {
      double max = -kInf;
      for (double x : v) max = std::isnan(x) || std::isnan(max) ? kNaN : std::max(max, x);
      if (std::isnan(max)) return {kNaN};
      if (std::isinf(max)) return {max};
      long double s = 0;
      for (double x : v) s += std::exp((long double)(x - max));
      const double value = max + double(std::log(s));
      return {value, rounding * std::fabs(value) + acc * growth * (1.0 + std::fabs(max))};
    }
    case Reduction::Norm: {
      if (p == 0) {
        return {double(std::count_if(v.begin(), v.end(), [](double x) { return x != 0; }))};
      }
      if (std::isinf(p)) {
        double max = 0;
        for (double x : v)
          max = std::isnan(x) || std::isnan(max) ? kNaN : std::max(max, std::fabs(x));
        return {max, rounding * max};
      }
      long double s = 0;
      for (double x : v) s += std::pow((long double)std::fabs(x), (long double)p);
      const double value = double(std::pow(s, 1.0L / p));
      return {value, (rounding + acc * growth * 4.0) * value};
    }
  }
  return {kNaN};
}

Expected var_reference(const std::vector<double>& v, int64_t correction, DType in, DType out) {
  const double n = double(v.size());
  long double sum = 0, sum_squares = 0;
  for (double x : v) {
    sum += x;
    sum_squares += (long double)x * x;
  }
  const long double mean = sum / n;
  long double deviations = 0;
  for (double x : v) deviations += (x - mean) * (x - mean);
  const double dof = n - double(correction);
  if (dof <= 0) return {kNaN};
  const double value = double(deviations / dof);
  return {value, output_eps(out) * value +
                     accumulate_eps(in) * (16.0 + std::sqrt(n)) * double(sum_squares) / dof};
}

// ---- Comparing ----------------------------------------------------------------------------

bool matches(double got, const Expected& e) {
  if (std::isnan(e.value)) return std::isnan(got);
  if (std::isinf(e.value) || std::isnan(got)) return got == e.value;
  return std::fabs(got - e.value) <= e.tol;
}

// The expected values rounded to a floating dtype, so that results beyond its range
// (overflow to inf, underflow to 0 or a subnormal) are expected too; one unit in the last
// place of the smallest subnormal joins the tolerance.
std::vector<Expected> round_to(DType dtype, std::vector<Expected> expected) {
  if (!is_floating_point(dtype) || dtype == kFloat64) return expected;
  std::vector<double> exact;
  for (const Expected& e : expected) exact.push_back(e.value);
  const std::vector<double> rounded =
      tensor(exact, {int64_t(exact.size())}, kFloat64).to(dtype).to_vector<double>();
  for (size_t i = 0; i < expected.size(); ++i) {
    expected[i].value = rounded[i];
    expected[i].tol += finfo(dtype).smallest_subnormal;
  }
  return expected;
}

// got must be contiguous, of the expected shape and dtype, and match every expected value.
void check_result(const Tensor& got, const Shape& shape, DType dtype,
                  const std::vector<Expected>& exact) {
  REQUIRE(got.sizes() == shape);
  REQUIRE(got.dtype() == dtype);
  REQUIRE(got.is_contiguous());
  const std::vector<Expected> expected = round_to(dtype, exact);
  const std::vector<double> values = got.to_vector<double>();
  int64_t bad = 0;
  std::string first_bad;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!matches(values[i], expected[i]) && bad++ == 0) {
      first_bad = fmt::format("output {}: got {:.10g}, expected {:.10g} (tolerance {:.3g})", i,
                              values[i], expected[i].value, expected[i].tol);
    }
  }
  INFO(first_bad);
  CHECK(bad == 0);
}

// ---- Inputs -------------------------------------------------------------------------------

enum class Layout { Contiguous, Transposed, Sliced };

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Transposed:
      return "transposed";
    case Layout::Sliced:
      return "sliced";
  }
  return "?";
}

// Normal draws of `shape` from `seed`, laid out as `layout` says: contiguous; the transpose
// of a contiguous tensor (first and last dims swapped); or every other element of a tensor
// twice as long in the last dim.
Tensor make_input(const Shape& shape, DType dtype, Layout layout, uint64_t seed) {
  manual_seed(seed);
  if (layout == Layout::Transposed && shape.size() >= 2) {
    Shape base = shape;
    std::swap(base[0], base.back());
    return randn(base, dtype).transpose(0, int64_t(shape.size()) - 1);
  }
  if (layout == Layout::Sliced && !shape.empty()) {
    Shape base = shape;
    base.back() *= 2;
    return randn(base, dtype).slice(-1, 0, std::nullopt, 2);
  }
  return randn(shape, dtype);
}

// A tensor of `dtype` holding values[i] (rounded once to the dtype).
Tensor from_values(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return tensor(values, shape, dtype);
}

// A tensor equal to the contiguous x, laid out as `layout` says (see make_input).
Tensor relayout(const Tensor& x, Layout layout) {
  if (layout == Layout::Transposed && x.dim() >= 2) {
    return x.transpose(0, -1).contiguous().transpose(0, -1);
  }
  if (layout == Layout::Sliced && x.dim() >= 1) {
    Shape base = x.sizes();
    base.back() *= 2;
    const Tensor every_other = zeros(base, x.dtype()).slice(-1, 0, std::nullopt, 2);
    Tensor(every_other).copy_(x);
    return every_other;
  }
  return x;
}

// Dim sets to reduce for a tensor of ndim dims: all, one, negative, several.
std::vector<Shape> dim_sets(int64_t ndim) {
  if (ndim == 0) return {{}, {0}, {-1}};
  std::vector<Shape> sets = {{}, {0}, {-1}};
  if (ndim >= 2) sets.push_back({-1, 0});
  if (ndim >= 3) sets.push_back({0, 2});
  if (ndim >= 4) sets.push_back({1, 3, 2});
  return sets;
}

const std::vector<Shape> kShapes = {{}, {1}, {7}, {3, 1, 5}, {4, 6, 5}, {2, 3, 4, 5}, {33, 40}};

std::string describe(const Tensor& x, const Shape& dims, bool keepdim, DType out) {
  return fmt::format("input {} shape {} strides {}, dims {}, keepdim {}, out {}", x.dtype(),
                     x.sizes(), x.strides(), dims, keepdim, out);
}

// reduce() against the reference for one input and every dim set / keepdim.
void check_reduce_all_dims(Reduction op, const Tensor& x, DType out, double p = 2.0) {
  for (const Shape& dims : dim_sets(x.dim())) {
    for (bool keepdim : {false, true}) {
      INFO(kernel::reduction_name(op) << " p=" << p << ": " << describe(x, dims, keepdim, out));
      const Tensor got = K.reduce(op, x, dims, keepdim, out, p);
      const Groups groups = group_by_output(x, dims, keepdim);
      std::vector<Expected> expected;
      for (const auto& group : groups.values) {
        expected.push_back(reference(op, group, x.dtype(), out, p));
      }
      check_result(got, groups.out_shape, out, expected);
    }
  }
}

// The dtypes a result of floating input `in` is checked in: its own, and float32 (the op
// layer's fp32 policy for float16/bfloat16) or float64 for float32.
std::vector<DType> out_dtypes_for(DType in) {
  if (in == kFloat32) return {kFloat32, kFloat64};
  if (in == kFloat64) return {kFloat64};
  return {in, kFloat32};
}

}  // namespace

// ---- reduce against the reference ---------------------------------------------------------

TEST_CASE("reduce matches the float64 reference for every floating dtype and layout", "[reduce]") {
  const std::vector<Reduction> ops = {Reduction::Sum, Reduction::Mean, Reduction::Amax,
                                      Reduction::Amin, Reduction::LogSumExp};
  uint64_t seed = 100;
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
        const Tensor x = make_input(shape, dtype, layout, ++seed);
        INFO("layout " << layout_name(layout));
        for (Reduction op : ops) {
          for (DType out : out_dtypes_for(dtype)) check_reduce_all_dims(op, x, out);
        }
      }
    }
  }
}

TEST_CASE("reduce prod matches the reference on values near 1", "[reduce]") {
  uint64_t seed = 200;
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
        // Factors in [0.5, 1.5) keep products of up to a thousand values finite.
        const Tensor u = make_input(shape, kFloat64, Layout::Contiguous, ++seed);
        std::vector<double> values = u.to_vector<double>();
        for (double& v : values) v = 1.0 + 0.5 * std::tanh(v);
        const Tensor x = relayout(from_values(values, u.sizes(), dtype), layout);
        INFO("layout " << layout_name(layout));
        for (DType out : out_dtypes_for(dtype)) check_reduce_all_dims(Reduction::Prod, x, out);
      }
    }
  }
}

TEST_CASE("reduce norm matches the reference for p = 0 0.5 1 2 3 and inf", "[reduce]") {
  uint64_t seed = 300;
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : {Layout::Contiguous, Layout::Sliced}) {
        const Tensor x = make_input(shape, dtype, layout, ++seed);
        INFO("layout " << layout_name(layout));
        for (double p : {0.0, 0.5, 1.0, 2.0, 3.0, kInf}) {
          check_reduce_all_dims(Reduction::Norm, x, dtype, p);
        }
      }
    }
  }
}

TEST_CASE("reduce of large inputs runs in parallel and in pieces and stays accurate", "[reduce]") {
  // [3, 40000] over dim 1 and [40000, 3] over dim 0: few outputs, each split into pieces;
  // [300, 400]: many outputs, both walks; 120000 elements is past the parallel grain.
  const std::vector<std::pair<Shape, Shape>> cases = {{{3, 40000}, {1}}, {{40000, 3}, {0}},
                                                      {{300, 400}, {0}}, {{300, 400}, {1}},
                                                      {{300, 400}, {}},  {{20, 30, 200}, {0, 2}}};
  uint64_t seed = 400;
  for (DType dtype : {kFloat32, kFloat16, kFloat64}) {
    for (const auto& [shape, dims] : cases) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        const Tensor x = make_input(shape, dtype, layout, ++seed);
        for (Reduction op :
             {Reduction::Sum, Reduction::Amax, Reduction::LogSumExp, Reduction::Norm}) {
          const DType out = dtype == kFloat16 ? kFloat32 : dtype;
          INFO(kernel::reduction_name(op) << ": " << describe(x, dims, false, out));
          const Tensor got = K.reduce(op, x, dims, false, out, 2.0);
          const Groups groups = group_by_output(x, dims, false);
          std::vector<Expected> expected;
          for (const auto& group : groups.values) {
            expected.push_back(reference(op, group, dtype, out, 2.0));
          }
          check_result(got, groups.out_shape, out, expected);
        }
      }
    }
  }
}

TEST_CASE("reduce of integer and bool inputs accumulates exactly in int64", "[reduce]") {
  manual_seed(500);
  const Tensor draws = randn({4, 5, 6}, kFloat64);
  std::vector<double> values = draws.to_vector<double>();
  for (double& v : values) v = std::round(3.0 * v);
  const Tensor x64 = from_values(values, {4, 5, 6}, kInt64);
  for (const Tensor& x : {x64, x64.to(kInt32), relayout(x64, Layout::Transposed),
                          relayout(x64.to(kInt32), Layout::Sliced)}) {
    for (Reduction op : {Reduction::Sum, Reduction::Amax, Reduction::Amin}) {
      check_reduce_all_dims(op, x, kInt64);
      check_reduce_all_dims(op, x, kFloat32);
    }
  }
  // Products of small integers stay exact.
  std::vector<double> small(24);
  for (size_t i = 0; i < small.size(); ++i) small[i] = double(int(i % 5) - 2 + (i % 5 == 2));
  check_reduce_all_dims(Reduction::Prod, from_values(small, {2, 3, 4}, kInt64), kInt64);

  // bool sums count the true values; an int32 sum is an int64 sum rounded to the out dtype.
  const Tensor flags = from_values({1, 0, 1, 1, 0, 1}, {2, 3}, kBool);
  CHECK(K.reduce(Reduction::Sum, flags, {}, false, kInt64, 2.0).item<int64_t>() == 4);
  CHECK(K.reduce(Reduction::Sum, flags, {1}, false, kInt64, 2.0).to_vector<int64_t>() ==
        std::vector<int64_t>{2, 2});
  const Tensor big = full({3}, int64_t(1) << 62, kInt64);
  CHECK(K.reduce(Reduction::Sum, big, {}, false, kFloat64, 2.0).item<double>() ==
        -double(uint64_t(1) << 62));  // wraps as int64 does: 3 * 2^62 - 2^64 = -2^62
}

TEST_CASE("reduce handles expanded inputs with stride 0", "[reduce]") {
  manual_seed(600);
  const Tensor row = randn({1, 37}, kFloat32);
  const Tensor x = row.expand({1000, 37});
  REQUIRE(x.strides()[0] == 0);
  for (Reduction op : {Reduction::Sum, Reduction::Amax, Reduction::Mean}) {
    check_reduce_all_dims(op, x, kFloat32);
  }
}

TEST_CASE("reduce leaves its input untouched and returns a new tensor", "[reduce]") {
  manual_seed(700);
  const Tensor x = randn({5, 6}, kFloat16).transpose(0, 1);
  const std::vector<double> before = x.to_vector<double>();
  const Tensor s = K.reduce(Reduction::Sum, x, {0}, true, kFloat16, 2.0);
  const Tensor l = K.reduce(Reduction::LogSumExp, x, {1}, false, kFloat16, 2.0);
  CHECK(x.to_vector<double>() == before);
  CHECK(x.strides() == Shape{1, 6});
  CHECK_FALSE(s.shares_storage(x));
  CHECK_FALSE(l.shares_storage(x));
}

// ---- Accuracy of 16-bit sums ---------------------------------------------------------------

TEST_CASE("float16 and bfloat16 sums accumulate in float not in 16 bits", "[reduce]") {
  // 100k values near 1.0: a float16 accumulator would stop growing at 2048 (bfloat16: 256).
  manual_seed(800);
  const std::vector<double> draws = rand({100000}, kFloat64).to_vector<double>();
  for (DType dtype : {kFloat16, kBFloat16}) {
    std::vector<double> values(draws.size());
    for (size_t i = 0; i < draws.size(); ++i) values[i] = 1.0 + (draws[i] - 0.5) / 16.0;
    const Tensor x = from_values(values, {100000}, dtype);
    const std::vector<double> rounded = x.to_vector<double>();
    const double exact = std::accumulate(rounded.begin(), rounded.end(), 0.0);
    INFO("dtype " << dtype << ", exact sum " << exact);

    const double sum = K.reduce(Reduction::Sum, x, {}, false, kFloat32, 2.0).item<double>();
    CHECK(std::fabs(sum - exact) <= 1e-5 * exact);
    const double mean = K.reduce(Reduction::Mean, x, {}, false, dtype, 2.0).item<double>();
    CHECK(std::fabs(mean - exact / 1e5) <= output_eps(dtype) * exact / 1e5);
    // Rounded once at the output: the float16 sum (over 65504) overflows to inf.
    if (dtype == kFloat16) {
      CHECK(K.reduce(Reduction::Sum, x, {}, false, kFloat16, 2.0).item<double>() == kInf);
    }
    const double norm = K.reduce(Reduction::Norm, x, {}, false, kFloat32, 2.0).item<double>();
    double squares = 0;
    for (double v : rounded) squares += v * v;
    CHECK(std::fabs(norm - std::sqrt(squares)) <= 1e-5 * std::sqrt(squares));
  }
}

// ---- NaN and inf ---------------------------------------------------------------------------

TEST_CASE("NaN propagates through every reduction", "[reduce]") {
  for (DType dtype : kFloatTypes) {
    INFO("dtype " << dtype);
    const Tensor x = from_values({1, 2, kNaN, 4, -5, 6, 7, 8}, {2, 4}, dtype);
    for (Reduction op : {Reduction::Sum, Reduction::Prod, Reduction::Mean, Reduction::Amax,
                         Reduction::Amin, Reduction::LogSumExp, Reduction::Norm}) {
      INFO(kernel::reduction_name(op));
      const std::vector<double> rows = K.reduce(op, x, {1}, false, dtype, 2.0).to_vector<double>();
      CHECK(std::isnan(rows[0]));
      CHECK_FALSE(std::isnan(rows[1]));
      CHECK(std::isnan(K.reduce(op, x, {}, false, dtype, 2.0).item<double>()));
      const std::vector<double> cols = K.reduce(op, x, {0}, false, dtype, 2.0).to_vector<double>();
      CHECK(std::isnan(cols[2]));
      CHECK_FALSE(std::isnan(cols[3]));
    }
    CHECK(std::isnan(K.reduce(Reduction::Norm, x, {}, false, dtype, kInf).item<double>()));
    CHECK(K.reduce(Reduction::Norm, x, {}, false, dtype, 0.0).item<double>() == 8.0);
    CHECK(std::isnan(K.var(x, {}, 1, false, dtype).item<double>()));
  }
}

TEST_CASE("logsumexp is stable and handles infinities", "[reduce]") {
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    INFO("dtype " << dtype);
    const auto lse = [&](std::vector<double> values) {
      return K
          .reduce(Reduction::LogSumExp, from_values(values, {int64_t(values.size())}, dtype), {},
                  false, kFloat64, 2.0)
          .item<double>();
    };
    // exp(1000) overflows every dtype; the shifted sum does not.
    const double big = dtype == kFloat16 ? 10000.0 : 1000.0;
    CHECK(lse({big, big}) == Approx(big + std::log(2.0)).epsilon(1e-6));
    CHECK(lse({-kInf, -kInf, -kInf}) == -kInf);
    CHECK(lse({-kInf, 0.0}) == Approx(0.0).margin(1e-7));
    CHECK(lse({1.0, kInf, -kInf}) == kInf);
    CHECK(lse({kInf, kInf}) == kInf);
    CHECK(std::isnan(lse({kNaN, kInf})));
    CHECK(std::isnan(lse({-kInf, kNaN})));
  }
}

TEST_CASE("max_dim and argmax pick the first extreme and the first NaN", "[reduce]") {
  for (DType dtype : kFloatTypes) {
    INFO("dtype " << dtype);
    const Tensor x = from_values({3, 1, 3, -2, 5, 5, 0, kNaN, 2, kNaN, 9, 9}, {3, 4}, dtype);
    auto [values, indices] = K.max_dim(x, 1, false);
    CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{0, 3, 1});
    CHECK(values.dtype() == dtype);
    const std::vector<double> v = values.to_vector<double>();
    CHECK(v[0] == 3);
    CHECK(std::isnan(v[1]));
    CHECK(std::isnan(v[2]));
    CHECK(K.min_dim(x, 1, false).indices.to_vector<int64_t>() == std::vector<int64_t>{3, 3, 1});
    CHECK(K.argmax(x, std::nullopt, false).item<int64_t>() == 7);
    const Tensor columns = K.argmax(x, 0, true);
    CHECK(columns.sizes() == Shape{1, 4});
    CHECK(columns.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 2, 1});
  }
}

// ---- max_dim, min_dim, argmax against the reference ---------------------------------------

namespace {

// The first index of the extreme of `v` (NaN beats everything, the first NaN wins).
int64_t reference_arg(const std::vector<double>& v, bool max) {
  int64_t best = 0;
  for (int64_t i = 0; i < int64_t(v.size()); ++i) {
    if (std::isnan(v[size_t(i)])) return i;
    if (max ? v[size_t(i)] > v[size_t(best)] : v[size_t(i)] < v[size_t(best)]) best = i;
  }
  return best;
}

}  // namespace

TEST_CASE("max_dim min_dim and argmax match the reference", "[reduce]") {
  uint64_t seed = 900;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64}) {
    const std::vector<Shape> shapes = {{}, {1}, {9}, {3, 1, 5}, {4, 6, 5}, {33, 40}, {3, 40000}};
    for (const Shape& shape : shapes) {
      // The large shape (pieces, threads) for a few dtypes only, to keep the test quick.
      if (shape_numel(shape) > 100000 && (dtype == kFloat16 || dtype == kFloat64)) continue;
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
        // bfloat16 and integers make many ties, which must resolve to the first index.
        std::vector<double> values =
            make_input(shape, kFloat64, Layout::Contiguous, ++seed).to_vector<double>();
        if (dtype == kInt64) {
          for (double& v : values) v = std::round(2.0 * v);
        }
        const Tensor x = relayout(from_values(values, shape, dtype), layout);
        for (int64_t dim = -std::max<int64_t>(x.dim(), 1); dim < std::max<int64_t>(x.dim(), 1);
             ++dim) {
          for (bool keepdim : {false, true}) {
            INFO(describe(x, {dim}, keepdim, dtype));
            const Groups groups = group_by_output(x, {dim}, keepdim);
            for (bool is_max : {true, false}) {
              const kernel::ValuesIndices got =
                  is_max ? K.max_dim(x, dim, keepdim) : K.min_dim(x, dim, keepdim);
              std::vector<Expected> values, indices;
              for (const auto& group : groups.values) {
                const int64_t i = reference_arg(group, is_max);
                values.push_back({group[size_t(i)]});
                indices.push_back({double(i)});
              }
              check_result(got.values, groups.out_shape, dtype, values);
              check_result(got.indices, groups.out_shape, kInt64, indices);
            }
            check_result(K.argmax(x, dim, keepdim), groups.out_shape, kInt64, [&] {
              std::vector<Expected> indices;
              for (const auto& group : groups.values) {
                indices.push_back({double(reference_arg(group, true))});
              }
              return indices;
            }());
          }
        }
        // No dim: the index into x flattened in row-major (logical) order.
        const std::vector<double> flat = x.to_vector<double>();
        const Tensor flat_index = K.argmax(x, std::nullopt, false);
        check_result(flat_index, {}, kInt64, {{double(reference_arg(flat, true))}});
        const Tensor kept = K.argmax(x, std::nullopt, true);
        CHECK(kept.sizes() == Shape(size_t(x.dim()), 1));
        CHECK(kept.item<int64_t>() == reference_arg(flat, true));
      }
    }
  }
}

TEST_CASE("max_dim of bool and int32 inputs keeps the dtype", "[reduce]") {
  const Tensor b = from_values({0, 1, 1, 0, 0, 0}, {2, 3}, kBool);
  const kernel::ValuesIndices m = K.max_dim(b, 1, false);
  CHECK(m.values.dtype() == kBool);
  CHECK(m.values.to_vector<double>() == std::vector<double>{1, 0});
  CHECK(m.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  const Tensor i = from_values({5, -7, 2, 9}, {4}, kInt32);
  CHECK(K.min_dim(i, 0, true).values.to_vector<double>() == std::vector<double>{-7});
  CHECK(K.min_dim(i, 0, true).values.sizes() == Shape{1});
}

// ---- var ----------------------------------------------------------------------------------

TEST_CASE("var matches the two-pass reference for corrections 0 1 and 2", "[reduce]") {
  uint64_t seed = 1000;
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
        // An offset mean makes the naive one-pass formula lose digits; two passes do not.
        std::vector<double> values =
            make_input(shape, kFloat64, Layout::Contiguous, ++seed).to_vector<double>();
        for (double& v : values) v = 3.0 + v;
        const Tensor x = relayout(from_values(values, shape, dtype), layout);
        for (int64_t correction : {0, 1, 2}) {
          for (const Shape& dims : dim_sets(x.dim())) {
            for (bool keepdim : {false, true}) {
              for (DType out : out_dtypes_for(dtype)) {
                INFO("correction " << correction << ": " << describe(x, dims, keepdim, out));
                const Tensor got = K.var(x, dims, correction, keepdim, out);
                const Groups groups = group_by_output(x, dims, keepdim);
                std::vector<Expected> expected;
                for (const auto& group : groups.values) {
                  expected.push_back(var_reference(group, correction, dtype, out));
                }
                check_result(got, groups.out_shape, out, expected);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("var of n <= correction is NaN", "[reduce]") {
  const Tensor x = from_values({1.5, 2.5, 4.0}, {3, 1}, kFloat32);
  CHECK(std::isnan(K.var(x, {1}, 1, false, kFloat32).to_vector<double>()[0]));
  CHECK(K.var(x, {1}, 0, false, kFloat32).to_vector<double>()[0] == 0.0);
  CHECK(std::isnan(K.var(x, {}, 3, false, kFloat32).item<double>()));
  CHECK(std::isnan(K.var(x, {}, 5, false, kFloat32).item<double>()));
  CHECK(K.var(x, {}, 2, false, kFloat32).item<double>() == Approx(19.0 / 6.0));
}

// ---- cumsum -------------------------------------------------------------------------------

TEST_CASE("cumsum matches the reference along every dim", "[reduce]") {
  uint64_t seed = 1100;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64}) {
    const std::vector<Shape> shapes = {{}, {1}, {7}, {3, 1, 5}, {4, 6, 5}, {33, 40}, {600, 70}};
    for (const Shape& shape : shapes) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Sliced}) {
        Tensor x = make_input(shape, dtype == kInt64 ? kFloat64 : dtype, layout, ++seed);
        if (dtype == kInt64) {
          std::vector<double> rounded = x.to_vector<double>();
          for (double& v : rounded) v = std::round(4.0 * v);
          x = relayout(from_values(rounded, x.sizes(), kInt64), layout);
        }
        const std::vector<double> values = x.to_vector<double>();
        const std::vector<DType> outs =
            dtype == kInt64 ? std::vector<DType>{kInt64, kFloat32} : out_dtypes_for(dtype);
        for (int64_t dim = -std::max<int64_t>(x.dim(), 1); dim < std::max<int64_t>(x.dim(), 1);
             ++dim) {
          for (DType out : outs) {
            INFO("cumsum: " << describe(x, {dim}, false, out));
            // Reference: walk every line along dim in plain loops.
            const int64_t ndim = x.dim(), d = ndim == 0 ? 0 : (dim + ndim) % ndim;
            const int64_t length = ndim == 0 ? 1 : x.size(d);
            int64_t inner = 1;
            for (int64_t k = d + 1; k < ndim; ++k) inner *= x.size(k);
            std::vector<Expected> expected(values.size());
            for (int64_t line = 0; line < int64_t(values.size()) / std::max<int64_t>(length, 1);
                 ++line) {
              const int64_t start = line / inner * inner * length + line % inner;
              long double sum = 0, sum_abs = 0;
              for (int64_t k = 0; k < length; ++k) {
                const double v = values[size_t(start + k * inner)];
                sum += v;
                sum_abs += std::fabs(v);
                expected[size_t(start + k * inner)] = {
                    double(sum), output_eps(out) * std::fabs(double(sum)) +
                                     accumulate_eps(dtype) * (16.0 + std::sqrt(double(k + 1))) *
                                         double(sum_abs)};
              }
            }
            check_result(K.scan(kernel::Scan::Sum, x, dim, out), x.sizes(), out, expected);
          }
        }
      }
    }
  }
}

TEST_CASE("cumsum of an empty tensor is empty and of bool counts", "[reduce]") {
  const Tensor empty_rows = zeros({0, 4}, kFloat16);
  const Tensor c = K.scan(kernel::Scan::Sum, empty_rows, 0, kFloat32);
  CHECK(c.sizes() == Shape{0, 4});
  CHECK(c.dtype() == kFloat32);
  const Tensor flags = from_values({1, 0, 1, 1}, {4}, kBool);
  CHECK(K.scan(kernel::Scan::Sum, flags, 0, kInt64).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 1, 2, 3});
}

// ---- sum_to -------------------------------------------------------------------------------

TEST_CASE("sum_to sums the broadcast dims and keeps the dtype", "[reduce]") {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {3, 1}},    {{2, 3, 4}, {4}},    {{2, 3, 4}, {}},        {{2, 3, 4}, {1, 1, 1}},
      {{2, 3, 4}, {2, 1, 4}}, {{5, 1, 6}, {1, 6}}, {{2, 3, 4}, {2, 3, 4}}, {{40, 900}, {900}}};
  uint64_t seed = 1200;
  for (DType dtype : kFloatTypes) {
    for (const auto& [shape, target] : cases) {
      for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
        const Tensor x = make_input(shape, dtype, layout, ++seed);
        INFO("sum_to " << target << ": " << describe(x, {}, false, dtype));
        const Tensor got = K.sum_to(x, target);
        // Reference: the element of the target each input element broadcasts from.
        const int64_t lead = x.dim() - int64_t(target.size());
        const std::vector<double> values = x.to_vector<double>();
        const int64_t outputs = shape_numel(target);
        std::vector<long double> sums(size_t(outputs), 0), sums_abs(size_t(outputs), 0);
        for (int64_t i = 0; i < int64_t(values.size()); ++i) {
          int64_t rest = i, out = 0, scale = 1;
          for (int64_t d = x.dim() - 1; d >= lead; --d) {
            const int64_t index = rest % x.size(d);
            rest /= x.size(d);
            const int64_t t = target[size_t(d - lead)];
            out += (t == 1 ? 0 : index) * scale;
            scale *= t;
          }
          sums[size_t(out)] += values[size_t(i)];
          sums_abs[size_t(out)] += std::fabs(values[size_t(i)]);
        }
        std::vector<Expected> expected;
        const double n = double(values.size()) / double(outputs);
        for (int64_t o = 0; o < outputs; ++o) {
          expected.push_back(
              {double(sums[size_t(o)]),
               output_eps(dtype) * std::fabs(double(sums[size_t(o)])) +
                   accumulate_eps(dtype) * (16.0 + std::sqrt(n)) * double(sums_abs[size_t(o)])});
        }
        check_result(got, target, dtype, expected);
        CHECK_FALSE(got.shares_storage(x));
      }
    }
  }
  const Tensor ints = from_values({1, 2, 3, 4, 5, 6}, {2, 3}, kInt32);
  const Tensor s = K.sum_to(ints, {3});
  CHECK(s.dtype() == kInt32);
  CHECK(s.to_vector<double>() == std::vector<double>{5, 7, 9});
}

// ---- Empty reductions ---------------------------------------------------------------------

TEST_CASE("reductions over zero elements follow PyTorch", "[reduce]") {
  const Tensor x = zeros({0, 3}, kFloat32);
  const auto over_rows = [&](Reduction op, double p = 2.0) {
    const Tensor r = K.reduce(op, x, {0}, false, kFloat32, p);
    REQUIRE(r.sizes() == Shape{3});
    return r.to_vector<double>();
  };
  CHECK(over_rows(Reduction::Sum) == std::vector<double>{0, 0, 0});
  CHECK(over_rows(Reduction::Prod) == std::vector<double>{1, 1, 1});
  CHECK(std::isnan(over_rows(Reduction::Mean)[0]));
  CHECK(over_rows(Reduction::LogSumExp) == std::vector<double>{-kInf, -kInf, -kInf});
  CHECK(over_rows(Reduction::Norm) == std::vector<double>{0, 0, 0});
  CHECK(over_rows(Reduction::Norm, 0.0) == std::vector<double>{0, 0, 0});
  CHECK(std::isnan(K.var(x, {0}, 1, false, kFloat32).to_vector<double>()[1]));
  CHECK(K.reduce(Reduction::Sum, x, {}, false, kFloat32, 2.0).item<double>() == 0.0);
  CHECK(K.reduce(Reduction::Sum, zeros({0}, kInt64), {}, false, kInt64, 2.0).item<int64_t>() == 0);

  // No identity: an empty reduced dim is an error naming the op.
  CHECK_THROWS_WITH(K.reduce(Reduction::Amax, x, {0}, false, kFloat32, 2.0),
                    Contains("amax: expected non-empty reduced dims") &&
                        Contains("got dim 0 of size 0 in an input of shape [0, 3]"));
  CHECK_THROWS_WITH(K.reduce(Reduction::Amin, x, {}, false, kFloat32, 2.0), Contains("amin"));
  CHECK_THROWS_WITH(K.reduce(Reduction::Norm, x, {0}, false, kFloat32, kInf),
                    Contains("norm (p = inf)"));
  CHECK_THROWS_WITH(K.max_dim(x, 0, false), Contains("max: expected non-empty reduced dims"));
  CHECK_THROWS_WITH(K.argmax(x, std::nullopt, false),
                    Contains("argmax: expected a non-empty input, got one of shape [0, 3]"));

  // Reducing the non-empty dim of an empty tensor gives an empty result, even for amax.
  const Tensor a = K.reduce(Reduction::Amax, x, {1}, true, kFloat32, 2.0);
  CHECK(a.sizes() == Shape{0, 1});
  CHECK(K.max_dim(x, 1, false).indices.sizes() == Shape{0});
  CHECK(K.scan(kernel::Scan::Sum, x, 1, kFloat32).sizes() == Shape{0, 3});
  CHECK(K.sum_to(x, {3}).to_vector<double>() == std::vector<double>{0, 0, 0});
}

// ---- Errors -------------------------------------------------------------------------------

TEST_CASE("reduction errors name the op with what was expected and given", "[reduce]") {
  const Tensor x = zeros({2, 3, 4}, kFloat32);
  CHECK_THROWS_WITH(
      K.reduce(Reduction::Sum, x, {3}, false, kFloat32, 2.0),
      Contains("sum: dim out of range (expected in [-3, 2] for a 3-D tensor, got 3)"));
  CHECK_THROWS_WITH(K.reduce(Reduction::Mean, x, {-4}, false, kFloat32, 2.0),
                    Contains("mean: dim out of range"));
  CHECK_THROWS_WITH(K.reduce(Reduction::Sum, x, {1, -2}, false, kFloat32, 2.0),
                    Contains("sum: expected distinct dims, got dim 1 more than once in [1, -2]"));
  CHECK_THROWS_WITH(K.var(x, {0, 0}, 1, false, kFloat32), Contains("var: expected distinct dims"));
  CHECK_THROWS_WITH(K.max_dim(x, 5, false), Contains("max: dim out of range"));
  CHECK_THROWS_WITH(K.argmax(x, -4, false), Contains("argmax: dim out of range"));
  CHECK_THROWS_WITH(K.scan(kernel::Scan::Sum, x, 3, kFloat32),
                    Contains("cumsum: dim out of range"));
  CHECK_THROWS_WITH(K.reduce(Reduction::Sum, scalar_tensor(1.0), {1}, false, kFloat32, 2.0),
                    Contains("for a 0-D tensor, got 1"));

  const Tensor ints = zeros({2, 3}, kInt64);
  for (Reduction op : {Reduction::Mean, Reduction::LogSumExp, Reduction::Norm}) {
    CHECK_THROWS_WITH(
        K.reduce(op, ints, {}, false, kFloat32, 2.0),
        Contains(std::string(kernel::reduction_name(op)) +
                 ": expected a floating input (float32, float16, bfloat16 or float64), got int64"));
  }
  CHECK_THROWS_WITH(K.var(zeros({3}, kInt32), {}, 1, false, kFloat32),
                    Contains("var: expected a floating input") && Contains("got int32"));
  CHECK_THROWS_WITH(K.reduce(Reduction::Sum, x, {}, false, kInt64, 2.0),
                    Contains("sum: expected a floating out_dtype for float32 input, got int64"));
  CHECK_THROWS_WITH(K.scan(kernel::Scan::Sum, x.to(kFloat16), 0, kInt32),
                    Contains("cumsum: expected a floating out_dtype for float16 input, got int32"));
  CHECK_THROWS_WITH(K.reduce(Reduction::Norm, x, {}, false, kFloat32, -1.0),
                    Contains("norm: expected p > 0, p = 0 or p = inf, got p = -1"));
  CHECK_THROWS_WITH(K.var(x, {}, -1, false, kFloat32),
                    Contains("var: expected correction >= 0, got -1"));
  CHECK_THROWS_WITH(
      K.sum_to(x, {2, 4}),
      Contains("sum_to: expected a target shape that broadcasts to the input's shape [2, 3, 4], "
               "got [2, 4]"));
  CHECK_THROWS_WITH(K.sum_to(x, {1, 2, 3, 4}), Contains("got [1, 2, 3, 4]"));
  CHECK_THROWS_WITH(K.reduce(Reduction::Sum, Tensor(), {}, false, kFloat32, 2.0),
                    Contains("sum: expected a defined tensor"));
}

// ---- Determinism --------------------------------------------------------------------------

TEST_CASE("results are bitwise the same with 1 and 2 threads", "[reduce]") {
  const int saved = omp_get_max_threads();
  manual_seed(1300);
  const Tensor big = randn({300, 500}, kFloat32);
  const Tensor half = big.to(kFloat16);
  const Tensor wide = randn({4, 70000}, kFloat32);
  const Tensor tall = randn({70000, 4}, kFloat32);

  const auto run_all = [&] {
    std::vector<Tensor> results;
    for (const Tensor& x : {big, half, big.transpose(0, 1), wide, tall}) {
      for (const Shape& dims : std::vector<Shape>{{}, {0}, {1}}) {
        for (Reduction op : {Reduction::Sum, Reduction::Mean, Reduction::LogSumExp, Reduction::Norm,
                             Reduction::Amax}) {
          results.push_back(K.reduce(op, x, dims, false, kFloat32, 2.0));
        }
        results.push_back(K.var(x, dims, 1, false, kFloat32));
      }
      results.push_back(K.max_dim(x, 0, false).indices);
      results.push_back(K.argmax(x, std::nullopt, false));
      results.push_back(K.scan(kernel::Scan::Sum, x, 0, kFloat32));
      results.push_back(K.sum_to(x, {1, x.size(1)}));
    }
    return results;
  };
  omp_set_num_threads(1);
  const std::vector<Tensor> one = run_all();
  omp_set_num_threads(2);
  const std::vector<Tensor> two = run_all();
  omp_set_num_threads(saved);

  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    REQUIRE(one[i].nbytes() == two[i].nbytes());
    CHECK(std::memcmp(one[i].data_ptr(), two[i].data_ptr(), one[i].nbytes()) == 0);
  }
}

TEST_CASE("a column sum folds each column row after row from 0 on both paths", "[reduce]") {
  // NOTE [Column sums]: a small contiguous float32 matrix takes a direct loop, a larger one
  // the outer walk in one piece (64 columns are not "few outputs"); both must give the bits
  // of a float fold of each column in row order, starting from 0.
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{16, 32}, std::pair<int64_t, int64_t>{1, 5},
        std::pair<int64_t, int64_t>{16, 1}, std::pair<int64_t, int64_t>{7, 21},
        std::pair<int64_t, int64_t>{0, 3}, std::pair<int64_t, int64_t>{600, 64}}) {
    INFO("shape [" << rows << ", " << cols << "]");
    manual_seed(uint64_t(rows * cols));
    const Tensor x = randn({rows, cols});
    const std::vector<float> values = x.to_vector<float>();
    for (bool keepdim : {false, true}) {
      const Tensor sums = K.reduce(Reduction::Sum, x, {0}, keepdim, kFloat32, 2.0);
      CHECK(sums.sizes() == (keepdim ? Shape{1, cols} : Shape{cols}));
      const std::vector<float> got = sums.to_vector<float>();
      int64_t different = 0;
      for (int64_t j = 0; j < cols; ++j) {
        float expected = 0.0f;
        for (int64_t r = 0; r < rows; ++r) expected += values[size_t(r * cols + j)];
        if (std::memcmp(&expected, &got[size_t(j)], sizeof(float)) != 0) ++different;
      }
      CHECK(different == 0);
    }
  }
}

TEST_CASE("a full float32 sum gives the strided walk's bits", "[reduce]") {
  // A small contiguous float32 tensor is summed without the plan (reduce.cpp's full_sum); the
  // same values read through a stride of 2 take the walk (gathered into a block of up to 512,
  // then the same row fold): short rows (under 64), a long row with a tail, a whole block.
  for (int64_t n : {2, 20, 100, 512}) {
    INFO("n = " << n);
    manual_seed(uint64_t(n));
    const Tensor wide = randn({2 * n});
    const Tensor strided = wide.slice(0, 0, std::nullopt, 2);
    const Tensor dense = strided.contiguous();
    REQUIRE(!strided.is_contiguous());
    for (DType out_dtype : {kFloat32, kFloat64}) {
      const Tensor walked = K.reduce(Reduction::Sum, strided, {}, false, out_dtype, 2.0);
      const Tensor direct = K.reduce(Reduction::Sum, dense, {}, false, out_dtype, 2.0);
      CHECK(walked.item<double>() == direct.item<double>());
    }
  }
  const Tensor kept = K.reduce(Reduction::Sum, randn({16, 1}), {}, true, kFloat32, 2.0);
  CHECK(kept.sizes() == Shape{1, 1});
}
