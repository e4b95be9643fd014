// fmod, remainder, atan2, hypot, lerp, erfinv; leaky_relu, elu, glu; std, var_mean, std_mean,
// argmin, any, all, cumprod, logcumsumexp; normalize, cosine_similarity, cdist; conv1d, the 1-d
// pools and adaptive_avg_pool2d: against float64 loops and torch's documented values and semantics.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <limits>
#include <numbers>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                 double atol = 0.0) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i, got[i], want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::abs(got[i] - want[i]) <= rtol * std::abs(want[i]) + atol);
    }
  }
}

double python_mod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

}  // namespace

TEST_CASE("fmod and remainder: C's and Python's signs, integers kept, zero divisors refused",
          "[math]") {
  const std::vector<double> a = {5.5, -5.5, 5.5, -5.5, 7.0, -0.25, 3.0, 1.0};
  const std::vector<double> b = {2.0, 2.0, -2.0, -2.0, 7.0, 1.0, 0.0, kInf};
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    const Tensor ta = tensor(a, dtype), tb = tensor(b, dtype);
    std::vector<double> want_fmod, want_rem;
    for (size_t i = 0; i < a.size(); ++i) {
      want_fmod.push_back(std::fmod(a[i], b[i]));
      want_rem.push_back(python_mod(a[i], b[i]));
    }
    CHECK(fmod(ta, tb).dtype() == dtype);
    check_close(fmod(ta, tb).to_vector<double>(), want_fmod, 0.0);
    check_close(remainder(ta, tb).to_vector<double>(), want_rem, 0.0);
  }
  // torch.remainder(tensor([-3., -2, -1, 1, 2, 3]), 2) = [1, 0, 1, 1, 0, 1];
  // torch.fmod(tensor([-3., -2, -1, 1, 2, 3]), 2) = [-1, -0, -1, 1, 0, 1].
  const Tensor x = tensor({-3.0, -2.0, -1.0, 1.0, 2.0, 3.0});
  CHECK(remainder(x, 2).to_vector<double>() == std::vector<double>{1, 0, 1, 1, 0, 1});
  CHECK(fmod(x, 2).to_vector<double>() == std::vector<double>{-1, -0, -1, 1, 0, 1});
  // torch.remainder(-1.5, tensor([1, 2, 3, 4, 5])) = [0.5, 0.5, 1.5, 2.5, 3.5].
  CHECK(remainder(-1.5, tensor({1.0, 2.0, 3.0, 4.0, 5.0})).to_vector<double>() ==
        std::vector<double>{0.5, 0.5, 1.5, 2.5, 3.5});

  // Integers stay integers: C's truncation and Python's floor.
  const Tensor ia = tensor(std::vector<int64_t>{-7, 7, -7, 7, -9223372036854775807LL - 1});
  const Tensor ib = tensor(std::vector<int64_t>{3, -3, -3, 3, -1});
  CHECK(fmod(ia, ib).dtype() == kInt64);
  CHECK(fmod(ia, ib).to_vector<int64_t>() == std::vector<int64_t>{-1, 1, -1, 1, 0});
  CHECK(remainder(ia, ib).to_vector<int64_t>() == std::vector<int64_t>{2, -2, -1, 1, 0});
  const Tensor i32 = tensor(std::vector<int64_t>{5, -5}).to(kInt32);
  CHECK(remainder(i32, 3).dtype() == kInt32);
  CHECK(remainder(i32, 3).to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  CHECK_THAT(testing::error_message([&] {
               fmod(ia, tensor(std::vector<int64_t>{1, 0, 1, 1, 1}));
             }),
             Contains("expected a nonzero integer divisor"));
  CHECK_THAT(testing::error_message([&] { remainder(ia, 0); }),
             Contains("expected a nonzero integer divisor"));

  // Gradients: 1 for a; -trunc(a / b) (fmod) and -floor(a / b) (remainder) for b.
  const Tensor ga = tensor({5.5, -5.5}, kFloat64).requires_grad_();
  const Tensor gb = tensor({2.0, 2.0}, kFloat64).requires_grad_();
  sum(add(fmod(ga, gb), mul(remainder(ga, gb), 10.0))).backward();
  CHECK(ga.grad().to_vector<double>() == std::vector<double>{11, 11});
  // fmod: -trunc(2.75) = -2, -trunc(-2.75) = 2; remainder: -floor(2.75) = -2, -floor(-2.75) = 3.
  CHECK(gb.grad().to_vector<double>() == std::vector<double>{-2 - 20, 2 + 30});
}

