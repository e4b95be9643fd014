// argsort, sort, topk, kthvalue and median: against std::stable_sort of float64 values with
// NaN the largest, torch's documented examples, gradients to the chosen elements, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

// The stable order of one row: NaN after everything, -0 equal to +0.
std::vector<int64_t> reference_order(const std::vector<double>& row, bool descending) {
  std::vector<int64_t> order(row.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  const auto rank = [](double v) { return std::isnan(v) ? 1 : 0; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const double x = row[size_t(a)], y = row[size_t(b)];
    if (rank(x) != rank(y)) return descending ? rank(x) > rank(y) : rank(x) < rank(y);
    if (std::isnan(x)) return false;
    return descending ? x > y : x < y;
  });
  return order;
}

}  // namespace

TEST_CASE("argsort is stable with NaN the largest, in every dtype, along any dim", "[sort]") {
  // Ties, both zeros, infinities and NaN in one row.
  const std::vector<double> row = {2.0,      -1.0, kNan, 0.0,  -0.0, 2.0, -INFINITY,
                                   INFINITY, 1.5,  kNan, -1.0, 0.5,  2.0};
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    for (bool descending : {false, true}) {
      CAPTURE(dtype, descending);
      const Tensor x = tensor(row, dtype);
      CHECK(argsort(x, 0, descending).to_vector<int64_t>() == reference_order(row, descending));
    }
  }
  const std::vector<double> ints = {3, -7, 3, 0, 9, -7, 1};
  for (DType dtype : {kInt64, kInt32}) {
    CHECK(argsort(tensor(ints, dtype)).to_vector<int64_t>() == reference_order(ints, false));
    CHECK(argsort(tensor(ints, dtype), 0, true).to_vector<int64_t>() ==
          reference_order(ints, true));
  }
  CHECK(argsort(tensor({1.0, 0.0, 1.0, 0.0}).to(kBool)).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 3, 0, 2});

  // Along a middle dim of a non-contiguous tensor: each column of each slice on its own.
  manual_seed(4);
  const Tensor x = randn({3, 5, 4}, kFloat64).transpose(0, 2);  // [4, 5, 3]
  const Tensor order = argsort(x, 1, true);
  REQUIRE(order.sizes() == x.sizes());
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t k = 0; k < 3; ++k) {
      const std::vector<double> column = x.select(0, i).select(1, k).to_vector<double>();
      CHECK(order.select(0, i).select(1, k).to_vector<int64_t>() == reference_order(column, true));
    }
  }
  CHECK(argsort(full({}, 3.0)).item<int64_t>() == 0);
  CHECK(argsort(zeros({2, 0})).sizes() == Shape{2, 0});
  CHECK_THAT(testing::error_message([] { argsort(zeros({2, 3}), 2); }), Contains("dim"));
}

