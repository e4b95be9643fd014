// The LR schedules against PyTorch step by step: twin/lr_schedules.py made the same schedules
// with torch (1.13, Debian's python3-torch; 2.15 for PolynomialLR, CosineAnnealingWarmRestarts
// and CyclicLR) and printed every group's lr (and momentum where it cycles) after construction
// and after each step into twin/lr_schedules.txt, read here.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "halfgrad/halfgrad.h"
#include "halfgrad/optim/optim.h"

using namespace hg;
using Catch::Contains;

namespace {

using Rows = std::vector<std::vector<double>>;  // per step: the printed values

// name -> rows, from the twin's output.
std::map<std::string, Rows> golden() {
  std::ifstream file(std::string(HG_TESTS_SOURCE_DIR) + "/optim/twin/lr_schedules.txt");
  REQUIRE(file.good());
  std::map<std::string, Rows> out;
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string name;
    int64_t step = 0;
    in >> name >> step;
    std::vector<double> values;
    for (std::string word; in >> word;) values.push_back(std::stod(word));
    Rows& rows = out[name];
    REQUIRE(int64_t(rows.size()) == step);
    rows.push_back(values);
  }
  return out;
}

const std::map<std::string, Rows>& twin() {
  static const std::map<std::string, Rows> rows = golden();
  return rows;
}

// The twin's two groups: lr 0.1 and 0.02.
std::vector<optim::ParamGroup> two_groups() {
  return {{{zeros({2}).requires_grad_()}, {{"lr", 0.1}}},
          {{zeros({3}).requires_grad_()}, {{"lr", 0.02}}}};
}

std::unique_ptr<optim::SGD> sgd() {
  return std::make_unique<optim::SGD>(two_groups(), optim::SGDOptions{.momentum = 0.9});
}

// The values the twin printed at one step: every group's lr, then every group's momentum.
std::vector<double> observed(const optim::Optimizer& opt, const char* momentum) {
  std::vector<double> values;
  for (const auto& group : opt.param_groups()) values.push_back(group.options.at("lr"));
  if (momentum != nullptr) {
    for (const auto& group : opt.param_groups()) values.push_back(group.options.at(momentum));
  }
  return values;
}

void check_row(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i, got[i], want[i]);
    CHECK(got[i] == Approx(want[i]).epsilon(1e-12).margin(1e-18));
  }
}

// Steps `advance` as often as the twin did, comparing after construction and each step.
template <class Advance>
void follow(const std::string& name, const optim::Optimizer& opt, Advance advance,
            const char* momentum = nullptr) {
  const Rows& rows = twin().at(name);
  REQUIRE(rows.size() > 1);
  for (size_t k = 0; k < rows.size(); ++k) {
    CAPTURE(name, k);
    if (k > 0) advance(k);
    check_row(observed(opt, momentum), rows[k]);
  }
}

template <class Scheduler>
void follow_scheduler(const std::string& name, const optim::Optimizer& opt, Scheduler& s,
                      const char* momentum = nullptr) {
  follow(
      name, opt, [&](size_t) { s.step(); }, momentum);
}

}  // namespace

TEST_CASE("LambdaLR MultiStepLR ExponentialLR follow torch", "[optim][lr_scheduler]") {
  auto a = sgd();
  optim::LambdaLR lambda(
      *a, std::vector<optim::LambdaLR::Lambda>{[](int64_t e) { return std::pow(0.95, double(e)); },
                                               [](int64_t e) { return 1.0 / double(e + 1); }});
  follow_scheduler("lambda", *a, lambda);
  auto b = sgd();
  optim::MultiStepLR multistep(*b, {7, 3, 7}, 0.5);  // unsorted, 7 twice: decays twice
  follow_scheduler("multistep", *b, multistep);
  auto c = sgd();
  optim::ExponentialLR exponential(*c, 0.9);
  follow_scheduler("exponential", *c, exponential);
}

TEST_CASE("CosineAnnealingLR and LinearLR follow torch", "[optim][lr_scheduler]") {
  auto a = sgd();
  optim::CosineAnnealingLR cosine(*a, 5, 0.001);  // 16 steps: back up past T_max
  follow_scheduler("cosine", *a, cosine);
  auto b = sgd();
  optim::LinearLR linear(*b, 0.25, 1.0, 4);
  follow_scheduler("linear", *b, linear);
}

TEST_CASE("OneCycleLR follows torch, momentum included", "[optim][lr_scheduler]") {
  auto a = sgd();
  optim::OneCycleLR one_cycle(*a, {.max_lr = {0.5, 0.1}, .total_steps = 20});
  follow_scheduler("onecycle", *a, one_cycle, "momentum");
  // One more step is the last torch allows; a second is an error that changes nothing.
  one_cycle.step();
  const std::vector<double> before = observed(*a, "momentum");
  CHECK_THROWS_WITH(one_cycle.step(), Contains("tried to step 21 times") && Contains("20"));
  CHECK(observed(*a, "momentum") == before);
  CHECK(one_cycle.last_epoch() == 20);

  optim::Adam adam(two_groups());
  optim::OneCycleLR three(adam, {.max_lr = {0.3},
                                 .total_steps = 15,
                                 .pct_start = 0.25,
                                 .anneal_strategy = "linear",
                                 .base_momentum = 0.8,
                                 .max_momentum = 0.9,
                                 .div_factor = 10.0,
                                 .final_div_factor = 100.0,
                                 .three_phase = true});
  follow_scheduler("onecycle_three_phase", adam, three, "beta1");
}

