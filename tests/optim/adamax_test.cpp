// optim::Adamax, Adadelta, RAdam and NAdam: every option set against PyTorch step by step
// (twin/adamax_adadelta_radam.txt, printed by torch 1.13; twin/nadam.txt, by torch 2) in float64
// and float32; RAdam's two branches; NAdam's float32 mu_product; skipped and scaled steps;
// bf16_params; state_dict round trips; option checks; the threaded pass.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "shared_checks.h"
#include "twin_runs.h"

using namespace hg;
using namespace optim_test;
using Catch::Contains;

namespace {

template <class Opt>
std::unique_ptr<optim::Optimizer> make(std::vector<optim::ParamGroup> groups) {
  return std::make_unique<Opt>(std::move(groups));
}

struct Kind {
  std::string prefix, torch_name;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)> make;
  // An optimizer over `params` with every option away from its default (bf16_params aside).
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>, bool bf16_params)> every;
};

const std::vector<Kind>& kinds() {
  static const std::vector<Kind> all = {
      {"adamax_", "Adamax", make<optim::Adamax>,
       [](std::vector<Tensor> p, bool bf16) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::Adamax>(p, optim::AdamaxOptions{.lr = 0.02,
                                                                        .beta1 = 0.8,
                                                                        .beta2 = 0.99,
                                                                        .eps = 1e-3,
                                                                        .weight_decay = 0.05,
                                                                        .maximize = true,
                                                                        .bf16_params = bf16});
       }},
      {"adadelta_", "Adadelta", make<optim::Adadelta>,
       [](std::vector<Tensor> p, bool bf16) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::Adadelta>(p, optim::AdadeltaOptions{.lr = 0.5,
                                                                            .rho = 0.7,
                                                                            .eps = 1e-4,
                                                                            .weight_decay = 0.05,
                                                                            .maximize = true,
                                                                            .bf16_params = bf16});
       }},
      {"radam_", "RAdam", make<optim::RAdam>,
       [](std::vector<Tensor> p, bool bf16) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::RAdam>(p, optim::RAdamOptions{.lr = 0.02,
                                                                      .beta1 = 0.8,
                                                                      .beta2 = 0.9,
                                                                      .eps = 1e-6,
                                                                      .weight_decay = 0.05,
                                                                      .bf16_params = bf16});
       }},
      {"nadam_", "NAdam", make<optim::NAdam>,
       [](std::vector<Tensor> p, bool bf16) -> std::unique_ptr<optim::Optimizer> {
         return std::make_unique<optim::NAdam>(p,
                                               optim::NAdamOptions{.lr = 0.02,
                                                                   .beta1 = 0.8,
                                                                   .beta2 = 0.9,
                                                                   .eps = 1e-6,
                                                                   .weight_decay = 0.05,
                                                                   .momentum_decay = 0.01,
                                                                   .decoupled_weight_decay = true,
                                                                   .maximize = true,
                                                                   .bf16_params = bf16});
       }},
  };
  return all;
}

// kind's optimizer with every option set, float32 or float16 parameters (no bf16_params).
OptimizerOver every_option(const Kind& kind) {
  return [&kind](std::vector<Tensor> params) { return kind.every(std::move(params), false); };
}

}  // namespace

