// nn::init: fans, gains, and the statistics of each fill against torch.nn.init's formulas.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

struct Stats {
  double mean, std, min, max;
};

Stats stats_of(const Tensor& t) {
  const auto v = t.to_vector<double>();
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  return {mean, std::sqrt(sq / double(v.size())), *std::min_element(v.begin(), v.end()),
          *std::max_element(v.begin(), v.end())};
}

// For n independent draws the sample mean is within 5 standard errors almost surely.
void check_uniform(const Tensor& t, double bound) {
  const Stats s = stats_of(t);
  const double n = double(t.numel());
  CHECK(s.min >= -bound);
  CHECK(s.max < bound);
  CHECK(s.min < -0.99 * bound);  // the range is used
  CHECK(s.max > 0.99 * bound);
  const double std = bound / std::sqrt(3.0);
  CHECK(std::abs(s.mean) < 5 * std / std::sqrt(n));
  CHECK(s.std == Approx(std).epsilon(0.02));
}

void check_normal(const Tensor& t, double mean, double std) {
  const Stats s = stats_of(t);
  CHECK(std::abs(s.mean - mean) < 5 * std / std::sqrt(double(t.numel())));
  CHECK(s.std == Approx(std).epsilon(0.02));
}

}  // namespace

TEST_CASE("fans follow torch for linear and conv weights", "[nn][init]") {
  auto fans = nn::init::calculate_fan_in_and_fan_out(empty({8, 3}));
  CHECK(fans.fan_in == 3);
  CHECK(fans.fan_out == 8);
  fans = nn::init::calculate_fan_in_and_fan_out(empty({16, 4, 3, 5}));
  CHECK(fans.fan_in == 4 * 15);
  CHECK(fans.fan_out == 16 * 15);
  CHECK_THROWS_AS(nn::init::calculate_fan_in_and_fan_out(empty({5})), Error);
}

TEST_CASE("calculate_gain matches torch's table", "[nn][init]") {
  CHECK(nn::init::calculate_gain("linear") == 1.0);
  CHECK(nn::init::calculate_gain("conv2d") == 1.0);
  CHECK(nn::init::calculate_gain("sigmoid") == 1.0);
  CHECK(nn::init::calculate_gain("tanh") == Approx(5.0 / 3.0));
  CHECK(nn::init::calculate_gain("relu") == Approx(std::sqrt(2.0)));
  CHECK(nn::init::calculate_gain("leaky_relu") == Approx(std::sqrt(2.0 / (1 + 0.01 * 0.01))));
  CHECK(nn::init::calculate_gain("leaky_relu", std::sqrt(5.0)) == Approx(std::sqrt(1.0 / 3.0)));
  CHECK(nn::init::calculate_gain("selu") == 0.75);
  CHECK_THROWS_AS(nn::init::calculate_gain("swish"), Error);
}

TEST_CASE("uniform_ and normal_ fill in place with the asked statistics", "[nn][init]") {
  manual_seed(3);
  Tensor t = zeros({200, 300}).requires_grad_();
  Tensor same = t;
  nn::init::uniform_(t, -0.5, 0.5);
  CHECK(same.is_same(t));
  CHECK(t.requires_grad());
  CHECK(t.is_leaf());
  check_uniform(t, 0.5);

  Tensor u = empty({200, 300});
  nn::init::uniform_(u, 2.0, 3.0);
  const Stats s = stats_of(u);
  CHECK(s.min >= 2.0);
  CHECK(s.max < 3.0);
  CHECK(s.mean == Approx(2.5).margin(0.01));

  nn::init::normal_(t, 1.0, 0.02);
  check_normal(t, 1.0, 0.02);

  Tensor h = empty({300, 200}, kBFloat16);
  nn::init::normal_(h, 0.0, 1.0);
  CHECK(h.dtype() == kBFloat16);
  check_normal(h, 0.0, 1.0);

  CHECK_THROWS_AS(nn::init::uniform_(t, 1.0, 1.0), Error);
  Tensor integers = zeros({4}, kInt64);
  CHECK_THROWS_AS(nn::init::normal_(integers), Error);
}

TEST_CASE("the same seed gives the same init and a strided tensor the contiguous numbers",
          "[nn][init]") {
  Tensor a = empty({30, 40}), b = empty({40, 30});
  manual_seed(11);
  nn::init::normal_(a);
  manual_seed(11);
  Tensor bt = b.t();
  nn::init::normal_(bt);
  CHECK(bt.contiguous().to_vector<float>() == a.to_vector<float>());
}

