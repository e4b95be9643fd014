// optim::Adam and optim::AdamW: updates against a float64 reference of PyTorch's formulas
// (tests/optim/reference.h) for float64, float32 and bfloat16 parameters and every option;
// a first step worked by hand; float32 state for 16-bit parameters; skipped and scaled steps;
// state_dict round trips and the checks of load_state_dict.
#include <catch2/catch.hpp>

#include <limits>
#include <tuple>

#include "halfgrad/cpu/multi_tensor.h"
#include "reference.h"
#include "shared_checks.h"

using namespace hg;
using namespace optim_test;
using Catch::Contains;

namespace {

// Adam and AdamW take option structs of the same fields; Options is the one Opt takes.
template <class Opt, class Options>
std::unique_ptr<optim::Optimizer> make_adam_like(const Tensor& p, const AdamConfig& c,
                                                 bool float32_state) {
  return std::make_unique<Opt>(std::vector<Tensor>{p}, Options{.lr = c.lr,
                                                               .beta1 = c.beta1,
                                                               .beta2 = c.beta2,
                                                               .eps = c.eps,
                                                               .weight_decay = c.weight_decay,
                                                               .amsgrad = c.amsgrad,
                                                               .maximize = c.maximize,
                                                               .float32_state = float32_state});
}

std::unique_ptr<optim::Optimizer> make_adam(const Tensor& p, const AdamConfig& c,
                                            bool float32_state = false) {
  return c.decoupled ? make_adam_like<optim::AdamW, optim::AdamWOptions>(p, c, float32_state)
                     : make_adam_like<optim::Adam, optim::AdamOptions>(p, c, float32_state);
}

// Every option away from its default.
AdamConfig every_adam_option(bool decoupled) {
  return {.lr = 0.02,
          .beta1 = 0.8,
          .beta2 = 0.99,
          .eps = 1e-3,
          .weight_decay = 0.05,
          .amsgrad = true,
          .maximize = true,
          .decoupled = decoupled};
}

// Adam (AdamW when decoupled) with weight decay and amsgrad over the one parameter given.
OptimizerOver adam_with_amsgrad(bool decoupled) {
  return [decoupled](std::vector<Tensor> params) {
    return make_adam(params.at(0),
                     {.lr = 0.01, .weight_decay = 0.1, .amsgrad = true, .decoupled = decoupled});
  };
}

void check_adam(const AdamConfig& c, DType dtype, bool float32_state = false, int64_t n = 37,
                int steps = 6) {
  const DType state_dtype = float32_state && dtype != kFloat64 ? kFloat32 : dtype;
  const Values initial = random_values(2, n, dtype);
  Tensor p = make_param(initial, dtype);
  auto opt = make_adam(p, c, float32_state);
  ReferenceAdam reference{c, dtype, state_dtype, initial, {}, {}, {}};
  for (int s = 0; s < steps; ++s) {
    // Gradients of varied magnitudes so that the second moment matters.
    const Values grad = random_values(200 + uint32_t(s), n, dtype, -1.0 - s, 1.0 + s);
    set_grad(p, grad);
    opt->step();
    reference.step(grad);
  }
  CHECK(close(values_of(p), reference.p, tolerance(dtype)));
  const optim::ParamState& state = opt->state(0, 0);
  CHECK(state.step == steps);
  REQUIRE(state.buffers.count("exp_avg") == 1);
  CHECK(state.buffers.at("exp_avg").dtype() == state_dtype);
  CHECK(close(values_of(state.buffers.at("exp_avg")), reference.exp_avg, tolerance(dtype)));
  CHECK(close(values_of(state.buffers.at("exp_avg_sq")), reference.exp_avg_sq, tolerance(dtype)));
  CHECK(state.buffers.count("max_exp_avg_sq") == (c.amsgrad ? 1u : 0u));
  if (c.amsgrad) {
    CHECK(close(values_of(state.buffers.at("max_exp_avg_sq")), reference.max_exp_avg_sq,
                tolerance(dtype)));
  }
}

}  // namespace

