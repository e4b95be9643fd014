// GradScaler: PyTorch's test_grad_scaling scenarios on the CPU. Each scaled run is checked
// against a control run without a scaler that skips the same iterations; the scales are
// powers of two, so scaling and unscaling are exact and the runs agree to the last bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <tuple>

#include "halfgrad/amp/grad_scaler.h"
#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/linalg.h"
#include "halfgrad/ops/loss.h"
#include "halfgrad/optim/optimizer.h"

using namespace hg;
using Catch::Contains;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Plain SGD (p -= lr * grad), so these tests do not depend on optim/'s optimizers.
class TestSGD : public optim::Optimizer {
 public:
  TestSGD(std::vector<Tensor> params, double lr)
      : Optimizer({optim::ParamGroup{std::move(params), {}}}, {{"lr", lr}}) {}
  void step() override {
    NoGradGuard no_grad;
    ++steps;
    for (optim::ParamGroup& group : param_groups()) {
      for (Tensor& p : group.params) {
        if (p.grad().defined()) p.sub_(p.grad(), group.options.at("lr"));
      }
    }
  }
  int steps = 0;
};

// A linear model y = x W^T + b with fp32 parameters drawn from `seed`.
struct Linear {
  Tensor weight, bias;
  Linear(int64_t in, int64_t out, uint64_t seed) {
    Generator gen(seed);
    weight = randn({out, in}, {}, &gen).mul_(0.5).requires_grad_();
    bias = randn({out}, {}, &gen).mul_(0.1).requires_grad_();
  }
  Linear clone() const {
    Linear copy = *this;
    copy.weight = weight.detach().clone().requires_grad_();
    copy.bias = bias.detach().clone().requires_grad_();
    return copy;
  }
  Tensor operator()(const Tensor& x) const { return linear(x, weight, bias); }
  std::vector<Tensor> parameters() const { return {weight, bias}; }
};

struct Batch {
  Tensor x, y;
};

std::vector<Batch> make_data(int64_t batches, int64_t in, int64_t out, uint64_t seed) {
  Generator gen(seed);
  std::vector<Batch> data;
  for (int64_t i = 0; i < batches; ++i) {
    Tensor x = randn({4, in}, {}, &gen);
    Tensor y = randn({4, out}, {}, &gen);
    data.push_back({x, y});
  }
  return data;
}

std::vector<float> values(const Tensor& t) { return t.detach().to_vector<float>(); }

// Bitwise equality of two float32 tensors (NaNs included).
bool bit_identical(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = values(a), vb = values(b);
  return va.size() == vb.size() && std::memcmp(va.data(), vb.data(), va.size() * 4) == 0;
}

void check_close(const Tensor& actual, const Tensor& expected, double rtol = 1e-6,
                 double atol = 1e-7) {
  const std::vector<float> a = values(actual), e = values(expected);
  REQUIRE(a.size() == e.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i << ": " << a[i] << " vs " << e[i]);
    CHECK(std::abs(double(a[i]) - double(e[i])) <= atol + rtol * std::abs(double(e[i])));
  }
}

void set_grad(Tensor& param, std::vector<double> grad) {
  param.mutable_grad() = tensor(std::vector<double>(grad), param.sizes()).to(param.dtype());
}

}  // namespace

TEST_CASE("GradScaler defaults are PyTorch's", "[grad_scaler]") {
  amp::GradScaler scaler;
  CHECK(scaler.is_enabled());
  CHECK(scaler.get_scale() == 65536.0);
  CHECK(scaler.get_growth_factor() == 2.0);
  CHECK(scaler.get_backoff_factor() == 0.5);
  CHECK(scaler.get_growth_interval() == 2000);
  const auto state = scaler.state_dict();
  CHECK(state.at("scale") == 65536.0);
  CHECK(state.at("_growth_tracker") == 0.0);
  CHECK(state.size() == 5);
  CHECK_THROWS_WITH(amp::GradScaler({.growth_factor = 1.0}),
                    Contains("growth factor must be > 1.0"));
  CHECK_THROWS_WITH(amp::GradScaler({.backoff_factor = 1.0}),
                    Contains("backoff factor must be < 1.0"));
  CHECK_THROWS_WITH(amp::GradScaler({.backoff_factor = 0.0}),
                    Contains("backoff factor must be < 1.0 and > 0, got 0"));
  CHECK_THROWS_WITH(amp::GradScaler({.backoff_factor = -0.5}),
                    Contains("backoff factor must be < 1.0 and > 0, got -0.5"));
}

TEST_CASE("GradScaler scale multiplies by a float32 one-element scale", "[grad_scaler]") {
  amp::GradScaler scaler({.init_scale = 4.0});
  const Tensor loss = scalar_tensor(1.5);
  const Tensor scaled = scaler.scale(loss);
  CHECK(scaled.dtype() == kFloat32);
  CHECK(scaled.numel() == 1);
  CHECK(scaled.item<float>() == 6.0f);
  const std::vector<Tensor> many = scaler.scale(std::vector<Tensor>{loss, tensor({1.0, -2.0})});
  REQUIRE(many.size() == 2);
  CHECK(values(many[1]) == std::vector<float>{4.0f, -8.0f});
  // A float64 output stays float64 (the float32 scale is promoted).
  CHECK(scaler.scale(tensor({1.0}, kFloat64)).dtype() == kFloat64);
}

