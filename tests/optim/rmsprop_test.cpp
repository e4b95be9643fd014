// optim::RMSprop: every option set against PyTorch step by step (twin/rmsprop_adagrad.txt) in
// float64 and float32; float16/bfloat16 against a float64 reference of torch's formulas that
// rounds where the storage does; skipped and scaled steps; GradScaler; state_dict keys and
// round trips; option checks; the threaded pass.
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

std::unique_ptr<optim::Optimizer> make_rmsprop(std::vector<optim::ParamGroup> groups) {
  return std::make_unique<optim::RMSprop>(std::move(groups));
}

const optim::RMSpropOptions kEveryOption{.lr = 0.02,
                                         .alpha = 0.9,
                                         .eps = 1e-6,
                                         .weight_decay = 0.05,
                                         .momentum = 0.5,
                                         .centered = true,
                                         .maximize = true};

// RMSprop with `options` over the parameters it is given.
OptimizerOver rmsprop_with(const optim::RMSpropOptions& options) {
  return [options](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::RMSprop>(std::move(params), options);
  };
}

}  // namespace

TEST_CASE("RMSprop: defaults are torch's") {
  Tensor p = make_param({1.0}, kFloat32);
  optim::RMSprop opt({p});
  const auto& o = opt.param_groups()[0].options;
  CHECK(o.at("lr") == 1e-2);
  CHECK(o.at("alpha") == 0.99);
  CHECK(o.at("eps") == 1e-8);
  CHECK(o.at("weight_decay") == 0);
  CHECK(o.at("momentum") == 0);
  CHECK(o.at("centered") == 0);
  CHECK(o.at("maximize") == 0);
  CHECK(o.size() == 7);
  CHECK(opt.supports_scaled_step());
}

TEST_CASE("RMSprop: every option set matches PyTorch step by step in float64 and float32") {
  // Step 0 of each run is the state torch makes in its constructor.
  follow_twin_runs("rmsprop_", "RMSprop", 6, make_rmsprop);
}

TEST_CASE("RMSprop: 16-bit parameters against the float64 reference") {
  const std::vector<optim::RMSpropOptions> configs = {
      {.lr = 0.01},
      {.lr = 0.01, .momentum = 0.9},
      {.lr = 0.01, .alpha = 0.9, .centered = true},
      {.lr = 0.01, .weight_decay = 0.1, .maximize = true},
      kEveryOption,
  };
  for (DType dtype : {kFloat16, kBFloat16, kFloat32, kFloat64}) {
    for (const optim::RMSpropOptions& c : configs) {
      INFO(dtype_name(dtype) << " momentum " << c.momentum << " centered " << c.centered
                             << " weight_decay " << c.weight_decay << " maximize " << c.maximize);
      const int64_t n = 41;
      const Values initial = random_values(2, n, dtype);
      Tensor p = make_param(initial, dtype);
      optim::RMSprop opt({p}, c);
      ReferenceRMSprop reference{c, dtype, dtype, initial, {}, {}, {}};
      step_beside(opt, reference, p, dtype, 6);
      CHECK(close(values_of(p), reference.p, tolerance(dtype)));
      const optim::ParamState& state = opt.state(0, 0);
      CHECK(state.step == 6);
      CHECK(state.buffers.at("square_avg").dtype() == dtype);
      CHECK(
          close(values_of(state.buffers.at("square_avg")), reference.square_avg, tolerance(dtype)));
      CHECK(state.buffers.count("grad_avg") == (c.centered ? 1u : 0u));
      if (c.centered) {
        CHECK(close(values_of(state.buffers.at("grad_avg")), reference.grad_avg, tolerance(dtype)));
      }
      CHECK(state.buffers.count("momentum_buffer") == (c.momentum > 0 ? 1u : 0u));
      if (c.momentum > 0) {
        CHECK(close(values_of(state.buffers.at("momentum_buffer")), reference.buffer,
                    tolerance(dtype)));
      }
    }
  }
}

