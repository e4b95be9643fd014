// The CPU loss kernels (cpu::loss_kernels, kernel/loss.h): the small-loss buffer sums in the
// reduction's order; the members with no fused form on the CPU say so (std::nullopt); the class
// losses keep "mean"'s divisor on the host and check class indices at once.
#include <catch2/catch.hpp>

#include <optional>

#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;
using kernel::LossReduction;
using kernel::PointwiseLoss;

TEST_CASE("a small float loss sums its terms in the reduction's order", "[loss]") {
  // Up to 4096 terms are summed from a buffer (cpu::sum_floats), more through a tensor and
  // cpu::reduce_kernels.reduce: both must give the bits of reduce over the terms computed as
  // tensors.
  for (int64_t n : {16, 100, 5000}) {
    INFO("n = " << n);
    manual_seed(uint64_t(n));
    const Tensor x = randn({n}), y = randn({n});
    const Tensor diff = sub(x, y);
    const Tensor terms = mul(diff, diff);
    const double total =
        cpu::reduce_kernels.reduce(kernel::Reduction::Sum, terms, {}, false, kFloat64, 2.0)
            .item<double>();
    CHECK(mse_loss(x, y).item<double>() == scalar_tensor(total / double(n)).item<double>());
    CHECK(mse_loss(x, y, "sum").item<double>() == scalar_tensor(total).item<double>());
  }
}

TEST_CASE("the CPU's fused pointwise backward is mse_loss's only", "[loss]") {
  const auto& K = cpu::loss_kernels;
  manual_seed(5);
  const Tensor x = randn({4, 3}), y = randn({4, 3}), g = scalar_tensor(1.0, kFloat32);
  const auto fused = [&](PointwiseLoss kind, LossReduction reduction, const Tensor& grad) {
    return K.pointwise_loss_backward(kind, grad, x, y, {}, {}, reduction, double(x.numel()), true,
                                     true, 1.0);
  };
  const std::optional<kernel::LossGrads> mse = fused(PointwiseLoss::Mse, LossReduction::Mean, g);
  REQUIRE(mse.has_value());
  CHECK(mse->input.sizes() == x.sizes());
  CHECK(mse->target.sizes() == y.sizes());
  // "none", and the other losses: the op formulas.
  CHECK_FALSE(fused(PointwiseLoss::Mse, LossReduction::None, ones({4, 3})).has_value());
  for (PointwiseLoss kind : {PointwiseLoss::L1, PointwiseLoss::SmoothL1, PointwiseLoss::KlDiv,
                             PointwiseLoss::KlDivLogTarget}) {
    CHECK_FALSE(fused(kind, LossReduction::Mean, g).has_value());
  }
}

TEST_CASE("the CPU's class losses divide on the host and check indices at once", "[loss]") {
  const auto& K = cpu::loss_kernels;
  const Tensor logp = log_softmax(randn({3, 4}), 1);
  const Tensor weight = tensor({0.5, 2.0, 1.0, 1.5}, kFloat32);
  const Tensor target = tensor(std::vector<int64_t>{1, 3, 2}, {3}, kInt64);
  const kernel::ClassLossForward r = K.nll_loss(logp, target, weight, 2, LossReduction::Mean);
  REQUIRE(r.host_divisor.has_value());
  CHECK(*r.host_divisor == 2.0 + 1.5);  // the weights of the targets not ignored
  CHECK_FALSE(r.divisor.defined());
  CHECK_FALSE(K.nll_loss_backward(scalar_tensor(1.0, kFloat32), target, weight, logp.sizes(),
                                  logp.dtype(), r, 2, LossReduction::Mean)
                  .has_value());
  // Every target ignored: the backward divides by 1.
  const Tensor ignored = tensor(std::vector<int64_t>{2, 2, 2}, {3}, kInt64);
  CHECK(K.cross_entropy(logp, ignored, {}, 2, LossReduction::Mean, 0.0, kFloat32).host_divisor ==
        1.0);
  const Tensor bad = tensor(std::vector<int64_t>{1, 4, 2}, {3}, kInt64);
  CHECK_THROWS_WITH(K.nll_loss(logp, bad, {}, -100, LossReduction::Sum),
                    Contains("nll_loss: expected class indices in [0, C) with C = 4"));
}
