// The standard layers against the same computation written by hand in float64, or with ops.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

void check_close(const Tensor& actual, const std::vector<double>& expected, double tol = 1e-5) {
  const auto got = actual.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expected[i]).margin(tol));
}

void check_same(const Tensor& a, const Tensor& b, double tol = 1e-6) {
  REQUIRE(a.sizes() == b.sizes());
  check_close(a, b.to_vector<double>(), tol);
}

}  // namespace

TEST_CASE("Linear computes x W^T + b", "[nn][layers]") {
  manual_seed(2);
  nn::Linear linear(3, 2);
  Tensor x = randn({4, 3});
  const auto w = linear.weight.to_vector<double>();
  const auto b = linear.bias.to_vector<double>();
  const auto xv = x.to_vector<double>();
  std::vector<double> expected;
  for (int n = 0; n < 4; ++n) {
    for (int o = 0; o < 2; ++o) {
      double acc = b[o];
      for (int i = 0; i < 3; ++i) acc += xv[n * 3 + i] * w[o * 3 + i];
      expected.push_back(acc);
    }
  }
  Tensor y = linear(x);
  CHECK(y.sizes() == Shape{4, 2});
  check_close(y, expected);
  // Leading dims pass through.
  CHECK(linear(randn({2, 5, 3})).sizes() == Shape{2, 5, 2});
}

TEST_CASE("LayerNorm normalises the last dims then scales and shifts", "[nn][layers]") {
  nn::LayerNorm ln(4);
  {
    NoGradGuard no_grad;
    ln.weight.copy_(tensor({1.0, 2.0, 0.5, -1.0}));
    ln.bias.copy_(tensor({0.0, 0.1, 0.2, 0.3}));
  }
  Tensor x = tensor({1.0, 2.0, 4.0, 7.0, -1.0, 0.0, 0.0, 1.0}, {2, 4});
  const auto xv = x.to_vector<double>();
  const double w[4] = {1, 2, 0.5, -1}, b[4] = {0, 0.1, 0.2, 0.3};
  std::vector<double> expected;
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 4; ++c) mean += xv[r * 4 + c] / 4;
    for (int c = 0; c < 4; ++c) var += (xv[r * 4 + c] - mean) * (xv[r * 4 + c] - mean) / 4;
    for (int c = 0; c < 4; ++c) {
      expected.push_back((xv[r * 4 + c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c]);
    }
  }
  check_close(ln(x), expected);
  CHECK(ln.to_string() == "LayerNorm((4,), eps=1e-05, elementwise_affine=True)");
}

TEST_CASE("Embedding picks rows and padding_idx gets no gradient", "[nn][layers]") {
  nn::Embedding emb(5, 3, 1);
  Tensor idx = tensor(std::vector<int64_t>{4, 1, 4}, Shape{3});
  Tensor y = emb(idx);
  CHECK(y.sizes() == Shape{3, 3});
  check_same(y[0], emb.weight.detach()[4]);
  check_same(y[1], zeros({3}));
  sum(y).backward();
  const auto g = emb.weight.grad().to_vector<double>();
  CHECK(g[4 * 3] == 2.0);
  CHECK(g[1 * 3] == 0.0);
  CHECK(g[0] == 0.0);
  CHECK_THROWS_AS(nn::Embedding(5, 3, 5), Error);
}

TEST_CASE("Dropout drops while training and is the identity in eval", "[nn][layers]") {
  manual_seed(4);
  nn::Dropout drop(0.25);
  Tensor x = ones({100, 100});
  const auto y = drop(x).to_vector<double>();
  int zeros_seen = 0;
  for (double v : y) {
    if (v == 0) {
      ++zeros_seen;
    } else {
      CHECK(v == Approx(1 / 0.75));
    }
  }
  CHECK(zeros_seen == Approx(2500).margin(5 * std::sqrt(10000 * 0.25 * 0.75)));
  drop.eval();
  CHECK(drop(x).to_vector<double>() == x.to_vector<double>());
  CHECK_THROWS_AS(nn::Dropout(1.5), Error);
}

TEST_CASE("activation modules are their ops", "[nn][layers]") {
  Tensor x = linspace(-3, 3, 13);
  const auto xv = x.to_vector<double>();
  std::vector<double> relu_ref, gelu_ref, gelu_tanh_ref, silu_ref, tanh_ref;
  for (double v : xv) {
    relu_ref.push_back(v > 0 ? v : 0);
    gelu_ref.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
    gelu_tanh_ref.push_back(0.5 * v *
                            (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))));
    silu_ref.push_back(v / (1 + std::exp(-v)));
    tanh_ref.push_back(std::tanh(v));
  }
  check_close(nn::ReLU()(x), relu_ref);
  check_close(nn::GELU()(x), gelu_ref);
  check_close(nn::GELU("tanh")(x), gelu_tanh_ref);
  check_close(nn::SiLU()(x), silu_ref);
  check_close(nn::Tanh()(x), tanh_ref);
  CHECK_THROWS_AS(nn::GELU("fast"), Error);
}

