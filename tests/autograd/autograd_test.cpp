// The autograd engine: accumulation, graph retention, higher order, hooks, the version
// counter, anomaly mode, grad(), grad mode and in-place rules. Expected gradients are
// derived by hand in the comments.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string_view>

#include "halfgrad/autograd/engine.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("backward accumulates into leaves and never overwrites", "[autograd]") {
  Tensor x = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
  sum(mul(x, x)).backward();  // d/dx sum x^2 = 2x
  CHECK(values(x.grad()) == std::vector<double>{2, 4, 6});
  sum(mul(x, 3.0)).backward();  // + 3
  CHECK(values(x.grad()) == std::vector<double>{5, 7, 9});
  CHECK(x.is_leaf());
  CHECK_FALSE(mul(x, 2.0).is_leaf());
  CHECK(mul(x, 2.0).grad_fn()->name() == "MulBackward");
}

TEST_CASE("a tensor used twice gets the sum of both paths", "[autograd]") {
  Tensor x = tensor({2.0}, kFloat64).requires_grad_();
  const Tensor y = mul(x, x);          // x^2
  const Tensor z = add(mul(y, x), y);  // x^3 + x^2, d/dx = 3x^2 + 2x = 16
  z.backward();
  CHECK(x.grad().item<double>() == 16.0);
}

TEST_CASE("broadcast inputs get gradients of their own shape and dtype", "[autograd]") {
  Tensor a = ones({2, 3}, kFloat32).requires_grad_();
  Tensor b = ones({3}, kFloat16).requires_grad_();
  const Tensor y = add(a, b);  // float32 (promotion)
  CHECK(y.dtype() == kFloat32);
  sum(y).backward();
  CHECK(a.grad().sizes() == Shape{2, 3});
  CHECK(b.grad().sizes() == Shape{3});
  CHECK(b.grad().dtype() == kFloat16);
  CHECK(values(b.grad()) == std::vector<double>{2, 2, 2});
}

TEST_CASE("the graph is freed after backward unless retain_graph", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: the first call kept it
  CHECK(values(x.grad())[0] == Approx(2 * std::exp(1.0)));
  CHECK_THROWS_WITH(y.backward(), Contains("a second time") && Contains("retain_graph=true"));
}

TEST_CASE("grad returns gradients without touching grad()", "[autograd]") {
  Tensor x = tensor({1.0, -2.0}, kFloat64).requires_grad_();
  Tensor w = tensor({3.0, 4.0}, kFloat64).requires_grad_();
  const Tensor y = sum(mul(x, w));
  const std::vector<Tensor> g = autograd::grad({y}, {x, w});
  CHECK(values(g[0]) == std::vector<double>{3, 4});
  CHECK(values(g[1]) == std::vector<double>{1, -2});
  CHECK_FALSE(x.grad().defined());
  Tensor unused = tensor({1.0}, kFloat64).requires_grad_();
  CHECK_THROWS_WITH(autograd::grad({sum(mul(x, w))}, {unused}), Contains("was not used"));
  CHECK_FALSE(autograd::grad({sum(mul(x, w))}, {unused}, {}, false, false, true)[0].defined());
}

TEST_CASE("backward needs a gradient for a tensor of more than one element", "[autograd][errors]") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  const Tensor y = mul(x, 2.0);
  CHECK_THROWS_WITH(y.backward(), Contains("one-element tensor") && Contains("shape [2]"));
  y.backward(tensor({1.0, 0.5}, kFloat64));
  CHECK(values(x.grad()) == std::vector<double>{2.0, 1.0});
  CHECK_THROWS_WITH(tensor({1.0}).backward(), Contains("does not require grad"));
}

