// The imperative autocast functions (libtorch's at::autocast::set_autocast_enabled, ...) and
// amp::register_autocast for custom Functions (torch.library.register_autocast): what each
// does to the thread's mode, the weight-cast cache and a Function's inputs.
#include <catch2/catch.hpp>

#include <string>
#include <thread>

#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/autocast_nesting.h"

using namespace hg;
using Catch::Contains;

namespace {

// Restores the thread's mode, nesting count and registrations however a test ends.
struct CleanAutocast {
  ~CleanAutocast() {
    amp::set_autocast_enabled(kCPU, false);
    amp::set_autocast_enabled(kCUDA, false);
    amp::set_autocast_dtype(kCPU, kBFloat16);
    amp::set_autocast_dtype(kCUDA, kFloat16);
    amp::set_autocast_cache_enabled(true);
    while (ops::autocast_nesting() > 0) amp::decrement_nesting();
    amp::clear_cache();
    amp::reset_autocast_registrations();
    amp::reset_cast_policies();
  }
};

// Records the dtypes its forward saw and whether autocast was on inside it.
struct SeenDtypes : autograd::Function<SeenDtypes> {
  static constexpr const char* kName = "SeenDtypes";
  static inline std::vector<DType> seen;
  static inline bool autocast_inside = false;
  static Tensor forward(autograd::FunctionContext&, const Tensor& a, const Tensor& b) {
    seen = {a.dtype(), b.dtype()};
    autocast_inside = amp::is_autocast_enabled(kCPU);
    return a + b.to(a.dtype());
  }
  static std::vector<Tensor> backward(autograd::FunctionContext&, const std::vector<Tensor>& g) {
    return {g[0], g[0]};
  }
};

// Declares custom_fwd(cast_inputs=float32) at compile time.
struct DeclaresFp32 : autograd::Function<DeclaresFp32> {
  static constexpr const char* kName = "DeclaresFp32";
  static constexpr std::optional<DType> kCastInputs = kFloat32;
  static inline DType seen = kFloat64;
  static Tensor forward(autograd::FunctionContext&, const Tensor& a) {
    seen = a.dtype();
    return a * 2.0;
  }
  static std::vector<Tensor> backward(autograd::FunctionContext&, const std::vector<Tensor>& g) {
    return {g[0] * 2.0};
  }
};

// No kName of its own.
struct Unnamed : autograd::Function<Unnamed> {
  static Tensor forward(autograd::FunctionContext&, const Tensor& a) { return a; }
  static std::vector<Tensor> backward(autograd::FunctionContext&, const std::vector<Tensor>& g) {
    return g;
  }
};

}  // namespace

TEST_CASE("set_autocast_enabled and set_autocast_dtype switch autocast as the guard does",
          "[autocast][imperative]") {
  CleanAutocast clean;
  const Tensor a = randn({3, 4});
  const Tensor b = randn({4, 2});
  CHECK(matmul(a, b).dtype() == kFloat32);
  amp::set_autocast_enabled(kCPU, true);
  CHECK(amp::is_autocast_enabled(kCPU));
  CHECK_FALSE(amp::is_autocast_enabled(kCUDA));
  CHECK(matmul(a, b).dtype() == kBFloat16);
  amp::set_autocast_dtype(kCPU, kFloat16);
  CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
  CHECK(matmul(a, b).dtype() == kFloat16);
  // A guard inside restores what the imperative calls set.
  {
    amp::Autocast off(kCPU, std::nullopt, /*enabled=*/false);
    CHECK(matmul(a, b).dtype() == kFloat32);
  }
  CHECK(amp::is_autocast_enabled(kCPU));
  CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
  amp::set_autocast_enabled(kCPU, false);
  CHECK(matmul(a, b).dtype() == kFloat32);
  CHECK(amp::is_autocast_available(kCPU));
  CHECK(amp::is_autocast_available(kCUDA));
}

TEST_CASE("set_autocast_dtype refuses a dtype that is not 16-bit floating and changes nothing",
          "[autocast][imperative][errors]") {
  CleanAutocast clean;
  amp::set_autocast_dtype(kCPU, kFloat16);
  CHECK_THROWS_WITH(amp::set_autocast_dtype(kCPU, kFloat32),
                    Contains("expected float16 or bfloat16") && Contains("got float32"));
  CHECK(amp::get_autocast_dtype(kCPU) == kFloat16);
}

