// optim::SGD and the Optimizer base: updates against a float64 reference of PyTorch's SGD
// (tests/optim/reference.h) for float64, float32 and bfloat16 parameters and every option;
// a case worked by hand; per-group options; zero_grad; the scaled step; bad options.
#include <catch2/catch.hpp>

#include <limits>

#include "halfgrad/cpu/multi_tensor.h"
#include "reference.h"

using namespace hg;
using namespace optim_test;
using Catch::Contains;

namespace {

// SGD with config c over the one parameter p.
optim::SGD make_sgd(const Tensor& p, const SGDConfig& c) {
  return optim::SGD({p}, {.lr = c.lr,
                          .momentum = c.momentum,
                          .dampening = c.dampening,
                          .weight_decay = c.weight_decay,
                          .nesterov = c.nesterov,
                          .maximize = c.maximize});
}

// Runs `steps` steps of SGD with config c on a parameter of n elements and compares the
// parameter and momentum buffer with the reference.
void check_sgd(const SGDConfig& c, DType dtype, int64_t n = 37, int steps = 5) {
  const Values initial = random_values(1, n, dtype);
  Tensor p = make_param(initial, dtype);
  optim::SGD opt = make_sgd(p, c);
  ReferenceSGD reference{c, dtype, initial, {}};
  for (int s = 0; s < steps; ++s) {
    const Values grad = random_values(100 + uint32_t(s), n, dtype);
    set_grad(p, grad);
    opt.step();
    reference.step(grad);
  }
  CHECK(close(values_of(p), reference.p, tolerance(dtype)));
  const optim::ParamState& state = opt.state(0, 0);
  CHECK(state.step == 0);
  if (c.momentum != 0) {
    REQUIRE(state.buffers.count("momentum_buffer") == 1);
    CHECK(state.buffers.at("momentum_buffer").dtype() == dtype);
    CHECK(
        close(values_of(state.buffers.at("momentum_buffer")), reference.buffer, tolerance(dtype)));
  } else {
    CHECK(state.buffers.empty());
  }
}

}  // namespace

TEST_CASE("SGD: a case worked by hand") {
  // p = 1, g = 0.5 twice, lr 0.1, momentum 0.9: buf = 0.5, p = 0.95; buf = 0.9 * 0.5 + 0.5 =
  // 0.95, p = 0.95 - 0.095 = 0.855.
  Tensor p = make_param({1.0}, kFloat64);
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, {0.5});
  opt.step();
  CHECK(p.item<double>() == Approx(0.95).epsilon(1e-15));
  set_grad(p, {0.5});
  opt.step();
  CHECK(p.item<double>() == Approx(0.855).epsilon(1e-15));
  CHECK(opt.state(0, 0).buffers.at("momentum_buffer").item<double>() == Approx(0.95));
}

TEST_CASE("SGD: every option against the float64 reference") {
  const SGDConfig configs[] = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.3},
      {.lr = 0.05, .momentum = 0.8, .nesterov = true},
      {.lr = 0.1, .weight_decay = 0.1},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .maximize = true},
      {.lr = 0.1, .maximize = true},
  };
  for (DType dtype : {kFloat64, kFloat32, kBFloat16}) {
    for (const SGDConfig& c : configs) {
      INFO(dtype_name(dtype) << " momentum " << c.momentum << " dampening " << c.dampening
                             << " weight_decay " << c.weight_decay << " nesterov " << c.nesterov
                             << " maximize " << c.maximize);
      check_sgd(c, dtype);
    }
  }
}

TEST_CASE("SGD: a large parameter runs on every thread with the same result") {
  check_sgd({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01}, kFloat32, 100003, 3);
}