// The update rule step by step (PyTorch's test_grad_scaling_update_scale): init 2,
// interval 3, iterations clean, clean, clean, clean, inf, clean, clean, clean.
TEST_CASE("GradScaler update grows after growth_interval clean steps and backs off on inf",
          "[grad_scaler]") {
  amp::GradScaler scaler({.init_scale = 2.0, .growth_interval = 3});
  Tensor p = zeros({2}).requires_grad_();
  TestSGD opt({p}, 0.0);
  scaler.scale(scalar_tensor(1.0));
  const bool inf_at[] = {false, false, false, false, true, false, false, false};
  const double scale_after[] = {2, 2, 4, 4, 2, 2, 2, 4};
  const double tracker_after[] = {1, 2, 0, 1, 0, 1, 2, 0};
  for (int i = 0; i < 8; ++i) {
    INFO("iteration " << i);
    set_grad(p, {1.0, inf_at[i] ? double(kInf) : 2.0});
    CHECK(scaler.step(opt) == !inf_at[i]);
    CHECK(scaler.last_step_skipped() == inf_at[i]);
    scaler.update();
    CHECK(scaler.get_scale() == scale_after[i]);
    CHECK(scaler.state_dict().at("_growth_tracker") == tracker_after[i]);
  }
  CHECK(opt.steps == 7);
  // update(new_scale) sets the scale as given.
  set_grad(p, {1.0, 1.0});
  scaler.step(opt);
  scaler.update(3.0);
  CHECK(scaler.get_scale() == 3.0);
  // torch's other form: a one-element float32 tensor without grad.
  scaler.step(opt);
  scaler.update(full({1}, 5.0));
  CHECK(scaler.get_scale() == 5.0);
  scaler.step(opt);
  scaler.update(scalar_tensor(0.25));
  CHECK(scaler.get_scale() == 0.25);
  scaler.step(opt);
  CHECK_THROWS_WITH(scaler.update(full({2}, 5.0)),
                    Contains("one-element float32 tensor") && Contains("of shape [2]"));
  CHECK_THROWS_WITH(scaler.update(full({1}, 5.0, kFloat64)), Contains("a float64 tensor"));
  CHECK_THROWS_WITH(scaler.update(full({1}, 5.0).requires_grad_()), Contains("that requires grad"));
  CHECK_THROWS_WITH(scaler.update(full({1}, -1.0)), Contains("new_scale"));
  CHECK(scaler.get_scale() == 0.25);  // refused: the scale as it was
}

TEST_CASE("GradScaler unscale_ divides every grad by the scale and flags infs and NaNs",
          "[grad_scaler]") {
  amp::GradScaler scaler({.init_scale = 8.0});
  scaler.scale(scalar_tensor(1.0));
  Tensor a = zeros({3}).requires_grad_();
  Tensor b = zeros({2, 2}, kFloat64).requires_grad_();
  Tensor c = zeros({3}, kBFloat16).requires_grad_();
  Tensor unused = zeros({2}).requires_grad_();  // no grad: skipped
  TestSGD opt({a, b, c, unused}, 1.0);

  SECTION("finite grads") {
    set_grad(a, {8.0, -4.0, 1.0});
    set_grad(b, {16.0, 2.0, 0.5, -24.0});
    set_grad(c, {8.0, 3.0, -40.0});
    scaler.unscale_(opt);
    CHECK(values(a.grad()) == std::vector<float>{1.0f, -0.5f, 0.125f});
    CHECK(b.grad().to_vector<double>() == std::vector<double>{2.0, 0.25, 0.0625, -3.0});
    CHECK(values(c.grad()) == std::vector<float>{1.0f, 0.375f, -5.0f});
    CHECK_FALSE(unused.grad().defined());
    CHECK(scaler.step(opt));
    CHECK(opt.steps == 1);
  }
  SECTION("one NaN in a float64 grad skips the step and leaves the params bit-identical") {
    set_grad(a, {8.0, -4.0, 1.0});
    set_grad(b, {16.0, 2.0, std::nan(""), -24.0});
    set_grad(c, {8.0, 3.0, -40.0});
    const Tensor a_before = a.detach().clone();
    CHECK_FALSE(scaler.step(opt));
    CHECK(opt.steps == 0);
    CHECK(bit_identical(a, a_before));
  }
  SECTION("a float16 grad is an error and nothing is unscaled") {
    Tensor h = zeros({2}, kFloat16).requires_grad_();
    opt.add_param_group({{h}, {}});
    set_grad(a, {8.0, -4.0, 1.0});
    set_grad(h, {1.0, 1.0});
    CHECK_THROWS_WITH(scaler.unscale_(opt), Contains("float16 gradients"));
    CHECK(values(a.grad()) == std::vector<float>{8.0f, -4.0f, 1.0f});
  }
  SECTION("inv_scale is 1/scale in float64 rounded to float32") {
    scaler.update(3.0);
    set_grad(a, {3.0, 1.0, 0.0});
    scaler.unscale_(opt);
    const float inv_scale = float(1.0 / 3.0);
    CHECK(values(a.grad()) == std::vector<float>{3.0f * inv_scale, inv_scale, 0.0f});
  }
}

