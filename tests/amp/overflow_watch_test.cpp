// OverflowWatch on a model built to overflow float16 in one known layer: the watch names that
// layer's op and module, and the ranges of its inputs.
#include <limits>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

// Linear(4, 16) -> GELU -> Linear(16, 16) -> LayerNorm -> Linear(16, 2). On ones(8, 4) the
// first layer gives 2 everywhere (GELU(2) = 1.95), and the second, with weights of 1e4, gives
// 16 * 1.95e4 = 3.1e5: beyond float16's 65504, so it overflows under float16 autocast and only
// there.
std::shared_ptr<nn::Sequential> overflowing_model() {
  auto model = std::make_shared<nn::Sequential>(nn::Linear(4, 16), nn::GELU(), nn::Linear(16, 16),
                                                nn::LayerNorm({16}), nn::Linear(16, 2));
  NoGradGuard no_grad;
  std::vector<Tensor> params = model->parameters();
  params[0].fill_(0.5);  // 0.weight
  params[1].fill_(0.0);  // 0.bias
  params[2].fill_(1e4);  // 2.weight
  params[3].fill_(0.0);  // 2.bias
  return model;
}

}  // namespace

TEST_CASE("OverflowWatch names the op and the module that overflowed float16",
          "[amp][overflow_watch]") {
  auto model = overflowing_model();
  const Tensor x = ones({8, 4});
  amp::OverflowWatch watch(model.get());
  {
    amp::Autocast autocast(kCPU, kFloat16);
    Tensor loss = sum(model->forward(x));
    CHECK_FALSE(std::isfinite(loss.item<double>()));
  }
  REQUIRE(watch.found());
  const amp::OverflowFinding& finding = *watch.first_non_finite();
  CHECK(finding.module == "2");
  CHECK(finding.module_type == "Linear");
  CHECK(finding.op == OpId::linear);
  CHECK(finding.op_index > 0);  // the first Linear and the GELU ran cleanly before it
  CHECK(finding.output.dtype == kFloat16);
  CHECK(finding.output.non_finite == 8 * 16);
  REQUIRE(finding.inputs.size() == 3);  // input, weight, bias as the kernel got them
  for (const amp::TensorRange& input : finding.inputs) {
    CHECK(input.all_finite);
    CHECK(input.dtype == kFloat16);
  }
  CHECK(finding.inputs[1].max_abs == 1e4);
  CHECK(finding.inputs[0].max_abs == Approx(1.9545).epsilon(1e-3));
  CHECK_THAT(watch.report(), Contains("linear in module \"2\" (Linear)") &&
                                 Contains("128 inf/NaN") && Contains("max |x| = 10000"));
  CHECK(watch.ops_checked() >= 5);
}

TEST_CASE("OverflowWatch in float32 finds the op that would overflow float16",
          "[amp][overflow_watch]") {
  auto model = overflowing_model();
  amp::OverflowWatch watch(model.get());
  model->forward(ones({8, 4}));
  CHECK_FALSE(watch.found());
  REQUIRE(watch.first_beyond_float16());
  CHECK(watch.first_beyond_float16()->module == "2");
  CHECK(watch.first_beyond_float16()->output.max_abs == Approx(16 * 1.9545e4).epsilon(1e-3));
  CHECK_THAT(watch.report(), Contains("no op produced an inf or a NaN") &&
                                 Contains("beyond float16's range: linear in module \"2\""));
  watch.reset();
  CHECK_FALSE(watch.first_beyond_float16());
  CHECK(watch.ops_checked() == 0);
}

TEST_CASE("OverflowWatch leaves nothing behind", "[amp][overflow_watch]") {
  auto model = overflowing_model();
  {
    amp::OverflowWatch watch(model.get());
    CHECK(amp::active_overflow_watch() == &watch);
    {
      amp::OverflowWatch inner;  // without a model: no module names
      {
        amp::Autocast autocast(kCPU, kFloat16);
        model->forward(ones({8, 4}));
      }
      REQUIRE(inner.found());
      CHECK(inner.first_non_finite()->module_type.empty());
      CHECK_THAT(inner.report(), Contains("outside any module"));
      CHECK_FALSE(watch.found());  // only the innermost watch checks
    }
    CHECK(amp::active_overflow_watch() == &watch);
  }
  CHECK(amp::active_overflow_watch() == nullptr);
  // The hooks are gone: the model runs as before, and nothing is checked.
  amp::Autocast autocast(kCPU, kFloat16);
  CHECK_FALSE(std::isfinite(sum(model->forward(ones({8, 4}))).item<double>()));
}