TEST_CASE("atan2 and hypot: every quadrant, no overflow, integers in float32", "[math]") {
  const std::vector<double> y = {1, 1, -1, -1, 0, -0.0, 0, 3, 1e30};
  const std::vector<double> x = {1, -1, 1, -1, -1, -1, 0, 4, 1e30};
  std::vector<double> want_angle, want_length;
  for (size_t i = 0; i < y.size(); ++i) {
    want_angle.push_back(std::atan2(y[i], x[i]));
    want_length.push_back(std::hypot(y[i], x[i]));
  }
  check_close(atan2(tensor(y, kFloat64), tensor(x, kFloat64)).to_vector<double>(), want_angle,
              1e-15);
  check_close(atan2(tensor(y), tensor(x)).to_vector<double>(), want_angle, 1e-6);
  // 1e30 squared overflows float32; hypot does not.
  check_close(hypot(tensor(y), tensor(x)).to_vector<double>(), want_length, 1e-6);
  const Tensor iy = tensor(std::vector<int64_t>{3, -5}), ix = tensor(std::vector<int64_t>{4, 12});
  CHECK(hypot(iy, ix).dtype() == kFloat32);
  CHECK(hypot(iy, ix).to_vector<double>() == std::vector<double>{5, 13});
  CHECK(atan2(iy, ix).dtype() == kFloat32);
  for (DType dtype : {kFloat16, kBFloat16}) {
    const Tensor a = tensor({0.5, -1.25, 2.0}, dtype), b = tensor({1.5, 0.75, -3.0}, dtype);
    CHECK(atan2(a, b).dtype() == dtype);
    check_close(atan2(a, b).to_vector<double>(),
                {std::atan2(0.5, 1.5), std::atan2(-1.25, 0.75), std::atan2(2.0, -3.0)},
                testing::rounding_tolerance(dtype));
    check_close(hypot(a, b).to_vector<double>(),
                {std::hypot(0.5, 1.5), std::hypot(-1.25, 0.75), std::hypot(2.0, -3.0)},
                testing::rounding_tolerance(dtype));
  }
  // float16 and bfloat16 promote to float32, as torch's.
  CHECK(atan2(tensor({1.0}, kFloat16), tensor({1.0}, kBFloat16)).dtype() == kFloat32);
}

TEST_CASE("lerp: torch's two-sided formula, exact at weight 1", "[math]") {
  const Tensor start = tensor({1.0, 2.0, 3.0, 4.0}), end = tensor({10.0, 10.0, 10.0, 10.0});
  // torch.lerp(start, end, 0.5) = [5.5, 6, 6.5, 7].
  CHECK(lerp(start, end, 0.5).to_vector<double>() == std::vector<double>{5.5, 6, 6.5, 7});
  CHECK(lerp(start, end, tensor({0.0, 1.0, 0.25, 2.0})).to_vector<double>() ==
        std::vector<double>{1.0, 10.0, 4.75, 16.0});
  // Weight 1 gives end exactly, where start + (end - start) would round.
  const Tensor a = tensor({0.1}, kFloat32), b = tensor({1e8}, kFloat32);
  CHECK(lerp(a, b, 1.0).item<double>() == b.item<double>());
  for (DType dtype : {kFloat16, kBFloat16})
    CHECK(lerp(start.to(dtype), end.to(dtype), 0.3).dtype() == dtype);
  CHECK_THAT(testing::error_message([&] { lerp(start, end.to(kFloat64), 0.5); }),
             Contains("expected start and end of one dtype"));
  // Gradients: 1 - w, w, end - start.
  const Tensor s = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  const Tensor e = tensor({5.0, -2.0}, kFloat64).requires_grad_();
  const Tensor w = tensor({0.25, 0.75}, kFloat64).requires_grad_();
  sum(lerp(s, e, w)).backward();
  CHECK(s.grad().to_vector<double>() == std::vector<double>{0.75, 0.25});
  CHECK(e.grad().to_vector<double>() == std::vector<double>{0.25, 0.75});
  CHECK(w.grad().to_vector<double>() == std::vector<double>{4.0, -4.0});
}

TEST_CASE("erfinv: infinities at +-1, NaN outside, its derivative", "[math]") {
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    const std::vector<double> got =
        erfinv(tensor({1.0, -1.0, 1.5, -2.0, 0.0}, dtype)).to_vector<double>();
    CHECK(got[0] == kInf);
    CHECK(got[1] == -kInf);
    CHECK(std::isnan(got[2]));
    CHECK(std::isnan(got[3]));
    CHECK(got[4] == 0.0);
  }
  // erf(erfinv(y)) = y to float64's rounding, near the ends too.
  const std::vector<double> ys = {-0.999999, -0.9, -1e-10, 0.3, 0.99, 0.999999999};
  const std::vector<double> xs = erfinv(tensor(ys, kFloat64)).to_vector<double>();
  for (size_t i = 0; i < ys.size(); ++i) CHECK(std::abs(std::erf(xs[i]) - ys[i]) <= 4e-16);
  const Tensor y = tensor({0.0, 0.5}, kFloat64).requires_grad_();
  sum(erfinv(y)).backward();
  const double x1 = erfinv(tensor({0.5}, kFloat64)).item<double>();
  check_close(
      y.grad().to_vector<double>(),
      {std::sqrt(std::numbers::pi) / 2, std::sqrt(std::numbers::pi) / 2 * std::exp(x1 * x1)},
      1e-14);
}