TEST_CASE("GradScaler unscale_ of long float32 grads: every element, every non-finite one",
          "[grad_scaler]") {
  // 16-lane blocks split over the threads, and a tail: a non-finite value at any position is
  // flagged, and every finite one is multiplied by the float32 inv_scale as one multiply.
  const int64_t n = 100003;
  std::vector<float> base(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) base[size_t(i)] = float(i % 977) * 0.37f - 150.0f;
  const float inv_scale = float(1.0 / 1024.0);
  const int threads = get_num_threads();
  for (int count : {1, 2}) {
    set_num_threads(count);
    for (int64_t bad : {int64_t(-1), int64_t(0), int64_t(15), int64_t(50000), n - 1}) {
      for (float value : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
        CAPTURE(count, bad, value);
        amp::GradScaler scaler({.init_scale = 1024.0});
        scaler.scale(scalar_tensor(1.0));
        Tensor w = zeros({n}).requires_grad_();
        TestSGD opt({w}, 1.0);
        std::vector<float> g = base;
        if (bad >= 0) g[size_t(bad)] = value;
        w.mutable_grad() = tensor(std::vector<double>(g.begin(), g.end()), {n}, kFloat32);
        scaler.unscale_(opt);
        CHECK(scaler.step(opt) == (bad < 0));
        const std::vector<float> got = values(w.grad());
        int64_t wrong = 0;
        for (int64_t i = 0; i < n; ++i) {
          if (i == bad) continue;
          wrong += got[size_t(i)] != g[size_t(i)] * inv_scale;
        }
        CHECK(wrong == 0);
        if (bad < 0) break;  // no bad value: one run per thread count
      }
    }
  }
  set_num_threads(threads);
}

// PyTorch's test_grad_scaling_autocast: a model run under autocast (float16 matmuls) with a
// scaler against the same run without one. At skip_iter an inf is put into a grad: the
// scaled run skips that step, and the control skips it too.
TEST_CASE("GradScaler autocast training loop matches an unscaled control with a skipped step",
          "[grad_scaler]") {
  const int64_t skip_iter = 2;
  const std::vector<Batch> data = make_data(4, 3, 2, 11);
  Linear model(3, 2, 7);
  Linear control = model.clone();
  TestSGD opt(model.parameters(), 0.1);
  TestSGD control_opt(control.parameters(), 0.1);
  amp::GradScaler scaler({.init_scale = 128.0, .growth_interval = 1});
  for (int64_t i = 0; i < int64_t(data.size()); ++i) {
    opt.zero_grad();
    control_opt.zero_grad();
    Tensor loss, control_loss;
    {
      amp::Autocast autocast(kCPU, kFloat16);
      loss = mse_loss(model(data[i].x), data[i].y);
      control_loss = mse_loss(control(data[i].x), data[i].y);
    }
    scaler.scale(loss).backward();
    control_loss.backward();
    if (i == skip_iter) model.weight.mutable_grad().data_ptr<float>()[1] = kInf;
    CHECK(scaler.step(opt) == (i != skip_iter));
    scaler.update();
    if (i != skip_iter) control_opt.step();
  }
  // 3 clean steps grow the scale 3 times, the inf one backs it off once.
  CHECK(scaler.get_scale() == 128.0 * 8.0 * 0.5);
  CHECK(opt.steps == 3);
  check_close(model.weight, control.weight, 1e-5, 1e-6);
  check_close(model.bias, control.bias, 1e-5, 1e-6);
}

TEST_CASE("GradScaler with gradient accumulation steps once on the summed grads", "[grad_scaler]") {
  const std::vector<Batch> data = make_data(3, 4, 2, 21);
  Linear model(4, 2, 5);
  Linear control = model.clone();
  TestSGD opt(model.parameters(), 0.05);
  TestSGD control_opt(control.parameters(), 0.05);
  amp::GradScaler scaler({.init_scale = 1024.0});
  for (const Batch& batch : data) {
    scaler.scale(mse_loss(model(batch.x), batch.y) / 3.0).backward();
    (mse_loss(control(batch.x), batch.y) / 3.0).backward();
  }
  CHECK(scaler.step(opt));
  scaler.update();
  control_opt.step();
  CHECK(bit_identical(model.weight, control.weight));
  CHECK(bit_identical(model.bias, control.bias));
  CHECK(scaler.state_dict().at("_growth_tracker") == 1.0);
}

TEST_CASE("GradScaler unscale_ before clipping gives the true gradient norm", "[grad_scaler]") {
  const std::vector<Batch> data = make_data(3, 3, 3, 31);
  Linear model(3, 3, 9);
  Linear control = model.clone();
  TestSGD opt(model.parameters(), 0.1);
  TestSGD control_opt(control.parameters(), 0.1);
  amp::GradScaler scaler({.init_scale = 256.0, .growth_interval = 1});
  const double max_norm = 0.2;
  // The global L2 norm of the grads, computed with ops, and the clip.
  auto clip = [&](const std::vector<Tensor>& params) {
    Tensor squares = scalar_tensor(0.0);
    for (const Tensor& p : params) squares = squares + sum(p.grad() * p.grad());
    const double norm = std::sqrt(squares.item<double>());
    NoGradGuard no_grad;
    if (norm > max_norm) {
      for (const Tensor& p : params) p.mutable_grad().mul_(max_norm / (norm + 1e-6));
    }
    return norm;
  };
  for (const Batch& batch : data) {
    opt.zero_grad();
    control_opt.zero_grad();
    scaler.scale(mse_loss(model(batch.x), batch.y)).backward();
    mse_loss(control(batch.x), batch.y).backward();
    scaler.unscale_(opt);
    const double norm = clip(model.parameters());
    const double control_norm = clip(control.parameters());
    CHECK(norm == control_norm);
    CHECK(scaler.step(opt));
    scaler.update();
    control_opt.step();
  }
  CHECK(scaler.get_scale() == 256.0 * 8.0);
  CHECK(bit_identical(model.weight, control.weight));
  CHECK(bit_identical(model.bias, control.bias));
}