TEST_CASE("Adam: the first step worked by hand") {
  // Step 1: m = 0.1 g, v = 0.001 g^2, bias corrections 0.1 and 0.001, so the update is
  // lr * g / (|g| + eps): p = 1 - 0.1 * 0.5 / (0.5 + 1e-8).
  for (bool decoupled : {false, true}) {
    Tensor p = make_param({1.0}, kFloat64);
    auto opt = make_adam(p, {.lr = 0.1, .decoupled = decoupled});
    set_grad(p, {0.5});
    opt->step();
    // AdamW's default-free config here has weight_decay 0 (set explicitly by make_adam).
    CHECK(p.item<double>() == Approx(1 - 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-14));
    CHECK(opt->state(0, 0).buffers.at("exp_avg").item<double>() == Approx(0.05));
    CHECK(opt->state(0, 0).buffers.at("exp_avg_sq").item<double>() == Approx(0.00025));
  }
  // AdamW's weight decay is decoupled: p = 1 * (1 - 0.1 * 0.5) - 0.1 * 0.5 / (0.5 + 1e-8).
  Tensor p = make_param({1.0}, kFloat64);
  optim::AdamW opt({p}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(p, {0.5});
  opt.step();
  CHECK(p.item<double>() == Approx(0.95 - 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-14));
  // Adam's is L2 added to the gradient: g = 0.5 + 0.5 * 1 = 1, p = 1 - 0.1 * 1 / (1 + 1e-8).
  Tensor q = make_param({1.0}, kFloat64);
  optim::Adam adam({q}, {.lr = 0.1, .weight_decay = 0.5});
  set_grad(q, {0.5});
  adam.step();
  CHECK(q.item<double>() == Approx(1 - 0.1 / (1 + 1e-8)).epsilon(1e-14));
}

TEST_CASE("Adam and AdamW: defaults are torch's") {
  Tensor p = make_param({1.0}, kFloat32);
  optim::Adam adam({p});
  optim::AdamW adamw({p});
  const auto& a = adam.param_groups()[0].options;
  const auto& w = adamw.param_groups()[0].options;
  CHECK(a.at("lr") == 1e-3);
  CHECK(a.at("beta1") == 0.9);
  CHECK(a.at("beta2") == 0.999);
  CHECK(a.at("eps") == 1e-8);
  CHECK(a.at("weight_decay") == 0);
  CHECK(w.at("weight_decay") == 0.01);
  CHECK(a.at("amsgrad") == 0);
  CHECK(w.at("maximize") == 0);
}

TEST_CASE("Adam and AdamW: every option against the float64 reference") {
  std::vector<AdamConfig> configs;
  for (bool decoupled : {false, true}) {
    configs.push_back({.lr = 0.01, .decoupled = decoupled});
    configs.push_back({.lr = 0.01, .weight_decay = 0.1, .decoupled = decoupled});
    configs.push_back({.lr = 0.01, .amsgrad = true, .decoupled = decoupled});
    configs.push_back(every_adam_option(decoupled));
  }
  for (DType dtype : {kFloat64, kFloat32, kBFloat16}) {
    for (const AdamConfig& c : configs) {
      INFO(dtype_name(dtype) << (c.decoupled ? " AdamW" : " Adam") << " weight_decay "
                             << c.weight_decay << " amsgrad " << c.amsgrad << " maximize "
                             << c.maximize);
      check_adam(c, dtype);
    }
  }
}

TEST_CASE("Adam: float32 state for 16-bit parameters") {
  for (DType dtype : {kBFloat16, kFloat16}) {
    INFO(dtype_name(dtype));
    check_adam({.lr = 0.01, .weight_decay = 0.1, .amsgrad = true, .decoupled = true}, dtype,
               /*float32_state=*/true);
  }
  // A float32 parameter keeps float32 state either way, a float64 one float64 state.
  check_adam({.lr = 0.01}, kFloat64, true);
}

TEST_CASE("AdamW: a large parameter runs on every thread with the same result") {
  check_adam({.lr = 0.01, .weight_decay = 0.01, .decoupled = true}, kFloat32, false, 100003, 3);
}

TEST_CASE("Adam and AdamW: the vectorized float32 pass is bit-identical to the scalar pass") {
  // Sizes: shorter than one 16-lane block, whole blocks plus a tail, and one large enough to
  // be split over threads. With the vector pass off both runs are scalar (and still equal).
  std::vector<AdamConfig> configs;
  for (bool decoupled : {false, true}) {
    configs.push_back({.lr = 0.01, .decoupled = decoupled});
    configs.push_back(every_adam_option(decoupled));
  }
  for (int64_t n : {int64_t(5), int64_t(16 * 9 + 7), int64_t(40000 + 3)}) {
    for (const AdamConfig& c : configs) {
      INFO("n " << n << (c.decoupled ? " AdamW" : " Adam") << " amsgrad " << c.amsgrad);
      const Values initial = random_values(11, n, kFloat32);
      std::vector<std::vector<unsigned char>> params, exp_avg_sqs;
      for (bool vector_pass : {true, false}) {
        const bool previous = cpu::detail::set_vector_passes(vector_pass);
        Tensor p = make_param(initial, kFloat32);
        auto opt = make_adam(p, c);
        for (uint32_t s = 0; s < 3; ++s) {
          // Gradients that reach the second moment's extremes, and one scaled step.
          set_grad(p, random_values(400 + s, n, kFloat32, -10.0 * (s + 1), 10.0 * (s + 1)));
          if (s == 1) {
            opt->step_scaled(scalar_tensor(4.0, kFloat32), scalar_tensor(0.0, kFloat32));
          } else {
            opt->step();
          }
        }
        cpu::detail::set_vector_passes(previous);
        params.push_back(bytes_of(p));
        exp_avg_sqs.push_back(
            bytes_of(opt->state(0, 0).buffers.at(c.amsgrad ? "max_exp_avg_sq" : "exp_avg_sq")));
      }
      CHECK(params[0] == params[1]);
      CHECK(exp_avg_sqs[0] == exp_avg_sqs[1]);
    }
  }
}

TEST_CASE("Adam: a parameter without a gradient keeps no state") {
  TwoParams run = check_no_state_without_grad([](std::vector<Tensor> params) {
    return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = 0.1});
  });
  set_grad(run.b, {1.0});
  run.opt->step();
  CHECK(run.opt->state(0, 0).step == 3);
  CHECK(run.opt->state(0, 1).step == 1);
}