TEST_CASE("leaky_relu, elu and glu against their formulas", "[math]") {
  const std::vector<double> v = {-3.0, -0.5, 0.0, 0.25, 2.0};
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    const Tensor x = tensor(v, dtype);
    std::vector<double> leaky, elu_want;
    for (double t : v) {
      leaky.push_back(t > 0 ? t : 0.1 * t);
      elu_want.push_back(t > 0 ? t : 1.5 * std::expm1(t));
    }
    CHECK(leaky_relu(x, 0.1).dtype() == dtype);
    check_close(leaky_relu(x, 0.1).to_vector<double>(), leaky, testing::rounding_tolerance(dtype));
    check_close(elu(x, 1.5).to_vector<double>(), elu_want, testing::rounding_tolerance(dtype));
  }
  // torch's default slope 0.01; the gradient at 0 takes the slope's side.
  const Tensor x = tensor({-2.0, 0.0, 3.0}, kFloat64).requires_grad_();
  sum(leaky_relu(x)).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0.01, 0.01, 1.0});
  // elu's exponential never overflows into the gradient of the side where does not take.
  const Tensor big = tensor({100.0, -1.0}, kFloat32).requires_grad_();
  sum(elu(big)).backward();
  check_close(big.grad().to_vector<double>(), {1.0, std::exp(-1.0)}, 1e-6);

  const Tensor g = tensor({1.0, 2.0, 0.5, -1.0, 3.0, 4.0, 0.0, 2.0}, {2, 4}, kFloat64);
  std::vector<double> want;
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 2; ++c) {
      const double a = g.to_vector<double>()[r * 4 + c], b = g.to_vector<double>()[r * 4 + c + 2];
      want.push_back(a / (1 + std::exp(-b)));
    }
  }
  check_close(glu(g).to_vector<double>(), want, 1e-15);
  CHECK(glu(g, 0).sizes() == Shape{1, 4});
  CHECK_THAT(testing::error_message([&] {
               glu(ones({2, 3}));
             }),
             Contains("expected an even size along dim -1, got 3"));
  CHECK_THAT(testing::error_message([&] { elu(tensor(std::vector<int64_t>{1})); }),
             Contains("expected a floating tensor"));
}

TEST_CASE("std, var_mean and std_mean against float64 loops", "[math]") {
  manual_seed(3);
  const Tensor x = randn({3, 5}, kFloat64);
  const std::vector<double> v = x.to_vector<double>();
  for (int64_t correction : {0, 1}) {
    std::vector<double> want_std, want_mean;
    for (int r = 0; r < 3; ++r) {
      double m = 0;
      for (int c = 0; c < 5; ++c) m += v[r * 5 + c];
      m /= 5;
      double ss = 0;
      for (int c = 0; c < 5; ++c) ss += (v[r * 5 + c] - m) * (v[r * 5 + c] - m);
      want_std.push_back(std::sqrt(ss / double(5 - correction)));
      want_mean.push_back(m);
    }
    check_close(hg::std(x, {1}, correction).to_vector<double>(), want_std, 1e-14);
    const auto [s, m] = std_mean(x, {1}, correction);
    check_close(s.to_vector<double>(), want_std, 1e-14);
    check_close(m.to_vector<double>(), want_mean, 1e-14);
    const auto [var_, mean_] = var_mean(x, {1}, correction, /*keepdim=*/true);
    CHECK(var_.sizes() == Shape{3, 1});
    check_close(var_.to_vector<double>(),
                {want_std[0] * want_std[0], want_std[1] * want_std[1], want_std[2] * want_std[2]},
                1e-13);
  }
  CHECK(hg::std(tensor({1.0, 2.0, 3.0, 4.0}, kBFloat16)).dtype() == kBFloat16);
  CHECK_THAT(testing::error_message([] {
               hg::std(tensor(std::vector<int64_t>{1, 2}));
             }),
             Contains("expected a floating tensor"));
}

