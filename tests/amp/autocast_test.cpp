// Autocast: the guard's state machine, per-thread isolation, the weight-cast cache, and what
// each cast policy does to an op's inputs (as torch.amp documents it).
#include <catch2/catch.hpp>

#include <thread>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

TEST_CASE("Autocast guards nest and restore the previous state", "[autocast]") {
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  {
    amp::Autocast outer(kCPU);  // bfloat16 by default on the CPU
    CHECK(amp::is_autocast_enabled(kCPU));
    CHECK(amp::get_autocast_dtype(kCPU) == kBFloat16);
    CHECK_FALSE(amp::is_autocast_enabled(kCUDA));
    {
      amp::Autocast inner(kCPU, kFloat16);
      CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
      {
        amp::Autocast off(kCPU, std::nullopt, /*enabled=*/false);
        CHECK_FALSE(amp::is_autocast_enabled(kCPU));
      }
      CHECK(amp::is_autocast_enabled(kCPU));
    }
    CHECK(amp::get_autocast_dtype(kCPU) == kBFloat16);
  }
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  {
    amp::Autocast cuda(kCUDA);
    CHECK(amp::get_autocast_dtype(kCUDA) == kFloat16);
  }
}

TEST_CASE("Autocast without a dtype keeps the enclosing region's, as torch.autocast does",
          "[autocast]") {
  {
    amp::Autocast outer(kCPU, kFloat16);
    {
      amp::Autocast inner(kCPU);  // torch: dtype=None takes get_autocast_cpu_dtype()
      CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
      CHECK(matmul(randn({2, 2}), randn({2, 2})).dtype() == kFloat16);
    }
    CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
  }
  {
    amp::Autocast outer(kCUDA, kBFloat16);
    amp::Autocast inner(kCUDA);
    CHECK(amp::get_autocast_dtype(kCUDA) == kBFloat16);
  }
  // Outside every region, the defaults again.
  amp::Autocast cpu(kCPU);
  CHECK(amp::get_autocast_dtype(kCPU) == kBFloat16);
}

TEST_CASE("Autocast restores the state when an exception unwinds", "[autocast]") {
  try {
    amp::Autocast autocast(kCPU, kFloat16);
    throw std::runtime_error("boom");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  CHECK(amp::get_autocast_dtype(kCPU) == kBFloat16);
  CHECK(amp::weight_cast_cache_size() == 0);
}

TEST_CASE("Autocast refuses a dtype that is not 16-bit floating", "[autocast][errors]") {
  CHECK_THROWS_WITH(
      amp::Autocast(kCPU, kFloat64),
      Contains("expected float16 or bfloat16 as the autocast dtype for cpu, got float64"));
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
}

TEST_CASE("autocast state is per thread", "[autocast]") {
  amp::Autocast autocast(kCPU, kFloat16);
  bool other_thread_enabled = true;
  DType other_thread_result = kFloat16;
  std::thread worker([&] {
    other_thread_enabled = amp::is_autocast_enabled(kCPU);
    other_thread_result = prod(ones({2}, kFloat32)).dtype();  // fp32 policy: would stay fp32 anyway
    amp::Autocast own(kCPU, kBFloat16);
    other_thread_result = amp::get_autocast_dtype(kCPU);
  });
  worker.join();
  CHECK_FALSE(other_thread_enabled);
  CHECK(other_thread_result == kBFloat16);
  CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);  // untouched by the worker's guard
}

TEST_CASE("fp32 policy casts lower-precision inputs up", "[autocast]") {
  const Tensor h = ones({3}, kFloat16);
  {
    amp::Autocast autocast(kCUDA);  // policies are per device type: CPU tensors are untouched
    CHECK(sum(h).dtype() == kFloat16);
  }
  amp::set_cast_policy(OpId::sum, kCPU, CastPolicy::Fp32);
  {
    amp::Autocast autocast(kCPU);
    CHECK(sum(h).dtype() == kFloat32);
    CHECK(sum(h, {}, false, kFloat16).dtype() == kFloat16);  // an explicit dtype is not autocast
    CHECK(prod(h).dtype() == kFloat32);                      // fp32 on the CPU list
    CHECK(exp(h).dtype() == kFloat16);                       // unlisted on the CPU
  }
  amp::reset_cast_policies();
  CHECK(amp::cast_policy(OpId::sum, kCPU) == CastPolicy::Unlisted);
}