TEST_CASE("Adamax Adadelta RAdam and NAdam: defaults are torch's") {
  Tensor p = make_param({1.0}, kFloat32);
  const auto adamax = optim::Adamax({p}).param_groups()[0].options;
  CHECK(adamax == std::map<std::string, double>{{"lr", 2e-3},
                                                {"beta1", 0.9},
                                                {"beta2", 0.999},
                                                {"eps", 1e-8},
                                                {"weight_decay", 0},
                                                {"maximize", 0}});
  const auto adadelta = optim::Adadelta({p}).param_groups()[0].options;
  CHECK(adadelta ==
        std::map<std::string, double>{
            {"lr", 1.0}, {"rho", 0.9}, {"eps", 1e-6}, {"weight_decay", 0}, {"maximize", 0}});
  const auto radam = optim::RAdam({p}).param_groups()[0].options;
  CHECK(radam ==
        std::map<std::string, double>{
            {"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0}});
  const auto nadam = optim::NAdam({p}).param_groups()[0].options;
  CHECK(nadam == std::map<std::string, double>{{"lr", 2e-3},
                                               {"beta1", 0.9},
                                               {"beta2", 0.999},
                                               {"eps", 1e-8},
                                               {"weight_decay", 0},
                                               {"momentum_decay", 4e-3},
                                               {"decoupled_weight_decay", 0},
                                               {"maximize", 0}});
  CHECK(optim::RAdam({p}).supports_scaled_step());
  CHECK(std::string(optim::Adadelta({p}).name()) == "Adadelta");
}

TEST_CASE("Adamax Adadelta RAdam and NAdam: every option set matches PyTorch step by step") {
  for (const Kind& kind : kinds()) follow_twin_runs(kind.prefix, kind.torch_name, 3, kind.make);
}

TEST_CASE("RAdam: the twin's runs take both branches of the rectification") {
  // rho_t > 5 from the fourth step on with beta2 0.999 (rho_t is about 2t - 1 while beta2^t is
  // near 1): the first steps move by the bias-corrected average alone, p -= lr * m / (1 - beta1^t).
  const TwinRun& run = twin_run("radam_plain");
  const double lr = run.options.at("lr"), beta1 = run.options.at("beta1");
  for (size_t t = 1; t <= 3; ++t) {
    const TwinRecord& now = run.steps[t][0];
    const TwinRecord& before = run.steps[t - 1][0];
    for (size_t i = 0; i < now.param.size(); ++i) {
      const double m = now.state.at("exp_avg")[i];
      const double want = before.param[i] - m / (1 - std::pow(beta1, double(t))) * lr;
      CHECK(std::abs(now.param[i] - want) <= 1e-15);
    }
  }
}

TEST_CASE("NAdam: mu_product is a float32 product of the momentum schedule") {
  // torch keeps mu_product as a float32 tensor even for float64 parameters, multiplying it by
  // each step's mu (rounded to float32) in float32; the float64 twin run above holds the
  // parameters to 1e-12, which a float64 product would miss by about 1e-8.
  Tensor p = make_param({0.5, -1.0, 2.0}, kFloat64);
  optim::NAdam opt({p}, {.momentum_decay = 0.05});
  float product = 1.0f;
  for (int t = 1; t <= 6; ++t) {
    set_grad(p, {0.25, -0.5, 1.0});
    opt.step();
    const double mu = 0.9 * (1.0 - 0.5 * std::pow(0.96, t * 0.05));
    product = product * float(mu);
    const Tensor stored = opt.state(0, 0).buffers.at("mu_product");
    CHECK(stored.dtype() == kFloat32);
    CHECK(stored.dim() == 0);
    CHECK(stored.item<float>() == product);
  }
  // Loaded from a state dict as one element of any floating dtype; the wrong size is an error.
  optim::OptimizerStateDict state = opt.state_dict();
  state.state[0]["mu_product"] = scalar_tensor(0.25, kFloat64).reshape({1});
  optim::NAdam other({make_param({0.5, -1.0, 2.0}, kFloat64)});
  other.load_state_dict(state);
  CHECK(other.state(0, 0).buffers.at("mu_product").item<float>() == 0.25f);
  CHECK(other.state(0, 0).buffers.at("mu_product").dim() == 0);
  state.state[0]["mu_product"] = make_param({1.0, 2.0}, kFloat32);
  CHECK_THROWS_WITH(other.load_state_dict(state),
                    Contains("expected \"mu_product\" of parameter 0 to be a floating tensor of "
                             "shape []"));
  CHECK(other.state(0, 0).buffers.at("mu_product").item<float>() == 0.25f);
}

TEST_CASE(
    "Adamax Adadelta RAdam and NAdam: found_inf skips the step leaving everything bit-identical") {
  for (const Kind& kind : kinds()) {
    for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
      INFO(kind.torch_name << " " << dtype_name(dtype));
      check_found_inf_skips(every_option(kind), dtype, 2);
    }
  }
}

TEST_CASE("Adamax Adadelta RAdam and NAdam: a scaled step equals a step on the divided gradients") {
  for (const Kind& kind : kinds()) {
    for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
      INFO(kind.torch_name << " " << dtype_name(dtype));
      check_scaled_step(every_option(kind), dtype, 6);
    }
  }
}

TEST_CASE(
    "Adamax Adadelta RAdam and NAdam: bf16_params keep float32 state and round stochastically") {
  // A float32 twin reset to the bfloat16 parameter before each step computes the same float32
  // update from the same state; the bfloat16 result must be one of that value's two bfloat16
  // neighbours (the one below and the one above it, NOTE [bf16_params] in optim/fused.h), and
  // over many elements both must occur.
  for (const Kind& kind : kinds()) {
    INFO(kind.torch_name);
    const Values initial = random_values(8, 256, kBFloat16);
    Tensor p16 = make_param(initial, kBFloat16), p32 = make_param(initial, kFloat32);
    auto sr = kind.every({p16}, true);
    auto reference = kind.every({p32}, false);
    int64_t below = 0, above = 0;
    for (uint32_t s = 0; s < 5; ++s) {
      p32.detach().copy_(p16.detach().to(kFloat32));
      const Values grad = random_values(80 + s, 256, kBFloat16);
      set_grad(p16, grad);
      set_grad(p32, grad);
      sr->step();
      reference->step();
      const Values got = values_of(p16), want = values_of(p32);
      for (size_t i = 0; i < got.size(); ++i) {
        const uint32_t bits = std::bit_cast<uint32_t>(float(want[i]));
        const float toward_zero = std::bit_cast<float>(bits & 0xFFFF0000u);
        const float away = (bits & 0xFFFFu) == 0
                               ? toward_zero
                               : std::bit_cast<float>((bits & 0xFFFF0000u) + 0x10000u);
        CHECK((float(got[i]) == toward_zero || float(got[i]) == away));
        if (toward_zero != away) (float(got[i]) == toward_zero ? below : above) += 1;
      }
    }
    for (const auto& [name, buffer] : sr->state(0, 0).buffers) CHECK(buffer.dtype() == kFloat32);
    CHECK(below > 100);
    CHECK(above > 100);
    CHECK_THROWS_WITH(kind.every({make_param({1.0}, kFloat32)}, true),
                      Contains("bf16_params expects bfloat16 parameters"));
  }
}

TEST_CASE("Adamax Adadelta RAdam and NAdam: a state_dict round trip reproduces the next step") {
  for (const Kind& kind : kinds()) {
    INFO(kind.torch_name);
    check_state_dict_round_trip(every_option(kind), kFloat32, 20, 3);
  }
}

TEST_CASE("Adamax Adadelta RAdam and NAdam: bad options are errors and change nothing") {
  const std::vector<std::tuple<std::string, std::string, double, std::string>> cases = {
      {"Adamax", "lr", -1.0, "Adamax: expected lr >= 0, got -1"},
      {"Adamax", "beta1", 1.0, "Adamax: expected beta1 in [0, 1), got 1"},
      {"Adamax", "beta2", std::nan(""), "Adamax: expected beta2 in [0, 1), got nan"},
      {"Adamax", "eps", -1e-8, "Adamax: expected eps >= 0, got -1e-08"},
      {"Adamax", "maximize", 0.5, "Adamax: expected maximize to be 0 or 1 (a bool), got 0.5"},
      {"Adadelta", "rho", 1.5, "Adadelta: expected rho in [0, 1], got 1.5"},
      {"Adadelta", "weight_decay", -0.1, "Adadelta: expected weight_decay >= 0, got -0.1"},
      {"RAdam", "beta2", -0.1, "RAdam: expected beta2 in [0, 1), got -0.1"},
      {"RAdam", "lr", -0.5, "RAdam: expected lr >= 0, got -0.5"},
      {"NAdam", "momentum_decay", -1.0, "NAdam: expected momentum_decay >= 0, got -1"},
      {"NAdam", "beta1", 1.0, "NAdam: expected beta1 in [0, 1), got 1"},
      {"NAdam", "decoupled_weight_decay", 2.0,
       "NAdam: expected decoupled_weight_decay to be 0 or 1 (a bool), got 2"},
  };
  for (const auto& [optimizer, key, value, message] : cases) {
    INFO(optimizer << " " << key << " = " << value);
    const std::string wanted = optimizer;  // (a structured binding: no lambda captures it)
    const Kind& kind = *std::find_if(kinds().begin(), kinds().end(),
                                     [&](const Kind& k) { return k.torch_name == wanted; });
    CHECK_THROWS_WITH(kind.make({{{make_param({1.0}, kFloat32)}, {{key, value}}}}),
                      Contains(message));
    Tensor p = make_param({1.0, 2.0}, kFloat32);
    auto opt = kind.every({p}, false);
    set_grad(p, {0.5, -0.5});
    opt->step();
    const auto before = buffer_bytes(opt->state(0, 0));
    optim::OptimizerStateDict bad = opt->state_dict();
    bad.param_groups[0].options[key] = value;
    CHECK_THROWS_WITH(opt->load_state_dict(bad), Contains(message));
    CHECK(buffer_bytes(opt->state(0, 0)) == before);
    CHECK_THROWS_WITH(opt->add_param_group({{make_param({1.0}, kFloat32)}, {{key, value}}}),
                      Contains(message));
    CHECK(opt->param_groups().size() == 1);
  }
  // rho 0 and 1 are allowed, as torch allows them.
  optim::Adadelta edges({make_param({1.0}, kFloat32)}, {.rho = 1.0});
  optim::Adadelta zero({make_param({1.0}, kFloat32)}, {.rho = 0.0});
}

TEST_CASE("Adamax Adadelta RAdam and NAdam: the result does not depend on the number of threads") {
  for (const Kind& kind : kinds()) {
    INFO(kind.torch_name);
    check_thread_count_independent(every_option(kind));
  }
}