TEST_CASE("cumprod and logcumsumexp against float64 loops, zeros and extremes", "[math]") {
  manual_seed(8);
  const Tensor x = randn({3, 6}, kFloat64);
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> products, logs;
  for (int r = 0; r < 3; ++r) {
    double p = 1, m = -kInf, acc = 0;
    for (int c = 0; c < 6; ++c) {
      const double e = v[size_t(r * 6 + c)];
      p *= e;
      products.push_back(p);
      // log-sum-exp by a running max, in float64.
      if (e > m) {
        acc = acc * std::exp(m - e) + 1;
        m = e;
      } else {
        acc += std::exp(e - m);
      }
      logs.push_back(m + std::log(acc));
    }
  }
  check_close(cumprod(x, 1).to_vector<double>(), products, 1e-14);
  check_close(logcumsumexp(x, 1).to_vector<double>(), logs, 1e-14);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    CHECK(cumprod(x.to(dtype), 1).dtype() == dtype);
    check_close(logcumsumexp(x.to(dtype), 1).to_vector<double>(),
                logcumsumexp(x.to(dtype).to(kFloat64), 1).to_vector<double>(),
                testing::rounding_tolerance(dtype), testing::rounding_tolerance(dtype));
  }
  // torch: cumprod of int32 gives int64; logcumsumexp far below the max keeps its value.
  const Tensor ints = tensor(std::vector<int64_t>{2, -3, 4}).to(kInt32);
  CHECK(cumprod(ints, 0).dtype() == kInt64);
  CHECK(cumprod(ints, 0).to_vector<int64_t>() == std::vector<int64_t>{2, -6, -24});
  check_close(logcumsumexp(tensor({-1000.0, 0.0, -kInf, 1000.0}, kFloat64), 0).to_vector<double>(),
              {-1000.0, 0.0, 0.0, 1000.0}, 1e-15);
  check_close(logcumsumexp(tensor({kInf, 1.0}), 0).to_vector<double>(), {kInf, kInf}, 0.0);
  CHECK(std::isnan(logcumsumexp(tensor({1.0, kNan, 2.0}), 0).to_vector<double>()[2]));
  CHECK_THAT(testing::error_message([] { logcumsumexp(tensor(std::vector<int64_t>{1}), 0); }),
             Contains("expected a floating tensor"));

  // cumprod's gradient through zeros: d out_j / d x_k = prod_{i <= j, i != k} x_i.
  const Tensor z = tensor({2.0, 0.0, 3.0, 0.0, 5.0}, kFloat64).requires_grad_();
  const std::vector<double> g = {1.0, 10.0, 100.0, 1000.0, 10000.0};
  sum(mul(cumprod(z, 0), tensor(g, kFloat64))).backward();
  // k = 0: g0 + 0...; k = 1 (first zero): 2 (g1 + 3 g2 + 0 g3...) = 2 * 310; after it: 0.
  CHECK(z.grad().to_vector<double>() == std::vector<double>{1.0, 620.0, 0.0, 0.0, 0.0});
  // logcumsumexp's gradient: sum_{j >= k} g_j softmax weights, negative g included.
  const Tensor w = tensor({0.5, -1.0, 2.0}, kFloat64).requires_grad_();
  const std::vector<double> gw = {1.0, -2.0, 3.0};
  sum(mul(logcumsumexp(w, 0), tensor(gw, kFloat64))).backward();
  const std::vector<double> wv = {0.5, -1.0, 2.0};
  std::vector<double> out(3), want(3, 0.0);
  for (int j = 0; j < 3; ++j) {
    double acc = 0;
    for (int i = 0; i <= j; ++i) acc += std::exp(wv[size_t(i)]);
    out[size_t(j)] = std::log(acc);
  }
  for (int k = 0; k < 3; ++k) {
    for (int j = k; j < 3; ++j)
      want[size_t(k)] += gw[size_t(j)] * std::exp(wv[size_t(k)] - out[size_t(j)]);
  }
  check_close(w.grad().to_vector<double>(), want, 1e-14);
}

TEST_CASE("argmin, any and all as torch's", "[math]") {
  const Tensor x = tensor({3.0, 1.0, 4.0, 1.0, 5.0, 0.5}, {2, 3});
  CHECK(argmin(x).item<int64_t>() == 5);
  CHECK(argmin(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});  // ties: the first
  CHECK(argmin(x, 0, true).sizes() == Shape{1, 3});
  CHECK(argmin(x, std::nullopt, true).sizes() == Shape{1, 1});
  CHECK(argmin(tensor({2.0, kNan, -1.0})).item<int64_t>() == 1);  // NaN counts as the smallest
  CHECK(argmin(tensor(std::vector<int64_t>{4, -2, 9})).item<int64_t>() == 1);
  CHECK_THAT(testing::error_message([] { argmin(zeros({0})); }), Contains("non-empty"));

  const Tensor m = tensor({0.0, 0.0, 2.0, 0.0, kNan, 1.0}, {2, 3});
  CHECK(any(m).dtype() == kBool);
  CHECK(any(m).item<bool>());
  CHECK_FALSE(all(m).item<bool>());
  CHECK(any(m, {1}).to_vector<bool>() == std::vector<bool>{true, true});  // NaN is nonzero
  CHECK(all(m, {0}).to_vector<bool>() == std::vector<bool>{false, false, true});
  CHECK(all(m, {0}, true).sizes() == Shape{1, 3});
  CHECK_FALSE(any(zeros({0})).item<bool>());  // over nothing: any false, all true
  CHECK(all(zeros({0})).item<bool>());
  CHECK(all(tensor(std::vector<int64_t>{1, -3})).item<bool>());
  CHECK_FALSE(any(full({3}, false, kBool)).item<bool>());
}

