// GradScaler's scale() over nested containers (torch scales any iterable of tensors, nested,
// into the same structure) and step(optimizer, closure) (the closure's value comes back when
// the optimizer stepped, nothing when the step was skipped). Scales are powers of two, so
// scaling and unscaling are exact and the expected values are exact.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

std::vector<float> values(const Tensor& t) { return t.to(kFloat32).to_vector<float>(); }

std::vector<float> times(std::vector<float> v, float factor) {
  for (float& x : v) x *= factor;
  return v;
}

}  // namespace

TEST_CASE("scale keeps the structure of nested containers and scales every tensor",
          "[grad_scaler][scale]") {
  amp::GradScaler scaler({.init_scale = 8.0});
  const Tensor a = tensor(std::vector<float>{1.0f, -2.0f});
  const Tensor b = tensor(std::vector<float>{0.5f});
  const Tensor c = tensor(std::vector<float>{3.0f, 4.0f, 5.0f}).to(kFloat16);

  using Tree = std::pair<Tensor, std::map<std::string, std::vector<Tensor>>>;
  const Tree outputs{a, {{"x", {b, c}}, {"y", {}}}};
  const Tree scaled = scaler.scale(outputs);
  CHECK(values(scaled.first) == times(values(a), 8.0f));
  REQUIRE(scaled.second.size() == 2);
  REQUIRE(scaled.second.at("x").size() == 2);
  CHECK(values(scaled.second.at("x")[0]) == times(values(b), 8.0f));
  CHECK(values(scaled.second.at("x")[1]) == times(values(c), 8.0f));
  // torch's promotion with the float32 scale makes a float16 output float32.
  CHECK(scaled.second.at("x")[1].dtype() == kFloat32);
  CHECK(scaled.second.at("y").empty());

  const std::tuple<Tensor, std::optional<Tensor>, std::optional<Tensor>, std::array<Tensor, 2>>
      mixed{a, b, std::nullopt, {b, a}};
  const auto scaled_mixed = scaler.scale(mixed);
  CHECK(values(std::get<0>(scaled_mixed)) == times(values(a), 8.0f));
  REQUIRE(std::get<1>(scaled_mixed).has_value());
  CHECK(values(*std::get<1>(scaled_mixed)) == times(values(b), 8.0f));
  CHECK_FALSE(std::get<2>(scaled_mixed).has_value());
  CHECK(values(std::get<3>(scaled_mixed)[1]) == times(values(a), 8.0f));

  const std::unordered_map<int, Tensor> by_id{{3, a}, {7, b}};
  const auto scaled_by_id = scaler.scale(by_id);
  CHECK(values(scaled_by_id.at(3)) == times(values(a), 8.0f));
  CHECK(values(scaled_by_id.at(7)) == times(values(b), 8.0f));

  // Undefined tensors anywhere in the structure are errors, as for a single tensor.
  const std::vector<std::vector<Tensor>> with_hole{{a}, {Tensor()}};
  CHECK_THROWS_WITH(scaler.scale(with_hole), Contains("expected a defined tensor"));
}

TEST_CASE("the profiler records one GradScaler.scale range around a nested structure's multiplies",
          "[grad_scaler][scale]") {
  amp::GradScaler scaler({.init_scale = 8.0});
  const Tensor a = tensor(std::vector<float>{1.0f, -2.0f});
  const Tensor b = tensor(std::vector<float>{0.5f});
  profiler::Profile prof;
  const auto scaled =
      scaler.scale(std::pair<Tensor, std::vector<Tensor>>{a, std::vector<Tensor>{b, a}});
  prof.stop();
  CHECK(values(scaled.second[0]) == times(values(b), 8.0f));
  const std::vector<profiler::Event>& events = prof.events();
  std::vector<size_t> ranges;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].name == "GradScaler.scale") ranges.push_back(i);
  }
  REQUIRE(ranges.size() == 1);
  const profiler::Event& range = events[ranges[0]];
  CHECK(range.range);
  CHECK(range.parent == -1);
  // The three multiplies (one per tensor) run inside it.
  int64_t multiplies_inside = 0;
  for (const profiler::Event& e : events) {
    if (e.op == OpId::mul && e.parent == int64_t(ranges[0])) ++multiplies_inside;
  }
  CHECK(multiplies_inside == 3);
}

TEST_CASE("a disabled scaler returns nested outputs as they are", "[grad_scaler][scale]") {
  amp::GradScaler scaler({.enabled = false});
  const Tensor a = tensor(std::vector<float>{1.0f, 2.0f});
  const std::pair<Tensor, std::vector<Tensor>> outputs{a, {a}};
  const auto same = scaler.scale(outputs);
  CHECK(same.first.impl() == a.impl());
  CHECK(same.second[0].impl() == a.impl());
}