TEST_CASE("GradScaler step after a separate unscale_ does not unscale again", "[grad_scaler]") {
  Tensor p = tensor({1.0, 2.0}).requires_grad_();
  TestSGD opt({p}, 1.0);
  amp::GradScaler scaler({.init_scale = 4.0});
  scaler.scale(scalar_tensor(1.0));
  set_grad(p, {4.0, 8.0});
  scaler.unscale_(opt);
  CHECK(values(p.grad()) == std::vector<float>{1.0f, 2.0f});
  CHECK(scaler.step(opt));
  CHECK(values(p) == std::vector<float>{0.0f, 0.0f});
}

// PyTorch's test_grad_scaling_multiple: two models, two losses mixing both, two optimizers.
// At skip_iter an inf goes into model1's grads: optimizer1 skips, optimizer0 still steps.
TEST_CASE("GradScaler serves two models and optimizers with one scaler", "[grad_scaler]") {
  const int64_t skip_iter = 1;
  const std::vector<Batch> data = make_data(4, 3, 2, 41);
  Linear model0(3, 2, 1), model1(3, 2, 2);
  Linear control0 = model0.clone(), control1 = model1.clone();
  TestSGD opt0(model0.parameters(), 0.1), opt1(model1.parameters(), 0.1);
  TestSGD control_opt0(control0.parameters(), 0.1), control_opt1(control1.parameters(), 0.1);
  amp::GradScaler scaler({.init_scale = 128.0, .growth_interval = 1});
  for (int64_t i = 0; i < int64_t(data.size()); ++i) {
    const Batch& b = data[i];
    opt0.zero_grad();
    opt1.zero_grad();
    control_opt0.zero_grad();
    control_opt1.zero_grad();
    {
      const Tensor out0 = model0(b.x), out1 = model1(b.x);
      const Tensor loss0 = mse_loss(out0 * 0.3 + out1 * 0.7, b.y);
      const Tensor loss1 = mse_loss(out0 * 0.6 - out1 * 0.4, b.y);
      scaler.scale(loss0).backward(Tensor(), /*retain_graph=*/true);
      scaler.scale(loss1).backward();
      if (i == skip_iter) model1.weight.mutable_grad().fill_(kInf);
      scaler.unscale_(opt0);  // one optimizer unscaled separately, as PyTorch's test does
      CHECK(scaler.step(opt0));
      CHECK(scaler.step(opt1) == (i != skip_iter));
      scaler.update();
    }
    {
      const Tensor out0 = control0(b.x), out1 = control1(b.x);
      const Tensor loss0 = mse_loss(out0 * 0.3 + out1 * 0.7, b.y);
      const Tensor loss1 = mse_loss(out0 * 0.6 - out1 * 0.4, b.y);
      loss0.backward(Tensor(), /*retain_graph=*/true);
      loss1.backward();
      control_opt0.step();
      if (i != skip_iter) control_opt1.step();
    }
  }
  CHECK(scaler.get_scale() == 128.0 * 8.0 * 0.5);
  check_close(model0.weight, control0.weight);
  check_close(model0.bias, control0.bias);
  check_close(model1.weight, control1.weight);
  check_close(model1.bias, control1.bias);
}

// PyTorch's test_grad_scaling_penalty: the gradient norm as a penalty, computed from
// autograd::grad of the scaled loss and unscaled by hand.
TEST_CASE("GradScaler gradient penalty through autograd grad with create_graph", "[grad_scaler]") {
  const int64_t skip_iter = 2;
  const std::vector<Batch> data = make_data(4, 3, 2, 51);
  Linear model(3, 2, 3);
  Linear control = model.clone();
  TestSGD opt(model.parameters(), 0.05);
  TestSGD control_opt(control.parameters(), 0.05);
  amp::GradScaler scaler({.init_scale = 128.0, .growth_interval = 1});
  auto penalty = [](const std::vector<Tensor>& grads, double inv_scale) {
    Tensor squares = scalar_tensor(0.0);
    for (const Tensor& g : grads) squares = squares + sum(pow(g * inv_scale, 2.0));
    return sqrt(squares);
  };
  for (int64_t i = 0; i < int64_t(data.size()); ++i) {
    opt.zero_grad();
    control_opt.zero_grad();
    {
      Tensor loss = mse_loss(model(data[i].x), data[i].y);
      const std::vector<Tensor> scaled_grads =
          autograd::grad({scaler.scale(loss)}, model.parameters(), {}, /*retain_graph=*/true,
                         /*create_graph=*/true);
      loss = loss + penalty(scaled_grads, 1.0 / scaler.get_scale());
      scaler.scale(loss).backward();
      if (i == skip_iter) model.weight.mutable_grad().fill_(kInf);
      CHECK(scaler.step(opt) == (i != skip_iter));
      scaler.update();
    }
    {
      Tensor loss = mse_loss(control(data[i].x), data[i].y);
      const std::vector<Tensor> grads = autograd::grad(
          {loss}, control.parameters(), {}, /*retain_graph=*/true, /*create_graph=*/true);
      loss = loss + penalty(grads, 1.0);
      loss.backward();
      if (i != skip_iter) control_opt.step();
    }
  }
  CHECK(scaler.get_scale() == 128.0 * 8.0 * 0.5);
  check_close(model.weight, control.weight, 1e-5, 1e-6);
  check_close(model.bias, control.bias, 1e-5, 1e-6);
}