TEST_CASE("normalize, cosine_similarity, cdist, dist, pairwise_distance and pdist against float64",
          "[math]") {
  const Tensor a = tensor({3.0, 4.0, 0.0, 0.0, 1.0, 2.0}, {2, 3}, kFloat64);
  const Tensor b = tensor({1.0, 0.0, 0.0, 0.0, -1.0, -2.0}, {2, 3}, kFloat64);
  // normalize along dim 1: [0.6, 0.8, 0], [0, 1/sqrt 5, 2/sqrt 5].
  check_close(normalize(a).to_vector<double>(),
              {0.6, 0.8, 0.0, 0.0, 1 / std::sqrt(5.0), 2 / std::sqrt(5.0)}, 1e-15);
  check_close(normalize(zeros({2, 2}, kFloat64)).to_vector<double>(), {0, 0, 0, 0}, 0.0);
  check_close(normalize(a, 1.0, 1).to_vector<double>(),
              {3.0 / 7, 4.0 / 7, 0.0, 0.0, 1.0 / 3, 2.0 / 3}, 1e-15);
  // cos: 3/5 and -1; a zero vector gives 0 (its norm clamped at eps).
  check_close(cosine_similarity(a, b).to_vector<double>(), {0.6, -1.0}, 1e-15);
  check_close(cosine_similarity(a, zeros({1, 3}, kFloat64)).to_vector<double>(), {0, 0}, 0.0);
  CHECK(cosine_similarity(a, b, 0).sizes() == Shape{3});

  // The p-norm of the differences a[i] - b[i] (p = inf: the largest; p = 0: how many differ).
  const auto p_norm = [](const std::vector<double>& a, const std::vector<double>& b, double p) {
    double acc = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::abs(a[i] - b[i]);
      acc = p == kInf ? std::max(acc, d) : p == 0.0 ? acc + (d != 0) : acc + std::pow(d, p);
    }
    return p == kInf || p == 0.0 ? acc : std::pow(acc, 1 / p);
  };
  manual_seed(5);
  const Tensor x1 = randn({2, 3, 4}, kFloat64), x2 = randn({2, 5, 4}, kFloat64);
  const std::vector<double> u = x1.to_vector<double>(), w = x2.to_vector<double>();
  for (double p : {2.0, 1.0, 3.0, kInf, 0.0}) {
    CAPTURE(p);
    std::vector<double> want;
    for (int bt = 0; bt < 2; ++bt) {
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 5; ++j) {
          const auto row = [](const std::vector<double>& t, int first) {
            return std::vector<double>(t.begin() + first, t.begin() + first + 4);
          };
          want.push_back(p_norm(row(u, (bt * 3 + i) * 4), row(w, (bt * 5 + j) * 4), p));
        }
      }
    }
    const Tensor d = cdist(x1, x2, p);
    CHECK(d.sizes() == Shape{2, 3, 5});
    check_close(d.to_vector<double>(), want, 1e-13);
  }
  CHECK(cdist(x1.select(0, 0), x2.select(0, 1)).sizes() == Shape{3, 5});
  CHECK_THAT(testing::error_message([&] {
               cdist(x1, randn({2, 5, 3}, kFloat64));
             }),
             Contains("expected rows of one length M"));
  // A zero distance has a zero gradient, not NaN.
  const Tensor same = tensor({1.0, 2.0}, {1, 2}, kFloat64).requires_grad_();
  sum(cdist(same, same.detach())).backward();
  check_close(same.grad().to_vector<double>(), {0.0, 0.0}, 0.0);

  // dist: the p-norm of x1 - x2 broadcast (x1's first rows against one row of x2).
  const Tensor row = x2.select(0, 0).select(0, 2);
  std::vector<double> rows;  // row repeated against each of x1's six rows
  for (int i = 0; i < 6; ++i) {
    for (double v : row.to_vector<double>()) rows.push_back(v);
  }
  for (double p : {2.0, 1.0, 3.0, kInf, 0.0}) {
    CAPTURE(p);
    const double want = p_norm(u, rows, p);
    const Tensor d = dist(x1, row, p);
    CHECK(d.dim() == 0);
    CHECK(d.item<double>() == Approx(want).epsilon(1e-13));
  }
  CHECK_THAT(testing::error_message([&] {
               dist(tensor(std::vector<int64_t>{1, 2}), tensor(std::vector<int64_t>{0, 2}));
             }),
             Contains("dist: expected floating tensors, got int64 and int64"));

  // pairwise_distance: the p-norm of x1's rows minus x2's (one row broadcast) plus eps.
  const double eps = 1e-6;
  for (double p : {2.0, 1.0, 3.0, kInf}) {
    CAPTURE(p);
    std::vector<double> want;
    for (int i = 0; i < 6; ++i) {
      std::vector<double> shifted(u.begin() + i * 4, u.begin() + i * 4 + 4);
      for (double& v : shifted) v += eps;
      want.push_back(p_norm(shifted, row.to_vector<double>(), p));
    }
    const Tensor d = pairwise_distance(x1, row, p);
    CHECK(d.sizes() == Shape{2, 3});
    check_close(d.to_vector<double>(), want, 1e-13);
    CHECK(pairwise_distance(x1, row, p, eps, /*keepdim=*/true).sizes() == Shape{2, 3, 1});
  }
  CHECK(pairwise_distance(row, row).item<double>() == Approx(2 * eps).epsilon(1e-12));
  CHECK_THAT(
      testing::error_message([&] { pairwise_distance(full(Shape{}, 1.0), full(Shape{}, 2.0)); }),
      Contains("pairwise_distance: expected tensors of at least one dim"));

  // pdist: every pair of rows i < j in row-major order of the pairs.
  const Tensor points = x2.select(0, 1);  // [5, 4]
  const std::vector<double> pv = points.to_vector<double>();
  for (double p : {2.0, 1.0, 3.0, kInf, 0.0}) {
    CAPTURE(p);
    std::vector<double> want;
    for (int i = 0; i < 5; ++i) {
      for (int j = i + 1; j < 5; ++j) {
        want.push_back(p_norm(std::vector<double>(pv.begin() + i * 4, pv.begin() + i * 4 + 4),
                              std::vector<double>(pv.begin() + j * 4, pv.begin() + j * 4 + 4), p));
      }
    }
    const Tensor d = pdist(points, p);
    CHECK(d.sizes() == Shape{10});
    check_close(d.to_vector<double>(), want, 1e-13);
  }
  CHECK(pdist(points.slice(0, 0, 1)).sizes() == Shape{0});
  // A repeated row: distance 0, gradient 0 (not NaN).
  const Tensor twice = tensor({1.0, 2.0, 1.0, 2.0}, {2, 2}, kFloat64).requires_grad_();
  sum(pdist(twice)).backward();
  check_close(twice.grad().to_vector<double>(), {0.0, 0.0, 0.0, 0.0}, 0.0);
  CHECK_THAT(testing::error_message([&] { pdist(x1); }),
             Contains("pdist: expected input of shape [N, M], got [2, 3, 4]"));
  CHECK_THAT(testing::error_message([&] { pdist(points, -1.0); }),
             Contains("pdist: expected p >= 0, got -1"));
}

