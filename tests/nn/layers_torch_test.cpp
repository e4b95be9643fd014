// The layers of nn/layers.h and the loss modules of nn/loss.h: shapes, parameter and buffer
// names, initialisation bounds and printed forms as torch.nn's, forwards against float64 loops
// or the functional ops they hold, batch norm's statistics over 1-d inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <vector>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using testing::bit_identical;

namespace {

std::set<std::string> keys_of(const nn::Module& m) {
  std::set<std::string> keys;
  for (const auto& [name, t] : m.state_dict()) keys.insert(name);
  return keys;
}

double max_abs(const Tensor& t) { return amax(abs(t.to(kFloat64))).item<double>(); }

}  // namespace

TEST_CASE("shape and activation layers print and compute as torch's", "[nn][layers]") {
  manual_seed(4);
  const Tensor x = randn({2, 3, 4, 5});
  CHECK(nn::Flatten()(x).sizes() == Shape{2, 60});
  CHECK(nn::Flatten(0, 1)(x).sizes() == Shape{6, 4, 5});
  CHECK(nn::Unflatten(1, {3, 1})(randn({2, 3})).sizes() == Shape{2, 3, 1});
  CHECK(nn::Identity()(x).is_same(x));
  // The printed forms torch gives for the same constructions.
  CHECK(nn::Flatten().to_string() == "Flatten(start_dim=1, end_dim=-1)");
  CHECK(nn::Unflatten(1, {2, 5}).to_string() == "Unflatten(dim=1, unflattened_size=(2, 5))");
  CHECK(nn::Softmax(1).to_string() == "Softmax(dim=1)");
  CHECK(nn::LeakyReLU().to_string() == "LeakyReLU(negative_slope=0.01)");
  CHECK(nn::Identity().to_string() == "Identity()");
  // Each activation against its formula in float64.
  const std::vector<double> v = x.to_vector<double>();
  const auto check = [&](nn::Module& m, double (*f)(double)) {
    const std::vector<double> got = m(x).to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) CHECK(got[i] == Approx(f(v[i])).margin(1e-6));
  };
  nn::Sigmoid sigmoid_layer;
  check(sigmoid_layer, [](double t) { return 1 / (1 + std::exp(-t)); });
  nn::LeakyReLU leaky(0.2);
  check(leaky, [](double t) { return t > 0 ? t : 0.2 * t; });
  nn::ELU elu_layer(0.5);
  check(elu_layer, [](double t) { return t > 0 ? t : 0.5 * (std::exp(t) - 1); });
  nn::Mish mish_layer;
  check(mish_layer, [](double t) { return t * std::tanh(std::log1p(std::exp(t))); });
  nn::Hardswish hardswish_layer;
  check(hardswish_layer, [](double t) { return t * std::clamp(t + 3, 0.0, 6.0) / 6; });
  // Softmax over dim 1 sums to one there; LogSoftmax is its log.
  const Tensor p = nn::Softmax(1)(x);
  const std::vector<double> sums = sum(p, {1}).to_vector<double>();
  for (double s : sums) CHECK(s == Approx(1.0).margin(1e-6));
  CHECK(max_abs(sub(nn::LogSoftmax(1)(x), log(p))) < 1e-5);
}