namespace {

// Linear(8, 16) in float32, run under float16 autocast on ones(16, 8) * 10 with weights of 0.01:
// forward gives 8 * 10 * 0.01 = 0.8, finite. With a gradient of `upstream` for each output, the
// weight's gradient is a product over the batch of 16: 16 * upstream * 10, beyond float16's
// 65504 once upstream >= 410, while the input's gradient (16 * upstream * 0.01) and the bias's
// (16 * upstream) stay finite.
std::shared_ptr<nn::Sequential> classifier() {
  auto model = std::make_shared<nn::Sequential>(nn::Linear(8, 16));
  NoGradGuard no_grad;
  std::vector<Tensor> params = model->parameters();
  params[0].fill_(0.01);  // 0.weight
  params[1].fill_(0.0);   // 0.bias
  return model;
}

Tensor classifier_loss(nn::Sequential& model) {
  Tensor y;
  {
    amp::Autocast autocast(kCPU, kFloat16);
    y = model.forward(full({16, 8}, 10.0));
  }
  return sum(y.to(kFloat32));  // float32: the loss is finite
}

}  // namespace

TEST_CASE("OverflowWatch names the backward node whose product overflowed float16",
          "[amp][overflow_watch]") {
  auto model = classifier();
  amp::OverflowWatch watch(model.get());
  Tensor loss = classifier_loss(*model);
  CHECK_FALSE(watch.found());  // forward is finite
  // d loss / d y = 1000 everywhere: the weight's gradient is 16 * 1000 * 10 = 160000.
  mul(loss, 1000.0).backward();
  const Tensor& weight_grad = model->parameters()[0].grad();
  REQUIRE(weight_grad.defined());
  CHECK(std::isinf(weight_grad.to_vector<double>()[0]));
  REQUIRE(watch.found());
  const amp::OverflowFinding& finding = *watch.first_non_finite();
  CHECK(finding.backward);
  CHECK(finding.node == "LinearBackward");
  CHECK(finding.op == OpId::linear);
  CHECK(finding.module == "0");
  CHECK(finding.module_type == "Linear");
  CHECK(finding.output.dtype == kFloat16);
  CHECK(finding.output.non_finite == 16 * 8);  // every element of the weight's gradient
  for (const amp::TensorRange& input : finding.inputs) CHECK(input.all_finite);
  CHECK_THAT(watch.report(), Contains("LinearBackward (the backward of linear") &&
                                 Contains("in module \"0\" (Linear)") && Contains("128 inf/NaN"));
}

TEST_CASE("OverflowWatch ignores GradScaler's own ops and names the model's backward node",
          "[amp][overflow_watch]") {
  auto model = classifier();
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  // A scale of 1024: the scaled gradient reaching the linear is 1024 (finite in float16), the
  // weight's gradient 16 * 1024 * 10 = 163840 (not).
  amp::GradScaler scaler({.init_scale = 1024.0});
  amp::OverflowWatch watch(model.get());
  scaler.scale(classifier_loss(*model)).backward();
  CHECK_FALSE(scaler.step(opt));  // the step is skipped: the gradients overflowed
  scaler.update();
  REQUIRE(watch.found());
  const amp::OverflowFinding& finding = *watch.first_non_finite();
  CHECK(finding.node == "LinearBackward");
  CHECK(finding.op == OpId::linear);
  CHECK(finding.module == "0");
  CHECK(scaler.get_scale() == 512.0);
}

TEST_CASE("OverflowWatch ignores GradScaler's own ops for a pair or a tuple of losses",
          "[amp][overflow_watch]") {
  // Finite losses whose products with the default scale of 2^16 are inf in float32 (1e36) and
  // beyond float16's range (1): the scaler's multiplies overflow on purpose and are not findings,
  // whatever structure the losses come in (NOTE [Scaling nested outputs]).
  amp::GradScaler scaler;
  amp::OverflowWatch watch;
  const Tensor huge = full({1}, 1e36, kFloat32);
  const Tensor one = full({1}, 1.0, kFloat32);
  const auto [scaled_huge, scaled_one] = scaler.scale(std::pair<Tensor, Tensor>{huge, one});
  CHECK(std::isinf(scaled_huge.item<double>()));
  CHECK(scaled_one.item<double>() == 65536.0);
  const auto scaled = scaler.scale(std::tuple<Tensor, std::vector<Tensor>>{one, {huge}});
  CHECK(std::isinf(std::get<1>(scaled)[0].item<double>()));
  CHECK_FALSE(watch.found());
  CHECK_FALSE(watch.first_beyond_float16().has_value());
  // The same multiply outside the scaler is a finding.
  const Tensor product = huge * 65536.0;
  CHECK(std::isinf(product.item<double>()));
  REQUIRE(watch.found());
  CHECK(watch.first_non_finite()->op == OpId::mul);
}