TEST_CASE("step with a closure returns the closure's value when the optimizer stepped",
          "[grad_scaler][closure]") {
  Tensor w = tensor(std::vector<float>{1.0f, 2.0f, 3.0f}).requires_grad_(true);
  const Tensor x = tensor(std::vector<float>{0.5f, -1.0f, 2.0f});
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.25});
  amp::GradScaler scaler({.init_scale = 1024.0});
  int calls = 0;
  auto closure = [&] {
    ++calls;
    opt.zero_grad();
    Tensor loss = (w * x).sum();
    scaler.scale(loss).backward();
    return loss;
  };
  const std::optional<Tensor> loss = scaler.step(opt, closure);
  CHECK(calls == 1);
  REQUIRE(loss.has_value());
  CHECK(loss->item<float>() == 0.5f - 2.0f + 6.0f);
  // d(w.x)/dw = x: w - 0.25 x, exact.
  CHECK(values(w) == std::vector<float>{1.0f - 0.125f, 2.0f + 0.25f, 3.0f - 0.5f});
  scaler.update();
  CHECK(scaler.get_scale() == 1024.0);

  // An overflow: the closure's gradient is inf, the step is skipped, nothing comes back.
  const std::vector<float> before = values(w);
  const Tensor huge = tensor(std::vector<float>{std::numeric_limits<float>::infinity(), 1, 1});
  const std::optional<Tensor> skipped = scaler.step(opt, [&] {
    opt.zero_grad();
    Tensor loss_inf = (w * huge).sum();
    scaler.scale(loss_inf).backward();
    return loss_inf;
  });
  CHECK_FALSE(skipped.has_value());
  CHECK(values(w) == before);
  scaler.update();
  CHECK(scaler.get_scale() == 512.0);

  // A closure returning nothing: the StepResult.
  const amp::StepResult result = scaler.step(opt, [&] {
    opt.zero_grad();
    scaler.scale((w * x).sum()).backward();
  });
  CHECK(static_cast<bool>(result));
  scaler.update();
}

TEST_CASE("a closure may unscale_ to clip and step goes on from there", "[grad_scaler][closure]") {
  Tensor w = tensor(std::vector<float>{0.0f, 0.0f}).requires_grad_(true);
  const Tensor x = tensor(std::vector<float>{3.0f, 4.0f});
  optim::SGD opt({w}, optim::SGDOptions{.lr = 1.0});
  amp::GradScaler scaler({.init_scale = 64.0});
  const auto loss = scaler.step(opt, [&] {
    opt.zero_grad();
    Tensor l = (w * x).sum();
    scaler.scale(l).backward();
    scaler.unscale_(opt);
    nn::utils::clip_grad_norm_({w}, 1.0);  // |(3, 4)| = 5 -> (0.6, 0.8)
    return l;
  });
  REQUIRE(loss.has_value());
  const std::vector<float> got = values(w);
  CHECK(got[0] == Approx(-0.6f).epsilon(1e-6));
  CHECK(got[1] == Approx(-0.8f).epsilon(1e-6));
}

TEST_CASE("step with a closure after unscale_ is an error before the closure runs",
          "[grad_scaler][closure][errors]") {
  Tensor w = tensor(std::vector<float>{1.0f}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.5});
  amp::GradScaler scaler({.init_scale = 2.0});
  scaler.scale((w * 3.0).sum()).backward();
  scaler.unscale_(opt);
  bool called = false;
  CHECK_THROWS_WITH(scaler.step(opt,
                                [&] {
                                  called = true;
                                  return 0;
                                }),
                    Contains("expected the optimizer at the start of an iteration") &&
                        Contains("got unscale_ already called"));
  CHECK_FALSE(called);
  CHECK(values(w) == std::vector<float>{1.0f});
  // The iteration goes on as without the closure.
  CHECK(static_cast<bool>(scaler.step(opt)));
  CHECK(values(w) == std::vector<float>{1.0f - 0.5f * 3.0f});
}

TEST_CASE("a disabled scaler calls the closure and steps", "[grad_scaler][closure]") {
  Tensor w = tensor(std::vector<float>{1.0f}).requires_grad_(true);
  optim::SGD opt({w}, optim::SGDOptions{.lr = 0.5});
  amp::GradScaler scaler({.enabled = false});
  const std::optional<double> value = scaler.step(opt, [&] {
    opt.zero_grad();
    (w * 2.0).sum().backward();
    return 7.5;
  });
  REQUIRE(value.has_value());
  CHECK(*value == 7.5);
  CHECK(values(w) == std::vector<float>{0.0f});
}
