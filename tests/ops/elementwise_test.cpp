// Elementwise ops: forward in every floating dtype against float64 math on the (already
// rounded) inputs, PyTorch's type promotion, and bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>

#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/kernel_lookup.h"

using namespace hg;
using Catch::Contains;

namespace {

// Relative tolerance of an op computed in float and rounded once to dtype.
double tolerance(DType dtype) {
  switch (dtype) {
    case kFloat16:
      return 1e-3;  // 2^-11 output rounding, plus float's own error
    case kBFloat16:
      return 8e-3;  // 2^-8 output rounding
    case kFloat32:
      return 5e-6;
    default:
      return 1e-13;
  }
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> reference;
  double low, high;
};

double gelu_exact(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// erf's inverse found by bisection on std::erf (independent of the kernel's formula).
double erfinv_by_bisection(double y) {
  double low = -6, high = 6;
  for (int i = 0; i < 200 && low < high; ++i) {
    const double mid = 0.5 * (low + high);
    if (mid == low || mid == high) break;
    (std::erf(mid) < y ? low : high) = mid;
  }
  return 0.5 * (low + high);
}

void check_unary(const UnaryCase& c, DType dtype) {
  CAPTURE(c.name, dtype);
  Tensor x = rand({257}, dtype);  // odd size: vector loops and their tails
  x = add(mul(x, c.high - c.low), c.low);
  const Tensor y = c.op(x);
  REQUIRE(y.dtype() == dtype);
  const std::vector<double> in = x.to_vector<double>(), out = y.to_vector<double>();
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = c.reference(in[i]);
    CAPTURE(in[i], out[i], want);
    REQUIRE(std::isfinite(out[i]));
    REQUIRE(std::abs(out[i] - want) <= tolerance(dtype) * std::abs(want) + tolerance(dtype) * 1e-3);
  }
}

}  // namespace

TEST_CASE("unary ops match float64 math in every floating dtype", "[elementwise]") {
  manual_seed(1);
  const std::vector<UnaryCase> cases = {
      {"neg", [](auto& x) { return neg(x); }, [](double v) { return -v; }, -3, 3},
      {"exp", [](auto& x) { return exp(x); }, [](double v) { return std::exp(v); }, -4, 4},
      {"log", [](auto& x) { return log(x); }, [](double v) { return std::log(v); }, 0.1, 10},
      {"expm1", [](auto& x) { return expm1(x); }, [](double v) { return std::expm1(v); }, -3, 3},
      {"log1p", [](auto& x) { return log1p(x); }, [](double v) { return std::log1p(v); }, 0, 5},
      {"log2", [](auto& x) { return log2(x); }, [](double v) { return std::log2(v); }, 0.1, 10},
      {"log10", [](auto& x) { return log10(x); }, [](double v) { return std::log10(v); }, 0.1, 10},
      {"sqrt", [](auto& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0.01, 9},
      {"rsqrt", [](auto& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); }, 0.1,
       9},
      {"reciprocal", [](auto& x) { return reciprocal(x); }, [](double v) { return 1 / v; }, 0.2, 5},
      {"abs", [](auto& x) { return abs(x); }, [](double v) { return std::abs(v); }, -3, 3},
      {"sin", [](auto& x) { return sin(x); }, [](double v) { return std::sin(v); }, -3, 3},
      {"cos", [](auto& x) { return cos(x); }, [](double v) { return std::cos(v); }, -3, 3},
      {"tanh", [](auto& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -3, 3},
      {"tan", [](auto& x) { return tan(x); }, [](double v) { return std::tan(v); }, -1.3, 1.3},
      {"asin", [](auto& x) { return asin(x); }, [](double v) { return std::asin(v); }, -0.99, 0.99},
      {"acos", [](auto& x) { return acos(x); }, [](double v) { return std::acos(v); }, -0.99, 0.99},
      {"sinh", [](auto& x) { return sinh(x); }, [](double v) { return std::sinh(v); }, -4, 4},
      {"cosh", [](auto& x) { return cosh(x); }, [](double v) { return std::cosh(v); }, -4, 4},
      {"sigmoid", [](auto& x) { return sigmoid(x); },
       [](double v) { return 1 / (1 + std::exp(-v)); }, -6, 6},
      {"relu", [](auto& x) { return relu(x); }, [](double v) { return v <= 0 ? 0 : v; }, -3, 3},
      {"gelu", [](auto& x) { return gelu(x); }, gelu_exact, -4, 4},
      {"gelu_tanh", [](auto& x) { return gelu(x, "tanh"); }, gelu_tanh, -4, 4},
      {"silu", [](auto& x) { return silu(x); }, [](double v) { return v / (1 + std::exp(-v)); }, -5,
       5},
      {"softplus", [](auto& x) { return softplus(x); },
       [](double v) { return std::log1p(std::exp(v)); }, -5, 5},
      {"erf", [](auto& x) { return erf(x); }, [](double v) { return std::erf(v); }, -2, 2},
      {"erfinv", [](auto& x) { return erfinv(x); }, erfinv_by_bisection, -0.95, 0.95},
      {"clamp", [](auto& x) { return clamp(x, -0.5, 0.75); },
       [](double v) { return std::min(std::max(v, -0.5), 0.75); }, -2, 2},
  };
  for (const UnaryCase& c : cases) {
    for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) check_unary(c, dtype);
  }
}