TEST_CASE("OverflowWatch skips loss-scaling ranges and nothing else", "[amp][overflow_watch]") {
  amp::OverflowWatch watch;
  const Tensor big = full({4}, 40000.0, kFloat16);
  {
    ops::RecordFunction scaling("GradScaler.scale", ops::RangeKind::kLossScaling);
    CHECK(ops::in_loss_scaling());
    Tensor scaled = mul(big, 2.0);  // inf, on purpose
    CHECK(std::isinf(scaled.to_vector<double>()[0]));
    CHECK_FALSE(watch.found());
    {
      // The optimizer's step inside GradScaler.step is the user's work again.
      ops::RecordFunction step("Optimizer.step#SGD.step");
      CHECK_FALSE(ops::in_loss_scaling());
      add(big, big);
    }
  }
  CHECK_FALSE(ops::in_loss_scaling());
  REQUIRE(watch.found());
  CHECK(watch.first_non_finite()->op == OpId::add);
  CHECK_FALSE(watch.first_non_finite()->backward);
}

TEST_CASE("OverflowWatch names a NaN made from finite values", "[amp][overflow_watch]") {
  SECTION("forward: 0 / 0") {
    amp::OverflowWatch watch;
    const Tensor zero = zeros({3});
    Tensor ratio = div(zero, zero);
    REQUIRE(watch.found());
    CHECK(watch.first_non_finite()->op == OpId::div);
    CHECK(watch.first_non_finite()->output.non_finite == 3);
    CHECK(watch.first_non_finite()->inputs.at(0).all_finite);
  }
  SECTION("backward: the derivative of sqrt at 0, times a gradient of 0") {
    Tensor x = zeros({3});
    x.requires_grad_(true);
    amp::OverflowWatch watch;
    Tensor y = sqrt(x);  // 0: finite
    CHECK_FALSE(watch.found());
    sum(mul(y, 0.0)).backward();  // 0 / (2 sqrt(0)) = 0 / 0
    CHECK(std::isnan(x.grad().to_vector<double>()[0]));
    REQUIRE(watch.found());
    CHECK(watch.first_non_finite()->backward);
    CHECK(watch.first_non_finite()->node == "SqrtBackward");
    CHECK(watch.first_non_finite()->op == OpId::sqrt);
  }
}

TEST_CASE("OverflowWatch does not name ops whose inputs were already inf",
          "[amp][overflow_watch]") {
  const Tensor inf = full({4}, std::numeric_limits<double>::infinity(), kFloat16);
  amp::OverflowWatch watch;
  Tensor passed_on = mul(add(inf, 1.0), 2.0);
  CHECK(std::isinf(passed_on.to_vector<double>()[0]));
  CHECK_FALSE(watch.found());
  // exp(12) = 162755 > 65504: made here, from finite inputs.
  Tensor made = exp(full({4}, 12.0, kFloat16));
  REQUIRE(watch.found());
  CHECK(watch.first_non_finite()->op == OpId::exp);
  CHECK(watch.first_non_finite()->inputs.at(0).all_finite);
}

TEST_CASE("OverflowWatch still names a forward overflow as the forward op",
          "[amp][overflow_watch]") {
  auto model = overflowing_model();
  amp::OverflowWatch watch(model.get());
  Tensor loss;
  {
    amp::Autocast autocast(kCPU, kFloat16);
    loss = sum(model->forward(ones({8, 4})).to(kFloat32));
  }
  REQUIRE(watch.found());
  CHECK_FALSE(watch.first_non_finite()->backward);
  CHECK(watch.first_non_finite()->op == OpId::linear);
  CHECK(watch.first_non_finite()->module == "2");
  loss.backward();  // the backward only passes the inf on
  CHECK_FALSE(watch.first_non_finite()->backward);
  CHECK(watch.first_non_finite()->module == "2");
}

TEST_CASE("OverflowWatch ignores the Apex scalers' own ops and names the model's backward node",
          "[amp][overflow_watch]") {
  // The same classifier in float16 through FP16Optimizer with a static scale of 1024: the
  // scaled float32 loss (1024 * 204.8) is beyond float16's range, on purpose and harmless; the
  // gradient reaching the float16 output (1024) fits, and the weight's gradient (16 * 1024 * 10)
  // overflows.
  auto model = classifier();
  model->to(kFloat16);
  amp::FP16Optimizer opt(
      model->parameters(),
      [](std::vector<Tensor> masters) {
        return std::make_unique<optim::SGD>(std::move(masters), optim::SGDOptions{.lr = 0.1});
      },
      {.static_loss_scale = 1024.0});
  amp::OverflowWatch watch(model.get());
  const Tensor loss = sum(model->forward(full({16, 8}, 10.0, kFloat16)).to(kFloat32));
  CHECK_FALSE(watch.first_beyond_float16().has_value());
  opt.backward(loss);
  REQUIRE(watch.found());
  CHECK(watch.first_non_finite()->node == "LinearBackward");
  // The scaled loss is not reported as a value beyond float16 (nothing else is: the first
  // beyond-float16 finding is of float32 outputs, and the model's are float16).
  CHECK_FALSE(watch.first_beyond_float16().has_value());
}