TEST_CASE("GradScaler state_dict round trip resumes the same sequence", "[grad_scaler]") {
  amp::GradScaler scaler(
      {.init_scale = 16.0, .growth_factor = 4.0, .backoff_factor = 0.25, .growth_interval = 3});
  Tensor p = zeros({1}).requires_grad_();
  TestSGD opt({p}, 0.0);
  scaler.scale(scalar_tensor(1.0));
  for (int i = 0; i < 2; ++i) {
    set_grad(p, {1.0});
    scaler.step(opt);
    scaler.update();
  }
  const auto state = scaler.state_dict();
  CHECK(state.at("scale") == 16.0);
  CHECK(state.at("growth_factor") == 4.0);
  CHECK(state.at("backoff_factor") == 0.25);
  CHECK(state.at("growth_interval") == 3.0);
  CHECK(state.at("_growth_tracker") == 2.0);

  amp::GradScaler resumed;
  resumed.load_state_dict(state);
  CHECK(resumed.state_dict() == state);
  // One more clean step grows both by 4.
  for (amp::GradScaler* s : {&scaler, &resumed}) {
    s->scale(scalar_tensor(1.0));
    set_grad(p, {1.0});
    s->step(opt);
    s->update();
    CHECK(s->get_scale() == 64.0);
    CHECK(s->state_dict().at("_growth_tracker") == 0.0);
  }

  auto missing = state;
  missing.erase("_growth_tracker");
  amp::GradScaler other({.init_scale = 2.0});
  CHECK_THROWS_WITH(other.load_state_dict(missing), Contains("\"_growth_tracker\""));
  CHECK(other.get_scale() == 2.0);
  CHECK_THROWS_WITH(other.load_state_dict({}), Contains("empty"));
}

TEST_CASE("GradScaler load_state_dict checks every value as the constructor does",
          "[grad_scaler]") {
  amp::GradScaler scaler({.init_scale = 16.0,
                          .growth_factor = 4.0,
                          .backoff_factor = 0.25,
                          .growth_interval = 3,
                          .hysteresis = 2});
  Tensor p = zeros({1}).requires_grad_();
  TestSGD opt({p}, 0.0);
  scaler.scale(scalar_tensor(1.0));
  set_grad(p, {1.0});
  scaler.step(opt);
  scaler.update();
  const std::map<std::string, double> good = scaler.state_dict();
  REQUIRE(good.at("_growth_tracker") == 1.0);

  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::tuple<std::string, double, std::string>> cases = {
      {"backoff_factor", 8.5,
       "\"backoff_factor\": the backoff factor must be < 1.0 and > 0, got 8.5"},
      {"backoff_factor", 0.0, "the backoff factor must be < 1.0 and > 0, got 0"},
      {"backoff_factor", -0.5, "the backoff factor must be < 1.0 and > 0, got -0.5"},
      {"growth_factor", 0.0, "\"growth_factor\": the growth factor must be > 1.0, got 0"},
      {"growth_factor", std::nan(""), "the growth factor must be > 1.0, got nan"},
      {"_growth_tracker", 0.5,
       "\"_growth_tracker\": expected a whole number in [0, 2147483647], got 0.5"},
      {"_growth_tracker", -1.0,
       "\"_growth_tracker\": expected a whole number in [0, 2147483647], got -1"},
      {"_growth_tracker", 1e20, "got 1e+20"},
      {"_overflow_tracker", 1.5,
       "\"_overflow_tracker\": expected a whole number in [0, 2147483647], got 1.5"},
      {"_overflow_tracker", -inf, "got -inf"},
      {"growth_interval", 0.0,
       "\"growth_interval\": expected a whole number in [1, 9223372036854775807], got 0"},
      {"growth_interval", -3.0, "got -3"},
      {"growth_interval", 2.5, "got 2.5"},
      {"growth_interval", 1e20, "got 1e+20"},
      {"scale", -16.0, "\"scale\" must be finite and >= 0, got -16"},
      {"scale", inf, "\"scale\" must be finite and >= 0, got inf"},
      {"scale", std::nan(""), "\"scale\" must be finite and >= 0, got nan"},
  };
  for (const auto& [key, value, message] : cases) {
    INFO(key << " = " << value);
    std::map<std::string, double> bad = good;
    bad["scale"] = 1024.0;  // loaded first, and must not stay loaded
    bad[key] = value;
    CHECK_THROWS_WITH(scaler.load_state_dict(bad),
                      Contains("GradScaler.load_state_dict: ") && Contains(message));
    CHECK(scaler.state_dict() == good);
    CHECK(scaler.get_growth_interval() == 3);
  }
  // Before the first scale() too (the values then wait for the lazy initialization).
  amp::GradScaler fresh({.init_scale = 2.0});
  std::map<std::string, double> bad = good;
  bad["backoff_factor"] = 8.5;
  CHECK_THROWS_WITH(fresh.load_state_dict(bad), Contains("backoff factor"));
  CHECK(fresh.get_scale() == 2.0);
  CHECK(fresh.get_backoff_factor() == 0.5);
  // The values the constructor rejects, and the setters reject them too.
  CHECK_THROWS_WITH(amp::GradScaler({.backoff_factor = 0.0}),
                    Contains("GradScaler: the backoff factor must be < 1.0 and > 0, got 0"));
  CHECK_THROWS_WITH(amp::GradScaler({.growth_interval = 0}),
                    Contains("GradScaler: the growth interval must be >= 1, got 0"));
  CHECK_THROWS_WITH(amp::GradScaler({.init_scale = inf}),
                    Contains("GradScaler: init_scale must be finite and > 0, got inf"));
  CHECK_THROWS_WITH(scaler.set_backoff_factor(8.5),
                    Contains("GradScaler.set_backoff_factor: the backoff factor must be < 1.0"));
  CHECK_THROWS_WITH(scaler.set_growth_factor(0.5),
                    Contains("GradScaler.set_growth_factor: the growth factor must be > 1.0"));
  CHECK_THROWS_WITH(scaler.set_growth_interval(-1),
                    Contains("GradScaler.set_growth_interval: the growth interval must be >= 1"));
  CHECK_THROWS_WITH(scaler.update(-1.0),
                    Contains("GradScaler.update: new_scale must be finite and >= 0, got -1"));
  CHECK(scaler.state_dict() == good);
  // A scale backed off all the way to 0 is a state the scaler reaches (float32 underflow
  // without min_scale): state_dict() gives it and load_state_dict() takes it back; a scaler
  // cannot start from it.
  amp::GradScaler collapsed({.init_scale = 2.0, .hysteresis = 2});
  std::map<std::string, double> zero = good;
  zero["scale"] = 0.0;
  collapsed.load_state_dict(zero);
  CHECK(collapsed.get_scale() == 0.0);
  CHECK(collapsed.state_dict() == zero);
  CHECK_THROWS_WITH(amp::GradScaler({.init_scale = 0.0}),
                    Contains("GradScaler: init_scale must be finite and > 0, got 0"));
  scaler.set_backoff_factor(0.125);
  CHECK(scaler.get_backoff_factor() == 0.125);
}