TEST_CASE("SGD: the vectorized float32 pass is bit-identical to the scalar pass") {
  // Sizes: shorter than one 16-lane block, whole blocks plus a tail, and one large enough to
  // be split over threads. Zeros of both signs in the parameter and the gradient check the
  // sign of a negated zero. With the vector pass off both runs are scalar (and still equal).
  const std::vector<SGDConfig> configs = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.05, .maximize = true},
      {.lr = 0.02, .momentum = 0.8, .weight_decay = 0.01, .nesterov = true},
      {.lr = 0.1, .maximize = true}};
  for (int64_t n : {int64_t(5), int64_t(16 * 9 + 7), int64_t(40000 + 3)}) {
    for (size_t k = 0; k < configs.size(); ++k) {
      const SGDConfig& c = configs[k];
      INFO("n " << n << " config " << k);
      Values initial = random_values(21, n, kFloat32);
      initial[0] = -0.0, initial[1] = 0.0, initial[2] = -0.0;
      std::vector<std::vector<unsigned char>> params, buffers;
      for (bool vector_pass : {true, false}) {
        const bool previous = cpu::detail::set_vector_passes(vector_pass);
        Tensor p = make_param(initial, kFloat32);
        optim::SGD opt = make_sgd(p, c);
        for (uint32_t s = 0; s < 3; ++s) {
          Values grad = random_values(500 + s, n, kFloat32, -5.0, 5.0);
          grad[0] = 0.0, grad[1] = -0.0, grad[2] = 0.0;
          set_grad(p, grad);
          if (s == 1) {
            opt.step_scaled(scalar_tensor(4.0, kFloat32), scalar_tensor(0.0, kFloat32));
          } else {
            opt.step();
          }
        }
        cpu::detail::set_vector_passes(previous);
        params.push_back(bytes_of(p));
        if (c.momentum != 0)
          buffers.push_back(bytes_of(opt.state(0, 0).buffers.at("momentum_buffer")));
      }
      CHECK(params[0] == params[1]);
      if (c.momentum != 0) CHECK(buffers[0] == buffers[1]);
    }
  }
}

TEST_CASE("SGD: per-group options") {
  Tensor a = make_param({1.0, 2.0}, kFloat64);
  Tensor b = make_param({1.0, 2.0}, kFloat64);
  optim::SGD opt(std::vector<optim::ParamGroup>{{{a}, {}}, {{b}, {{"lr", 0.01}}}}, {.lr = 0.1});
  CHECK(opt.param_groups()[0].options.at("lr") == 0.1);
  CHECK(opt.param_groups()[1].options.at("lr") == 0.01);
  CHECK(opt.param_groups()[1].options.at("momentum") == 0);
  set_grad(a, {1.0, -1.0});
  set_grad(b, {1.0, -1.0});
  opt.step();
  CHECK(values_of(a) == Values{0.9, 2.1});
  CHECK(close(values_of(b), {0.99, 2.01}, 1e-15));
  // Changing a group's lr between steps takes effect at the next step.
  opt.param_groups()[0].options["lr"] = 1.0;
  set_grad(a, {1.0, 1.0});
  opt.step();
  CHECK(close(values_of(a), {-0.1, 1.1}, 1e-15));
}

TEST_CASE("Optimizer: a parameter in two groups, or twice in one, is refused as torch does") {
  Tensor a = make_param({1.0, 2.0}, kFloat32);
  Tensor b = make_param({3.0}, kFloat32);
  using Groups = std::vector<optim::ParamGroup>;
  CHECK_THROWS_WITH(optim::SGD(Groups{{{a, b}, {}}, {{a}, {}}}, {.lr = 0.1}),
                    Contains("some parameters appear in more than one parameter group") &&
                        Contains("of shape [2]"));
  CHECK_THROWS_WITH(optim::SGD(Groups{{{b, a, b}, {}}}, {.lr = 0.1}),
                    Contains("a parameter group holds a parameter twice (parameter 2"));
  // add_param_group with a parameter already held: refused, the groups as they were.
  optim::SGD opt({a}, {.lr = 0.1});
  CHECK_THROWS_WITH(opt.add_param_group({{b, a}, {}}),
                    Contains("more than one parameter group") && Contains("parameter 1"));
  REQUIRE(opt.param_groups().size() == 1);
  opt.add_param_group({{b}, {}});
  CHECK(opt.param_groups().size() == 2);
  // Each parameter held once: a step updates each once.
  set_grad(a, {1.0, 1.0});
  set_grad(b, {1.0});
  opt.step();
  CHECK(values_of(a) == Values{0.9f, 1.9f});
  CHECK(values_of(b) == Values{2.9f});
}

TEST_CASE("SGD: a parameter without a gradient is not updated") {
  Tensor a = make_param({1.0}, kFloat32);
  Tensor b = make_param({1.0}, kFloat32);
  optim::SGD opt({a, b}, {.lr = 0.5, .momentum = 0.9});
  set_grad(a, {1.0});
  opt.step();
  CHECK(a.item<double>() == 0.5);
  CHECK(b.item<double>() == 1.0);
  CHECK(opt.state(0, 1).empty());
}

