// The bf16_params option of SGD, Adam, AdamW, RMSprop and Adagrad (NOTE [bf16_params] in
// optim/fused.h): each new value is a bfloat16 neighbour of the float64 reference update
// (tests/optim/reference.h), the
// rounding is unbiased over many elements, the state is float32, the draws are reproducible;
// a least-squares run where round-to-nearest bfloat16 weights stall while stochastic rounding
// tracks the float32 run; the errors.
#include <catch2/catch.hpp>

#include <cmath>

#include "reference.h"

using namespace hg;
using namespace optim_test;
using Catch::Contains;

namespace {

// The spacing of bfloat16 values at x (normal range).
double bfloat16_ulp(double x) { return std::ldexp(1.0, std::ilogb(x) - 7); }

// One step's check: every new value lies within one bfloat16 spacing of the float64 reference
// value `want` (so it is one of the two neighbours), and the mean signed error, in spacings,
// is zero within 5 binomial standard errors (each error has variance at most 1/4).
void check_stochastic_step(const Values& got, const Values& want) {
  REQUIRE(got.size() == want.size());
  double error_sum = 0;
  int64_t off_grid = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double ulp = bfloat16_ulp(want[i]);
    const double error = (got[i] - want[i]) / ulp;
    off_grid += std::abs(error) < 1.0 + 1e-3 ? 0 : 1;
    error_sum += error;
  }
  CHECK(off_grid == 0);
  const double n = double(got.size());
  CHECK(std::abs(error_sum / n) <= 5 * 0.5 / std::sqrt(n));
}

// Parameters in [-1, -0.25) and [0.25, 1): updates of lr ~ 1e-3 are a fraction of their
// bfloat16 spacing (2^-9 .. 2^-8), where round to nearest would mostly drop them.
Values bfloat16_values(uint32_t seed, int64_t n) {
  Values v = random_values(seed, n, kBFloat16, 0.25, 1);
  for (size_t i = 0; i < v.size(); i += 2) v[i] = -v[i];
  return v;
}

constexpr int64_t kElements = 20000;

// State buffer `name` of the optimizer's one parameter: float32 (bf16_params keeps no bfloat16
// state) and within `tolerance` of the float64 reference's values.
void check_float32_state(const optim::Optimizer& opt, const char* name, const Values& reference,
                         double tolerance = 1e-6) {
  INFO("state " << name);
  const Tensor& buffer = opt.state(0, 0).buffers.at(name);
  CHECK(buffer.dtype() == kFloat32);
  CHECK(close(values_of(buffer), reference, tolerance));
}

// Three steps of `opt` (over the one parameter `p`, drawing from `gen`) against its float64
// `reference`, each from the stored bfloat16 values: every new value is a bfloat16 neighbour
// of the reference's, the rounding is unbiased, and each step draws one Philox word per
// element (a 4-word block per 4 elements).
template <class Reference>
void check_three_steps(optim::Optimizer& opt, Reference& reference, const Tensor& p,
                       const Generator& gen, uint32_t grad_seed) {
  for (int s = 0; s < 3; ++s) {
    INFO("step " << s);
    const Values grad = random_values(grad_seed + uint32_t(s), kElements, kBFloat16);
    reference.p = values_of(p);
    set_grad(p, grad);
    opt.step();
    reference.step(grad);
    check_stochastic_step(values_of(p), reference.p);
    CHECK(gen.offset() == uint64_t(s + 1) * (kElements / 4));
  }
}

}  // namespace

TEST_CASE("SGD bf16_params rounds the float32 update stochastically", "[optim][bf16_params]") {
  for (const double momentum : {0.0, 0.9}) {
    INFO("momentum " << momentum);
    const SGDConfig c{.lr = 1e-3, .momentum = momentum, .weight_decay = 0.01};
    Tensor p = make_param(bfloat16_values(1, kElements), kBFloat16);
    Generator gen(17);
    optim::SGD opt({p}, {.lr = c.lr,
                         .momentum = c.momentum,
                         .weight_decay = c.weight_decay,
                         .bf16_params = true,
                         .generator = &gen});
    ReferenceSGD reference{c, kFloat64, {}, {}};
    check_three_steps(opt, reference, p, gen, 50);
    if (momentum != 0) check_float32_state(opt, "momentum_buffer", reference.buffer);
  }
}

