// optim::StepLR and optim::CosineWithWarmup: lr sequences against values computed by hand,
// skipped steps, per-group base lrs, bad arguments.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "halfgrad/halfgrad.h"
#include "halfgrad/optim/optim.h"

using namespace hg;
using Catch::Contains;

namespace {

Tensor param() {
  Tensor p = zeros({2});
  p.requires_grad_();
  return p;
}

}  // namespace

TEST_CASE("StepLR: decays by gamma every step_size steps") {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR schedule(opt, /*step_size=*/3, /*gamma=*/0.5);
  const double expected[] = {1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125};
  for (int s = 0; s < 10; ++s) {
    INFO("step " << s);
    CHECK(schedule.last_epoch() == s);
    CHECK(opt.param_groups()[0].options.at("lr") == expected[s]);
    CHECK(schedule.get_last_lr() == std::vector<double>{expected[s]});
    schedule.step();
  }
}

TEST_CASE("StepLR: each group decays from its own base lr and gamma defaults to 0.1") {
  Tensor a = param(), b = param();
  optim::SGD opt(std::vector<optim::ParamGroup>{{{a}, {}}, {{b}, {{"lr", 0.5}}}}, {.lr = 2.0});
  optim::StepLR schedule(opt, 1);
  CHECK(schedule.base_lrs() == std::vector<double>{2.0, 0.5});
  schedule.step();
  CHECK(opt.param_groups()[0].options.at("lr") == Approx(0.2).epsilon(1e-15));
  CHECK(opt.param_groups()[1].options.at("lr") == Approx(0.05).epsilon(1e-15));
  schedule.step();
  CHECK(schedule.get_last_lr()[0] == Approx(0.02).epsilon(1e-15));
}

TEST_CASE("CosineWithWarmup: linear warmup then a cosine down to min_lr") {
  Tensor p = param();
  optim::AdamW opt({p}, {.lr = 1.0});
  optim::CosineWithWarmup schedule(opt, /*warmup_steps=*/2, /*total_steps=*/6, /*min_lr=*/0.1);
  // Steps 3..6 are the cosine at progress 1/4, 2/4, 3/4, 1 over [0.1, 1].
  const double half_sqrt2 = std::sqrt(2.0) / 2;
  const double expected[] = {
      0.0, 0.5, 1.0, 0.1 + 0.45 * (1 + half_sqrt2), 0.55, 0.1 + 0.45 * (1 - half_sqrt2),
      0.1, 0.1, 0.1};
  for (int s = 0; s < 9; ++s) {
    INFO("step " << s);
    CHECK(opt.param_groups()[0].options.at("lr") == Approx(expected[s]).margin(1e-15));
    schedule.step();
  }
}

TEST_CASE("CosineWithWarmup: no warmup and min_lr 0") {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.4});
  optim::CosineWithWarmup schedule(opt, 0, 4);
  const double expected[] = {0.4, 0.2 * (1 + std::cos(std::numbers::pi / 4)), 0.2,
                             0.2 * (1 + std::cos(3 * std::numbers::pi / 4)), 0.0};
  for (int s = 0; s < 5; ++s) {
    INFO("step " << s);
    CHECK(schedule.get_last_lr()[0] == Approx(expected[s]).margin(1e-15));
    schedule.step();
  }
}

TEST_CASE("LR schedulers: a skipped optimizer step keeps the lr") {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR schedule(opt, 2, 0.5);
  schedule.step();
  schedule.step(/*optimizer_stepped=*/false);
  schedule.step(/*optimizer_stepped=*/false);
  CHECK(schedule.last_epoch() == 1);
  CHECK(opt.param_groups()[0].options.at("lr") == 1.0);
  schedule.step();
  CHECK(opt.param_groups()[0].options.at("lr") == 0.5);

  optim::SGD opt2({p}, {.lr = 1.0});
  optim::CosineWithWarmup warmup(opt2, 4, 8);
  warmup.step();
  CHECK(warmup.get_last_lr()[0] == 0.25);
  warmup.step(false);
  CHECK(warmup.get_last_lr()[0] == 0.25);
  CHECK(opt2.param_groups()[0].options.at("lr") == 0.25);
  warmup.step();
  CHECK(warmup.get_last_lr()[0] == 0.5);
}

TEST_CASE("LR schedulers: bad arguments are errors") {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 1.0});
  CHECK_THROWS_WITH(optim::StepLR(opt, 0), Contains("expected step_size >= 1, got 0"));
  CHECK_THROWS_WITH(optim::CosineWithWarmup(opt, 5, 4),
                    Contains("got warmup_steps 5 and total_steps 4"));
  CHECK_THROWS_WITH(optim::CosineWithWarmup(opt, 0, 4, -1), Contains("expected min_lr >= 0"));
  CHECK(opt.param_groups()[0].options.at("lr") == 1.0);
}