TEST_CASE("Adam: per-group lr") {
  Tensor a = make_param({1.0}, kFloat64);
  Tensor b = make_param({1.0}, kFloat64);
  optim::Adam opt(std::vector<optim::ParamGroup>{{{a}, {}}, {{b}, {{"lr", 0.01}}}}, {.lr = 0.1});
  set_grad(a, {2.0});
  set_grad(b, {2.0});
  opt.step();
  CHECK(a.item<double>() == Approx(1 - 0.1 * 2 / (2 + 1e-8)).epsilon(1e-14));
  CHECK(b.item<double>() == Approx(1 - 0.01 * 2 / (2 + 1e-8)).epsilon(1e-14));
}

TEST_CASE("Adam: bad options are errors") {
  Tensor p = make_param({1.0}, kFloat32);
  CHECK_THROWS_WITH(optim::Adam({p}, {.lr = -0.1}), Contains("Adam: expected lr >= 0"));
  CHECK_THROWS_WITH(optim::AdamW({p}, {.beta1 = 1.0}),
                    Contains("AdamW: expected beta1 in [0, 1), got 1"));
  CHECK_THROWS_WITH(optim::Adam({p}, {.beta2 = -0.1}), Contains("expected beta2 in [0, 1)"));
  CHECK_THROWS_WITH(optim::Adam({p}, {.eps = -1}), Contains("expected eps >= 0"));
  CHECK_THROWS_WITH(optim::AdamW({p}, {.weight_decay = -1}),
                    Contains("expected weight_decay >= 0"));
}

TEST_CASE("Adam and AdamW: found_inf skips the step leaving everything bit-identical") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    for (bool decoupled : {false, true}) {
      INFO(dtype_name(dtype) << " decoupled " << decoupled);
      check_found_inf_skips(adam_with_amsgrad(decoupled), dtype, 2);
    }
  }
}

TEST_CASE("Adam and AdamW: a scaled step equals a step on the divided gradients") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    for (bool decoupled : {false, true}) {
      INFO(dtype_name(dtype) << " decoupled " << decoupled);
      check_scaled_step(adam_with_amsgrad(decoupled), dtype, 3);
    }
  }
}

TEST_CASE("Optimizer: the base has no scaled step") {
  // An optimizer written without step_scaled answers false and throws.
  struct Plain : optim::Optimizer {
    explicit Plain(std::vector<Tensor> params)
        : Optimizer({optim::ParamGroup{std::move(params), {}}}, {{"lr", 0.1}}) {}
    void step() override {}
    std::vector<std::string> state_buffer_names(const optim::ParamGroup&) const override {
      return {};
    }
    bool keeps_step() const override { return false; }
  };
  Tensor p = make_param({1.0}, kFloat32);
  Plain plain({p});
  CHECK_FALSE(plain.supports_scaled_step());
  CHECK_THROWS_WITH(plain.step_scaled(Tensor(), Tensor()),
                    Contains("expected an optimizer that supports the scaled step"));
}