TEST_CASE("Adam and AdamW bf16_params round the float32 update stochastically",
          "[optim][bf16_params]") {
  for (const bool decoupled : {false, true}) {
    for (const bool amsgrad : {false, true}) {
      INFO((decoupled ? "AdamW" : "Adam") << (amsgrad ? " amsgrad" : ""));
      const AdamConfig c{.lr = 2e-4,
                         .weight_decay = 0.01,
                         .amsgrad = amsgrad,
                         .decoupled = decoupled};
      Tensor p = make_param(bfloat16_values(2, kElements), kBFloat16);
      Generator gen(18);
      std::unique_ptr<optim::Optimizer> opt;
      if (decoupled) {
        opt = std::make_unique<optim::AdamW>(
            std::vector<Tensor>{p},
            optim::AdamWOptions{.lr = c.lr,
                                .weight_decay = c.weight_decay,
                                .amsgrad = amsgrad,
                                .bf16_params = true,
                                .generator = &gen});
      } else {
        opt = std::make_unique<optim::Adam>(
            std::vector<Tensor>{p}, optim::AdamOptions{.lr = c.lr,
                                                       .weight_decay = c.weight_decay,
                                                       .amsgrad = amsgrad,
                                                       .bf16_params = true,
                                                       .generator = &gen});
      }
      ReferenceAdam reference{c, kFloat64, kFloat32, {}, {}, {}, {}};
      check_three_steps(*opt, reference, p, gen, 60);
      check_float32_state(*opt, "exp_avg", reference.exp_avg);
      check_float32_state(*opt, "exp_avg_sq", reference.exp_avg_sq);
    }
  }
}

TEST_CASE("RMSprop bf16_params rounds the float32 update stochastically", "[optim][bf16_params]") {
  for (const double momentum : {0.0, 0.9}) {
    for (const bool centered : {false, true}) {
      INFO("momentum " << momentum << (centered ? " centered" : ""));
      // Each update is about lr / sqrt(1 - alpha) = 1e-3 on the first step, below the spacing.
      const optim::RMSpropOptions c{.lr = 1e-4,
                                    .weight_decay = 0.01,
                                    .momentum = momentum,
                                    .centered = centered};
      Tensor p = make_param(bfloat16_values(5, kElements), kBFloat16);
      Generator gen(19);
      optim::RMSpropOptions options = c;
      options.bf16_params = true;
      options.generator = &gen;
      optim::RMSprop opt({p}, options);
      ReferenceRMSprop reference{c, kFloat64, kFloat32, {}, {}, {}, {}};
      check_three_steps(opt, reference, p, gen, 70);
      check_float32_state(opt, "square_avg", reference.square_avg);
      if (centered) check_float32_state(opt, "grad_avg", reference.grad_avg);
      // Its terms g / avg are up to 1 / sqrt(1 - alpha) = 10 and may cancel: float32's error is
      // relative to 10, not to the sum.
      if (momentum != 0) check_float32_state(opt, "momentum_buffer", reference.buffer, 1e-5);
    }
  }
}

TEST_CASE("Adagrad bf16_params rounds the float32 update stochastically", "[optim][bf16_params]") {
  const optim::AdagradOptions c{.lr = 1e-3,
                                .lr_decay = 0.1,
                                .weight_decay = 0.01,
                                .initial_accumulator_value = 0.1};
  Tensor p = make_param(bfloat16_values(6, kElements), kBFloat16);
  Generator gen(20);
  optim::AdagradOptions options = c;
  options.bf16_params = true;
  options.generator = &gen;
  optim::Adagrad opt({p}, options);
  // The state made at construction is float32 too.
  CHECK(opt.state(0, 0).buffers.at("sum").dtype() == kFloat32);
  ReferenceAdagrad reference{c, kFloat64, kFloat32, {}, {}};
  check_three_steps(opt, reference, p, gen, 80);
  check_float32_state(opt, "sum", reference.sum);
}