TEST_CASE("sort, topk, kthvalue and median as torch's", "[sort]") {
  const Tensor x = tensor({3.0, 1.0, 2.0, 5.0, 4.0});
  auto [values, indices] = sort(x);
  CHECK(values.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5});
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 0, 4, 3});
  // torch.topk(torch.arange(1., 6.), 3) = values [5, 4, 3], indices [4, 3, 2].
  auto [top, top_at] = topk(arange(1.0, 6.0, 1, kFloat32), 3);
  CHECK(top.to_vector<double>() == std::vector<double>{5, 4, 3});
  CHECK(top_at.to_vector<int64_t>() == std::vector<int64_t>{4, 3, 2});
  auto [low, low_at] = topk(x, 2, -1, /*largest=*/false);
  CHECK(low.to_vector<double>() == std::vector<double>{1, 2});
  CHECK(low_at.to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(std::get<0>(topk(x, 0)).numel() == 0);
  CHECK_THAT(testing::error_message([&] { topk(x, 6); }),
             Contains("expected k in [0, 5] (the size of dim -1), got 6"));
  // torch.kthvalue(torch.arange(1., 6.), 4) = (4., 3).
  auto [kth, kth_at] = kthvalue(arange(1.0, 6.0, 1, kFloat32), 4);
  CHECK(kth.item<double>() == 4.0);
  CHECK(kth_at.item<int64_t>() == 3);
  const Tensor m = tensor({4.0, 1.0, 7.0, 2.0, 9.0, 3.0}, {2, 3});
  auto [kv, ki] = kthvalue(m, 2, 0, /*keepdim=*/true);
  CHECK(kv.sizes() == Shape{1, 3});
  CHECK(kv.to_vector<double>() == std::vector<double>{4, 9, 7});
  CHECK(ki.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 0});
  CHECK_THAT(testing::error_message([&] { kthvalue(m, 0, 1); }), Contains("expected k in [1, 3]"));

  // The lower median; a row with NaN gives NaN.
  CHECK(median(tensor({4.0, 1.0, 3.0, 2.0})).item<double>() == 2.0);
  CHECK(median(tensor(std::vector<int64_t>{5, 1, 3})).item<int64_t>() == 3);
  auto [med, med_at] = median(tensor({4.0, 1.0, kNan, 2.0, 7.0, 5.0, 6.0, kNan}, {2, 4}), 1);
  const std::vector<double> med_values = med.to_vector<double>();
  CHECK(std::isnan(med_values[0]));
  CHECK(med_at.to_vector<int64_t>()[0] == 2);
  CHECK(std::isnan(med_values[1]));
  CHECK(med_at.to_vector<int64_t>()[1] == 3);
  auto [med2, med2_at] = median(m, 1, true);
  CHECK(med2.to_vector<double>() == std::vector<double>{4, 3});
  CHECK(med2_at.to_vector<int64_t>() == std::vector<int64_t>{0, 2});
  CHECK_THAT(testing::error_message([] { median(zeros({0})); }), Contains("non-empty"));
  CHECK(std::get<0>(sort(x.to(kBFloat16), 0, true)).dtype() == kBFloat16);
}