TEST_CASE("state_dict: torch's layout") {
  Tensor a = make_param({1.0, 2.0}, kFloat32);
  Tensor b = make_param({3.0}, kFloat32);
  Tensor c = make_param({4.0, 5.0, 6.0}, kFloat32);
  optim::Adam opt(std::vector<optim::ParamGroup>{{{a, b}, {}}, {{c}, {{"amsgrad", 1.0}}}},
                  {.lr = 0.1});
  set_grad(a, {1.0, 1.0});
  set_grad(c, {1.0, 1.0, 1.0});
  opt.step();
  opt.step();
  optim::OptimizerStateDict sd = opt.state_dict();
  REQUIRE(sd.param_groups.size() == 2);
  CHECK(sd.param_groups[0].params == std::vector<int64_t>{0, 1});
  CHECK(sd.param_groups[1].params == std::vector<int64_t>{2});
  CHECK(sd.param_groups[0].options.at("lr") == 0.1);
  CHECK(sd.param_groups[1].options.at("amsgrad") == 1.0);
  REQUIRE(sd.state.size() == 2);  // b has no gradient, so no state
  CHECK(sd.state.count(1) == 0);
  const auto& s0 = sd.state.at(0);
  CHECK(s0.size() == 3);
  CHECK(s0.at("step").dim() == 0);
  CHECK(s0.at("step").dtype() == kFloat32);
  CHECK(s0.at("step").item<double>() == 2.0);
  CHECK(s0.at("exp_avg").sizes() == Shape{2});
  CHECK(sd.state.at(2).count("max_exp_avg_sq") == 1);
  // The buffers are copies: changing them changes nothing in the optimizer.
  sd.state.at(0).at("exp_avg").fill_(100);
  CHECK(values_of(opt.state(0, 0).buffers.at("exp_avg"))[0] != 100);

  optim::SGD sgd({a}, {.lr = 0.1, .momentum = 0.9});
  sgd.step();
  const optim::OptimizerStateDict sgd_sd = sgd.state_dict();
  CHECK(sgd_sd.state.at(0).size() == 1);
  CHECK(sgd_sd.state.at(0).count("momentum_buffer") == 1);
}