TEST_CASE("NoGradGuard records nothing and detach cuts the history", "[autograd]") {
  Tensor x = tensor({1.0}, kFloat64).requires_grad_();
  {
    NoGradGuard no_grad;
    CHECK_FALSE(mul(x, x).requires_grad());
    {
      EnableGradGuard enable;
      CHECK(mul(x, x).requires_grad());
    }
  }
  CHECK(autograd::is_grad_enabled());
  const Tensor d = mul(x, x).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.grad_fn() == nullptr);
  CHECK_THROWS_WITH(tensor(std::vector<int64_t>{1}).requires_grad_(),
                    Contains("only floating tensors can require gradients"));
}

TEST_CASE("hooks see and may replace gradients", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = values(g);
    return mul(g, 10.0);  // replaces the gradient accumulated into x
  });
  Tensor y = mul(x, 3.0);
  y.register_hook([](const Tensor& g) { return add(g, 1.0); });  // on a non-leaf
  sum(y).backward();
  // dL/dy = 1, hooked to 2; dL/dx = 3 * 2 = 6, seen by the leaf hook, stored as 60.
  CHECK(seen == std::vector<double>{6, 6});
  CHECK(values(x.grad()) == std::vector<double>{60, 60});
}

TEST_CASE("post-accumulate-grad hooks see the leaf after its gradient is added", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor w = tensor({5.0}, kFloat64).requires_grad_();
  std::vector<std::vector<double>> seen;
  x.register_hook([](const Tensor& g) { return mul(g, 2.0); });  // runs first, before the sum
  x.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    seen.push_back(values(leaf.grad()));
    CHECK(autograd::is_backward_running());
  });
  // x is used twice: the engine sums both paths first, so the hook runs once per pass.
  // d/dx sum(x*w + x*x) = w + 2x = {7, 9}, doubled by the pre-hook: {14, 18}.
  sum(add(mul(x, w), mul(x, x))).backward();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == std::vector<double>{14, 18});
  sum(mul(x, w)).backward();  // + 2 * 5, accumulated before the hook sees it
  REQUIRE(seen.size() == 2);
  CHECK(seen[1] == std::vector<double>{24, 28});
  CHECK_THROWS_WITH(mul(x, 2.0).register_post_accumulate_grad_hook([](const Tensor&) {}),
                    Contains("expected a leaf tensor") && Contains("MulBackward"));
  CHECK_THROWS_WITH(tensor({1.0}).register_post_accumulate_grad_hook([](const Tensor&) {}),
                    Contains("does not require grad"));
}

TEST_CASE("queue_callback runs once the whole graph is done", "[autograd]") {
  Tensor a = tensor({1.0}, kFloat64).requires_grad_();
  Tensor b = tensor({2.0}, kFloat64).requires_grad_();
  std::vector<std::string> order;
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    order.push_back("a");
    autograd::queue_callback([&] {
      // Every leaf's gradient is in place when callbacks run.
      order.push_back(fmt::format("callback a={} b={}", a.grad().item<double>(),
                                  b.grad().defined() ? b.grad().item<double>() : -1.0));
      autograd::queue_callback([&] { order.push_back("queued by a callback"); });
    });
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("b"); });
  // b's gradient comes after a's: b is used by the op recorded first.
  Tensor y = mul(b, 3.0);
  sum(add(mul(a, 4.0), y)).backward();
  std::sort(order.begin(), order.begin() + 2);
  CHECK(order == std::vector<std::string>{"a", "b", "callback a=4 b=3", "queued by a callback"});
  CHECK_FALSE(autograd::is_backward_running());
  CHECK_THROWS_WITH(autograd::queue_callback([] {}), Contains("during a backward pass"));
}

TEST_CASE("retain_grad keeps the gradient of a non-leaf", "[autograd]") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor y = mul(x, x);
  y.retain_grad();
  sum(mul(y, 4.0)).backward();
  CHECK(values(y.grad()) == std::vector<double>{4, 4});
  CHECK(values(x.grad()) == std::vector<double>{8, 16});
}