TEST_CASE("quantile and nanquantile against float64 with each interpolation", "[sort]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Row 1 holds a NaN; row 2 ties.
  const std::vector<double> values = {0.3, -1.2, 2.5,  0.7, 1.1,  -0.4, 3.3,   //
                                      1.0, nan,  -2.0, 0.5, 4.0,  2.2,  -0.7,  //
                                      1.5, 1.5,  0.2,  1.5, -3.0, 0.9,  0.9};
  const std::vector<double> qs = {0.0, 0.25, 0.5, 0.8, 1.0};
  // numpy's definitions over the sorted values v of one slice.
  const auto reference = [](std::vector<double> v, double q, const std::string& how) {
    std::sort(v.begin(), v.end());
    const double rank = q * double(v.size() - 1);
    const double lo = v[size_t(std::floor(rank))], hi = v[size_t(std::ceil(rank))];
    if (how == "lower") return lo;
    if (how == "higher") return hi;
    if (how == "nearest") return v[size_t(std::nearbyint(rank))];  // halves to even
    if (how == "midpoint") return (lo + hi) / 2;
    return lo + (rank - std::floor(rank)) * (hi - lo);
  };
  for (DType dtype : {kFloat64, kFloat32}) {
    CAPTURE(dtype);
    const Tensor x = tensor(values, {3, 7}, kFloat64).to(dtype);
    const Tensor q = tensor(qs, kFloat64).to(dtype);
    const std::vector<double> xv = x.to_vector<double>();
    const double tolerance = dtype == kFloat64 ? 1e-14 : 1e-6;
    for (const char* how : {"linear", "lower", "higher", "nearest", "midpoint"}) {
      CAPTURE(how);
      const Tensor got = quantile(x, q, 1, false, how);
      const Tensor got_nan = nanquantile(x, q, 1, false, how);
      REQUIRE(got.sizes() == Shape{5, 3});
      const std::vector<double> gv = got.to_vector<double>(), nv = got_nan.to_vector<double>();
      for (size_t k = 0; k < qs.size(); ++k) {
        for (size_t row = 0; row < 3; ++row) {
          CAPTURE(k, row);
          std::vector<double> slice(xv.begin() + row * 7, xv.begin() + row * 7 + 7);
          const double at = gv[k * 3 + row], at_nan = nv[k * 3 + row];
          if (row == 1) {
            CHECK(std::isnan(at));  // quantile: NaN where the slice holds one
            slice.erase(slice.begin() + 1);
          } else {
            CHECK(at == Approx(reference(slice, qs[k], how)).margin(tolerance));
          }
          CHECK(at_nan == Approx(reference(slice, qs[k], how)).margin(tolerance));
        }
      }
    }
    // Over all elements with a number q, and shapes with keepdim.
    std::vector<double> finite;
    for (double v : xv) {
      if (!std::isnan(v)) finite.push_back(v);
    }
    CHECK(std::isnan(quantile(x, 0.4).item<double>()));
    CHECK(nanquantile(x, 0.4).item<double>() ==
          Approx(reference(finite, 0.4, "linear")).margin(tolerance));
    CHECK(quantile(x, q, 0, true).sizes() == Shape{5, 1, 7});
    CHECK(quantile(x, 0.5, 1, true).sizes() == Shape{3, 1});
    CHECK(quantile(x, q, std::nullopt, true).sizes() == Shape{5, 1, 1});
    CHECK(quantile(x, 0.5, -1).sizes() == Shape{3});
  }
  // An all-NaN slice: nanquantile gives NaN too.
  const Tensor all_nan = tensor({nan, nan, 1.0, 2.0}, {2, 2}, kFloat64);
  const std::vector<double> halves = nanquantile(all_nan, 0.5, 1).to_vector<double>();
  CHECK(std::isnan(halves[0]));
  CHECK(halves[1] == 1.5);
  // The gradient reaches the two elements at the fractional rank: rank 0.75 * 3 = 2.25 of
  // [4, 1, 3, 2] lies between 3 (weight 0.75) and 4 (weight 0.25).
  const Tensor leaf = tensor({4.0, 1.0, 3.0, 2.0}, kFloat64).requires_grad_();
  quantile(leaf, 0.75).backward();
  CHECK(leaf.grad().to_vector<double>() == std::vector<double>{0.25, 0.0, 0.75, 0.0});
  // torch's checks.
  const Tensor x = tensor(values, {3, 7});
  CHECK_THROWS_WITH(quantile(x, 1.5),
                    Contains("quantile: expected q in [0, 1], got values from 1.5 to 1.5"));
  CHECK_THROWS_WITH(quantile(x.to(kBFloat16), 0.5),
                    Contains("quantile: expected a float32 or float64 input, got bfloat16"));
  CHECK_THROWS_WITH(quantile(x, tensor({0.5}, kFloat64)),
                    Contains("quantile: expected q as a number or a 0-d or 1-D tensor of input's "
                             "dtype float32, got float64 of shape [1]"));
  CHECK_THROWS_WITH(nanquantile(x, 0.5, 1, false, "mean"),
                    Contains("nanquantile: expected interpolation \"linear\""));
  CHECK_THROWS_WITH(quantile(zeros({0}), 0.5),
                    Contains("quantile: expected a non-empty input, got shape [0]"));
  {
    amp::Autocast autocast(kCPU);  // float32 on the CPU, as torch's list
    CHECK(quantile(x.to(kBFloat16), tensor({0.5}, kBFloat16), 1).dtype() == kFloat32);
  }
}

TEST_CASE("sort's values take gradients at the positions they came from", "[sort]") {
  const Tensor x = tensor({3.0, 1.0, 2.0, 5.0}, kFloat64).requires_grad_();
  auto [values, indices] = topk(x, 2);
  sum(mul(values, tensor({10.0, 1.0}, kFloat64))).backward();
  // 5 (position 3) took weight 10, 3 (position 0) weight 1.
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 10});
  const Tensor y = tensor({4.0, 1.0, 3.0}, kFloat64).requires_grad_();
  median(y).backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 0, 1});
}