TEST_CASE("state_dict: a round trip reproduces the next step exactly") {
  for (DType dtype : {kFloat32, kBFloat16}) {
    INFO(dtype_name(dtype));
    const Values initial = random_values(7, 33, dtype);
    Tensor p = make_param(initial, dtype);
    optim::AdamW first({p}, {.lr = 0.01, .amsgrad = true});
    for (uint32_t s = 0; s < 3; ++s) {
      set_grad(p, random_values(80 + s, 33, dtype));
      first.step();
    }
    Tensor q = make_param(values_of(p), dtype);
    optim::AdamW second({q}, {.lr = 0.5});  // options come from the state dict
    second.load_state_dict(first.state_dict());
    CHECK(second.param_groups()[0].options.at("lr") == 0.01);
    CHECK(second.param_groups()[0].options.at("amsgrad") == 1.0);
    CHECK(second.state(0, 0).step == 3);
    const Values grad = random_values(90, 33, dtype);
    set_grad(p, grad);
    set_grad(q, grad);
    first.step();
    second.step();
    CHECK(bytes_of(p) == bytes_of(q));

    // SGD's momentum buffer too.
    Tensor r = make_param(initial, dtype);
    optim::SGD sgd({r}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    set_grad(r, grad);
    sgd.step();
    Tensor u = make_param(values_of(r), dtype);
    optim::SGD sgd2({u}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    sgd2.load_state_dict(sgd.state_dict());
    set_grad(r, initial);
    set_grad(u, initial);
    sgd.step();
    sgd2.step();
    CHECK(bytes_of(r) == bytes_of(u));
  }
}

TEST_CASE("load_state_dict: buffers are converted to the state dtype") {
  Tensor p = make_param({1.0, 2.0}, kBFloat16);
  optim::Adam opt({p}, {.lr = 0.1, .float32_state = true});
  optim::OptimizerStateDict sd;
  sd.param_groups.push_back({opt.param_groups()[0].options, {0}});
  sd.state[0] = {{"step", scalar_tensor(4.0, kFloat32)},
                 {"exp_avg", make_tensor({0.1, 0.2}, kFloat64)},
                 {"exp_avg_sq", make_tensor({0.01, 0.04}, kFloat64)}};
  opt.load_state_dict(sd);
  CHECK(opt.state(0, 0).step == 4);
  CHECK(opt.state(0, 0).buffers.at("exp_avg").dtype() == kFloat32);
  CHECK(values_of(opt.state(0, 0).buffers.at("exp_avg")) == Values{double(0.1f), double(0.2f)});
}

TEST_CASE("load_state_dict: checks keys and shapes and changes nothing on error") {
  Tensor a = make_param({1.0, 2.0}, kFloat32);
  optim::Adam opt({a}, {.lr = 0.1});
  set_grad(a, {1.0, 1.0});
  opt.step();
  const optim::OptimizerStateDict good = opt.state_dict();
  const auto exp_avg_bytes = bytes_of(opt.state(0, 0).buffers.at("exp_avg"));

  auto expect_unchanged = [&] {
    CHECK(opt.state(0, 0).step == 1);
    CHECK(bytes_of(opt.state(0, 0).buffers.at("exp_avg")) == exp_avg_bytes);
    CHECK(opt.param_groups()[0].options.at("lr") == 0.1);
  };

  optim::OptimizerStateDict bad = good;
  bad.param_groups.push_back(bad.param_groups[0]);
  CHECK_THROWS_WITH(opt.load_state_dict(bad), Contains("expected 1 param groups, got 2"));

  bad = good;
  bad.param_groups[0].params.push_back(1);
  CHECK_THROWS_WITH(opt.load_state_dict(bad),
                    Contains("expected group 0 to hold 1 parameters, got 2"));

  bad = good;
  bad.param_groups[0].options["lr"] = 0.5;
  bad.state[0]["exp_avg"] = zeros({3});
  CHECK_THROWS_WITH(opt.load_state_dict(bad), Contains("of shape [2], got float32 [3]"));
  expect_unchanged();

  bad = good;
  bad.param_groups[0].options["lr"] = 0.5;
  bad.state[0]["momentum_buffer"] = zeros({2});
  CHECK_THROWS_WITH(opt.load_state_dict(bad), Contains("got \"momentum_buffer\""));
  expect_unchanged();

  bad = good;
  bad.state[0]["max_exp_avg_sq"] = zeros({2});  // amsgrad is off
  CHECK_THROWS_WITH(opt.load_state_dict(bad), Contains("got \"max_exp_avg_sq\""));

  bad = good;
  bad.state[5] = good.state.at(0);
  CHECK_THROWS_WITH(opt.load_state_dict(bad), Contains("got state for index 5"));

  bad = good;
  bad.param_groups[0].options["momentum"] = 0.9;
  CHECK_THROWS_WITH(opt.load_state_dict(bad), Contains("unknown option \"momentum\""));

  bad = good;
  bad.state[0].erase("step");
  CHECK_THROWS_WITH(opt.load_state_dict(bad), Contains("expected a \"step\""));
  expect_unchanged();

  opt.load_state_dict(good);
  expect_unchanged();
}

TEST_CASE("load_state_dict: out-of-range options are the constructor's errors, nothing changed") {
  for (bool decoupled : {false, true}) {
    const char* name = decoupled ? "AdamW" : "Adam";
    INFO(name);
    Tensor a = make_param({1.0, 2.0}, kFloat32);
    std::unique_ptr<optim::Optimizer> opt =
        decoupled ? std::unique_ptr<optim::Optimizer>(new optim::AdamW({a}, {.lr = 0.1}))
                  : std::unique_ptr<optim::Optimizer>(new optim::Adam({a}, {.lr = 0.1}));
    set_grad(a, {1.0, 1.0});
    opt->step();
    const optim::OptimizerStateDict good = opt->state_dict();
    const std::map<std::string, double> options_before = opt->param_groups()[0].options;
    const auto exp_avg_bytes = bytes_of(opt->state(0, 0).buffers.at("exp_avg"));

    // Each value the constructor rejects, loaded (with an lr change that must not happen).
    const std::vector<std::tuple<std::string, double, std::string>> cases = {
        {"beta2", 8.999, "expected beta2 in [0, 1), got 8.999"},
        {"beta1", -0.5, "expected beta1 in [0, 1), got -0.5"},
        {"beta1", 1.0, "expected beta1 in [0, 1), got 1"},
        {"eps", -1e-8, "expected eps >= 0, got -1e-08"},
        {"weight_decay", -0.01, "expected weight_decay >= 0, got -0.01"},
        {"lr", -1.0, "expected lr >= 0, got -1"},
        {"lr", std::nan(""), "expected lr >= 0, got nan"},
        {"amsgrad", 0.5, "expected amsgrad to be 0 or 1 (a bool), got 0.5"},
        {"maximize", 2.0, "expected maximize to be 0 or 1 (a bool), got 2"},
    };
    for (const auto& [key, value, message] : cases) {
      INFO(key << " = " << value);
      optim::OptimizerStateDict bad = good;
      if (key != "lr") bad.param_groups[0].options["lr"] = 0.5;
      bad.param_groups[0].options[key] = value;
      CHECK_THROWS_WITH(opt->load_state_dict(bad), Contains("load_state_dict: param group 0") &&
                                                       Contains(fmt::format("{}: ", name)) &&
                                                       Contains(message));
      CHECK(opt->param_groups()[0].options == options_before);
      CHECK(opt->state(0, 0).step == 1);
      CHECK(bytes_of(opt->state(0, 0).buffers.at("exp_avg")) == exp_avg_bytes);
    }
    // The same values are still rejected by the constructor and, now, by add_param_group.
    Tensor b = make_param({1.0}, kFloat32);
    CHECK_THROWS_WITH(opt->add_param_group({{b}, {{"beta2", 8.999}}}),
                      Contains("expected beta2 in [0, 1), got 8.999"));
    CHECK_THROWS_WITH(opt->add_param_group({{b}, {{"amsgrad", 0.5}}}),
                      Contains("expected amsgrad to be 0 or 1"));
    CHECK(opt->param_groups().size() == 1);
    opt->load_state_dict(good);
  }
  Tensor p = make_param({1.0}, kFloat32);
  CHECK_THROWS_WITH(optim::Adam(std::vector<optim::ParamGroup>{{{p}, {{"beta2", 8.999}}}}),
                    Contains("Adam: expected beta2 in [0, 1), got 8.999"));
  CHECK_THROWS_WITH(optim::AdamW(std::vector<optim::ParamGroup>{{{p}, {{"maximize", -1.0}}}}),
                    Contains("AdamW: expected maximize to be 0 or 1 (a bool), got -1"));
}

TEST_CASE("load_state_dict: a step that int64 does not hold is an error, not a conversion") {
  Tensor a = make_param({1.0, 2.0}, kFloat32);
  optim::Adam opt({a}, {.lr = 0.1});
  set_grad(a, {1.0, 1.0});
  opt.step();
  const optim::OptimizerStateDict good = opt.state_dict();
  // 1e20 and 2^63 do not fit int64 (converting them is undefined behaviour); the others are not
  // whole numbers >= 0. float64 "step" tensors carry the values exactly.
  const std::vector<std::pair<double, std::string>> cases = {
      {1e20, "got 1e+20"},
      {0x1p63, "got 9.223372036854776e+18"},
      {std::numeric_limits<double>::infinity(), "got inf"},
      {std::nan(""), "got nan"},
      {-1.0, "got -1"},
      {2.5, "got 2.5"},
  };
  for (const auto& [step, message] : cases) {
    INFO(step);
    optim::OptimizerStateDict bad = good;
    bad.param_groups[0].options["lr"] = 0.5;
    bad.state[0]["step"] = scalar_tensor(step, kFloat64);
    CHECK_THROWS_WITH(opt.load_state_dict(bad),
                      Contains("\"step\" of parameter 0") &&
                          Contains("expected a whole number in [0, 9223372036854775807]") &&
                          Contains(message));
    CHECK(opt.state(0, 0).step == 1);
    CHECK(opt.param_groups()[0].options.at("lr") == 0.1);
  }
  // The largest float32 below 2^63 is a step count like any other.
  optim::OptimizerStateDict big = good;
  big.state[0]["step"] = scalar_tensor(0x1p63 - 0x1p39, kFloat32);
  opt.load_state_dict(big);
  CHECK(opt.state(0, 0).step == int64_t(0x1p63 - 0x1p39));
}

TEST_CASE("AdamW: the result does not depend on the number of threads") {
  check_thread_count_independent(adam_with_amsgrad(true));
}