TEST_CASE("float64 and integer inputs are never cast", "[autocast]") {
  amp::Autocast autocast(kCPU);
  CHECK(prod(ones({2}, kFloat64)).dtype() == kFloat64);
  CHECK(prod(full({2}, 3, kInt64)).dtype() == kInt64);
}

TEST_CASE("promote casts to the widest floating input", "[autocast]") {
  const Tensor h = ones({2}, kFloat16), b = ones({2}, kBFloat16), f = ones({2}, kFloat32);
  amp::set_cast_policy(OpId::addcmul, kCPU, CastPolicy::Promote);
  {
    amp::Autocast autocast(kCPU);
    CHECK(addcmul(h, h, f).dtype() == kFloat32);
    CHECK(addcmul(h, b, h).dtype() == kFloat32);  // f16 with bf16 meets at f32
    CHECK(addcmul(h, h, h).dtype() == kFloat16);
  }
  amp::reset_cast_policies();
}

TEST_CASE("lower precision casts and banned ops refuse", "[autocast]") {
  const Tensor f = ones({2}, kFloat32);
  amp::set_cast_policy(OpId::mul, kCPU, CastPolicy::LowerPrecision);
  amp::set_cast_policy(OpId::exp, kCPU, CastPolicy::Banned);
  {
    amp::Autocast autocast(kCPU, kFloat16);
    CHECK(mul(f, f).dtype() == kFloat16);
    CHECK_THROWS_WITH(exp(f), Contains("exp is unsafe to autocast on cpu") &&
                                  Contains("binary_cross_entropy_with_logits"));
    amp::Autocast off(kCPU, std::nullopt, false);
    CHECK(exp(f).dtype() == kFloat32);  // fine outside autocast
  }
  amp::reset_cast_policies();
}

TEST_CASE("in-place ops are not autocast", "[autocast]") {
  amp::set_cast_policy(OpId::mul, kCPU, CastPolicy::LowerPrecision);
  Tensor f = ones({2}, kFloat32);
  {
    amp::Autocast autocast(kCPU, kFloat16);
    f.mul_(ones({2}, kFloat32));
  }
  amp::reset_cast_policies();
  CHECK(f.dtype() == kFloat32);
}

TEST_CASE("the weight-cast cache casts a weight once per region", "[autocast][cache]") {
  amp::set_cast_policy(OpId::mul, kCPU, CastPolicy::LowerPrecision);
  Tensor weight = randn({4}).requires_grad_();
  const Tensor x = randn({4});
  {
    amp::AutocastTrace trace;
    amp::Autocast autocast(kCPU, kFloat16);
    const Tensor a = mul(weight, x);
    const Tensor b = mul(weight, x);
    CHECK(amp::weight_cast_cache_size() == 1);  // the weight; x is not a leaf requiring grad
    // Both products read the same cached cast: one to_dtype node feeds both.
    CHECK(a.grad_fn()->next_edges[0].node == b.grad_fn()->next_edges[0].node);
    sum(add(a, b)).backward();
  }
  CHECK(amp::weight_cast_cache_size() == 0);  // cleared when the region ends
  // The gradient reaches the float32 weight through the cached cast: d/dw 2 w x = 2 x.
  CHECK(weight.grad().dtype() == kFloat32);
  const std::vector<float> g = weight.grad().to_vector<float>(), xs = x.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    CHECK(g[i] == Approx(2 * float(Half(xs[i]))).epsilon(2e-3));
  }
  amp::reset_cast_policies();
}