TEST_CASE("bf16_params steps are reproducible from the generator's seed", "[optim][bf16_params]") {
  const Values initial = bfloat16_values(3, 1001);
  const Values grad = random_values(4, 1001, kBFloat16);
  auto run = [&](uint64_t seed) {
    Tensor p = make_param(initial, kBFloat16);
    Generator gen(seed);
    optim::AdamW opt({p}, {.lr = 1e-3, .bf16_params = true, .generator = &gen});
    for (int s = 0; s < 2; ++s) {
      set_grad(p, grad);
      opt.step();
    }
    return bytes_of(p);
  };
  CHECK(run(5) == run(5));
  CHECK(run(5) != run(6));
  // Without a generator the default one is drawn from.
  Tensor p = make_param(initial, kBFloat16);
  optim::SGD opt({p}, {.lr = 1e-3, .bf16_params = true});
  manual_seed(9);
  set_grad(p, grad);
  opt.step();
  CHECK(default_generator().offset() == (1001 + 3) / 4);
}

TEST_CASE("round-to-nearest bfloat16 weights stall where bf16_params tracks float32",
          "[optim][bf16_params]") {
  // Least squares: loss = |X w - y|^2 / n, w starts at 1, the target is 1 + 0.5 * randn. The
  // gradient, 2 / n * X^T (X w - y), is computed in float32 from each run's weights and stored
  // in the parameter's dtype. lr * |g| stays below 2^-9, half the bfloat16 spacing below 1, so
  // the round-to-nearest run never moves.
  constexpr int64_t kDims = 16, kSamples = 64;
  constexpr int kSteps = 3000;
  constexpr double kLr = 7e-4;
  manual_seed(21);
  const Tensor x = randn({kSamples, kDims});
  const Tensor target = add(mul(randn({kDims, 1}), 0.5), 1.0);
  const Tensor y = matmul(x, target);
  auto gradient = [&](const Tensor& w) {
    NoGradGuard no_grad;
    const Tensor residual = sub(matmul(x, w.to(kFloat32)), y);
    return mul(matmul(x.t(), residual), 2.0 / kSamples).to(w.dtype());
  };
  Tensor w32 = ones({kDims, 1}).requires_grad_();
  Tensor nearest = ones({kDims, 1}, {.dtype = kBFloat16}).requires_grad_();
  Tensor stochastic = ones({kDims, 1}, {.dtype = kBFloat16}).requires_grad_();
  Generator gen(31);
  optim::SGD opt32({w32}, {.lr = kLr});
  optim::SGD opt_nearest({nearest}, {.lr = kLr});
  optim::SGD opt_stochastic({stochastic}, {.lr = kLr, .bf16_params = true, .generator = &gen});
  double largest_update = 0;
  for (int s = 0; s < kSteps; ++s) {
    w32.mutable_grad() = gradient(w32);
    nearest.mutable_grad() = gradient(nearest);
    stochastic.mutable_grad() = gradient(stochastic);
    for (const double g : values_of(nearest.grad())) {
      largest_update = std::max(largest_update, kLr * std::abs(g));
    }
    opt32.step();
    opt_nearest.step();
    opt_stochastic.step();
  }
  REQUIRE(largest_update < std::ldexp(1.0, -9));
  // Round to nearest: every update was dropped.
  for (const double v : values_of(nearest)) CHECK(v == 1.0);
  const auto distance = [](const Tensor& a, const Tensor& b) {
    const Tensor difference = sub(a.to(kFloat64), b.to(kFloat64));
    return std::sqrt(sum(mul(difference, difference)).item<double>());
  };
  NoGradGuard no_grad;
  const double travelled = distance(w32, ones({kDims, 1}));
  const double stochastic_gap = distance(stochastic, w32);
  const double nearest_gap = distance(nearest, w32);
  INFO("float32 travelled " << travelled << ", stochastic gap " << stochastic_gap
                            << ", nearest gap " << nearest_gap);
  CHECK(travelled > 1.0);
  CHECK(stochastic_gap < 0.1 * travelled);
  CHECK(stochastic_gap < 0.1 * nearest_gap);
}

