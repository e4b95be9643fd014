// optim::Adagrad: every option set against PyTorch step by step (twin/rmsprop_adagrad.txt) in
// float64 and float32, its state from construction included; float16/bfloat16 against a
// float64 reference of torch's formulas that rounds where the storage does; skipped and scaled
// steps; GradScaler; state_dict round trips; option checks; the threaded pass.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <tuple>

#include "shared_checks.h"
#include "twin_runs.h"

using namespace hg;
using namespace optim_test;
using Catch::Contains;

namespace {

std::unique_ptr<optim::Optimizer> make_adagrad(std::vector<optim::ParamGroup> groups) {
  return std::make_unique<optim::Adagrad>(std::move(groups));
}

const optim::AdagradOptions kEveryOption{.lr = 0.05,
                                         .lr_decay = 0.1,
                                         .weight_decay = 0.05,
                                         .initial_accumulator_value = 0.25,
                                         .eps = 1e-6,
                                         .maximize = true};

// Adagrad with `options` over the parameters it is given.
OptimizerOver adagrad_with(const optim::AdagradOptions& options) {
  return [options](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::Adagrad>(std::move(params), options);
  };
}

std::vector<unsigned char> sum_bytes(const optim::Optimizer& opt, size_t group = 0,
                                     size_t index = 0) {
  return bytes_of(opt.state(group, index).buffers.at("sum"));
}

}  // namespace

TEST_CASE("Adagrad: defaults are torch's") {
  Tensor p = make_param({1.0}, kFloat32);
  optim::Adagrad opt({p});
  const auto& o = opt.param_groups()[0].options;
  CHECK(o.at("lr") == 1e-2);
  CHECK(o.at("lr_decay") == 0);
  CHECK(o.at("weight_decay") == 0);
  CHECK(o.at("initial_accumulator_value") == 0);
  CHECK(o.at("eps") == 1e-10);
  CHECK(o.at("maximize") == 0);
  CHECK(o.size() == 6);
  CHECK(opt.supports_scaled_step());
}

TEST_CASE("Adagrad: every option set matches PyTorch step by step in float64 and float32") {
  // Step 0 of each run is the state torch makes in its constructor.
  follow_twin_runs("adagrad_", "Adagrad", 5, make_adagrad);
}

TEST_CASE("Adagrad: 16-bit parameters against the float64 reference") {
  const std::vector<optim::AdagradOptions> configs = {
      {.lr = 0.1},
      {.lr = 0.1, .lr_decay = 0.2},
      {.lr = 0.1, .weight_decay = 0.1, .maximize = true},
      {.lr = 0.1, .initial_accumulator_value = 0.5},
      kEveryOption,
  };
  for (DType dtype : {kFloat16, kBFloat16, kFloat32, kFloat64}) {
    for (const optim::AdagradOptions& c : configs) {
      INFO(dtype_name(dtype) << " lr_decay " << c.lr_decay << " weight_decay " << c.weight_decay
                             << " initial_accumulator_value " << c.initial_accumulator_value
                             << " maximize " << c.maximize);
      const int64_t n = 41;
      const Values initial = random_values(2, n, dtype);
      Tensor p = make_param(initial, dtype);
      optim::Adagrad opt({p}, c);
      ReferenceAdagrad reference{c, dtype, dtype, initial, {}};
      step_beside(opt, reference, p, dtype, 6);
      CHECK(close(values_of(p), reference.p, tolerance(dtype)));
      const optim::ParamState& state = opt.state(0, 0);
      CHECK(state.step == 6);
      CHECK(state.buffers.at("sum").dtype() == dtype);
      CHECK(close(values_of(state.buffers.at("sum")), reference.sum, tolerance(dtype)));
    }
  }
}

