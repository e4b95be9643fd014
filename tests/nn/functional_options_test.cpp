// nn::functional's loss options (libtorch's F::...FuncOptions): each chained form gives the
// positional call's value, and the defaults are torch's.
#include <cmath>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;
namespace F = hg::nn::functional;

namespace {

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

}  // namespace

TEST_CASE("functional losses take libtorch's option objects", "[nn][functional]") {
  manual_seed(11);
  const Tensor logits = randn({6, 4});
  const Tensor labels = tensor(std::vector<int64_t>{0, 3, 1, 1, 2, 0});
  const Tensor weight = tensor({1.0, 2.0, 0.5, 1.5}, {4});
  // The defaults are torch's: mean reduction, ignore_index -100, no smoothing.
  CHECK(F::CrossEntropyFuncOptions().reduction() == "mean");
  CHECK(F::CrossEntropyFuncOptions().ignore_index() == -100);
  CHECK(F::CrossEntropyFuncOptions().label_smoothing() == 0.0);
  CHECK(F::SmoothL1LossFuncOptions().beta() == 1.0);
  CHECK(values(F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions())) ==
        values(cross_entropy(logits, labels)));
  // The sum by hand: -log softmax(logits)[n, labels[n]] over n.
  const std::vector<double> l = values(logits);
  const std::vector<int64_t> y = labels.to_vector<int64_t>();
  double total = 0;
  for (size_t n = 0; n < 6; ++n) {
    double norm = 0;
    for (size_t c = 0; c < 4; ++c) norm += std::exp(l[n * 4 + c]);
    total -= l[n * 4 + size_t(y[n])] - std::log(norm);
  }
  CHECK(F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction("sum"))
            .item<double>() == Approx(total).epsilon(1e-5));
  const auto chained = F::CrossEntropyFuncOptions()
                           .weight(weight)
                           .ignore_index(1)
                           .reduction("none")
                           .label_smoothing(0.1);
  CHECK(values(F::cross_entropy(logits, labels, chained)) ==
        values(cross_entropy(logits, labels, weight, 1, "none", 0.1)));
  const Tensor log_p = log_softmax(logits, 1);
  CHECK(values(F::nll_loss(log_p, labels, F::NLLLossFuncOptions().weight(weight).reduction("sum"))) ==
        values(nll_loss(log_p, labels, weight, -100, "sum")));
  const Tensor target = randn({6, 4});
  CHECK(values(F::mse_loss(logits, target, F::MSELossFuncOptions().reduction("sum"))) ==
        values(mse_loss(logits, target, "sum")));
  CHECK(values(F::l1_loss(logits, target, F::L1LossFuncOptions().reduction("none"))) ==
        values(l1_loss(logits, target, "none")));
  CHECK(values(F::smooth_l1_loss(logits, target, F::SmoothL1LossFuncOptions().beta(0.5))) ==
        values(smooth_l1_loss(logits, target, "mean", 0.5)));
  const Tensor p = sigmoid(logits), q = rand({6, 4});
  CHECK(values(F::binary_cross_entropy(p, q, F::BinaryCrossEntropyFuncOptions().reduction("sum"))) ==
        values(binary_cross_entropy(p, q, {}, "sum")));
  const Tensor pos = tensor({2.0, 1.0, 0.5, 3.0}, {4});
  CHECK(values(F::binary_cross_entropy_with_logits(
            logits, q, F::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pos))) ==
        values(binary_cross_entropy_with_logits(logits, q, {}, "mean", pos)));
  CHECK(values(F::kl_div(log_p, log_p, F::KLDivFuncOptions().log_target(true).reduction("batchmean"))) ==
        values(kl_div(log_p, log_p, "batchmean", true)));
  // A bad reduction is the functional loss's error, as for the positional call.
  CHECK_THROWS_AS(F::mse_loss(logits, target, F::MSELossFuncOptions().reduction("average")), Error);
}