TEST_CASE("nonzero, where(condition) and masked_select as torch's", "[sort][mask]") {
  // torch.nonzero(tensor([[0.6, 0, 0, 0], [0, 0.4, 0, 0], [0, 0, 1.2, 0], [0, 0, 0, -0.4]])).
  const Tensor m = tensor({0.6, 0, 0, 0, 0, 0.4, 0, 0, 0, 0, 1.2, 0, 0, 0, 0, -0.4}, {4, 4});
  const Tensor at = nonzero(m);
  CHECK(at.sizes() == Shape{4, 2});
  CHECK(at.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1, 2, 2, 3, 3});
  const Tensor x = tensor({0.0, NAN, 2.0, 0.0, -1.0, 0.0}, {3, 2});
  CHECK(nonzero(x).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 1, 0, 2, 0});
  const std::vector<Tensor> parts = where(gt(x, 0.5));
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].to_vector<int64_t>() == std::vector<int64_t>{1});
  CHECK(parts[1].to_vector<int64_t>() == std::vector<int64_t>{0});
  CHECK(nonzero(zeros({2, 3})).sizes() == Shape{0, 2});
  CHECK(nonzero(full({}, 3.0)).sizes() == Shape{1, 0});
  CHECK(nonzero(tensor(std::vector<int64_t>{0, 7, 0, 9})).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 3});

  // torch.masked_select(x, x.ge(0.5)); a mask broadcast against x.
  const Tensor v = tensor({0.1, 0.7, 0.9, 0.2, 0.5, 0.3}, {2, 3}, kFloat64);
  CHECK(masked_select(v, ge(v, 0.5)).to_vector<double>() == std::vector<double>{0.7, 0.9, 0.5});
  const Tensor row_mask = tensor({1.0, 0.0, 1.0}).to(kBool);
  CHECK(masked_select(v, row_mask).to_vector<double>() == std::vector<double>{0.1, 0.9, 0.2, 0.3});
  CHECK_THAT(testing::error_message([&] { masked_select(v, v); }),
             Contains("expected a bool mask, got float64"));
  const Tensor w = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
  sum(masked_select(w, tensor({1.0, 0.0, 1.0}).to(kBool))).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{1, 0, 1});
}

TEST_CASE("div with a rounding mode and floor_divide as torch's", "[sort][mask]") {
  // torch.div(a, b, rounding_mode=...) of a = [-7, -5.5, 5.5, 7], b = 2.
  const Tensor a = tensor({-7.0, -5.5, 5.5, 7.0});
  CHECK(div(a, 2, "trunc").to_vector<double>() == std::vector<double>{-3, -2, 2, 3});
  CHECK(div(a, 2, "floor").to_vector<double>() == std::vector<double>{-4, -3, 2, 3});
  CHECK(floor_divide(a, -2).to_vector<double>() == std::vector<double>{3, 2, -3, -4});
  const Tensor i = tensor(std::vector<int64_t>{-7, 7, -8, 0});
  CHECK(floor_divide(i, 2).dtype() == kInt64);
  CHECK(floor_divide(i, 2).to_vector<int64_t>() == std::vector<int64_t>{-4, 3, -4, 0});
  CHECK(div(i, -3, "trunc").to_vector<int64_t>() == std::vector<int64_t>{2, -2, 2, 0});
  CHECK(div(i, -3, "floor").to_vector<int64_t>() == std::vector<int64_t>{2, -3, 2, 0});
  // -1 negates, the minimum value wrapping (as torch's integer division does).
  const Tensor lowest = tensor(std::vector<int64_t>{-9223372036854775807LL - 1, 5});
  CHECK(floor_divide(lowest, -1).to_vector<int64_t>() ==
        std::vector<int64_t>{-9223372036854775807LL - 1, -5});
  CHECK(div(lowest, -1, "trunc").to_vector<int64_t>() ==
        std::vector<int64_t>{-9223372036854775807LL - 1, -5});
  // a // b and fmod agree: a == b * (a // b) + remainder(a, b), where floor(a / b) would not.
  const Tensor f = tensor({1.0}, kFloat64), g = tensor({0.1}, kFloat64);
  CHECK(floor_divide(f, g).item<double>() ==
        9.0);  // 1 / 0.1 rounds to 10; the exact quotient is 9.99...
  CHECK(std::isinf(floor_divide(tensor({1.0}), tensor({0.0})).item<double>()));
  CHECK_THAT(testing::error_message([&] { floor_divide(i, 0); }),
             Contains("expected a nonzero integer divisor"));
  CHECK_THAT(testing::error_message([&] { div(a, 2, "round"); }),
             Contains("expected rounding_mode \"trunc\" or \"floor\", got \"round\""));
}