TEST_CASE("GradScaler does not grow a scale that would overflow float32", "[grad_scaler]") {
  const double big = std::ldexp(1.0, 127);  // 2^128 is past float32's largest finite value
  amp::GradScaler scaler({.init_scale = big, .growth_interval = 1});
  Tensor p = zeros({1}).requires_grad_();
  TestSGD opt({p}, 0.0);
  scaler.scale(scalar_tensor(1e-30));
  set_grad(p, {1.0});
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == big);
  CHECK(std::isfinite(scaler.get_scale()));
  CHECK(scaler.state_dict().at("_growth_tracker") == 0.0);
}

TEST_CASE("GradScaler misuse errors follow PyTorch's state machine", "[grad_scaler]") {
  Tensor p = zeros({1}).requires_grad_();
  TestSGD opt({p}, 0.0);
  amp::GradScaler scaler;
  set_grad(p, {1.0});
  CHECK_THROWS_WITH(scaler.unscale_(opt), Contains("scale is not initialized"));
  scaler.scale(scalar_tensor(1.0));
  CHECK_THROWS_WITH(scaler.update(), Contains("no inf checks were recorded prior to update()"));

  scaler.unscale_(opt);
  CHECK_THROWS_WITH(scaler.unscale_(opt), Contains("unscale_() has already been called on this "
                                                   "optimizer since the last update()"));
  scaler.step(opt);
  CHECK_THROWS_WITH(scaler.unscale_(opt), Contains("unscale_() is being called after step()"));
  CHECK_THROWS_WITH(scaler.step(opt),
                    Contains("step() has already been called since the last update()"));
  scaler.update();
  // A new iteration starts from READY.
  set_grad(p, {1.0});
  CHECK_NOTHROW(scaler.step(opt));
  CHECK_NOTHROW(scaler.update());

  // An optimizer with no gradient at all.
  Tensor q = zeros({1}).requires_grad_();
  TestSGD empty_opt({q}, 0.0);
  CHECK_THROWS_WITH(scaler.step(empty_opt), Contains("no inf checks were recorded for this "
                                                     "optimizer"));
}

TEST_CASE("GradScaler with enabled false is a transparent pass-through", "[grad_scaler]") {
  amp::GradScaler scaler({.enabled = false});
  CHECK_FALSE(scaler.is_enabled());
  const Tensor loss = scalar_tensor(3.0);
  CHECK(scaler.scale(loss).is_same(loss));
  Tensor p = tensor({1.0, 1.0}).requires_grad_();
  TestSGD opt({p}, 1.0);
  set_grad(p, {0.5, double(kInf)});
  CHECK_NOTHROW(scaler.update());  // no checks needed
  scaler.unscale_(opt);
  CHECK(values(p.grad()) == std::vector<float>{0.5f, kInf});
  CHECK(scaler.step(opt));  // the optimizer steps, inf and all
  CHECK(opt.steps == 1);
  CHECK(scaler.step(opt));  // no state machine either
  scaler.update();
  CHECK(scaler.get_scale() == 1.0);
  CHECK(scaler.state_dict().empty());
  CHECK_NOTHROW(scaler.load_state_dict({}));
}

TEST_CASE("GradScaler NaN from the start skips every step and shrinks the scale", "[grad_scaler]") {
  Linear model(3, 2, 13);
  const Tensor weight_before = model.weight.detach().clone();
  const Tensor bias_before = model.bias.detach().clone();
  TestSGD opt(model.parameters(), 0.1);
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 1});
  const Tensor x = full({4, 3}, double(kNaN));
  const Tensor y = zeros({4, 2});
  for (int i = 0; i < 5; ++i) {
    opt.zero_grad();
    scaler.scale(mse_loss(model(x), y)).backward();
    CHECK_FALSE(scaler.step(opt));
    scaler.update();
    CHECK(scaler.get_scale() == 1024.0 / double(1 << (i + 1)));
  }
  CHECK(opt.steps == 0);
  CHECK(bit_identical(model.weight, weight_before));
  CHECK(bit_identical(model.bias, bias_before));
}