TEST_CASE("renorm scales the slices whose p-norm exceeds maxnorm, against float64", "[math]") {
  manual_seed(8);
  for (DType dtype : {kFloat64, kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    const Tensor x = (randn({3, 4, 2}, kFloat32) * 1.5).to(dtype);
    const std::vector<double> xv = x.to_vector<double>();
    for (double p : {2.0, 1.0, 3.0}) {
      for (int64_t dim : {0, 1, -1}) {
        CAPTURE(p, dim);
        const double maxnorm = 2.0;
        const int64_t d = dim < 0 ? dim + 3 : dim;
        const Shape sizes{3, 4, 2};
        // The p-norm of each slice along d, from the rounded values in float64.
        std::vector<double> norms(size_t(sizes[size_t(d)]), 0.0);
        for (int64_t i = 0; i < 24; ++i) {
          const int64_t index[3] = {i / 8, (i / 2) % 4, i % 2};
          norms[size_t(index[d])] += std::pow(std::abs(xv[size_t(i)]), p);
        }
        for (double& n : norms) n = std::pow(n, 1 / p);
        std::vector<double> want;
        for (int64_t i = 0; i < 24; ++i) {
          const int64_t index[3] = {i / 8, (i / 2) % 4, i % 2};
          const double n = norms[size_t(index[d])];
          want.push_back(n > maxnorm ? xv[size_t(i)] * maxnorm / (n + 1e-7) : xv[size_t(i)]);
        }
        const Tensor got = renorm(x, p, dim, maxnorm);
        CHECK(got.dtype() == dtype);
        // One rounding of each scaled value (float32 norms for 16-bit inputs).
        const double tolerance = dtype == kFloat64 ? 1e-13 : testing::rounding_tolerance(dtype);
        check_close(got.to_vector<double>(), want, tolerance);
      }
    }
  }
  const Tensor x = randn({3, 4});
  CHECK_THAT(testing::error_message([&] { renorm(x, 0.0, 0, 1.0); }),
             Contains("renorm: expected p > 0, got 0"));
  CHECK_THAT(testing::error_message([&] { renorm(x, 2.0, 0, -1.0); }),
             Contains("renorm: expected maxnorm >= 0, got -1"));
  CHECK_THAT(testing::error_message([&] { renorm(randn({4}), 2.0, 0, 1.0); }),
             Contains("renorm: expected input of at least 2 dims, got shape [4]"));
  CHECK_THAT(testing::error_message([&] { renorm(x, 2.0, 2, 1.0); }), Contains("renorm"));
}

TEST_CASE("conv1d, max_pool1d, avg_pool1d and adaptive_avg_pool2d against float64 loops",
          "[math]") {
  manual_seed(7);
  const int64_t n = 2, c = 4, length = 9, out_c = 6, k = 3, groups = 2, stride = 2, padding = 2,
                dilation = 2;
  const Tensor x = randn({n, c, length}, kFloat64), w = randn({out_c, c / groups, k}, kFloat64),
               bias = randn({out_c}, kFloat64);
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(),
                            bv = bias.to_vector<double>();
  const int64_t out_len = (length + 2 * padding - dilation * (k - 1) - 1) / stride + 1;
  std::vector<double> want;
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t o = 0; o < out_c; ++o) {
      const int64_t g = o / (out_c / groups);
      for (int64_t t = 0; t < out_len; ++t) {
        double acc = bv[size_t(o)];
        for (int64_t ci = 0; ci < c / groups; ++ci) {
          for (int64_t q = 0; q < k; ++q) {
            const int64_t pos = t * stride - padding + q * dilation;
            if (pos < 0 || pos >= length) continue;
            acc += xv[size_t((b * c + g * (c / groups) + ci) * length + pos)] *
                   wv[size_t((o * (c / groups) + ci) * k + q)];
          }
        }
        want.push_back(acc);
      }
    }
  }
  const Tensor y = conv1d(x, w, bias, stride, padding, dilation, groups);
  CHECK(y.sizes() == Shape{n, out_c, out_len});
  check_close(y.to_vector<double>(), want, 1e-12, 1e-12);
  CHECK(conv1d(x.select(0, 1), w, bias, stride, padding, dilation, groups).sizes() ==
        Shape{out_c, out_len});
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    CHECK(conv1d(x.to(kFloat32), w.to(kFloat32), {}, 1, 0, 1, groups).dtype() == kBFloat16);
  }
  CHECK_THAT(testing::error_message([&] {
               conv1d(x, randn({6, 2, 3, 1}, kFloat64));
             }),
             Contains("expected a 3-D weight"));

  // Pools over [1, 1, 7] with kernel 3, stride 2, padding 1: windows [-1, 1], [1, 3], [3, 5], [5,
  // 7].
  const std::vector<double> r = {1, -2, 5, 0, 3, 8, -1};
  const Tensor row = tensor(r, {1, 1, 7}, kFloat64);
  CHECK(max_pool1d(row, 3, 2, 1).to_vector<double>() == std::vector<double>{1, 5, 8, 8});
  check_close(avg_pool1d(row, 3, 2, 1).to_vector<double>(),
              {(1 - 2) / 3.0, (-2 + 5 + 0) / 3.0, (0 + 3 + 8) / 3.0, (8 - 1) / 3.0}, 1e-15);
  check_close(avg_pool1d(row, 3, 2, 1, false, false).to_vector<double>(),
              {(1 - 2) / 2.0, (-2 + 5 + 0) / 3.0, (0 + 3 + 8) / 3.0, (8 - 1) / 2.0}, 1e-15);
  CHECK(max_pool1d(row.select(0, 0), 2).sizes() == Shape{1, 3});

  // adaptive: windows [floor(i H / o), ceil((i + 1) H / o)).
  const Tensor img = randn({2, 3, 5, 7}, kFloat64);
  const std::vector<double> iv = img.to_vector<double>();
  for (auto [oh, ow] : {std::pair<int64_t, int64_t>{3, 4}, {5, 7}, {1, 1}, {5, 1}}) {
    CAPTURE(oh, ow);
    std::vector<double> expect;
    for (int64_t plane = 0; plane < 6; ++plane) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t h0 = i * 5 / oh, h1 = ((i + 1) * 5 + oh - 1) / oh;
          const int64_t w0 = j * 7 / ow, w1 = ((j + 1) * 7 + ow - 1) / ow;
          double acc = 0;
          for (int64_t h = h0; h < h1; ++h) {
            for (int64_t q = w0; q < w1; ++q) acc += iv[size_t((plane * 5 + h) * 7 + q)];
          }
          expect.push_back(acc / double((h1 - h0) * (w1 - w0)));
        }
      }
    }
    const Tensor out = adaptive_avg_pool2d(img, {oh, ow});
    CHECK(out.sizes() == Shape{2, 3, oh, ow});
    check_close(out.to_vector<double>(), expect, 1e-14, 1e-15);
  }
  CHECK(adaptive_avg_pool2d(img.to(kBFloat16), {2, 2}).dtype() == kBFloat16);
}