TEST_CASE("SequentialLR follows torch", "[optim][lr_scheduler]") {
  auto a = sgd();
  auto warmup = std::make_shared<optim::LinearLR>(*a, 0.1, 1.0, 3);
  auto decay = std::make_shared<optim::ExponentialLR>(*a, 0.8);
  optim::SequentialLR sequential(*a, {warmup, decay}, {3});
  follow_scheduler("sequential", *a, sequential);
  auto b = sgd();
  auto first = std::make_shared<optim::ExponentialLR>(*b, 0.5);
  auto second = std::make_shared<optim::CosineAnnealingLR>(*b, 4);
  optim::SequentialLR then(*b, {first, second}, {2});
  follow_scheduler("sequential_cosine", *b, then);
}

TEST_CASE("PolynomialLR follows torch", "[optim][lr_scheduler]") {
  auto a = sgd();
  optim::PolynomialLR squared(*a, /*total_iters=*/6, /*power=*/2.0);  // 9 steps: 0 past the end
  follow_scheduler("polynomial", *a, squared);
  auto b = sgd();
  optim::PolynomialLR linear(*b);  // total_iters 5, power 1
  follow_scheduler("polynomial_default", *b, linear);
}

TEST_CASE("CosineAnnealingWarmRestarts follows torch with step() and step(epoch)",
          "[optim][lr_scheduler]") {
  // The twin's steps: 0 is step() with no argument, anything else step(epoch).
  const std::vector<double> epochs = {0, 0, 0,    0, 0, 0,  0, 0,    12.5, 0,
                                      0, 0, 2.25, 0, 0, 40, 0, 0.75, 0};
  auto advance = [&](optim::CosineAnnealingWarmRestarts& warm) {
    return [&warm, &epochs](size_t k) {
      const double epoch = epochs[k - 1];
      if (epoch == 0) {
        warm.step();
      } else if (epoch == std::floor(epoch)) {
        warm.step(int64_t(epoch));  // an integer epoch is an epoch, not a bool
      } else {
        warm.step(epoch);
      }
    };
  };
  auto a = sgd();
  optim::CosineAnnealingWarmRestarts doubling(*a, /*T_0=*/3, /*T_mult=*/2, /*eta_min=*/0.001);
  follow("warm_restarts_mult2", *a, advance(doubling));
  // After step(0.75) and one step(): T_cur 1.75 in the first cycle, last_epoch floor(0.75) + 1.
  CHECK(doubling.T_cur() == 1.75);
  CHECK(doubling.T_i() == 3);
  CHECK(doubling.last_epoch() == 1);
  auto b = sgd();
  optim::CosineAnnealingWarmRestarts constant(*b, /*T_0=*/4);
  follow("warm_restarts", *b, advance(constant));
}

TEST_CASE("CyclicLR follows torch, momentum included", "[optim][lr_scheduler]") {
  auto a = sgd();
  optim::CyclicLR triangular(
      *a,
      {.base_lr = {0.01, 0.002}, .max_lr = {0.1, 0.05}, .step_size_up = 4, .step_size_down = 2});
  follow_scheduler("cyclic_triangular", *a, triangular, "momentum");

  optim::Adam adam(two_groups());
  optim::CyclicLR halving(adam, {.base_lr = {0.001},
                                 .max_lr = {0.01},
                                 .step_size_up = 3,
                                 .mode = "triangular2",
                                 .base_momentum = {0.85},
                                 .max_momentum = {0.95}});
  follow_scheduler("cyclic_triangular2", adam, halving, "beta1");

  auto b = sgd();
  optim::CyclicLR exp_range(*b, {.base_lr = {0.01},
                                 .max_lr = {0.1, 0.05},
                                 .step_size_up = 2,
                                 .step_size_down = 3,
                                 .mode = "exp_range",
                                 .gamma = 0.9,
                                 .cycle_momentum = false});
  follow_scheduler("cyclic_exp_range", *b, exp_range);
  CHECK(b->param_groups()[0].options.at("momentum") == 0.9);  // not cycled

  auto c = sgd();
  optim::CyclicLR by_step(*c, {.base_lr = {0.01},
                               .max_lr = {0.1},
                               .step_size_up = 3,
                               .step_size_down = 1,
                               .scale_fn = [](double x) { return 1.0 / (1.0 + 0.1 * x); },
                               .scale_mode = "iterations",
                               .base_momentum = {0.7, 0.8},
                               .max_momentum = {0.95, 0.9}});
  follow_scheduler("cyclic_scale_fn_iterations", *c, by_step, "momentum");

  auto d = sgd();
  optim::CyclicLR by_cycle(*d, {.base_lr = {0.01},
                                .max_lr = {0.1},
                                .step_size_up = 2,
                                .mode = "exp_range",  // ignored: scale_fn replaces the mode
                                .scale_fn = [](double cycle) { return 1.0 / cycle; },
                                .cycle_momentum = false});
  follow_scheduler("cyclic_scale_fn_cycle", *d, by_cycle);
}