TEST_CASE("GradScaler raises the collapse alarm once after N skipped iterations in a row",
          "[grad_scaler]") {
  Linear model(3, 2, 17);
  const Tensor weight_before = model.weight.detach().clone();
  TestSGD opt(model.parameters(), 0.1);
  amp::GradScaler scaler({.init_scale = 65536.0, .alarm_after_consecutive_skips = 4});
  std::vector<std::string> warnings;
  scaler.set_warning_handler([&](std::string_view message) { warnings.emplace_back(message); });
  const Tensor nan_x = full({4, 3}, double(kNaN));
  const Tensor x = ones({4, 3});
  const Tensor y = zeros({4, 2});
  auto iteration = [&](const Tensor& input) {
    opt.zero_grad();
    scaler.scale(mse_loss(model(input), y)).backward();
    scaler.step(opt);
    scaler.update();
  };
  for (int i = 1; i <= 3; ++i) {
    iteration(nan_x);
    CHECK(scaler.consecutive_skipped_iterations() == i);
  }
  CHECK(warnings.empty());
  iteration(nan_x);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("4 iterations in a row") && Contains("scale is now 4096") &&
                              Contains("bfloat16") && Contains("lower learning rate") &&
                              Contains("OverflowWatch"));
  for (int i = 0; i < 6; ++i) iteration(nan_x);  // the same run of skips warns once
  CHECK(warnings.size() == 1);
  CHECK(opt.steps == 0);
  CHECK(bit_identical(model.weight, weight_before));

  iteration(x);  // a clean step ends the run and rearms the warning
  CHECK(scaler.consecutive_skipped_iterations() == 0);
  CHECK(opt.steps == 1);
  for (int i = 0; i < 4; ++i) iteration(nan_x);
  CHECK(warnings.size() == 2);

  CHECK_THROWS_WITH(amp::GradScaler({.alarm_after_consecutive_skips = -1}),
                    Contains("alarm_after_consecutive_skips must be >= 0") && Contains("-1"));
  CHECK_THROWS_WITH(amp::GradScaler({.alarm_scale_floor = 0.0}),
                    Contains("alarm_scale_floor must be > 0"));
}

// ---- beyond PyTorch ----------------------------------------------------------------------

namespace {
// Runs one iteration on a one-parameter optimizer with a clean or an inf grad.
void iterate(amp::GradScaler& scaler, TestSGD& opt, bool inf) {
  Tensor& p = opt.param_groups()[0].params[0];
  scaler.scale(scalar_tensor(1.0));
  set_grad(p, {inf ? double(kInf) : 1.0});
  scaler.step(opt);
  scaler.update();
}
}  // namespace

TEST_CASE("GradScaler min_scale and max_scale bound update", "[grad_scaler]") {
  Tensor p = zeros({1}).requires_grad_();
  TestSGD opt({p}, 0.0);
  amp::GradScaler scaler(
      {.init_scale = 8.0, .growth_interval = 1, .min_scale = 2.0, .max_scale = 24.0});
  iterate(scaler, opt, false);
  CHECK(scaler.get_scale() == 16.0);
  iterate(scaler, opt, false);
  CHECK(scaler.get_scale() == 24.0);  // 32 clamped
  iterate(scaler, opt, false);
  CHECK(scaler.get_scale() == 24.0);
  for (double expected : {12.0, 6.0, 3.0, 2.0, 2.0}) {
    iterate(scaler, opt, true);
    CHECK(scaler.get_scale() == expected);
  }
  CHECK_THROWS_WITH(amp::GradScaler({.init_scale = 8.0, .max_scale = 4.0}), Contains("max_scale"));
}

TEST_CASE("GradScaler hysteresis tolerates consecutive overflows before backing off",
          "[grad_scaler]") {
  Tensor p = zeros({1}).requires_grad_();
  TestSGD opt({p}, 0.0);
  amp::GradScaler scaler({.init_scale = 64.0, .growth_interval = 2, .hysteresis = 2});
  // inf, inf: tolerated (skipped, no backoff); inf: backoff; inf: backoff.
  const double after_inf[] = {64.0, 64.0, 32.0, 16.0};
  for (double expected : after_inf) {
    iterate(scaler, opt, true);
    CHECK(scaler.last_step_skipped());
    CHECK(scaler.get_scale() == expected);
  }
  CHECK(opt.steps == 0);
  // A clean step resets the count: two more overflows are tolerated again.
  iterate(scaler, opt, false);
  CHECK_FALSE(scaler.last_step_skipped());
  CHECK(scaler.state_dict().at("_growth_tracker") == 1.0);
  iterate(scaler, opt, true);
  CHECK(scaler.state_dict().at("_growth_tracker") == 0.0);  // a skipped step breaks the run
  iterate(scaler, opt, true);
  CHECK(scaler.get_scale() == 16.0);
  CHECK(scaler.state_dict().at("_overflow_tracker") == 2.0);
  iterate(scaler, opt, true);
  CHECK(scaler.get_scale() == 8.0);
}

TEST_CASE("GradScaler warns once when it scales a bfloat16 loss", "[grad_scaler]") {
  amp::GradScaler scaler;
  std::vector<std::string> warnings;
  scaler.set_warning_handler([&](std::string_view message) { warnings.emplace_back(message); });
  scaler.scale(scalar_tensor(1.0));
  CHECK(warnings.empty());
  scaler.scale(scalar_tensor(1.0, kBFloat16));
  scaler.scale(scalar_tensor(2.0, kBFloat16));
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("bfloat16"));
}

