// OverflowWatch on a model built to overflow float16 in one known layer: the watch names that
// layer's op and module, and the ranges of its inputs.
#include <memory>

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
