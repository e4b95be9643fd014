// optim::RMSprop: every option set against PyTorch step by step (twin/rmsprop_adagrad.txt) in
// float64 and float32; float16/bfloat16 against a float64 reference of torch's formulas that
// rounds where the storage does; skipped and scaled steps; GradScaler; state_dict keys and
// round trips; option checks; the threaded pass.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <tuple>

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

// A few steps of `options` on `n` elements, with the state's bytes after them.
struct Stepped {
  Tensor param;
  std::unique_ptr<optim::RMSprop> opt;
};
Stepped stepped(const optim::RMSpropOptions& options, DType dtype, int64_t n, int steps) {
  Stepped out{make_param(random_values(3, n, dtype), dtype), nullptr};
  out.opt = std::make_unique<optim::RMSprop>(std::vector<Tensor>{out.param}, options);
  for (int s = 0; s < steps; ++s) {
    set_grad(out.param, random_values(30 + uint32_t(s), n, dtype));
    out.opt->step();
  }
  return out;
}

std::map<std::string, std::vector<unsigned char>> buffer_bytes(const optim::ParamState& state) {
  std::map<std::string, std::vector<unsigned char>> bytes;
  for (const auto& [name, buffer] : state.buffers) bytes[name] = bytes_of(buffer);
  return bytes;
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

TEST_CASE("RMSprop: every option set matches PyTorch step by step in float64") {
  const std::vector<std::string> names = twin_run_names("rmsprop_");
  REQUIRE(names.size() == 6);
  for (const std::string& name : names) {
    REQUIRE(twin_run(name).optimizer == "RMSprop");
    follow_twin_run(name, kFloat64, 1e-12, make_rmsprop);
  }
}

TEST_CASE("RMSprop: every option set matches PyTorch step by step in float32") {
  // float32 rounds the inputs and every stored value (6e-8 relative). torch's own float32 run
  // of these ten steps is within 1.4e-6 of each float64 tensor's size (RMSprop centered with
  // momentum the farthest); 1e-5 leaves room for a different rounding here and there.
  for (const std::string& name : twin_run_names("rmsprop_")) {
    follow_twin_run(name, kFloat32, 1e-5, make_rmsprop);
  }
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
      for (uint32_t s = 0; s < 6; ++s) {
        // Gradients of growing magnitude, so that the averages move.
        const Values grad = random_values(200 + s, n, dtype, -1.0 - s, 1.0 + s);
        set_grad(p, grad);
        opt.step();
        reference.step(grad);
      }
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
    Stepped run = stepped(kEveryOption, dtype, 64, 2);
    const auto state_before = buffer_bytes(run.opt->state(0, 0));
    const auto param_before = bytes_of(run.param);
    set_grad(run.param, random_values(60, 64, dtype));
    run.opt->step_scaled(scalar_tensor(8.0, kFloat32), scalar_tensor(1.0, kFloat32));
    run.opt->step_scaled(Tensor(), scalar_tensor(2.0, kFloat32));
    CHECK(bytes_of(run.param) == param_before);
    CHECK(run.opt->state(0, 0).step == 2);
    CHECK(buffer_bytes(run.opt->state(0, 0)) == state_before);
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
    const Values initial = random_values(6, 48, dtype);
    Tensor scaled_param = make_param(initial, dtype);
    Tensor plain_param = make_param(initial, dtype);
    optim::RMSprop scaled({scaled_param}, kEveryOption);
    optim::RMSprop plain({plain_param}, kEveryOption);
    for (uint32_t s = 0; s < 3; ++s) {
      const Values grad = random_values(70 + s, 48, dtype);
      Values grad_times_scale = grad;
      for (double& g : grad_times_scale) g *= 1024;  // exact: a power of two
      set_grad(scaled_param, grad_times_scale);
      set_grad(plain_param, grad);
      scaled.step_scaled(scalar_tensor(1024.0, kFloat32), scalar_tensor(0.0, kFloat32));
      plain.step();
      CHECK(values_of(scaled_param.grad()) == grad_times_scale);  // not unscaled in place
    }
    CHECK(bytes_of(scaled_param) == bytes_of(plain_param));
    CHECK(buffer_bytes(scaled.state(0, 0)) == buffer_bytes(plain.state(0, 0)));
    CHECK(scaled.state(0, 0).step == 3);
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
  // Two identical parameters; the scaled one sees an inf gradient at iteration 1 and must end
  // where the control ends after skipping that iteration.
  manual_seed(32);
  const Tensor w0 = randn({6});
  const Tensor x = randn({6});
  Tensor w = w0.clone().requires_grad_();
  Tensor control = w0.clone().requires_grad_();
  optim::RMSprop opt({w}, {.lr = 0.01, .momentum = 0.5, .centered = true});
  optim::RMSprop control_opt({control}, {.lr = 0.01, .momentum = 0.5, .centered = true});
  amp::GradScaler scaler(amp::GradScalerOptions{.init_scale = 1024.0});
  for (int iteration = 0; iteration < 4; ++iteration) {
    opt.zero_grad();
    scaler.scale(sum(mul(mul(w, w), x))).backward();
    if (iteration == 1) {
      NoGradGuard no_grad;
      w.mutable_grad().select(0, 2).fill_(INFINITY);
    }
    const std::vector<float> before = w.to_vector<float>();
    const bool stepped = scaler.step(opt);
    scaler.update();
    CHECK(stepped == (iteration != 1));
    if (iteration == 1) {
      CHECK(w.to_vector<float>() == before);
      CHECK(opt.state(0, 0).step == 1);
      continue;
    }
    control_opt.zero_grad();
    sum(mul(mul(control, control), x)).backward();
    control_opt.step();
  }
  const std::vector<float> a = w.to_vector<float>(), b = control.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-5));
  CHECK(opt.state(0, 0).step == 3);
}