TEST_CASE("relu keeps NaN and zeroes what is <= 0, as torch does", "[elementwise]") {
  // 37 values: two whole 16-lane blocks and a tail, so a vectorized pass is checked in full
  // blocks and in its masked tail; the special values recur at every position class.
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> special = {nan, -inf, -1.5, -0.0, 0.0, 2.5, inf, 1e-3, -2e-3, -nan};
  std::vector<double> input;
  for (size_t i = 0; i < 37; ++i) input.push_back(special[(i * 5) % special.size()]);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype);
    const Tensor x = tensor(input, dtype);
    const std::vector<double> xs = x.to_vector<double>();
    const std::vector<double> got = relu(x).to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(i, xs[i]);
      if (std::isnan(xs[i])) {
        CHECK(std::isnan(got[i]));
      } else if (xs[i] <= 0) {
        CHECK(got[i] == 0.0);
        CHECK_FALSE(std::signbit(got[i]));
      } else {
        CHECK(got[i] == xs[i]);
      }
    }
  }
}

TEST_CASE("relu's backward passes the gradient where the input is > 0 or NaN", "[elementwise]") {
  // The 16-bit kernels decide on the input's bits (both NaN signs, both zeros, subnormals);
  // 37 values, as above, for the vector blocks and the tail.
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> special = {nan,  -inf,  -1.5, -0.0, 0.0,   2.5,  inf,
                                       1e-3, -2e-3, -nan, 1e-7, -1e-7, 65504};
  std::vector<double> input, grad;
  for (size_t i = 0; i < 37; ++i) {
    input.push_back(special[(i * 5) % special.size()]);
    grad.push_back(double(i) - 17.25);
  }
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype);
    const Tensor x = tensor(input, dtype), g = tensor(grad, dtype);
    const std::vector<double> xs = x.to_vector<double>(), gs = g.to_vector<double>();
    const std::vector<double> got =
        kernel_for::elementwise(x).threshold_backward(g, x, 0.0).to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i) {
      CAPTURE(i, xs[i]);
      if (xs[i] <= 0) {
        CHECK(got[i] == 0.0);
        CHECK_FALSE(std::signbit(got[i]));
      } else {
        CHECK(got[i] == gs[i]);  // x > 0, or NaN
      }
    }
  }
}