TEST_CASE("Sequential chains its children", "[nn][layers]") {
  manual_seed(6);
  nn::Sequential mlp(nn::Linear(3, 5), nn::ReLU(), nn::Linear(5, 2));
  Tensor x = randn({4, 3});
  auto first = mlp.at<nn::Linear>(0), last = mlp.at<nn::Linear>(2);
  Tensor expected = linear(relu(linear(x, first->weight, first->bias)), last->weight, last->bias);
  check_same(mlp(x), expected);
  nn::Sequential empty_seq;
  CHECK(empty_seq(x).is_same(x));
}

TEST_CASE("Conv2d is conv2d with weight [O, C/groups, kH, kW]", "[nn][layers]") {
  manual_seed(7);
  nn::Conv2d conv(4, 6, 3, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2});
  CHECK(conv.weight.sizes() == Shape{6, 2, 3, 3});
  CHECK(conv.bias.sizes() == Shape{6});
  Tensor x = randn({2, 4, 7, 7});
  Tensor y = conv(x);
  CHECK(y.sizes() == Shape{2, 6, 4, 4});
  check_same(y, conv2d(x, conv.weight, conv.bias, {2, 2}, {1, 1}, {1, 1}, 2));
  // One output element by hand: sample 1, channel 4 (group 1: input channels 2, 3), (1, 2).
  const auto xv = x.to_vector<double>();
  const auto w = conv.weight.to_vector<double>();
  double acc = conv.bias.to_vector<double>()[4];
  for (int c = 0; c < 2; ++c) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        const int row = 1 * 2 - 1 + i, col = 2 * 2 - 1 + j;
        if (row < 0 || row >= 7 || col < 0 || col >= 7) continue;
        acc += xv[((1 * 4 + 2 + c) * 7 + row) * 7 + col] * w[((4 * 2 + c) * 3 + i) * 3 + j];
      }
    }
  }
  CHECK(y.to_vector<double>()[((1 * 6 + 4) * 4 + 1) * 4 + 2] == Approx(acc).margin(1e-5));
  CHECK(nn::Conv2d(3, 8, 3, {.bias = false}).named_parameters().size() == 1);
  CHECK_THROWS_AS(nn::Conv2d(3, 8, 3, {.groups = 2}), Error);
}

// NOTE [Expanding sizes]: one number is every spatial dim, as in torch (nn.Conv2d(1, 32, 3,
// padding=1) pads both dims); a braced pair sets each dim. The output sizes are torch's
// documented ones: floor((H + 2 p - d (k - 1) - 1) / s) + 1 for conv and pooling, (H - 1) s -
// 2 p + d (k - 1) + output_padding + 1 for the transposed conv.
TEST_CASE("one number in a spatial option stands for both dims in every module", "[nn][layers]") {
  manual_seed(8);
  const Tensor x = randn({2, 3, 9, 8});
  // Conv2d: padding 1 keeps 9 x 8 with a 3 x 3 kernel; {1, 0} pads the height only.
  nn::Conv2d conv(3, 4, 3, {.stride = 1, .padding = 1, .dilation = 1});
  CHECK(conv.options.padding == nn::Conv2dOptions{.padding = {1, 1}}.padding);
  CHECK(conv(x).sizes() == Shape{2, 4, 9, 8});
  nn::Conv2d pair(3, 4, {3, 3}, {.stride = {1, 1}, .padding = {1, 0}});
  CHECK(pair(x).sizes() == Shape{2, 4, 9, 6});
  nn::Conv2d strided(3, 4, 3, {.stride = 2, .padding = 1, .dilation = 2});
  // floor((9 + 2 - 2 (3 - 1) - 1) / 2) + 1 = 4 and floor((8 + 2 - 4 - 1) / 2) + 1 = 3.
  CHECK(strided(x).sizes() == Shape{2, 4, 4, 3});
  check_same(strided(x), conv2d(x, strided.weight, strided.bias, 2, 1, 2));
  check_same(strided(x), conv2d(x, strided.weight, strided.bias, {2, 2}, {1, 1}, {2, 2}));
  // ConvTranspose2d: (9 - 1) 2 - 2 + (2 - 1) + 1 + 1 = 17 and (8 - 1) 2 - 2 + 1 + 1 + 1 = 15.
  nn::ConvTranspose2d up(3, 2, 2, {.stride = 2, .padding = 1, .output_padding = 1});
  CHECK(up.weight.sizes() == Shape{3, 2, 2, 2});
  CHECK(up(x).sizes() == Shape{2, 2, 17, 15});
  check_same(up(x), conv_transpose2d(x, up.weight, up.bias, {2, 2}, {1, 1}, {1, 1}));
  // Pooling: kernel 3, stride 2, padding 1: floor((9 + 2 - 3) / 2) + 1 = 5, likewise 4 + 1.
  nn::MaxPool2d max(3, {.stride = 2, .padding = 1});
  CHECK(max(x).sizes() == Shape{2, 3, 5, 4});
  check_same(max(x), max_pool2d(x, {3, 3}, {2, 2}, {1, 1}));
  check_same(max(x), max_pool2d(x, 3, 2, 1));
  nn::AvgPool2d avg(3, {.stride = 2, .padding = 1});
  check_same(avg(x), avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}));
  CHECK(avg(x).sizes() == Shape{2, 3, 5, 4});
  CHECK(nn::AdaptiveAvgPool2d(2)(x).sizes() == Shape{2, 3, 2, 2});
  check_same(adaptive_avg_pool2d(x, 2), adaptive_avg_pool2d(x, {2, 2}));
  // A list of another length is an error naming both counts, not a half-filled array.
  CHECK_THROWS_WITH(nn::Conv2d(3, 4, 3, {.padding = {1, 1, 1}}),
                    Catch::Contains("expected 2 values (one per spatial dim) or a single number "
                                    "for all of them, got a list of 3"));
  CHECK_THROWS_WITH(max_pool2d(x, {2}), Catch::Contains("got a list of 1"));
}