TEST_CASE("pooling layers run the functional pools with torch's defaults", "[nn][layers]") {
  manual_seed(5);
  const Tensor x = randn({2, 3, 9, 8});
  CHECK(bit_identical(nn::MaxPool2d(2)(x), max_pool2d(x, {2, 2}, {2, 2})));
  CHECK(nn::MaxPool2d(3, {.stride = std::array<int64_t, 2>{2, 2}, .ceil_mode = true})(x).sizes() ==
        Shape{2, 3, 4, 4});
  CHECK(bit_identical(nn::AvgPool2d(3, {.padding = {1, 1}, .count_include_pad = false})(x),
                      avg_pool2d(x, {3, 3}, {3, 3}, {1, 1}, false, false)));
  const Tensor pooled = nn::AdaptiveAvgPool2d(1)(x);
  CHECK(pooled.sizes() == Shape{2, 3, 1, 1});
  CHECK(max_abs(sub(pooled.flatten(1), mean(x, {2, 3}))) < 1e-6);
  // As torch prints nn.MaxPool2d(2), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d((5, 7)).
  CHECK(nn::MaxPool2d(2).to_string() ==
        "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  CHECK(nn::AvgPool2d(2).to_string() == "AvgPool2d(kernel_size=2, stride=2, padding=0)");
  CHECK(nn::AdaptiveAvgPool2d({5, 7}).to_string() == "AdaptiveAvgPool2d(output_size=(5, 7))");
}

TEST_CASE("Conv1d and ConvTranspose2d hold torch's parameters", "[nn][layers]") {
  manual_seed(6);
  nn::Conv1d conv(4, 8, 3, {.padding = 1, .groups = 2});
  CHECK(conv.weight.sizes() == Shape{8, 2, 3});
  CHECK(conv.bias.sizes() == Shape{8});
  CHECK(keys_of(conv) == std::set<std::string>{"weight", "bias"});
  // kaiming_uniform(a = sqrt 5) and the bias both give U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  CHECK(max_abs(conv.weight) <= 1 / std::sqrt(6.0));
  CHECK(max_abs(conv.bias) <= 1 / std::sqrt(6.0));
  const Tensor x = randn({2, 4, 10});
  CHECK(bit_identical(conv(x), conv1d(x, conv.weight, conv.bias, 1, 1, 1, 2)));
  CHECK(nn::Conv1d(4, 8, 3).to_string() == "Conv1d(4, 8, kernel_size=(3,), stride=(1,))");

  nn::ConvTranspose2d up(16, 33, {3, 5}, {.stride = {2, 1}});
  CHECK(up.weight.sizes() == Shape{16, 33, 3, 5});        // [in, out / groups, kH, kW]
  CHECK(max_abs(up.weight) <= 1 / std::sqrt(33.0 * 15));  // fan_in = 33 * 3 * 5, torch's
  CHECK(max_abs(up.bias) <= 1 / std::sqrt(33.0 * 15));
  CHECK(up.to_string() == "ConvTranspose2d(16, 33, kernel_size=(3, 5), stride=(2, 1))");
  const Tensor y = up(randn({1, 16, 4, 4}));
  CHECK(y.sizes() == Shape{1, 33, 9, 8});  // (4 - 1) * 2 + 3 = 9, (4 - 1) + 5 = 8
  CHECK_THROWS_WITH(nn::Conv1d(3, 4, 3, {.groups = 2}),
                    Contains("Conv1d: expected in_channels (3) and out_channels (4) divisible by "
                             "groups (2)"));
}

TEST_CASE("Bilinear, PairwiseDistance and Softmin hold torch's parameters and options",
          "[nn][layers]") {
  manual_seed(9);
  nn::Bilinear layer(3, 4, 5);
  CHECK(layer.weight.sizes() == Shape{5, 3, 4});
  CHECK(layer.bias.sizes() == Shape{5});
  CHECK(keys_of(layer) == std::set<std::string>{"weight", "bias"});
  // Both U(-1/sqrt(in1), 1/sqrt(in1)), as torch's reset_parameters: spread over the range.
  CHECK(max_abs(layer.weight) <= 1 / std::sqrt(3.0));
  CHECK(max_abs(layer.weight) > 0.8 / std::sqrt(3.0));
  CHECK(max_abs(layer.bias) <= 1 / std::sqrt(3.0));
  CHECK(layer.to_string() == "Bilinear(in1_features=3, in2_features=4, out_features=5, bias=True)");
  const Tensor x1 = randn({2, 6, 3}), x2 = randn({2, 6, 4});
  CHECK(bit_identical(layer(x1, x2), bilinear(x1, x2, layer.weight, layer.bias)));
  nn::Bilinear no_bias(3, 4, 5, false);
  CHECK(keys_of(no_bias) == std::set<std::string>{"weight"});
  CHECK(bit_identical(no_bias(x1, x2), bilinear(x1, x2, no_bias.weight)));
  CHECK_THROWS_WITH(nn::Bilinear(0, 4, 5), Contains("Bilinear: expected positive in1_features"));

  const Tensor a = randn({4, 3}), b = randn({4, 3});
  CHECK(bit_identical(nn::PairwiseDistance()(a, b), pairwise_distance(a, b)));
  CHECK(bit_identical(nn::PairwiseDistance(1.0, 1e-3, true)(a, b),
                      pairwise_distance(a, b, 1.0, 1e-3, true)));
  CHECK(bit_identical(nn::Softmin(1)(a), softmin(a, 1)));
  CHECK(nn::Softmin(0).to_string() == "Softmin(dim=0)");
}

TEST_CASE("BatchNorm1d normalises per feature over 2-d and 3-d inputs", "[nn][layers]") {
  manual_seed(7);
  nn::BatchNorm1d bn(3);
  CHECK(keys_of(bn) == std::set<std::string>{"weight", "bias", "running_mean", "running_var",
                                             "num_batches_tracked"});
  CHECK(bn.to_string() ==
        "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  const Tensor x = add(mul(randn({64, 3}), 2.0), 5.0);
  const Tensor y = bn(x);
  // Batch statistics: each feature has mean 0 and (biased) variance 1 after.
  const std::vector<double> means = mean(y, {0}).to_vector<double>();
  for (double m : means) CHECK(m == Approx(0.0).margin(1e-5));
  // running_mean = 0.9 * 0 + 0.1 * batch mean; running_var uses the unbiased variance.
  const std::vector<double> batch_mean = mean(x.to(kFloat64), {0}).to_vector<double>();
  const std::vector<double> batch_var = var(x.to(kFloat64), {0}).to_vector<double>();
  const std::vector<double> running_mean = bn.running_mean.to_vector<double>();
  const std::vector<double> running_var = bn.running_var.to_vector<double>();
  for (int c = 0; c < 3; ++c) {
    CHECK(running_mean[c] == Approx(0.1 * batch_mean[c]).epsilon(1e-5));
    CHECK(running_var[c] == Approx(0.9 + 0.1 * batch_var[c]).epsilon(1e-5));
  }
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  // 3-d inputs [N, C, L] pool over N and L; eval uses the running statistics.
  CHECK(bn(randn({4, 3, 7})).sizes() == Shape{4, 3, 7});
  bn.eval();
  const Tensor z = bn(x);
  const std::vector<double> zv = z.to_vector<double>(), xv = x.to_vector<double>();
  const std::vector<double> rm = bn.running_mean.to_vector<double>();
  const std::vector<double> rv = bn.running_var.to_vector<double>();
  for (size_t i = 0; i < 6; ++i) {
    const size_t c = i % 3;
    CHECK(zv[i] == Approx((xv[i] - rm[c]) / std::sqrt(rv[c] + 1e-5)).epsilon(1e-5));
  }
  CHECK_THROWS_WITH(bn(randn({2, 3, 4, 5})),
                    Contains("BatchNorm1d: expected a 2-D [N, C] or 3-D [N, C, L] input"));
}

TEST_CASE("loss modules hold their options and weights as torch's", "[nn][loss]") {
  manual_seed(8);
  const Tensor logits = randn({6, 4});
  const Tensor target = tensor(std::vector<int64_t>{0, 3, 1, 1, 2, 0});
  const Tensor weight = tensor({1.0, 2.0, 0.5, 1.5});
  nn::CrossEntropyLoss criterion({.weight = weight, .ignore_index = 1, .label_smoothing = 0.1});
  CHECK(keys_of(criterion) == std::set<std::string>{"weight"});
  CHECK(criterion.to_string() == "CrossEntropyLoss()");
  CHECK(bit_identical(criterion(logits, target),
                      cross_entropy(logits, target, weight, 1, "mean", 0.1)));
  CHECK(keys_of(nn::CrossEntropyLoss()).empty());  // no weight, no buffer
  nn::NLLLoss nll({.reduction = "sum"});
  CHECK(bit_identical(nll(log_softmax(logits, 1), target),
                      nll_loss(log_softmax(logits, 1), target, {}, -100, "sum")));
  const Tensor a = randn({5, 3}), b = randn({5, 3});
  CHECK(bit_identical(nn::MSELoss()(a, b), mse_loss(a, b)));
  CHECK(bit_identical(nn::L1Loss("none")(a, b), l1_loss(a, b, "none")));
  CHECK(bit_identical(nn::SmoothL1Loss("sum", 0.5)(a, b), smooth_l1_loss(a, b, "sum", 0.5)));
  const Tensor probabilities = sigmoid(a), labels = gt(b, 0.0).to(kFloat32);
  CHECK(bit_identical(nn::BCELoss()(probabilities, labels),
                      binary_cross_entropy(probabilities, labels)));
  const Tensor pos_weight = tensor({1.0, 3.0, 0.5});
  nn::BCEWithLogitsLoss with_logits({.pos_weight = pos_weight});
  CHECK(keys_of(with_logits) == std::set<std::string>{"pos_weight"});
  CHECK(bit_identical(with_logits(a, labels),
                      binary_cross_entropy_with_logits(a, labels, {}, "mean", pos_weight)));
  CHECK(bit_identical(nn::KLDivLoss("batchmean")(log_softmax(a, 1), softmax(b, 1)),
                      kl_div(log_softmax(a, 1), softmax(b, 1), "batchmean")));
  // The loss's gradient reaches the logits as the functional one's.
  const Tensor leaf = logits.clone().requires_grad_();
  criterion(leaf, target).backward();
  CHECK(leaf.grad().defined());
  CHECK_THROWS_WITH(nn::MSELoss("average")(a, b), Contains("average"));
}

TEST_CASE("the margin, embedding and Poisson loss modules are their functional losses",
          "[nn][loss]") {
  manual_seed(10);
  const Tensor a = randn({5, 3}), b = randn({5, 3}), c = randn({5, 3});
  const Tensor sign = tensor({1.0, -1.0, 1.0, 1.0, -1.0});
  const Tensor signs = tensor(
      {1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, -1.0}, {5, 3});
  CHECK(bit_identical(nn::HuberLoss("sum", 0.5)(a, b), huber_loss(a, b, "sum", 0.5)));
  CHECK(bit_identical(nn::SoftMarginLoss()(a, signs), soft_margin_loss(a, signs)));
  CHECK(bit_identical(nn::HingeEmbeddingLoss(2.0, "none")(a, signs),
                      hinge_embedding_loss(a, signs, 2.0, "none")));
  const Tensor counts =
      tensor({0.0, 1.0, 2.0, 3.0, 5.0, 1.0, 0.0, 2.0, 4.0, 1.0, 0.0, 3.0, 2.0, 1.0, 6.0}, {5, 3});
  CHECK(bit_identical(nn::PoissonNLLLoss({.full = true})(a, counts),
                      poisson_nll_loss(a, counts, true, true)));
  const Tensor classes = tensor(std::vector<int64_t>{0, 2, 1, 1, 0});
  const Tensor weight = tensor({0.5, 1.0, 2.0});
  nn::MultiMarginLoss multi({.p = 2, .margin = 0.5, .weight = weight});
  CHECK(keys_of(multi) == std::set<std::string>{"weight"});
  CHECK(bit_identical(multi(a, classes), multi_margin_loss(a, classes, 2, 0.5, weight)));
  const Tensor labels =
      tensor(std::vector<int64_t>{0, 2, -1, 1, -1, 0, 2, 1, 0, 0, -1, 2, 1, 0, 2}, {5, 3});
  CHECK(bit_identical(nn::MultiLabelMarginLoss("sum")(a, labels),
                      multilabel_margin_loss(a, labels, "sum")));
  CHECK(bit_identical(nn::MarginRankingLoss(0.3)(a.select(1, 0), b.select(1, 0), sign),
                      margin_ranking_loss(a.select(1, 0), b.select(1, 0), sign, 0.3)));
  CHECK(bit_identical(nn::CosineEmbeddingLoss(0.1, "none")(a, b, sign),
                      cosine_embedding_loss(a, b, sign, 0.1, "none")));
  nn::TripletMarginLoss triplet({.margin = 2.0, .p = 1.0, .swap = true});
  CHECK(bit_identical(triplet(a, b, c), triplet_margin_loss(a, b, c, 2.0, 1.0, 1e-6, true)));
  CHECK(triplet.to_string() == "TripletMarginLoss()");
  // Hooks see the three arguments.
  int seen = 0;
  triplet.register_forward_pre_hook([&](nn::Module&, const nn::Args& args) {
    seen = int(args.size());
    return std::optional<nn::Args>();
  });
  triplet(a, b, c);
  CHECK(seen == 3);
}