TEST_CASE("Optimizer: zero_grad sets to none or fills zeros") {
  Tensor p = make_param({1.0, 2.0, 3.0}, kFloat32);
  optim::SGD opt({p}, {.lr = 0.1});
  set_grad(p, {1.0, 2.0, 3.0});
  opt.zero_grad(/*set_to_none=*/false);
  REQUIRE(p.grad().defined());
  CHECK(values_of(p.grad()) == Values{0, 0, 0});
  opt.step();  // a zero gradient: no change
  CHECK(values_of(p) == Values{1, 2, 3});
  opt.zero_grad();
  CHECK_FALSE(p.grad().defined());
  // Gradients accumulated by backward are what step uses.
  set_grad(p, {0, 0, 0});
  opt.zero_grad();
  Tensor loss = sum(p * p);
  loss.backward();
  opt.step();
  CHECK(close(values_of(p), {0.8, 1.6, 2.4}, 1e-6));
}

TEST_CASE("SGD: bad options are errors naming what was expected") {
  Tensor p = make_param({1.0}, kFloat32);
  CHECK_THROWS_WITH(optim::SGD({p}, {.lr = 0.1, .nesterov = true}),
                    Contains("Nesterov momentum expects momentum > 0 and dampening 0"));
  CHECK_THROWS_WITH(
      optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
      Contains("dampening 0.1"));
  CHECK_THROWS_WITH(optim::SGD({p}, {.lr = -1}), Contains("expected lr >= 0, got -1"));
  CHECK_THROWS_WITH(optim::SGD({p}, {.lr = 0.1, .momentum = -0.5}),
                    Contains("expected momentum >= 0"));
  CHECK_THROWS_WITH(
      optim::SGD(std::vector<optim::ParamGroup>{{{p}, {{"momentum", 0.0}, {"nesterov", 1.0}}}},
                 {.lr = 0.1, .momentum = 0.9}),
      Contains("Nesterov"));
  CHECK_THROWS_WITH(optim::SGD(std::vector<optim::ParamGroup>{{{p}, {{"betas", 0.9}}}}),
                    Contains("unknown option \"betas\""));
  // A gradient of another dtype is an error, and the parameter is left as it was.
  optim::SGD opt({p}, {.lr = 0.1});
  p.mutable_grad() = make_tensor({1.0}, kFloat64);
  CHECK_THROWS_WITH(opt.step(), Contains("expected a gradient of the parameter's dtype float32"));
  CHECK(p.item<double>() == 1.0);
}

TEST_CASE("SGD: out-of-range loaded options are the constructor's errors, nothing changed") {
  Tensor p = make_param({1.0, 2.0}, kFloat32);
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  set_grad(p, {1.0, 1.0});
  opt.step();
  const optim::OptimizerStateDict good = opt.state_dict();
  const std::map<std::string, double> options_before = opt.param_groups()[0].options;
  const auto buffer_bytes = bytes_of(opt.state(0, 0).buffers.at("momentum_buffer"));

  using Options = std::map<std::string, double>;
  const std::vector<std::pair<Options, std::string>> cases = {
      {{{"lr", -1.0}}, "SGD: expected lr >= 0, got -1"},
      {{{"momentum", -0.5}}, "SGD: expected momentum >= 0, got -0.5"},
      {{{"weight_decay", -1e-4}}, "SGD: expected weight_decay >= 0, got -0.0001"},
      {{{"dampening", std::numeric_limits<double>::infinity()}},
       "SGD: expected a finite dampening, got inf"},
      {{{"nesterov", 0.5}}, "SGD: expected nesterov to be 0 or 1 (a bool), got 0.5"},
      {{{"maximize", 3.0}}, "SGD: expected maximize to be 0 or 1 (a bool), got 3"},
      {{{"nesterov", 1.0}, {"dampening", 0.1}},
       "Nesterov momentum expects momentum > 0 and dampening 0, got momentum 0.9 and dampening "
       "0.1"},
      {{{"nesterov", 1.0}, {"momentum", 0.0}}, "Nesterov momentum expects momentum > 0"},
  };
  for (const auto& [options, message] : cases) {
    INFO(message);
    optim::OptimizerStateDict bad = good;
    if (options.count("lr") == 0) bad.param_groups[0].options["lr"] = 0.5;
    for (const auto& [key, value] : options) bad.param_groups[0].options[key] = value;
    CHECK_THROWS_WITH(opt.load_state_dict(bad),
                      Contains("load_state_dict: param group 0") && Contains(message));
    CHECK(opt.param_groups()[0].options == options_before);
    CHECK(bytes_of(opt.state(0, 0).buffers.at("momentum_buffer")) == buffer_bytes);
  }
  // The constructor and add_param_group reject them too.
  CHECK_THROWS_WITH(optim::SGD({p}, {.lr = 0.1, .dampening = std::nan("")}),
                    Contains("SGD: expected a finite dampening, got nan"));
  CHECK_THROWS_WITH(
      optim::SGD(std::vector<optim::ParamGroup>{{{p}, {{"maximize", 0.5}}}}, {.lr = 0.1}),
      Contains("expected maximize to be 0 or 1"));
  Tensor q = make_param({1.0}, kFloat32);
  CHECK_THROWS_WITH(opt.add_param_group({{q}, {{"lr", -2.0}}}),
                    Contains("SGD: expected lr >= 0, got -2"));
  CHECK(opt.param_groups().size() == 1);
  opt.add_param_group({{q}, {{"lr", 0.2}}});
  CHECK(opt.param_groups().size() == 2);
}