TEST_CASE("floor, ceil, trunc and round as torch's: halves to even, signed zeros, integers kept",
          "[elementwise]") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  // 37 values (two 16-lane blocks and a tail), the halves and the specials at every position.
  const std::vector<double> special = {-2.5, -1.5, -0.5,  0.5, 1.5,       2.5, -0.3, 0.3, -0.0,
                                       0.0,  1.75, -1.75, 3.0, 1e6 + 0.5, nan, inf,  -inf};
  std::vector<double> input;
  for (size_t i = 0; i < 37; ++i) input.push_back(special[(i * 7) % special.size()]);
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*reference)(double);  // C's functions in double; nearbyint rounds halves to even
  };
  const Case cases[] = {
      {"floor", [](const Tensor& t) { return floor(t); }, [](double v) { return std::floor(v); }},
      {"ceil", [](const Tensor& t) { return ceil(t); }, [](double v) { return std::ceil(v); }},
      {"trunc", [](const Tensor& t) { return trunc(t); }, [](double v) { return std::trunc(v); }},
      {"round", [](const Tensor& t) { return round(t); },
       [](double v) { return std::nearbyint(v); }}};
  REQUIRE(std::fegetround() == FE_TONEAREST);
  for (const Case& c : cases) {
    for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      CAPTURE(c.name, dtype);
      const Tensor x = tensor(input, dtype);
      const std::vector<double> xs = x.to_vector<double>();
      const Tensor y = c.op(x);
      REQUIRE(y.dtype() == dtype);
      const std::vector<double> got = y.to_vector<double>();
      for (size_t i = 0; i < xs.size(); ++i) {
        CAPTURE(i, xs[i]);
        const double want = c.reference(xs[i]);  // xs: the input as the dtype holds it
        if (std::isnan(want)) {
          CHECK(std::isnan(got[i]));
        } else {
          CHECK(got[i] == want);
          CHECK(std::signbit(got[i]) == std::signbit(want));
        }
      }
    }
    // An integer tensor keeps its dtype and values.
    const Tensor ints = tensor(std::vector<int64_t>{-3, 0, 7, int64_t(1) << 62}, {4});
    const Tensor same = c.op(ints);
    CHECK(same.dtype() == kInt64);
    CHECK(same.to_vector<int64_t>() == ints.to_vector<int64_t>());
  }
  CHECK(round(tensor({-2.5, -1.5, 0.5, 1.5, 2.5})).to_vector<double>() ==
        std::vector<double>{-2.0, -2.0, 0.0, 2.0, 2.0});
}

TEST_CASE("the rounding ops' gradient is zero, even for an infinite incoming gradient",
          "[elementwise]") {
  for (Tensor (*op)(const Tensor&) :
       {+[](const Tensor& t) { return floor(t); }, +[](const Tensor& t) { return ceil(t); },
        +[](const Tensor& t) { return trunc(t); }, +[](const Tensor& t) { return round(t); }}) {
    Tensor x = tensor({0.3, -1.7, 2.5}).requires_grad_();
    const Tensor y = op(x);
    REQUIRE(y.requires_grad());
    y.backward(tensor({std::numeric_limits<double>::infinity(), std::nan(""), 1.0}));
    CHECK(x.grad().to_vector<float>() == std::vector<float>{0.0f, 0.0f, 0.0f});
  }
}

TEST_CASE("hardswish and mish match float64 formulas, forward and backward", "[elementwise]") {
  // torch's definitions: hardswish(x) = x relu6(x + 3) / 6, its derivative 0 below -3, 1
  // above 3, x / 3 + 1/2 between; mish(x) = x tanh(softplus(x)).
  const auto hardswish_ref = [](double v) { return v * std::clamp(v + 3, 0.0, 6.0) / 6; };
  const auto hardswish_grad = [](double v) { return v < -3 ? 0.0 : v <= 3 ? v / 3 + 0.5 : 1.0; };
  const auto mish_ref = [](double v) { return v * std::tanh(std::log1p(std::exp(v))); };
  const auto mish_grad = [](double v) {
    const double t = std::tanh(std::log1p(std::exp(v))), s = 1 / (1 + std::exp(-v));
    return t + v * s * (1 - t * t);
  };
  const std::vector<double> values = {-5.0, -3.0, -2.9, -1.0, -0.25, 0.0, 0.5, 2.0, 3.0, 4.5, 25.0};
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    const double tol = dtype == kFloat64   ? 1e-12
                       : dtype == kFloat32 ? 2e-6
                       : dtype == kFloat16 ? 2e-3
                                           : 1.6e-2;
    Tensor x = tensor(values, dtype).requires_grad_();
    const std::vector<double> xs = x.to_vector<double>();
    for (int which = 0; which < 2; ++which) {
      CAPTURE(which);
      x.mutable_grad() = Tensor();
      const Tensor y = which == 0 ? hardswish(x) : mish(x);
      y.backward(ones_like(y));
      const std::vector<double> got = y.to_vector<double>(), g = x.grad().to_vector<double>();
      for (size_t k = 0; k < xs.size(); ++k) {
        CAPTURE(xs[k]);
        const double want = which == 0 ? hardswish_ref(xs[k]) : mish_ref(xs[k]);
        const double want_grad = which == 0 ? hardswish_grad(xs[k]) : mish_grad(xs[k]);
        CHECK(std::fabs(got[k] - want) <= tol * (1 + std::fabs(want)));
        CHECK(std::fabs(g[k] - want_grad) <= 2 * tol * (1 + std::fabs(want_grad)));
      }
    }
  }
  CHECK(std::isnan(hardswish(tensor({std::nan("")})).item<double>()));
  CHECK(std::isnan(mish(tensor({std::nan("")})).item<double>()));
}