TEST_CASE("Adagrad: the first step worked by hand and lr_decay follows each parameter's count") {
  // sum = 0.25 + g^2; p -= lr * g / (sqrt(sum) + eps).
  Tensor a = make_param({1.0}, kFloat64);
  Tensor b = make_param({1.0}, kFloat64);
  optim::Adagrad opt({a, b}, {.lr = 0.1, .lr_decay = 0.5, .initial_accumulator_value = 0.25});
  set_grad(a, {1.0});
  opt.step();
  CHECK(a.item<double>() == Approx(1 - 0.1 * 1.0 / (std::sqrt(1.25) + 1e-10)).epsilon(1e-14));
  opt.step();  // a's second step: clr = 0.1 / 1.5, sum = 2.25
  const double a1 = 1 - 0.1 / (std::sqrt(1.25) + 1e-10);
  CHECK(a.item<double>() == Approx(a1 - 0.1 / 1.5 / (1.5 + 1e-10)).epsilon(1e-14));
  // b's first step is its own first: the undecayed lr.
  a.mutable_grad() = Tensor();
  set_grad(b, {0.5});
  opt.step();
  CHECK(b.item<double>() == Approx(1 - 0.1 * 0.5 / (std::sqrt(0.5) + 1e-10)).epsilon(1e-14));
  CHECK(opt.state(0, 0).step == 2);
  CHECK(opt.state(0, 1).step == 1);
}

TEST_CASE("Adagrad: the state is made at construction as torch makes it") {
  Tensor a = make_param({1.0, 2.0}, kBFloat16);
  Tensor b = make_param({3.0}, kBFloat16);
  optim::Adagrad opt({a, b}, {.initial_accumulator_value = 0.1});
  for (size_t i = 0; i < 2; ++i) {
    const optim::ParamState& state = opt.state(0, i);
    CHECK(state.step == 0);
    REQUIRE(state.buffers.count("sum") == 1);
    CHECK(state.buffers.at("sum").dtype() == kBFloat16);
    for (double v : values_of(state.buffers.at("sum"))) CHECK(v == double(BFloat16(0.1)));
  }
  // Every parameter is in the state dict before any step, with a step of 0; it loads back.
  const optim::OptimizerStateDict sd = opt.state_dict();
  REQUIRE(sd.state.size() == 2);
  CHECK(sd.state.at(1).at("step").item<double>() == 0.0);
  CHECK(sd.state.at(1).count("sum") == 1);
  Tensor c = make_param({1.0, 2.0}, kBFloat16);
  Tensor d = make_param({3.0}, kBFloat16);
  optim::Adagrad loaded({c, d});
  loaded.load_state_dict(sd);
  CHECK(loaded.param_groups()[0].options.at("initial_accumulator_value") == 0.1);
  CHECK(sum_bytes(loaded, 0, 1) == sum_bytes(opt, 0, 1));
  CHECK(loaded.state(0, 1).step == 0);

  // A parameter of a group added later gets its group's accumulator at its first step.
  Tensor e = make_param({1.0}, kFloat64);
  opt.add_param_group({{e}, {{"initial_accumulator_value", 3.0}, {"lr", 0.5}}});
  CHECK(opt.state(1, 0).empty());
  set_grad(e, {1.0});
  opt.step();
  CHECK(opt.state(1, 0).step == 1);
  CHECK(values_of(opt.state(1, 0).buffers.at("sum")) == Values{4.0});
  CHECK(e.item<double>() == Approx(1 - 0.5 / (2 + 1e-10)).epsilon(1e-14));
  // Parameters without a gradient keep their state of step 0.
  CHECK(opt.state(0, 0).step == 0);
}

TEST_CASE("Adagrad: found_inf skips the step leaving everything bit-identical") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    for (int steps : {0, 2}) {
      INFO(dtype_name(dtype) << " after " << steps << " steps");
      check_found_inf_skips(adagrad_with(kEveryOption), dtype, steps);
    }
  }
}

TEST_CASE("Adagrad: a scaled step equals a step on the divided gradients") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    INFO(dtype_name(dtype));
    check_scaled_step(adagrad_with(kEveryOption), dtype, 3);
  }
  Tensor p = make_param({1.0}, kFloat32);
  optim::Adagrad opt({p});
  set_grad(p, {1.0});
  CHECK_THROWS_WITH(opt.step_scaled(scalar_tensor(0.0, kFloat32), Tensor()),
                    Contains("Adagrad: expected a nonzero grad_scale, got 0"));
  CHECK(opt.state(0, 0).step == 0);
}