TEST_CASE("modifying a saved tensor in place is caught by the version counter",
          "[autograd][errors]") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  Tensor y = mul(x, 2.0);
  const Tensor z = mul(y, y);  // saves y
  {
    NoGradGuard no_grad;
    y.add_(1.0);  // bumps y's version
  }
  CHECK_THROWS_WITH(sum(z).backward(), Contains("was modified by an in-place operation") &&
                                           Contains("MulBackward") && Contains("expected version"));
}

TEST_CASE("in-place ops follow torch's rules with autograd", "[autograd]") {
  Tensor leaf = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  CHECK_THROWS_WITH(leaf.mul_(2.0), Contains("a leaf tensor that requires grad"));
  {
    NoGradGuard no_grad;
    leaf.mul_(2.0);  // allowed: an optimizer step
  }
  CHECK(values(leaf) == std::vector<double>{2, 4});
  // A non-leaf modified in place moves its history to the new node: y = x, y *= x.
  Tensor y = mul(leaf, 1.0);
  y.mul_(leaf);
  CHECK(y.grad_fn()->name() == "MulBackward");
  sum(y).backward();  // d/dx (x^2) = 2x
  CHECK(values(leaf.grad()) == std::vector<double>{4, 8});
  // z *= z reads z's old value twice (torch refuses this at backward; halfgrad reads the
  // operand from the same copy of the old value): z = x^2, d/dx = 2x, added to 2x above.
  Tensor z = mul(leaf, 1.0);
  z.mul_(z);
  sum(z).backward();
  CHECK(values(leaf.grad()) == std::vector<double>{8, 16});
  // An operand that is a view of the tensor written to is read before the write too.
  Tensor m = mul(tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}, kFloat64).requires_grad_(), 1.0);
  m.add_(m.t());
  CHECK(values(m) == std::vector<double>{2, 5, 5, 8});
  Tensor ints = full({2}, 3, kInt64);
  CHECK_THROWS_WITH(ints.mul_(0.5), Contains("cannot be stored in the int64 tensor"));
}

TEST_CASE("anomaly mode names the forward op that made a non-finite value", "[autograd][anomaly]") {
  Tensor x = tensor({1.0, 0.0}, kFloat64).requires_grad_();
  CHECK_NOTHROW(log(x));  // off by default
  autograd::DetectAnomalyGuard anomaly;
  CHECK_THROWS_WITH(log(x), Contains("anomaly: log(float64 [2]) produced a non-finite value"));
}

TEST_CASE("anomaly mode names the backward node and its forward call", "[autograd][anomaly]") {
  Tensor x = tensor({0.0, 4.0}, kFloat64).requires_grad_();
  autograd::DetectAnomalyGuard anomaly;
  const Tensor y = sqrt(x);  // finite forward; the derivative 1 / (2 sqrt x) is inf at 0
  CHECK_THROWS_WITH(sum(y).backward(),
                    Contains("SqrtBackward returned a non-finite gradient") &&
                        Contains("created by the forward call sqrt(float64 [2])"));
}

TEST_CASE("a deep chain does not recurse", "[autograd]") {
  Tensor x = tensor({1.0}, kFloat64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = add(y, 0.0);
  y.backward();
  CHECK(x.grad().item<double>() == 1.0);
}

TEST_CASE("backward ops run in the dtype forward saved", "[autograd]") {
  Tensor w = randn({4}, kFloat16).requires_grad_();
  Tensor x = randn({4}, kFloat16);
  const Tensor y = mul(w, x);
  CHECK(y.dtype() == kFloat16);
  sum(y).backward();
  CHECK(w.grad().dtype() == kFloat16);
  const std::vector<float> gx = x.to_vector<float>(), gw = w.grad().to_vector<float>();
  for (size_t i = 0; i < gx.size(); ++i) CHECK(gw[i] == gx[i]);
}

namespace {

// a and b hold the same values bit for bit (NaN for NaN, the sign of zero included).
void check_same_bits(const Tensor& a, const Tensor& b) {
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.sizes() == b.sizes());
  const std::vector<double> x = values(a), y = values(b);  // exact for every floating dtype
  for (size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i, x[i], y[i]);
    if (std::isnan(x[i])) {
      CHECK(std::isnan(y[i]));
    } else {
      CHECK(x[i] == y[i]);
      CHECK(std::signbit(x[i]) == std::signbit(y[i]));
    }
  }
}