TEST_CASE("isnan, isinf, isfinite and nan_to_num as torch's", "[elementwise]") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {1.5, nan, inf, -inf, -0.0, -nan, 1e30, -2.25};
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    const Tensor x = tensor(values, dtype);
    const std::vector<double> xs = x.to_vector<double>();  // 1e30 is inf in float16
    const Tensor is_nan = isnan(x), is_inf = isinf(x), is_finite = isfinite(x);
    REQUIRE(is_nan.dtype() == kBool);
    const std::vector<bool> n = is_nan.to_vector<bool>(), i = is_inf.to_vector<bool>(),
                            f = is_finite.to_vector<bool>();
    for (size_t k = 0; k < xs.size(); ++k) {
      CAPTURE(k, xs[k]);
      CHECK(n[k] == std::isnan(xs[k]));
      CHECK(i[k] == std::isinf(xs[k]));
      CHECK(f[k] == std::isfinite(xs[k]));
    }
    // torch.nan_to_num: NaN -> 0, +-inf -> the dtype's largest and most negative finite values.
    const FInfo limits = finfo(dtype);
    const std::vector<double> replaced = nan_to_num(x).to_vector<double>();
    const std::vector<double> custom = nan_to_num(x, -1.0, 3.0, -4.0).to_vector<double>();
    for (size_t k = 0; k < xs.size(); ++k) {
      CAPTURE(k, xs[k]);
      const double want = std::isnan(xs[k]) ? 0.0
                          : xs[k] == inf    ? limits.max
                          : xs[k] == -inf   ? limits.min
                                            : xs[k];
      CHECK(replaced[k] == want);
      CHECK(custom[k] == (std::isnan(xs[k]) ? -1.0
                          : xs[k] == inf    ? 3.0
                          : xs[k] == -inf   ? -4.0
                                            : xs[k]));
    }
  }
  // Integers and bools: no NaN, no infinity; nan_to_num copies.
  const Tensor ints = tensor(std::vector<int64_t>{1, -2, 3}, {3});
  CHECK(isnan(ints).to_vector<bool>() == std::vector<bool>{false, false, false});
  CHECK(isinf(ints).to_vector<bool>() == std::vector<bool>{false, false, false});
  CHECK(isfinite(ints).to_vector<bool>() == std::vector<bool>{true, true, true});
  CHECK(nan_to_num(ints).to_vector<int64_t>() == ints.to_vector<int64_t>());
  // The gradient passes where x was finite, and is 0 where a value was replaced.
  Tensor w = tensor({1.0, nan, inf, -inf, 2.0}).requires_grad_();
  nan_to_num(w).backward(tensor({1.0, 2.0, 3.0, 4.0, 5.0}));
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f, 5.0f});
  CHECK_THROWS_WITH(isnan(Tensor()), Contains("isnan: expected a defined tensor"));
}

