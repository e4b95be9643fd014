// nn::utils::clip_grad_norm_ / clip_grad_value_ against norms computed by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

// Two parameters with grads [3, 4] (norm 5) and [12] (norm 12): total 2-norm 13.
std::vector<Tensor> params_with_grads() {
  Tensor a = zeros({2}).requires_grad_();
  Tensor b = zeros({1}).requires_grad_();
  Tensor no_grad = zeros({3}).requires_grad_();
  a.mutable_grad() = tensor({3.0, 4.0});
  b.mutable_grad() = tensor({12.0});
  return {a, b, no_grad};
}

}  // namespace

TEST_CASE("clip_grad_norm_ scales by max_norm over the total norm", "[nn][utils]") {
  auto params = params_with_grads();
  Tensor total = nn::utils::clip_grad_norm_(params, 1.0);
  CHECK(total.dim() == 0);
  CHECK(total.item<double>() == Approx(13.0));
  const double coef = 1.0 / (13.0 + 1e-6);
  CHECK(params[0].grad().to_vector<double>()[0] == Approx(3 * coef));
  CHECK(params[0].grad().to_vector<double>()[1] == Approx(4 * coef));
  CHECK(params[1].grad().to_vector<double>()[0] == Approx(12 * coef));
  CHECK(!params[2].grad().defined());
}

TEST_CASE("clip_grad_norm_ leaves gradients below max_norm alone", "[nn][utils]") {
  auto params = params_with_grads();
  Tensor total = nn::utils::clip_grad_norm_(params, 20.0);
  CHECK(total.item<double>() == Approx(13.0));
  CHECK(params[0].grad().to_vector<double>() == std::vector<double>{3, 4});
  CHECK(params[1].grad().to_vector<double>() == std::vector<double>{12});
}

TEST_CASE("clip_grad_norm_ with other norm types", "[nn][utils]") {
  auto params = params_with_grads();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(nn::utils::clip_grad_norm_(params, 100.0, inf).item<double>() == Approx(12.0));
  CHECK(nn::utils::clip_grad_norm_(params, 100.0, 1.0).item<double>() == Approx(19.0));
  CHECK(nn::utils::clip_grad_norm_(params, 6.0, 1.0).item<double>() == Approx(19.0));
  CHECK(params[1].grad().to_vector<double>()[0] == Approx(12 * 6.0 / (19 + 1e-6)));
  CHECK(nn::utils::clip_grad_norm_({}, 1.0).item<double>() == 0.0);
}

TEST_CASE("clip_grad_norm_ works on float16 gradients whose squares overflow", "[nn][utils]") {
  Tensor p = zeros({2}, kFloat16).requires_grad_();
  p.mutable_grad() = tensor({30000.0, 40000.0}, kFloat16);
  Tensor total = nn::utils::clip_grad_norm_({p}, 1.0);
  CHECK(total.item<double>() == Approx(50000.0).epsilon(1e-3));
  CHECK(p.grad().dtype() == kFloat16);
  CHECK(p.grad().to_vector<double>()[0] == Approx(0.6).epsilon(2e-3));
}

TEST_CASE("a non-finite total norm errors or poisons the gradients as torch", "[nn][utils]") {
  auto params = params_with_grads();
  params[0].mutable_grad() = tensor({std::nan(""), 1.0});
  CHECK_THROWS_AS(nn::utils::clip_grad_norm_(params, 1.0, 2.0, true), Error);
  CHECK(params[1].grad().to_vector<double>() == std::vector<double>{12});  // untouched
  Tensor total = nn::utils::clip_grad_norm_(params, 1.0);
  CHECK(std::isnan(total.item<double>()));
  CHECK(std::isnan(params[1].grad().to_vector<double>()[0]));
}

TEST_CASE("clip_grad_value_ clamps each gradient element", "[nn][utils]") {
  auto params = params_with_grads();
  nn::utils::clip_grad_value_(params, 3.5);
  CHECK(params[0].grad().to_vector<double>() == std::vector<double>{3, 3.5});
  CHECK(params[1].grad().to_vector<double>() == std::vector<double>{3.5});
  CHECK_THROWS_AS(nn::utils::clip_grad_value_(params, -1.0), Error);
}

TEST_CASE("parameters_to_vector and vector_to_parameters round trip in order", "[nn][utils]") {
  Tensor a = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}).requires_grad_();
  Tensor b = tensor({5.0, 6.0, 7.0}).requires_grad_();
  const Tensor v = nn::utils::parameters_to_vector({a, b});
  CHECK(v.sizes() == Shape{7});
  CHECK(v.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6, 7});
  // Recorded as torch's: the vector's gradient reaches the parameters.
  sum(mul(v, arange(7.0))).backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0, 1, 2, 3});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{4, 5, 6});
  // Back into the parameters, in place, leaves staying leaves.
  nn::utils::vector_to_parameters(mul(arange(7.0), -1.0), {a, b});
  CHECK(a.to_vector<double>() == std::vector<double>{0, -1, -2, -3});
  CHECK(b.to_vector<double>() == std::vector<double>{-4, -5, -6});
  CHECK(a.is_leaf());
  CHECK_THROWS_WITH(nn::utils::vector_to_parameters(zeros({6}), {a, b}),
                    Catch::Contains("the parameters hold 7 elements, the vector 6"));
  CHECK_THROWS_WITH(nn::utils::vector_to_parameters(zeros({7, 1}), {a, b}),
                    Catch::Contains("expected a 1-d vector, got shape [7, 1]"));
  CHECK(b.to_vector<double>() == std::vector<double>{-4, -5, -6});  // untouched
  CHECK_THROWS_WITH(nn::utils::parameters_to_vector({a, zeros({2}, kFloat64)}),
                    Catch::Contains("expected every parameter as float32"));
}