TEST_CASE("batch_norm takes [N, C] and [N, C, L] inputs, as torch's BatchNorm1d", "[math]") {
  const Tensor x = tensor({1.0, 10.0, 3.0, 20.0, 5.0, 60.0}, {3, 2}, kFloat64);
  // Per channel: mean 3 and 30, biased variance 8/3 and 1400/3.
  const Tensor y = batch_norm(x, {}, {}, {}, {}, /*training=*/true, 0.1, 0.0);
  const double s0 = std::sqrt(8.0 / 3), s1 = std::sqrt(1400.0 / 3);
  check_close(y.to_vector<double>(), {-2 / s0, -20 / s1, 0.0, -10 / s1, 2 / s0, 30 / s1}, 1e-14,
              1e-15);
  const Tensor seq = batch_norm(x.unsqueeze(-1).expand({3, 2, 4}), {}, {}, {}, {}, true, 0.1, 0.0);
  CHECK(seq.sizes() == Shape{3, 2, 4});
  check_close(seq.select(2, 3).to_vector<double>(), y.to_vector<double>(), 1e-14, 1e-15);
}

TEST_CASE("conv_transpose2d against a float64 scatter loop", "[math]") {
  manual_seed(12);
  const int64_t n = 2, cin = 4, cout = 6, groups = 2, h = 3, w = 4, kh = 3, kw = 2;
  const std::array<int64_t, 2> stride{2, 1}, padding{1, 0}, output_padding{1, 0}, dilation{1, 2};
  const Tensor x = randn({n, cin, h, w}, kFloat64);
  const Tensor weight = randn({cin, cout / groups, kh, kw}, kFloat64);
  const Tensor bias = randn({cout}, kFloat64);
  const int64_t oh =
      (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1;
  const int64_t ow =
      (w - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1;
  std::vector<double> want(size_t(n * cout * oh * ow), 0.0);
  const std::vector<double> xv = x.to_vector<double>(), wv = weight.to_vector<double>(),
                            bv = bias.to_vector<double>();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < cout; ++o)
      for (int64_t i = 0; i < oh * ow; ++i)
        want[size_t((b * cout + o) * oh * ow + i)] = bv[size_t(o)];
  // Each input value scatters through the kernel: out[o, y s - p + a d, ...] += x * w.
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t c = 0; c < cin; ++c) {
      const int64_t g = c / (cin / groups);
      for (int64_t oc = 0; oc < cout / groups; ++oc) {
        const int64_t o = g * (cout / groups) + oc;
        for (int64_t y = 0; y < h; ++y) {
          for (int64_t z = 0; z < w; ++z) {
            for (int64_t a = 0; a < kh; ++a) {
              for (int64_t e = 0; e < kw; ++e) {
                const int64_t r = y * stride[0] - padding[0] + a * dilation[0];
                const int64_t q = z * stride[1] - padding[1] + e * dilation[1];
                if (r < 0 || r >= oh || q < 0 || q >= ow) continue;
                want[size_t(((b * cout + o) * oh + r) * ow + q)] +=
                    xv[size_t(((b * cin + c) * h + y) * w + z)] *
                    wv[size_t(((c * (cout / groups) + oc) * kh + a) * kw + e)];
              }
            }
          }
        }
      }
    }
  }
  const Tensor out =
      conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation);
  CHECK(out.sizes() == Shape{n, cout, oh, ow});
  check_close(out.to_vector<double>(), want, 1e-12, 1e-12);
  CHECK(conv_transpose2d(x.select(0, 0), weight, bias, stride, padding, output_padding, groups,
                         dilation)
            .sizes() == Shape{cout, oh, ow});
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    CHECK(conv_transpose2d(x.to(kFloat32), weight.to(kFloat32), {}, {1, 1}, {0, 0}, {0, 0}, groups)
              .dtype() == kBFloat16);
  }
  CHECK_THAT(testing::error_message([&] {
               conv_transpose2d(x, weight, {}, {1, 1}, {0, 0}, {1, 0});
             }),
             Contains("expected output_padding smaller than stride or dilation"));
  CHECK_THAT(testing::error_message([&] {
               conv_transpose2d(x, randn({3, 2, 2, 2}, kFloat64));
             }),
             Contains("expected a weight [Cin = 4, Cout / groups, kH, kW]"));
}