TEST_CASE("RMSprop: the first step worked by hand") {
  // v = 0.01 g^2, so avg = 0.1 |g| + eps and the update is lr * g / avg = 10 lr sign(g).
  Tensor p = make_param({1.0, -2.0}, kFloat64);
  optim::RMSprop opt({p}, {.lr = 0.01});
  set_grad(p, {0.5, -4.0});
  opt.step();
  const Values got = values_of(p);
  CHECK(got[0] == Approx(1 - 0.01 * 0.5 / (0.05 + 1e-8)).epsilon(1e-14));
  CHECK(got[1] == Approx(-2 + 0.01 * 4.0 / (0.4 + 1e-8)).epsilon(1e-14));
  CHECK(values_of(opt.state(0, 0).buffers.at("square_avg"))[1] == Approx(0.16).epsilon(1e-14));
}

TEST_CASE("RMSprop: found_inf skips the step leaving everything bit-identical") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    INFO(dtype_name(dtype));
    check_found_inf_skips(rmsprop_with(kEveryOption), dtype, 2);
    // A skipped first step makes no state at all.
    Tensor q = make_param({1.0, 2.0}, dtype);
    optim::RMSprop fresh({q}, kEveryOption);
    set_grad(q, {1.0, 1.0});
    fresh.step_scaled(Tensor(), scalar_tensor(1.0, kFloat32));
    CHECK(fresh.state(0, 0).empty());
    CHECK(fresh.state_dict().state.empty());
  }
}

TEST_CASE("RMSprop: a scaled step equals a step on the divided gradients") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    INFO(dtype_name(dtype));
    check_scaled_step(rmsprop_with(kEveryOption), dtype, 3);
  }
  Tensor p = make_param({1.0}, kFloat32);
  optim::RMSprop opt({p});
  set_grad(p, {1.0});
  CHECK_THROWS_WITH(opt.step_scaled(scalar_tensor(0.0, kFloat32), Tensor()),
                    Contains("RMSprop: expected a nonzero grad_scale, got 0"));
  CHECK(opt.state(0, 0).empty());
}

TEST_CASE("RMSprop: GradScaler drives the scaled step and skips an overflow on its own",
          "[grad_scaler]") {
  check_grad_scaler_skips_overflow(rmsprop_with({.lr = 0.01, .momentum = 0.5, .centered = true}),
                                   32, INFINITY);
}

TEST_CASE("RMSprop: a parameter without a gradient keeps no state") {
  check_no_state_without_grad(rmsprop_with({.momentum = 0.9}));
}

TEST_CASE("RMSprop: state_dict has torch's keys and a round trip reproduces the next step") {
  const std::vector<std::pair<optim::RMSpropOptions, std::vector<std::string>>> cases = {
      {{}, {"square_avg", "step"}},
      {{.momentum = 0.9}, {"momentum_buffer", "square_avg", "step"}},
      {{.centered = true}, {"grad_avg", "square_avg", "step"}},
      {kEveryOption, {"grad_avg", "momentum_buffer", "square_avg", "step"}},
  };
  for (DType dtype : {kFloat32, kBFloat16}) {
    for (const auto& [options, keys] : cases) {
      INFO(dtype_name(dtype) << " momentum " << options.momentum << " centered "
                             << options.centered);
      const optim::OptimizerStateDict sd =
          check_state_dict_round_trip(rmsprop_with(options), dtype, 33, 3);
      std::vector<std::string> got;
      for (const auto& [key, value] : sd.state.at(0)) got.push_back(key);
      CHECK(got == keys);
      CHECK(sd.state.at(0).at("step").item<double>() == 3.0);
    }
  }
}