TEST_CASE("LR schedulers: state_dict round trip resumes the schedule") {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::CosineWithWarmup schedule(opt, 2, 10, 0.01);
  for (int s = 0; s < 5; ++s) schedule.step();
  const optim::LRSchedulerStateDict saved = schedule.state_dict();
  CHECK(saved.last_epoch == 5);
  CHECK(saved.base_lrs == std::vector<double>{1.0});

  optim::SGD opt2({p}, {.lr = 0.3});
  optim::CosineWithWarmup resumed(opt2, 2, 10, 0.01);
  resumed.load_state_dict(saved);
  CHECK(opt2.param_groups()[0].options.at("lr") == opt.param_groups()[0].options.at("lr"));
  schedule.step();
  resumed.step();
  CHECK(resumed.get_last_lr() == schedule.get_last_lr());
  CHECK(resumed.last_epoch() == 6);

  optim::LRSchedulerStateDict bad = saved;
  bad.base_lrs.push_back(1.0);
  CHECK_THROWS_WITH(resumed.load_state_dict(bad), Contains("expected 1 base lrs"));
  CHECK(resumed.last_epoch() == 6);
}

namespace {

// An optimizer with an lr and nothing else: no momentum to cycle.
struct PlainOptimizer : optim::Optimizer {
  explicit PlainOptimizer(std::vector<Tensor> params)
      : Optimizer({optim::ParamGroup{std::move(params), {}}}, {{"lr", 0.1}}) {}
  void step() override {}
};

}  // namespace

TEST_CASE("PolynomialLR CosineAnnealingWarmRestarts CyclicLR: bad arguments are errors",
          "[optim][lr_scheduler][errors]") {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 1.0, .momentum = 0.9});
  CHECK_THROWS_WITH(optim::PolynomialLR(opt, 0), Contains("expected total_iters >= 1, got 0"));
  CHECK_THROWS_WITH(optim::PolynomialLR(opt, 5, -1.0), Contains("expected power >= 0, got -1"));
  CHECK_THROWS_WITH(optim::CosineAnnealingWarmRestarts(opt, 0),
                    Contains("expected a positive integer T_0, got 0"));
  CHECK_THROWS_WITH(optim::CosineAnnealingWarmRestarts(opt, 2, 0),
                    Contains("expected an integer T_mult >= 1, got 0"));
  CHECK_THROWS_WITH(optim::CyclicLR(opt, {.base_lr = {0.1}, .max_lr = {1.0}, .mode = "sawtooth"}),
                    Contains("expected mode \"triangular\", \"triangular2\" or \"exp_range\"") &&
                        Contains("got \"sawtooth\""));
  CHECK_THROWS_WITH(
      optim::CyclicLR(opt, {.base_lr = {0.1}, .max_lr = {1.0}, .scale_mode = "epochs"}),
      Contains("expected scale_mode \"cycle\" or \"iterations\", got \"epochs\""));
  CHECK_THROWS_WITH(optim::CyclicLR(opt, {.base_lr = {0.1}, .max_lr = {1.0}, .step_size_up = 0}),
                    Contains("expected step_size_up >= 1 and step_size_down >= 0, got 0 and 0"));
  CHECK_THROWS_WITH(optim::CyclicLR(opt, {.base_lr = {0.1, 0.2}, .max_lr = {1.0}}),
                    Contains("one base_lr or one per param group (1), got 2"));
  CHECK_THROWS_WITH(optim::CyclicLR(opt, {.base_lr = {0.1}, .max_lr = {}}),
                    Contains("one max_lr or one per param group (1), got 0"));
  // Nothing was changed by the refused constructions.
  CHECK(opt.param_groups()[0].options.at("lr") == 1.0);
  CHECK(opt.param_groups()[0].options.at("momentum") == 0.9);
  CHECK_FALSE(opt.param_groups()[0].initial_lr.has_value());

  // torch's error for cycle_momentum on an optimizer without a momentum; without it, it runs.
  PlainOptimizer plain({param()});
  CHECK_THROWS_WITH(optim::CyclicLR(plain, {.base_lr = {0.01}, .max_lr = {0.1}}),
                    Contains("CyclicLR: cycle_momentum needs an optimizer with a momentum"));
  CHECK(plain.param_groups()[0].options.at("lr") == 0.1);
  optim::CyclicLR no_momentum(
      plain, {.base_lr = {0.01}, .max_lr = {0.1}, .step_size_up = 2, .cycle_momentum = false});
  CHECK(plain.param_groups()[0].options.at("lr") == 0.01);  // torch sets the lr to base_lr
  CHECK(*plain.param_groups()[0].initial_lr == 0.01);
  no_momentum.step();
  CHECK(plain.param_groups()[0].options.at("lr") == Approx(0.055).epsilon(1e-15));

  optim::CosineAnnealingWarmRestarts warm(opt, 4);
  warm.step();
  CHECK_THROWS_WITH(warm.step(-1.0), Contains("expected a non-negative epoch, got -1"));
  CHECK_THROWS_WITH(warm.step(std::nan("")), Contains("expected a non-negative epoch, got nan"));
  CHECK(warm.last_epoch() == 1);
  CHECK(warm.T_cur() == 1.0);
  CHECK(opt.param_groups()[0].options.at("lr") ==
        Approx(0.5 * (1 + std::cos(std::numbers::pi / 4))));
}