TEST_CASE("RMSprop: a parameter without a gradient keeps no state") {
  Tensor a = make_param({1.0}, kFloat32);
  Tensor b = make_param({1.0}, kFloat32);
  optim::RMSprop opt({a, b}, {.momentum = 0.9});
  set_grad(a, {1.0});
  opt.step();
  opt.step();
  CHECK(opt.state(0, 0).step == 2);
  CHECK(opt.state(0, 1).empty());
  CHECK(b.item<double>() == 1.0);
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
      Stepped first = stepped(options, dtype, 33, 3);
      const optim::OptimizerStateDict sd = first.opt->state_dict();
      std::vector<std::string> got;
      for (const auto& [key, value] : sd.state.at(0)) got.push_back(key);
      CHECK(got == keys);
      CHECK(sd.state.at(0).at("step").item<double>() == 3.0);
      Tensor q = make_param(values_of(first.param), dtype);
      optim::RMSprop second({q}, {.lr = 0.5});  // options come from the state dict
      second.load_state_dict(sd);
      CHECK(second.param_groups()[0].options == first.opt->param_groups()[0].options);
      CHECK(second.state(0, 0).step == 3);
      const Values grad = random_values(90, 33, dtype);
      set_grad(first.param, grad);
      set_grad(q, grad);
      first.opt->step();
      second.step();
      CHECK(bytes_of(first.param) == bytes_of(q));
      CHECK(buffer_bytes(first.opt->state(0, 0)) == buffer_bytes(second.state(0, 0)));
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
  Stepped run = stepped({.lr = 0.1, .momentum = 0.9}, kFloat32, 4, 1);
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
  const int threads = get_num_threads();
  std::vector<std::vector<unsigned char>> results;
  for (int t : {1, std::max(2, threads)}) {
    set_num_threads(t);
    Stepped run = stepped(kEveryOption, kFloat32, 70001, 3);
    results.push_back(bytes_of(run.param));
    const auto state = buffer_bytes(run.opt->state(0, 0));
    for (const auto& [name, bytes] : state) results.push_back(bytes);
  }
  set_num_threads(threads);
  REQUIRE(results.size() == 8);
  for (size_t i = 0; i < 4; ++i) CHECK(results[i] == results[i + 4]);
}