TEST_CASE("Adagrad: GradScaler drives the scaled step and skips an overflow on its own",
          "[grad_scaler]") {
  check_grad_scaler_skips_overflow(adagrad_with({.lr = 0.1, .lr_decay = 0.1}), 33, NAN);
}

TEST_CASE("Adagrad: a state_dict round trip reproduces the next step exactly") {
  for (DType dtype : {kFloat32, kBFloat16}) {
    INFO(dtype_name(dtype));
    const optim::OptimizerStateDict sd =
        check_state_dict_round_trip(adagrad_with(kEveryOption), dtype, 33, 3);
    std::vector<std::string> keys;
    for (const auto& [key, value] : sd.state.at(0)) keys.push_back(key);
    CHECK(keys == std::vector<std::string>{"step", "sum"});
    CHECK(sd.state.at(0).at("step").item<double>() == 3.0);
  }
}

TEST_CASE("Adagrad: bad options are errors and change nothing") {
  Tensor p = make_param({1.0}, kFloat32);
  CHECK_THROWS_WITH(optim::Adagrad({p}, {.lr = -0.1}),
                    Contains("Adagrad: expected lr >= 0, got -0.1"));
  const std::vector<std::tuple<std::string, double, std::string>> cases = {
      {"lr", -1.0, "expected lr >= 0, got -1"},
      {"lr", std::nan(""), "expected lr >= 0, got nan"},
      {"lr_decay", -0.5, "expected lr_decay >= 0, got -0.5"},
      {"weight_decay", -0.01, "expected weight_decay >= 0, got -0.01"},
      {"initial_accumulator_value", -0.1, "expected initial_accumulator_value >= 0, got -0.1"},
      {"eps", -1e-10, "expected eps >= 0, got -1e-10"},
      {"maximize", 0.5, "expected maximize to be 0 or 1 (a bool), got 0.5"},
  };
  Stepped run = stepped(adagrad_with({.lr = 0.1}), kFloat32, 4, 1);
  const optim::OptimizerStateDict good = run.opt->state_dict();
  const auto options_before = run.opt->param_groups()[0].options;
  const auto sum_before = sum_bytes(*run.opt);
  for (const auto& [key, value, message] : cases) {
    INFO(key << " = " << value);
    CHECK_THROWS_WITH(optim::Adagrad(std::vector<optim::ParamGroup>{
                          {{make_param({1.0}, kFloat32)}, {{key, value}}}}),
                      Contains("Adagrad: " + message));
    CHECK_THROWS_WITH(run.opt->add_param_group({{make_param({1.0}, kFloat32)}, {{key, value}}}),
                      Contains("Adagrad: " + message));
    CHECK(run.opt->param_groups().size() == 1);
    optim::OptimizerStateDict bad = good;
    if (key != "lr") bad.param_groups[0].options["lr"] = 0.5;
    bad.param_groups[0].options[key] = value;
    CHECK_THROWS_WITH(run.opt->load_state_dict(bad), Contains("load_state_dict: param group 0") &&
                                                         Contains("Adagrad: " + message));
    CHECK(run.opt->param_groups()[0].options == options_before);
    CHECK(run.opt->state(0, 0).step == 1);
    CHECK(sum_bytes(*run.opt) == sum_before);
  }
  optim::OptimizerStateDict bad = good;
  bad.state[0]["square_avg"] = zeros({4});
  CHECK_THROWS_WITH(run.opt->load_state_dict(bad), Contains("got \"square_avg\""));
  CHECK(sum_bytes(*run.opt) == sum_before);
}

TEST_CASE("Adagrad: the result does not depend on the number of threads") {
  check_thread_count_independent(adagrad_with(kEveryOption));
}