TEST_CASE("kaiming and xavier use torch's bounds and standard deviations", "[nn][init]") {
  manual_seed(5);
  Tensor w = empty({500, 400});  // fan_in 400, fan_out 500
  nn::init::kaiming_uniform_(w, 0.0, "fan_in", "relu");
  check_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / 400));
  nn::init::kaiming_uniform_(w, 0.0, "fan_out", "relu");
  check_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / 500));
  nn::init::kaiming_uniform_(w, std::sqrt(5.0));  // Linear's default: 1 / sqrt(fan_in)
  check_uniform(w, 1.0 / std::sqrt(400.0));
  nn::init::kaiming_normal_(w, 0.0, "fan_in", "relu");
  check_normal(w, 0.0, std::sqrt(2.0 / 400));
  nn::init::xavier_uniform_(w);
  check_uniform(w, std::sqrt(6.0 / 900));
  nn::init::xavier_normal_(w, 2.0);
  check_normal(w, 0.0, 2.0 * std::sqrt(2.0 / 900));

  Tensor conv = empty({64, 16, 3, 3});  // fan_in 144
  nn::init::kaiming_normal_(conv, 0.0, "fan_in", "relu");
  check_normal(conv, 0.0, std::sqrt(2.0 / 144));
  CHECK_THROWS_AS(nn::init::kaiming_uniform_(conv, 0.0, "fan_avg"), Error);
}

TEST_CASE("zeros_ ones_ and constant_", "[nn][init]") {
  Tensor t = randn({3, 4}).requires_grad_();
  nn::init::ones_(t);
  CHECK(t.to_vector<float>() == std::vector<float>(12, 1.0f));
  nn::init::zeros_(t);
  CHECK(t.to_vector<float>() == std::vector<float>(12, 0.0f));
  nn::init::constant_(t, 0.25);
  CHECK(t.to_vector<float>() == std::vector<float>(12, 0.25f));
  CHECK(t.is_leaf());
}

TEST_CASE("Linear and Conv2d start inside PyTorch's default bounds", "[nn][init]") {
  manual_seed(9);
  nn::Linear linear(256, 512);
  check_uniform(linear.weight.detach(), 1.0 / 16.0);
  const Stats b = stats_of(linear.bias.detach());
  CHECK(b.min >= -1.0 / 16.0);
  CHECK(b.max < 1.0 / 16.0);

  nn::Conv2d conv(16, 256, 3);  // fan_in 144
  check_uniform(conv.weight.detach(), 1.0 / 12.0);
  const Stats cb = stats_of(conv.bias.detach());
  CHECK(cb.min >= -1.0 / 12.0);
  CHECK(cb.max < 1.0 / 12.0);

  nn::Embedding embedding(1000, 64, 3);
  check_normal(embedding.weight.detach(), 0.0, 1.0);
  CHECK(embedding.weight.detach().select(0, 3).to_vector<float>() == std::vector<float>(64, 0.0f));
}

TEST_CASE("trunc_normal_ stays in [a, b] with the truncated normal's moments", "[nn][init]") {
  manual_seed(77);
  Tensor w = empty({400, 250});
  nn::init::trunc_normal_(w, 0.5, 2.0, -1.0, 3.0);
  const Stats s = stats_of(w);
  CHECK(s.min >= -1.0);
  CHECK(s.max <= 3.0);
  // The truncated normal's mean and variance from its definition: alpha, beta the standardised
  // bounds, Z = Phi(beta) - Phi(alpha).
  const double mu = 0.5, sigma = 2.0;
  const double alpha = (-1.0 - mu) / sigma, beta = (3.0 - mu) / sigma;
  const auto phi = [](double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
  const auto Phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const double z = Phi(beta) - Phi(alpha);
  const double mean = mu + sigma * (phi(alpha) - phi(beta)) / z;
  const double variance =
      sigma * sigma *
      (1 + (alpha * phi(alpha) - beta * phi(beta)) / z - std::pow((phi(alpha) - phi(beta)) / z, 2));
  // 100000 draws: the mean's standard error is about 0.004.
  CHECK(std::abs(s.mean - mean) < 0.02);
  CHECK(std::abs(s.std - std::sqrt(variance)) < 0.02);
  // Default bounds on a bfloat16 tensor: the draw is rounded once.
  Tensor h = empty({1000}, kBFloat16);
  nn::init::trunc_normal_(h);
  CHECK(stats_of(h).max <= 2.0);
  CHECK(stats_of(h).min >= -2.0);
  CHECK_THROWS_WITH(nn::init::trunc_normal_(w, 0.0, 1.0, 2.0, 1.0),
                    Catch::Contains("expected std > 0 and a < b"));
}

TEST_CASE("orthogonal_ gives orthonormal rows or columns times gain", "[nn][init]") {
  manual_seed(78);
  for (const Shape& shape : {Shape{20, 8}, Shape{8, 20}, Shape{6, 2, 3, 3}, Shape{5, 5}}) {
    CAPTURE(shape);
    Tensor w = empty(shape, kFloat64);
    nn::init::orthogonal_(w, 1.5);
    const Tensor m = w.reshape({shape[0], -1});
    // The Gram matrix of the shorter side is gain^2 I.
    const Tensor gram = m.size(0) >= m.size(1) ? matmul(m.t(), m) : matmul(m, m.t());
    const Tensor expected = mul(eye(gram.size(0), std::nullopt, {.dtype = kFloat64}), 2.25);
    const auto got = gram.to_vector<double>(), want = expected.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
  }
  Tensor weight = empty({4, 3}).requires_grad_();  // a parameter: filled without recording
  nn::init::orthogonal_(weight);
  CHECK(weight.requires_grad());
  CHECK(weight.is_leaf());
  Tensor flat = empty({3});
  CHECK_THROWS_WITH(nn::init::orthogonal_(flat), Catch::Contains("at least 2 dims"));
}