// The gradients of f's output w.r.t. inputs, for `seed` as the output's gradient: once as a
// plain backward (fused kernels) and once recorded (create_graph: the formulas' ops).
std::pair<std::vector<Tensor>, std::vector<Tensor>> fused_and_recorded(
    const std::function<Tensor()>& f, const std::vector<Tensor>& inputs, const Tensor& seed) {
  std::vector<Tensor> fused = autograd::grad({f()}, inputs, {seed});
  std::vector<Tensor> recorded =
      autograd::grad({f()}, inputs, {seed}, /*retain_graph=*/false, /*create_graph=*/true);
  return {fused, recorded};
}

}  // namespace

TEST_CASE("relu's fused backward gives its formula's bits", "[autograd][fused]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    // 40 values (two 16-lane blocks and a tail, for a vectorized pass): the pattern below
    // four times, the gradients rotated so that each meets every kind of input.
    const std::vector<double> xs0 = {-2.0, -0.0, 0.0, 1.5, nan, 3.0, -1.0, 2.0, 1e-3, -5.0};
    const std::vector<double> seeds0 = {1.0, -3.0, inf, -0.5, 2.0, -inf, inf, nan, 4.0, -2.0};
    std::vector<double> xs_all, seeds_all;
    for (size_t i = 0; i < 40; ++i) {
      xs_all.push_back(xs0[i % 10]);
      seeds_all.push_back(seeds0[(i + i / 10) % 10]);
    }
    Tensor x = tensor(xs_all, dtype);
    x.requires_grad_();
    // torch's threshold_backward: 0 where relu(x) <= 0, the gradient elsewhere, including
    // where x is NaN. A select: an infinite or NaN gradient where relu is flat gives +0.
    const Tensor seed = tensor(seeds_all, dtype);
    const auto [fused, recorded] = fused_and_recorded([&] { return relu(x); }, {x}, seed);
    check_same_bits(fused[0], recorded[0]);
    const std::vector<double> xs = values(x), seeds = values(seed), got = values(fused[0]);
    for (size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(i);
      if (xs[i] > 0 || std::isnan(xs[i])) {
        CHECK((got[i] == seeds[i] || (std::isnan(got[i]) && std::isnan(seeds[i]))));
      } else {
        CHECK(got[i] == 0.0);
        CHECK_FALSE(std::signbit(got[i]));
      }
    }
  }
}

TEST_CASE("mse_loss's fused backward gives its formula's bits", "[autograd][fused]") {
  manual_seed(11);
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (const char* reduction : {"mean", "sum"}) {
      CAPTURE(dtype, reduction);
      Tensor input = mul(randn({37, 3}, dtype), 3.0).requires_grad_();
      Tensor target = randn({37, 3}, dtype).requires_grad_();
      const Tensor seed = scalar_tensor(0.7, dtype);
      const auto [fused, recorded] = fused_and_recorded(
          [&] { return mse_loss(input, target, reduction); }, {input, target}, seed);
      check_same_bits(fused[0], recorded[0]);
      check_same_bits(fused[1], recorded[1]);
      // d/dx = 2 (x - y) g / N for "mean" (float64: checked against that directly).
      if (dtype == kFloat64) {
        const double scale = std::string_view(reduction) == "mean" ? 0.7 / (37 * 3) : 0.7;
        const std::vector<double> x = values(input), y = values(target), dx = values(fused[0]);
        for (size_t i = 0; i < x.size(); ++i) CHECK(dx[i] == Approx(2 * (x[i] - y[i]) * scale));
      }
    }
  }
}