TEST_CASE("GroupNorm normalises channel groups per sample", "[nn][layers]") {
  manual_seed(8);
  nn::GroupNorm gn(2, 4);
  Tensor x = randn({2, 4, 3});
  const auto xv = x.to_vector<double>();
  std::vector<double> expected(xv.size());
  for (int n = 0; n < 2; ++n) {
    for (int g = 0; g < 2; ++g) {
      const int start = (n * 4 + g * 2) * 3;
      double mean = 0, var = 0;
      for (int i = 0; i < 6; ++i) mean += xv[start + i] / 6;
      for (int i = 0; i < 6; ++i) var += (xv[start + i] - mean) * (xv[start + i] - mean) / 6;
      for (int i = 0; i < 6; ++i)
        expected[start + i] = (xv[start + i] - mean) / std::sqrt(var + 1e-5);
    }
  }
  check_close(gn(x), expected);
}

TEST_CASE("BatchNorm2d trains on batch statistics and evaluates on running ones", "[nn][layers]") {
  manual_seed(10);
  nn::BatchNorm2d bn(3);
  Tensor x = randn({4, 3, 2, 2}) * 2.0 + 1.0;
  const auto xv = x.to_vector<double>();
  std::vector<double> mean(3, 0), var(3, 0);
  for (int n = 0; n < 4; ++n)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 4; ++i) mean[c] += xv[(n * 3 + c) * 4 + i] / 16;
  for (int n = 0; n < 4; ++n)
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 4; ++i) {
        const double d = xv[(n * 3 + c) * 4 + i] - mean[c];
        var[c] += d * d / 16;
      }
  Tensor y = bn(x);
  std::vector<double> expected(xv.size());
  for (size_t k = 0; k < xv.size(); ++k) {
    const int c = int(k / 4) % 3;
    expected[k] = (xv[k] - mean[c]) / std::sqrt(var[c] + 1e-5);
  }
  check_close(y, expected, 1e-4);
  // running = 0.9 * running + 0.1 * batch statistic (the variance unbiased), as torch.
  std::vector<double> rm, rv;
  for (int c = 0; c < 3; ++c) {
    rm.push_back(0.1 * mean[c]);
    rv.push_back(0.9 + 0.1 * var[c] * 16 / 15);
  }
  check_close(bn.running_mean, rm);
  check_close(bn.running_var, rv);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);

  bn.eval();
  Tensor z = bn(x);
  for (size_t k = 0; k < xv.size(); ++k) {
    const int c = int(k / 4) % 3;
    expected[k] = (xv[k] - rm[c]) / std::sqrt(rv[c] + 1e-5);
  }
  check_close(z, expected, 1e-4);
  check_close(bn.running_mean, rm);  // eval leaves them alone
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
}