TEST_CASE("interpolate: torch's nearest and bilinear values", "[math]") {
  const Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, {1, 1, 2, 2}, kFloat64);
  CHECK(interpolate(x, std::nullopt, std::vector<double>{2.0}).to_vector<double>() ==
        std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear"), align_corners False.
  check_close(
      interpolate(x, std::nullopt, std::vector<double>{2.0}, "bilinear").to_vector<double>(),
      {1.0, 1.25, 1.75, 2.0, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3.0, 3.25, 3.75, 4.0},
      1e-15);
  // align_corners True: corners kept, steps of 1/3.
  const double t = 1.0 / 3;
  check_close(
      interpolate(x, std::vector<int64_t>{4}, std::nullopt, "bilinear", true).to_vector<double>(),
      {1, 1 + t, 1 + 2 * t, 2, 1 + 2 * t, 2, 2 + t, 2 + 2 * t, 2 + t, 2 + 2 * t, 3, 3 + t, 3, 3 + t,
       3 + 2 * t, 4},
      1e-15);
  // Downsampling and 1-d linear.
  const Tensor row = tensor({0.0, 10.0, 20.0, 30.0, 40.0}, {1, 1, 5}, kFloat64);
  CHECK(interpolate(row, std::vector<int64_t>{2}).to_vector<double>() ==
        std::vector<double>{0, 20});
  check_close(interpolate(row, std::vector<int64_t>{3}, std::nullopt, "linear").to_vector<double>(),
              {(5.0 / 6 - 0.5) * 10, 20.0, (25.0 / 6 - 0.5) * 10}, 1e-14);
  CHECK(
      interpolate(x.to(kBFloat16), std::vector<int64_t>{3, 5}, std::nullopt, "bilinear").sizes() ==
      Shape{1, 1, 3, 5});
  CHECK_THAT(
      testing::error_message(
          [&] { interpolate(x, std::vector<int64_t>{4}, std::nullopt, "linear"); }),
      Contains("expected mode \"nearest\", or \"bilinear\" for a 4-d input, got \"linear\""));
  CHECK_THAT(testing::error_message([&] { interpolate(x, std::nullopt, std::nullopt); }),
             Contains("expected exactly one of size and scale_factor"));
}

TEST_CASE("nn::functional names the new ops", "[math]") {
  namespace F = nn::functional;
  const Tensor x = tensor({-1.0, 2.0, -3.0, 4.0}, {1, 1, 4}, kFloat64);
  CHECK(F::leaky_relu(x, 0.5).to_vector<double>() == std::vector<double>{-0.5, 2, -1.5, 4});
  CHECK(F::pad(x, {1, 0}).to_vector<double>() == std::vector<double>{0, -1, 2, -3, 4});
  CHECK(F::max_pool1d(x, 2).to_vector<double>() == std::vector<double>{2, 4});
  CHECK(F::interpolate(x, std::vector<int64_t>{2}).to_vector<double>() ==
        std::vector<double>{-1, -3});
  CHECK(F::glu(x).to_vector<double>() == glu(x).to_vector<double>());
}