TEST_CASE("a cast made under no_grad is not cached for the training forward after it",
          "[autocast][cache]") {
  // PyTorch issues 65766 and 112583: an evaluation forward under no_grad inside the autocast
  // region cached the weight's cast without its autograd edge; the training forward after it
  // read that cast and the weight got no gradient.
  amp::set_cast_policy(OpId::mul, kCPU, CastPolicy::LowerPrecision);
  Tensor weight = tensor({1.0, 2.0, 3.0}).requires_grad_();
  const Tensor x = tensor({0.5, -1.0, 4.0});
  {
    amp::Autocast autocast(kCPU, kFloat16);
    {
      NoGradGuard no_grad;
      const Tensor evaluated = mul(weight, x);
      CHECK_FALSE(evaluated.requires_grad());
      CHECK(amp::weight_cast_cache_size() == 0);
    }
    const Tensor y = mul(weight, x);
    REQUIRE(y.requires_grad());
    CHECK(amp::weight_cast_cache_size() == 1);  // the training forward's cast is cached
    sum(y).backward();
  }
  REQUIRE(weight.grad().defined());
  CHECK(weight.grad().to_vector<float>() == std::vector<float>{0.5f, -1.0f, 4.0f});
  amp::reset_cast_policies();
}

TEST_CASE("the cache skips views and tensors that need no grad", "[autocast][cache]") {
  amp::set_cast_policy(OpId::mul, kCPU, CastPolicy::LowerPrecision);
  Tensor weight = randn({2, 2}).requires_grad_();
  {
    amp::Autocast autocast(kCPU, kFloat16, true, /*cache_enabled=*/false);
    mul(weight, weight);
    CHECK(amp::weight_cast_cache_size() == 0);
  }
  {
    amp::Autocast autocast(kCPU, kFloat16);
    mul(ones({2}), ones({2}));
    NoGradGuard no_grad;
    mul(weight.select(0, 0), ones({2}));  // a view of the weight
    CHECK(amp::weight_cast_cache_size() == 0);
  }
  amp::reset_cast_policies();
}

TEST_CASE("backward does not run under autocast", "[autocast]") {
  amp::set_cast_policy(OpId::mul, kCPU, CastPolicy::LowerPrecision);
  Tensor w = randn({3}).requires_grad_();
  Tensor loss;
  bool autocast_seen_in_backward = true;
  w.register_hook([&](const Tensor& g) {
    autocast_seen_in_backward = amp::is_autocast_enabled(kCPU);
    return Tensor();
  });
  {
    amp::Autocast autocast(kCPU, kFloat16);
    loss = sum(mul(w, w));
    loss.backward();  // inside the region on purpose
  }
  CHECK_FALSE(autocast_seen_in_backward);
  amp::reset_cast_policies();
}

TEST_CASE("the trace records each outermost op with its policy and dtypes", "[autocast][trace]") {
  amp::AutocastTrace trace;
  const Tensor f = ones({2}, kFloat32);
  {
    amp::Autocast autocast(kCPU);
    prod(f.to(kBFloat16));
  }
  prod(f);
  REQUIRE(trace.entries().size() == 3);
  CHECK(trace.entries()[0].op == OpId::to_dtype);
  CHECK(trace.entries()[1].op == OpId::prod);
  CHECK(trace.entries()[1].policy == CastPolicy::Fp32);
  CHECK(trace.entries()[1].input_dtypes == std::vector<DType>{kBFloat16});
  CHECK(trace.entries()[1].output_dtypes == std::vector<DType>{kFloat32});
  CHECK_FALSE(trace.entries()[2].policy.has_value());
  const std::string table = trace.table();
  CHECK(table.find("prod") != std::string::npos);
  CHECK(table.find("fp32") != std::string::npos);
  CHECK(table.find("(autocast off)") != std::string::npos);
}

TEST_CASE("the README example runs as it says", "[autocast][readme]") {
  Tensor w = randn({256, 784}).requires_grad_();
  Tensor x = randn({64, 784});
  Tensor loss;
  Tensor h;
  {
    amp::Autocast autocast(kCPU);
    h = gelu(linear(x, w));
    loss = mse_loss(h, zeros_like(h));
  }
  CHECK(h.dtype() == kBFloat16);
  CHECK(loss.dtype() == kFloat32);
  loss.backward();
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(w.grad().sizes() == Shape{256, 784});
}