TEST_CASE("bf16_params refuses parameters of other dtypes", "[optim][bf16_params]") {
  const Tensor p32 = zeros({3}).requires_grad_();
  const Tensor p16 = zeros({3}, kBFloat16).requires_grad_();
  CHECK_THROWS_WITH(optim::SGD({p16, p32}, {.bf16_params = true}),
                    Contains("bf16_params expects bfloat16") && Contains("float32") &&
                        Contains("parameter 1"));
  CHECK_THROWS_WITH(optim::Adam({p32}, {.bf16_params = true}),
                    Contains("Adam: bf16_params expects bfloat16") && Contains("float32"));
  CHECK_THROWS_WITH(optim::AdamW({zeros({2}, kFloat16).requires_grad_()}, {.bf16_params = true}),
                    Contains("AdamW: bf16_params expects bfloat16") && Contains("float16"));
  CHECK_THROWS_WITH(optim::RMSprop({p16, p32}, {.bf16_params = true}),
                    Contains("RMSprop: bf16_params expects bfloat16") && Contains("float32") &&
                        Contains("parameter 1"));
  CHECK_THROWS_WITH(optim::Adagrad({zeros({2}, kFloat64).requires_grad_()}, {.bf16_params = true}),
                    Contains("Adagrad: bf16_params expects bfloat16") && Contains("float64"));
  // A group added later is checked at the step, before anything changes.
  const Tensor later = zeros({3}).requires_grad_();
  optim::SGD opt({p16}, {.lr = 0.1, .bf16_params = true});
  opt.add_param_group({{later}, {}});
  p16.mutable_grad() = ones({3}, kBFloat16);
  later.mutable_grad() = ones({3});
  CHECK_THROWS_WITH(opt.step(), Contains("bf16_params expects bfloat16") && Contains("group 1"));
  CHECK(values_of(p16) == Values{0, 0, 0});
}

TEST_CASE("RMSprop and Adagrad bf16_params check groups added later at the step",
          "[optim][bf16_params]") {
  for (const bool adagrad : {false, true}) {
    INFO((adagrad ? "Adagrad" : "RMSprop"));
    const Tensor p16 = zeros({3}, kBFloat16).requires_grad_();
    const Tensor later = zeros({3}).requires_grad_();
    Generator gen(7);
    std::unique_ptr<optim::Optimizer> opt;
    if (adagrad) {
      opt = std::make_unique<optim::Adagrad>(
          std::vector<Tensor>{p16},
          optim::AdagradOptions{.lr = 0.1, .bf16_params = true, .generator = &gen});
    } else {
      opt = std::make_unique<optim::RMSprop>(
          std::vector<Tensor>{p16},
          optim::RMSpropOptions{.lr = 0.1, .bf16_params = true, .generator = &gen});
    }
    opt->add_param_group({{later}, {}});
    p16.mutable_grad() = ones({3}, kBFloat16);
    later.mutable_grad() = ones({3});
    CHECK_THROWS_WITH(opt->step(), Contains(adagrad ? "Adagrad: bf16_params expects bfloat16"
                                                    : "RMSprop: bf16_params expects bfloat16") &&
                                       Contains("float32") && Contains("group 1"));
    // Nothing changed: the parameters, the generator, the step counts.
    CHECK(values_of(p16) == Values{0, 0, 0});
    CHECK(values_of(later) == Values{0, 0, 0});
    CHECK(gen.offset() == 0);
    CHECK(opt->state(0, 0).step == 0);
  }
}
