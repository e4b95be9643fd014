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