TEST_CASE("ReduceLROnPlateau follows torch", "[optim][lr_scheduler]") {
  const std::vector<double> metrics = twin().at("metrics").at(0);
  auto a = sgd();
  optim::ReduceLROnPlateau min_mode(
      *a, {.factor = 0.5, .patience = 2, .threshold = 0.05, .cooldown = 1, .min_lr = {0.02, 0.0}});
  follow("plateau_min", *a, [&](size_t k) { min_mode.step(metrics[k - 1]); });
  auto b = sgd();
  optim::ReduceLROnPlateau max_mode(*b, {.mode = "max",
                                         .factor = 0.1,
                                         .patience = 1,
                                         .threshold = 0.02,
                                         .threshold_mode = "abs",
                                         .eps = 1e-3});
  follow("plateau_max_abs", *b, [&](size_t k) { max_mode.step(-metrics[k - 1]); });
}

TEST_CASE("no schedule advances on a skipped optimizer step", "[optim][lr_scheduler]") {
  // Skipped steps interleaved with the twin's steps leave the same sequence.
  auto a = sgd();
  optim::OneCycleLR one_cycle(*a, {.max_lr = {0.5, 0.1}, .total_steps = 20});
  follow(
      "onecycle", *a,
      [&](size_t) {
        one_cycle.step(/*optimizer_stepped=*/false);
        one_cycle.step();
      },
      "momentum");
  const std::vector<double> metrics = twin().at("metrics").at(0);
  auto b = sgd();
  optim::ReduceLROnPlateau plateau(
      *b, {.factor = 0.5, .patience = 2, .threshold = 0.05, .cooldown = 1, .min_lr = {0.02, 0.0}});
  follow("plateau_min", *b, [&](size_t k) {
    plateau.step(1e9, /*optimizer_stepped=*/false);  // a terrible metric, not counted
    plateau.step(metrics[k - 1]);
  });
  CHECK(plateau.last_epoch() == int64_t(metrics.size()));
}

TEST_CASE("the new schedules refuse bad arguments", "[optim][lr_scheduler][errors]") {
  auto a = sgd();
  CHECK_THROWS_WITH(optim::LinearLR(*a, 0.0), Contains("expected start_factor in (0, 1], got 0"));
  CHECK_THROWS_WITH(optim::LinearLR(*a, 0.5, 1.5), Contains("end_factor in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(optim::CosineAnnealingLR(*a, 0), Contains("T_max >= 1, got 0"));
  CHECK_THROWS_WITH(
      optim::LambdaLR(*a, std::vector<optim::LambdaLR::Lambda>{[](int64_t) { return 1.0; }}),
      Contains("expected 2 lr_lambdas"));
  CHECK_THROWS_WITH(optim::OneCycleLR(*a, {.max_lr = {0.1, 0.2, 0.3}, .total_steps = 5}),
                    Contains("one max_lr or one per param group (2), got 3"));
  CHECK_THROWS_WITH(optim::OneCycleLR(*a, {.max_lr = {0.1}}), Contains("total_steps > 0"));
  CHECK_THROWS_WITH(
      optim::OneCycleLR(*a, {.max_lr = {0.1}, .total_steps = 5, .anneal_strategy = "step"}),
      Contains("anneal_strategy"));
  CHECK_THROWS_WITH(optim::ReduceLROnPlateau(*a, {.factor = 1.0}),
                    Contains("expected factor in [0, 1), got 1"));
  CHECK_THROWS_WITH(optim::ReduceLROnPlateau(*a, {.mode = "lowest"}), Contains("mode"));
  auto other = sgd();
  auto foreign = std::make_shared<optim::ExponentialLR>(*other, 0.5);
  auto own = std::make_shared<optim::ExponentialLR>(*a, 0.5);
  CHECK_THROWS_WITH(optim::SequentialLR(*a, {own, foreign}, {2}),
                    Contains("scheduler 1 belongs to another optimizer"));
  CHECK_THROWS_WITH(optim::SequentialLR(*a, {own}, {2}), Contains("one milestone fewer"));
  // An optimizer without a momentum option cannot cycle it.
  struct Plain : optim::Optimizer {
    explicit Plain(std::vector<Tensor> params)
        : Optimizer({optim::ParamGroup{std::move(params), {}}}, {{"lr", 0.1}}) {}
    void step() override {}
  } plain({zeros({1}).requires_grad_()});
  CHECK_THROWS_WITH(optim::OneCycleLR(plain, {.max_lr = {0.1}, .total_steps = 5}),
                    Contains("cycle_momentum needs an optimizer with a momentum"));
}