TEST_CASE("GradScaler history records each iteration and writes CSV", "[grad_scaler]") {
  Tensor p = zeros({1}).requires_grad_();
  TestSGD opt({p}, 0.0);
  amp::GradScaler scaler({.init_scale = 4.0, .growth_interval = 1, .record_history = true});
  iterate(scaler, opt, false);
  iterate(scaler, opt, true);
  iterate(scaler, opt, false);
  const auto& history = scaler.history();
  REQUIRE(history.size() == 3);
  CHECK(history[0].step == 0);
  CHECK(history[0].scale == 4.0);
  CHECK_FALSE(history[0].skipped);
  CHECK(history[1].scale == 8.0);
  CHECK(history[1].skipped);
  CHECK(history[2].scale == 4.0);
  const std::string path = "grad_scaler_history_test.csv";
  scaler.write_history_csv(path);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == "step,scale,skipped\n0,4,0\n1,8,1\n2,4,0\n");
  std::remove(path.c_str());
  CHECK_THROWS_WITH(scaler.write_history_csv("/nonexistent-dir/x.csv"),
                    Contains("/nonexistent-dir/x.csv"));
  amp::GradScaler quiet;
  CHECK(quiet.history().empty());
}

TEST_CASE("GradScaler drives AdamW's scaled step and skips an overflow on its own",
          "[grad_scaler][optim]") {
  // Two identical models; the scaled one sees an inf gradient at iteration 1 and must end
  // where the control ends after skipping that iteration.
  manual_seed(31);
  const Tensor w0 = randn({4, 3});
  const Tensor x = randn({5, 3});
  Tensor w = w0.clone().requires_grad_();
  Tensor control = w0.clone().requires_grad_();
  optim::AdamW opt({w}, {.lr = 0.01});
  optim::AdamW control_opt({control}, {.lr = 0.01});
  REQUIRE(opt.supports_scaled_step());
  amp::GradScaler scaler(amp::GradScalerOptions{.init_scale = 1024.0});
  for (int iteration = 0; iteration < 3; ++iteration) {
    opt.zero_grad();
    scaler.scale(sum(mul(matmul(x, w.t()), matmul(x, w.t())))).backward();
    if (iteration == 1) {
      NoGradGuard no_grad;
      w.mutable_grad().select(0, 0).select(0, 0).fill_(INFINITY);
    }
    const std::vector<float> before = w.to_vector<float>();
    const bool stepped = scaler.step(opt);
    scaler.update();
    CHECK(stepped == (iteration != 1));
    if (iteration == 1) {
      CHECK(w.to_vector<float>() == before);  // bit-identical
      CHECK(scaler.get_scale() == 512.0);
      continue;
    }
    control_opt.zero_grad();
    sum(mul(matmul(x, control.t()), matmul(x, control.t()))).backward();
    control_opt.step();
  }
  const std::vector<float> a = w.to_vector<float>(), b = control.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-5));
}

TEST_CASE("GradScaler collapse alarm on a scale floor can be an error", "[grad_scaler]") {
  Tensor p = zeros({1}).requires_grad_();
  TestSGD opt({p}, 0.1);
  amp::GradScaler scaler({.init_scale = 16.0,
                          .growth_interval = 1,
                          .alarm_after_consecutive_skips = 0,
                          .alarm_scale_floor = 4.0,
                          .alarm_action = amp::GradScalerOptions::AlarmAction::kError});
  iterate(scaler, opt, /*inf=*/true);  // 8
  iterate(scaler, opt, /*inf=*/true);  // 4: not below the floor
  CHECK_THROWS_WITH(iterate(scaler, opt, /*inf=*/true),
                    Contains("fell to 2, below the floor 4") && Contains("bfloat16"));
  // The update was done before the error: the scaler goes on from a consistent state.
  CHECK(scaler.get_scale() == 2.0);
  iterate(scaler, opt, /*inf=*/true);  // 1: still below, the alarm is not raised again
  CHECK(scaler.get_scale() == 1.0);
  iterate(scaler, opt, /*inf=*/false);  // 2
  iterate(scaler, opt, /*inf=*/false);  // 4: back at the floor, rearmed
  CHECK_THROWS_WITH(iterate(scaler, opt, /*inf=*/true), Contains("fell to 2"));
}

TEST_CASE("GradScaler overflow_report names the parameters whose gradients overflowed",
          "[grad_scaler]") {
  auto model = std::make_shared<nn::Sequential>(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2));
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  amp::GradScaler scaler;
  opt.zero_grad();
  scaler.scale(sum(model->forward(ones({2, 3})))).backward();
  float* bias_grad = model->parameters()[3].mutable_grad().data_ptr<float>();
  bias_grad[0] = kInf;
  bias_grad[1] = -kInf;
  model->parameters()[0].mutable_grad().data_ptr<float>()[5] = kNaN;
  CHECK_FALSE(scaler.step(opt));
  const amp::OverflowReport report = scaler.overflow_report(opt, model.get());
  CHECK(report.params_checked == 4);
  REQUIRE(report.params.size() == 2);
  CHECK(report.params[0].name == "0.weight");
  CHECK(report.params[0].shape == Shape{4, 3});
  CHECK(report.params[0].nan == 1);
  CHECK(report.params[1].name == "2.bias");
  CHECK(report.params[1].positive_inf == 1);
  CHECK(report.params[1].negative_inf == 1);
  CHECK_THAT(report.table(), Contains("2 of 4 parameters") && Contains("2.bias"));
  // Without the model the parameters are named by their place in the optimizer.
  CHECK(scaler.overflow_report(opt).params[1].name == "group 0 param 3");
  scaler.update();
  model->parameters()[0].mutable_grad().fill_(1.0);
  model->parameters()[3].mutable_grad().fill_(1.0);
  CHECK_FALSE(amp::overflow_report(opt, model.get()).found_inf());
}
