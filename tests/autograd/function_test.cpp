// Custom autograd functions: forward/backward, gradcheck, and torch's custom_fwd/custom_bwd
// semantics under autocast.
#include <catch2/catch.hpp>

#include <any>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

// y = scale * x^2 with a hand-written backward.
struct ScaledSquare : autograd::Function<ScaledSquare> {
  static constexpr const char* kName = "ScaledSquareBackward";
  static Tensor forward(autograd::FunctionContext& ctx, const Tensor& x, double scale) {
    ctx.save_for_backward({x});
    ctx.saved_data["scale"] = scale;
    return mul(mul(x, x), scale);
  }
  static std::vector<Tensor> backward(autograd::FunctionContext& ctx,
                                      const std::vector<Tensor>& grads) {
    const Tensor x = ctx.saved(0);
    return {mul(mul(grads[0], x), 2 * std::any_cast<double>(ctx.saved_data["scale"]))};
  }
};

// Records what forward and backward saw of autocast.
struct Observed {
  static inline DType forward_input_dtype = kFloat64;
  static inline bool forward_autocast = true;
  static inline bool backward_autocast = false;
};

struct CastToFloat32 : autograd::Function<CastToFloat32> {
  static constexpr std::optional<DType> kCastInputs = kFloat32;
  static constexpr bool kCustomBwd = true;
  static Tensor forward(autograd::FunctionContext&, const Tensor& x) {
    Observed::forward_input_dtype = x.dtype();
    Observed::forward_autocast = amp::is_autocast_enabled(kCPU);
    return mul(x, 3.0);
  }
  static std::vector<Tensor> backward(autograd::FunctionContext&,
                                      const std::vector<Tensor>& grads) {
    Observed::backward_autocast = amp::is_autocast_enabled(kCPU);
    return {mul(grads[0], 3.0)};
  }
};

// custom_bwd without cast_inputs: backward replays the caller's autocast state.
struct KeepsAutocast : autograd::Function<KeepsAutocast> {
  static constexpr bool kCustomBwd = true;
  static Tensor forward(autograd::FunctionContext&, const Tensor& x) {
    Observed::forward_autocast = amp::is_autocast_enabled(kCPU);
    return mul(x, 2.0);
  }
  static std::vector<Tensor> backward(autograd::FunctionContext&,
                                      const std::vector<Tensor>& grads) {
    Observed::backward_autocast = amp::is_autocast_enabled(kCPU);
    return {mul(grads[0], 2.0)};
  }
};

}  // namespace

TEST_CASE("a custom function records one node with its own backward", "[autograd][function]") {
  Tensor x = tensor({1.0, -2.0}, kFloat64).requires_grad_();
  const Tensor y = ScaledSquare::apply(x, 3.0);
  CHECK(y.grad_fn()->name() == "ScaledSquareBackward");
  CHECK(y.to_vector<double>() == std::vector<double>{3.0, 12.0});
  sum(y).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6.0, -12.0});
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return ScaledSquare::apply(in[0], 0.5); },
      {randn({3}, kFloat64).requires_grad_()}));
  NoGradGuard no_grad;
  CHECK_FALSE(ScaledSquare::apply(x, 1.0).requires_grad());
}

TEST_CASE("custom_fwd casts inputs and runs forward and custom_bwd's backward without autocast",
          "[autograd][function][autocast]") {
  Tensor x = ones({2}, kBFloat16).requires_grad_();
  Tensor y;
  {
    amp::Autocast autocast(kCPU);
    y = CastToFloat32::apply(x);
  }
  CHECK(Observed::forward_input_dtype == kFloat32);
  CHECK_FALSE(Observed::forward_autocast);
  CHECK(y.dtype() == kFloat32);
  Observed::backward_autocast = true;
  sum(y).backward();
  CHECK_FALSE(Observed::backward_autocast);  // torch: custom_bwd after cast_inputs, autocast off
  CHECK(x.grad().dtype() == kBFloat16);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{3.0f, 3.0f});
  // Outside autocast nothing is cast.
  CastToFloat32::apply(ones({2}, kBFloat16));
  CHECK(Observed::forward_input_dtype == kBFloat16);
}

TEST_CASE("custom_bwd without cast_inputs runs backward under the caller's autocast state",
          "[autograd][function][autocast]") {
  Tensor x = ones({2}).requires_grad_();
  Tensor y;
  {
    amp::Autocast autocast(kCPU);
    y = KeepsAutocast::apply(x);
  }
  CHECK(Observed::forward_autocast);
  Observed::backward_autocast = false;
  sum(y).backward();
  CHECK(Observed::backward_autocast);  // replayed: the engine itself runs backward with it off
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2.0f, 2.0f});
}