TEST_CASE("SGD: a scaled step with found_inf set changes nothing") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    const Values initial = random_values(3, 50, dtype);
    Tensor p = make_param(initial, dtype);
    optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    REQUIRE(opt.supports_scaled_step());
    for (uint32_t s = 0; s < 2; ++s) {
      set_grad(p, random_values(10 + s, 50, dtype));
      opt.step();
    }
    const auto param_bytes = bytes_of(p);
    const auto buffer_bytes = bytes_of(opt.state(0, 0).buffers.at("momentum_buffer"));
    const uint64_t version = p.version();
    set_grad(p, random_values(20, 50, dtype));
    opt.step_scaled(scalar_tensor(1024.0, kFloat32), scalar_tensor(1.0, kFloat32));
    CHECK(bytes_of(p) == param_bytes);
    CHECK(bytes_of(opt.state(0, 0).buffers.at("momentum_buffer")) == buffer_bytes);
    CHECK(p.version() == version);
  }
}

TEST_CASE("SGD: a scaled step equals a step on the divided gradients") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    INFO(dtype_name(dtype));
    const Values initial = random_values(4, 40, dtype);
    Tensor scaled_param = make_param(initial, dtype);
    Tensor plain_param = make_param(initial, dtype);
    const optim::SGDOptions options{.lr = 0.1, .momentum = 0.9, .nesterov = true};
    optim::SGD scaled({scaled_param}, options);
    optim::SGD plain({plain_param}, options);
    for (uint32_t s = 0; s < 3; ++s) {
      const Values grad = random_values(30 + s, 40, dtype);
      Values grad_times_scale = grad;
      for (double& g : grad_times_scale) g *= 65536;  // exact: a power of two
      set_grad(scaled_param, grad_times_scale);
      set_grad(plain_param, grad);
      scaled.step_scaled(scalar_tensor(65536.0, kFloat32), scalar_tensor(0.0, kFloat32));
      plain.step();
    }
    CHECK(bytes_of(scaled_param) == bytes_of(plain_param));
    // Undefined grad_scale (gradients already unscaled) and found_inf: a plain step.
    set_grad(scaled_param, {initial});
    set_grad(plain_param, {initial});
    scaled.step_scaled(Tensor(), Tensor());
    plain.step();
    CHECK(bytes_of(scaled_param) == bytes_of(plain_param));
  }
}

TEST_CASE("SGD: a non-contiguous gradient and the version counter") {
  Tensor p = make_param({1.0, 2.0, 3.0}, kFloat32);
  optim::SGD opt({p}, {.lr = 0.5});
  p.mutable_grad() = make_tensor({2.0}, kFloat32).expand({3});  // stride 0
  const uint64_t version = p.version();
  opt.step();
  CHECK(values_of(p) == Values{0, 1, 2});
  // The update is an in-place write: autograd sees it.
  CHECK(p.version() > version);
}