TEST_CASE("the imperative mode is per thread", "[autocast][imperative]") {
  CleanAutocast clean;
  amp::set_autocast_enabled(kCPU, true);
  bool other_thread_enabled = true;
  std::thread([&] { other_thread_enabled = amp::is_autocast_enabled(kCPU); }).join();
  CHECK_FALSE(other_thread_enabled);
}

TEST_CASE("nesting counts keep the weight-cast cache and clear_cache drops it",
          "[autocast][imperative][cache]") {
  CleanAutocast clean;
  Tensor weight = randn({4, 4}).requires_grad_(true);
  const Tensor x = randn({2, 4});
  amp::set_autocast_enabled(kCPU, true);
  // Enabled but no region open: correct results, nothing cached.
  (void)matmul(x, weight);
  CHECK(amp::weight_cast_cache_size() == 0);
  CHECK(amp::increment_nesting() == 1);
  CHECK(amp::increment_nesting() == 2);
  (void)matmul(x, weight);
  (void)matmul(x, weight);
  CHECK(amp::weight_cast_cache_size() == 1);
  CHECK(amp::decrement_nesting() == 1);
  // libtorch's decrement_nesting leaves the clearing to its caller.
  CHECK(amp::decrement_nesting() == 0);
  CHECK(amp::weight_cast_cache_size() == 1);
  amp::clear_cache();
  CHECK(amp::weight_cast_cache_size() == 0);
  // A guard's exit after the count went to 0 by hand neither throws nor goes below 0.
  {
    amp::Autocast autocast(kCPU);
    CHECK(ops::autocast_nesting() == 1);
    CHECK(amp::decrement_nesting() == 0);
  }
  CHECK(ops::autocast_nesting() == 0);
  // The guard counts as a region: its exit clears.
  {
    amp::Autocast autocast(kCPU);
    (void)matmul(x, weight);
    CHECK(amp::weight_cast_cache_size() == 1);
  }
  CHECK(amp::weight_cast_cache_size() == 0);
  // The cache flag stops caching.
  amp::increment_nesting();
  amp::set_autocast_cache_enabled(false);
  CHECK_FALSE(amp::is_autocast_cache_enabled());
  (void)matmul(x, weight);
  CHECK(amp::weight_cast_cache_size() == 0);
  amp::decrement_nesting();
}

TEST_CASE("decrement_nesting at zero is an error that changes nothing",
          "[autocast][imperative][errors]") {
  CleanAutocast clean;
  CHECK(ops::autocast_nesting() == 0);
  CHECK_THROWS_WITH(amp::decrement_nesting(),
                    Contains("expected an open autocast region") && Contains("count of 0"));
  CHECK(ops::autocast_nesting() == 0);
}

TEST_CASE("a registered Function's inputs are cast as its policy says", "[autocast][register]") {
  CleanAutocast clean;
  const Tensor a = randn({3}).to(kFloat32);
  const Tensor b = randn({3}).to(kFloat16);
  const Tensor c = randn({3}).to(kFloat64);

  // Without a registration the Function runs as called, autocast on inside it.
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    (void)SeenDtypes::apply(a, b);
    CHECK(SeenDtypes::seen == std::vector<DType>{kFloat32, kFloat16});
    CHECK(SeenDtypes::autocast_inside);
  }

  amp::register_autocast<SeenDtypes>(kCPU, CastPolicy::LowerPrecision);
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    (void)SeenDtypes::apply(a, b);
    CHECK(SeenDtypes::seen == std::vector<DType>{kBFloat16, kBFloat16});
    CHECK_FALSE(SeenDtypes::autocast_inside);  // forward runs with autocast off
    // float64 is never lowered.
    (void)SeenDtypes::apply(c, b);
    CHECK(SeenDtypes::seen == std::vector<DType>{kFloat64, kBFloat16});
  }
  // Outside autocast the registration does nothing.
  (void)SeenDtypes::apply(a, b);
  CHECK(SeenDtypes::seen == std::vector<DType>{kFloat32, kFloat16});

  amp::register_autocast<SeenDtypes>(kCPU, CastPolicy::Fp32);  // replaces the first
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    (void)SeenDtypes::apply(b, b);
    CHECK(SeenDtypes::seen == std::vector<DType>{kFloat32, kFloat32});
  }
  amp::register_autocast<SeenDtypes>(kCPU, CastPolicy::Promote);
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    (void)SeenDtypes::apply(b, a);
    CHECK(SeenDtypes::seen == std::vector<DType>{kFloat32, kFloat32});
    (void)SeenDtypes::apply(b, c);
    CHECK(SeenDtypes::seen == std::vector<DType>{kFloat64, kFloat64});
  }
  amp::register_autocast<SeenDtypes>(kCPU, CastPolicy::Unlisted);
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    (void)SeenDtypes::apply(a, b);
    CHECK(SeenDtypes::seen == std::vector<DType>{kFloat32, kFloat16});
    CHECK(SeenDtypes::autocast_inside);
  }
  // A registration for CUDA leaves the CPU alone.
  amp::reset_autocast_registrations();
  amp::register_autocast<SeenDtypes>(kCUDA, CastPolicy::Fp32);
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    (void)SeenDtypes::apply(b, b);
    CHECK(SeenDtypes::seen == std::vector<DType>{kFloat16, kFloat16});
  }
}