TEST_CASE("RMSprop: a buffer an option switches on later starts at zero") {
  // Momentum switched on after two steps: the buffer starts at zero, so the next update is
  // lr * g / avg, as without momentum.
  Tensor p = make_param({1.0, -1.0}, kFloat64);
  Tensor q = make_param({1.0, -1.0}, kFloat64);
  optim::RMSprop with({p}, {.lr = 0.01});
  optim::RMSprop without({q}, {.lr = 0.01});
  for (int s = 0; s < 2; ++s) {
    set_grad(p, {0.5, 0.25});
    set_grad(q, {0.5, 0.25});
    with.step();
    without.step();
  }
  with.param_groups()[0].options["momentum"] = 0.9;
  set_grad(p, {0.3, -0.2});
  set_grad(q, {0.3, -0.2});
  with.step();
  without.step();
  CHECK(close(values_of(p), values_of(q), 1e-14));
  const Values square_avg = values_of(with.state(0, 0).buffers.at("square_avg"));
  CHECK(values_of(with.state(0, 0).buffers.at("momentum_buffer")) ==
        Values{0.3 / (std::sqrt(square_avg[0]) + 1e-8), -0.2 / (std::sqrt(square_avg[1]) + 1e-8)});
}

TEST_CASE("RMSprop: bad options are errors and change nothing") {
  Tensor p = make_param({1.0}, kFloat32);
  CHECK_THROWS_WITH(optim::RMSprop({p}, {.lr = -0.1}),
                    Contains("RMSprop: expected lr >= 0, got -0.1"));
  const std::vector<std::tuple<std::string, double, std::string>> cases = {
      {"lr", -1.0, "expected lr >= 0, got -1"},
      {"lr", std::nan(""), "expected lr >= 0, got nan"},
      {"alpha", -0.5, "expected alpha >= 0, got -0.5"},
      {"eps", -1e-8, "expected eps >= 0, got -1e-08"},
      {"weight_decay", -0.01, "expected weight_decay >= 0, got -0.01"},
      {"momentum", -0.9, "expected momentum >= 0, got -0.9"},
      {"centered", 0.5, "expected centered to be 0 or 1 (a bool), got 0.5"},
      {"maximize", 2.0, "expected maximize to be 0 or 1 (a bool), got 2"},
  };
  Stepped run = stepped(rmsprop_with({.lr = 0.1, .momentum = 0.9}), kFloat32, 4, 1);
  const optim::OptimizerStateDict good = run.opt->state_dict();
  const auto options_before = run.opt->param_groups()[0].options;
  const auto state_before = buffer_bytes(run.opt->state(0, 0));
  for (const auto& [key, value, message] : cases) {
    INFO(key << " = " << value);
    // The constructor, for the defaults and for a group.
    CHECK_THROWS_WITH(optim::RMSprop(std::vector<optim::ParamGroup>{
                          {{make_param({1.0}, kFloat32)}, {{key, value}}}}),
                      Contains("RMSprop: " + message));
    // add_param_group adds nothing.
    CHECK_THROWS_WITH(run.opt->add_param_group({{make_param({1.0}, kFloat32)}, {{key, value}}}),
                      Contains("RMSprop: " + message));
    CHECK(run.opt->param_groups().size() == 1);
    // load_state_dict loads nothing (the lr change with it must not happen either).
    optim::OptimizerStateDict bad = good;
    if (key != "lr") bad.param_groups[0].options["lr"] = 0.5;
    bad.param_groups[0].options[key] = value;
    CHECK_THROWS_WITH(run.opt->load_state_dict(bad), Contains("load_state_dict: param group 0") &&
                                                         Contains("RMSprop: " + message));
    CHECK(run.opt->param_groups()[0].options == options_before);
    CHECK(run.opt->state(0, 0).step == 1);
    CHECK(buffer_bytes(run.opt->state(0, 0)) == state_before);
  }
  // A buffer the options do not keep is refused by load_state_dict.
  optim::OptimizerStateDict bad = good;
  bad.state[0]["grad_avg"] = zeros({4});
  CHECK_THROWS_WITH(run.opt->load_state_dict(bad), Contains("got \"grad_avg\""));
  CHECK(buffer_bytes(run.opt->state(0, 0)) == state_before);
  // Boundary values are accepted, as torch accepts them.
  optim::RMSprop edge({p}, {.lr = 0, .alpha = 0, .eps = 0, .weight_decay = 0, .momentum = 0});
  CHECK(edge.param_groups()[0].options.at("alpha") == 0);
}

TEST_CASE("RMSprop: the result does not depend on the number of threads") {
  check_thread_count_independent(rmsprop_with(kEveryOption));
}