TEST_CASE("binary ops broadcast and match float64 math", "[elementwise]") {
  manual_seed(2);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype);
    const Tensor a = add(rand({3, 1, 5}, dtype), 0.5);
    const Tensor b = add(rand({4, 5}, dtype), 0.5);
    const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
    const auto check = [&](const Tensor& got, const std::function<double(double, double)>& f) {
      REQUIRE(got.sizes() == Shape{3, 4, 5});
      const std::vector<double> out = got.to_vector<double>();
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t k = 0; k < 5; ++k) {
            const double want = f(av[i * 5 + k], bv[j * 5 + k]);
            REQUIRE(std::abs(out[(i * 4 + j) * 5 + k] - want) <=
                    tolerance(dtype) * (std::abs(want) + 1e-3));
          }
    };
    check(add(a, b, 2.0), [](double x, double y) { return x + 2 * y; });
    check(sub(a, b), [](double x, double y) { return x - y; });
    check(mul(a, b), [](double x, double y) { return x * y; });
    check(div(a, b), [](double x, double y) { return x / y; });
    check(pow(a, b), [](double x, double y) { return std::pow(x, y); });
    check(maximum(a, b), [](double x, double y) { return std::max(x, y); });
    check(addcmul(a, a, b, 0.5), [](double x, double y) { return x + 0.5 * x * y; });
    check(addcdiv(a, a, b, 0.5), [](double x, double y) { return x + 0.5 * x / y; });
  }
}

TEST_CASE("type promotion follows PyTorch", "[elementwise][promotion]") {
  const Tensor h = ones({2}, kFloat16), b = ones({2}, kBFloat16), f = ones({2}, kFloat32);
  const Tensor i = full({2}, 3, kInt64);
  CHECK(add(h, b).dtype() == kFloat32);
  CHECK(add(h, f).dtype() == kFloat32);
  CHECK(mul(h, 2.0).dtype() == kFloat16);  // a number does not promote a tensor
  CHECK(mul(i, 2).dtype() == kInt64);
  CHECK(mul(i, 2.5).dtype() == kFloat32);  // a floating number lifts an integer tensor
  CHECK(add(h, scalar_tensor(1.0, kFloat64)).dtype() == kFloat16);  // 0-d does not promote
  CHECK(add(i, scalar_tensor(1.5, kFloat64)).dtype() == kFloat64);  // unless of a higher kind
  CHECK(div(i, i).dtype() == kFloat32);                             // true division
  CHECK(div(i, i).to_vector<float>() == std::vector<float>{1.0f, 1.0f});
  CHECK(exp(i).dtype() == kFloat32);  // float ops compute integers in float32
  CHECK(neg(i).dtype() == kInt64);
  CHECK(gt(h, 0.5).dtype() == kBool);
  CHECK((i * 2 + 1).to_vector<int64_t>() == std::vector<int64_t>{7, 7});
  CHECK((2.0 - f).to_vector<float>() == std::vector<float>{1.0f, 1.0f});
}

TEST_CASE("bad input to elementwise ops names the op and changes nothing",
          "[elementwise][errors]") {
  Tensor a = ones({2, 3});
  const uint64_t version = a.version();
  CHECK_THROWS_WITH(mul(a, ones({4, 3})),
                    Contains("mul: shapes [2, 3] and [4, 3] cannot be broadcast"));
  CHECK_THROWS_WITH(a.add_(ones({4, 3})), Contains("cannot be broadcast to the shape [2, 3]"));
  CHECK_THROWS_WITH(
      gelu(a, "fast"),
      Contains("gelu: expected approximate to be \"none\" or \"tanh\", got \"fast\""));
  CHECK_THROWS_WITH(clamp(a, std::nullopt, std::nullopt),
                    Contains("clamp: expected at least one of min and max"));
  CHECK_THROWS_WITH(mul(ones({2}, kBool), ones({2}, kBool)), Contains("mul:") && Contains("bool"));
  CHECK(a.version() == version);
  CHECK(a.to_vector<float>() == std::vector<float>(6, 1.0f));
}

TEST_CASE("in-place arithmetic writes through and bumps the version", "[elementwise]") {
  Tensor a = arange(4.0);
  const uint64_t version = a.version();
  a.add_(1.0).mul_(2.0).sub_(ones({4}), 0.5).div_(2.0);
  CHECK(a.to_vector<float>() == std::vector<float>{0.75f, 1.75f, 2.75f, 3.75f});
  CHECK(a.version() == version + 4);
  Tensor view = a.narrow(0, 1, 2);
  view.mul_(0.0);
  CHECK(a.to_vector<float>() == std::vector<float>{0.75f, 0.0f, 0.0f, 3.75f});
}