TEST_CASE("the gradient of a registered Function flows back through the casts",
          "[autocast][register]") {
  CleanAutocast clean;
  amp::register_autocast<DeclaresFp32>(kCPU, CastPolicy::LowerPrecision);
  Tensor x = randn({5}).requires_grad_(true);
  Tensor y;
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    y = DeclaresFp32::apply(x);
  }
  CHECK(DeclaresFp32::seen == kBFloat16);  // the registration wins over kCastInputs
  CHECK(y.dtype() == kBFloat16);
  y.to(kFloat32).sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == kFloat32);
  // d(2x)/dx = 2, exact in bfloat16.
  const std::vector<float> grad = x.grad().to_vector<float>();
  for (float g : grad) CHECK(g == 2.0f);

  // Dropping the registration brings kCastInputs back.
  amp::reset_autocast_registrations();
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    (void)DeclaresFp32::apply(x.detach().to(kBFloat16));
  }
  CHECK(DeclaresFp32::seen == kFloat32);
}

TEST_CASE("a Function registered as banned refuses to run under autocast",
          "[autocast][register][errors]") {
  CleanAutocast clean;
  amp::register_autocast<SeenDtypes>(kCPU, CastPolicy::Banned);
  const Tensor a = randn({2});
  {
    amp::Autocast autocast(kCPU);
    CHECK_THROWS_WITH(SeenDtypes::apply(a, a),
                      Contains("SeenDtypes is registered as banned under autocast on cpu"));
  }
  CHECK_NOTHROW(SeenDtypes::apply(a, a));
}

TEST_CASE("register_autocast needs a Function with a name of its own",
          "[autocast][register][errors]") {
  CleanAutocast clean;
  CHECK_THROWS_WITH(amp::register_autocast<Unnamed>(kCPU, CastPolicy::Fp32),
                    Contains("expected a Function with a kName of its own") &&
                        Contains("CustomFunctionBackward"));
  CHECK(amp::registered_autocasts().empty());
}

TEST_CASE("the policy table lists the program's registrations beside the built-in ops",
          "[autocast][register]") {
  CleanAutocast clean;
  const std::string before = amp::policy_table(/*header=*/true);
  CHECK(before.rfind("name\tcuda_policy\tcpu_policy\tdifferentiable\tfp8\n", 0) == 0);
  CHECK_THAT(before, Contains("\nlinear\tlower_precision_fp\tlower_precision_fp\tyes\tyes\n"));
  CHECK_THAT(before, !Contains("SeenDtypes"));

  amp::register_autocast<SeenDtypes>(kCUDA, CastPolicy::Fp32);
  amp::register_autocast<DeclaresFp32>(kCPU, CastPolicy::Promote);
  amp::register_autocast(OpId::layer_norm, kCUDA, CastPolicy::LowerPrecision);
  const std::string after = amp::policy_table();
  CHECK_THAT(after, Contains("\nSeenDtypes\tfp32\tunlisted\tyes\tno\n"));
  CHECK_THAT(after, Contains("\nDeclaresFp32\tunlisted\tpromote\tyes\tno\n"));
  CHECK_THAT(after, Contains("\nlayer_norm\tlower_precision_fp\tunlisted\t"));
  const auto registered = amp::registered_autocasts();
  REQUIRE(registered.size() == 2);
  CHECK(registered[0].name == "DeclaresFp32");
  CHECK(registered[0].device_type == kCPU);
  CHECK(registered[0].policy == CastPolicy::Promote);
  CHECK(registered[1].name == "SeenDtypes");
  CHECK(registered[1].device_type == kCUDA);
}