TEST_CASE("CosineAnnealingWarmRestarts: state_dict keeps T_cur and T_i after step(epoch)",
          "[optim][lr_scheduler]") {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::CosineAnnealingWarmRestarts warm(opt, /*T_0=*/2, /*T_mult=*/3, /*eta_min=*/0.1);
  warm.step();
  warm.step(9.5);  // the third cycle (lengths 2, 6, 18) starts at 8: T_cur 1.5, T_i 18
  warm.step();
  CHECK(warm.T_cur() == 2.5);
  CHECK(warm.T_i() == 18);
  const optim::LRSchedulerStateDict saved = warm.state_dict();
  CHECK(saved.last_epoch == 10);
  CHECK(saved.extra == std::map<std::string, double>{{"T_cur", 2.5}, {"T_i", 18.0}});

  optim::SGD opt2({p}, {.lr = 1.0});
  optim::CosineAnnealingWarmRestarts resumed(opt2, 2, 3, 0.1);
  resumed.load_state_dict(saved);
  CHECK(resumed.T_cur() == 2.5);
  CHECK(opt2.param_groups()[0].options.at("lr") == opt.param_groups()[0].options.at("lr"));
  for (int s = 0; s < 20; ++s) {
    warm.step();
    resumed.step();
    CHECK(resumed.get_last_lr() == warm.get_last_lr());
  }

  // Counters that do not fit, or a state with counters into a schedule without them: errors
  // that change nothing.
  optim::LRSchedulerStateDict bad = saved;
  bad.extra["T_i"] = 0;
  CHECK_THROWS_WITH(resumed.load_state_dict(bad), Contains("expected an integer T_i >= 1, got 0"));
  bad.extra = {{"T_cur", 1.0}};
  CHECK_THROWS_WITH(resumed.load_state_dict(bad), Contains("expected the counters T_cur and T_i"));
  CHECK(resumed.get_last_lr() == warm.get_last_lr());
  optim::StepLR step_lr(opt2, 2);
  CHECK_THROWS_WITH(step_lr.load_state_dict(saved),
                    Contains("StepLR load_state_dict: expected no state beyond the step count") &&
                        Contains("\"T_cur\""));
  CHECK(step_lr.last_epoch() == 0);
  CHECK(std::string(warm.name()) == "CosineAnnealingWarmRestarts");
}

TEST_CASE("OneCycleLR and CyclicLR: state_dict round trips and refuses a step past the end",
          "[optim][lr_scheduler]") {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 1.0, .momentum = 0.9});
  optim::CyclicLR cyclic(opt, {.base_lr = {0.1}, .max_lr = {1.0}, .step_size_up = 3});
  for (int s = 0; s < 4; ++s) cyclic.step();
  optim::SGD opt2({p}, {.lr = 1.0, .momentum = 0.5});
  optim::CyclicLR resumed(opt2, {.base_lr = {0.1}, .max_lr = {1.0}, .step_size_up = 3});
  resumed.load_state_dict(cyclic.state_dict());
  CHECK(opt2.param_groups()[0].options == opt.param_groups()[0].options);  // the momentum too

  optim::SGD opt3({p}, {.lr = 1.0, .momentum = 0.9});
  optim::OneCycleLR one_cycle(opt3, {.max_lr = {1.0}, .total_steps = 10});
  optim::LRSchedulerStateDict past_end = one_cycle.state_dict();
  past_end.last_epoch = 11;
  const auto options_before = opt3.param_groups()[0].options;
  CHECK_THROWS_WITH(one_cycle.check_state_dict(past_end), Contains("tried to step 11 times"));
  CHECK_THROWS_WITH(one_cycle.load_state_dict(past_end), Contains("tried to step 11 times"));
  CHECK(one_cycle.last_epoch() == 0);
  CHECK(opt3.param_groups()[0].options == options_before);
}
