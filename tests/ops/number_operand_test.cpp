// A number given to a float16/bfloat16 op is applied in float32, never rounded to 16 bits
// first (NOTE [Number operands of 16-bit ops]), as torch's opmath scalars: against a float64
// reference that rounds the product once to float32 and once to the 16-bit dtype, as the
// kernels do.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

// float32 arithmetic of the reference: double of the operands (exact), the op, rounded to
// float (for +, -, * of a 16-bit value and a float that is the float32 result), then to the
// 16-bit dtype through a float32 tensor (the tested conversion of tests/core).
std::vector<double> rounded(const std::vector<double>& floats, DType dtype) {
  return tensor(floats, kFloat32).to(dtype).to_vector<double>();
}

}  // namespace

TEST_CASE("bfloat16 times 1.7 uses 1.7 in float32, as torch prints", "[ops][number]") {
  // torch.tensor([3.0, 8.0], dtype=torch.bfloat16) * 1.7 prints tensor([5.0938, 13.6250]);
  // with 1.7 rounded to bfloat16 (1.703125) it would be 5.125 and 13.625.
  const Tensor x = tensor({3.0, 8.0}, kBFloat16);
  CHECK((x * 1.7).to_vector<double>() == std::vector<double>{5.09375, 13.625});
  CHECK(mul(x, 1.7).dtype() == kBFloat16);
  // torch.tensor([8.0], dtype=torch.bfloat16) ** 1.7 prints 34.2500 (34.30 rounded), where
  // 8 ** 1.703125 = 34.62 would give 34.5.
  CHECK(pow(tensor({8.0}, kBFloat16), 1.7).item<double>() == 34.25);
  // In place too.
  Tensor y = x.clone();
  y.mul_(1.7);
  CHECK(y.to_vector<double>() == std::vector<double>{5.09375, 13.625});
}

TEST_CASE("numbers with 16-bit tensors round once from the float32 result", "[ops][number]") {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> value(-50.0, 50.0);
  std::uniform_real_distribution<double> number(0.1, 9.0);
  for (DType dtype : {kBFloat16, kFloat16}) {
    std::vector<double> xs(300);
    for (double& v : xs) v = value(rng);
    const Tensor x = tensor(xs, kFloat64).to(dtype);
    const std::vector<double> xv = x.to_vector<double>();
    for (int trial = 0; trial < 20; ++trial) {
      const double s = number(rng);
      const double sf = double(float(s));
      CAPTURE(dtype_name(dtype), s);
      std::vector<double> sum(xv.size()), difference(xv.size()), product(xv.size()),
          quotient(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        sum[i] = double(float(xv[i] + sf));  // exact in double, one float rounding
        difference[i] = double(float(xv[i] - sf));
        product[i] = double(float(xv[i] * sf));
        quotient[i] = double(float(xv[i]) / float(s));  // the float division itself
      }
      CHECK((x + s).to_vector<double>() == rounded(sum, dtype));
      CHECK((x - s).to_vector<double>() == rounded(difference, dtype));
      CHECK(sub(x, -s, -1.0).to_vector<double>() == rounded(difference, dtype));
      CHECK((x * s).to_vector<double>() == rounded(product, dtype));
      CHECK((x / s).to_vector<double>() == rounded(quotient, dtype));
      Tensor inplace = x.clone();
      inplace.add_(s);
      CHECK(inplace.to_vector<double>() == rounded(sum, dtype));
      inplace = x.clone();
      inplace.div_(s);
      CHECK(inplace.to_vector<double>() == rounded(quotient, dtype));
    }
  }
}

TEST_CASE("number ** tensor: the base in float32 for 16-bit exponents, one rounding",
          "[ops][number]") {
  std::mt19937_64 rng(6);
  std::uniform_real_distribution<double> value(-4.0, 4.0);
  std::vector<double> xs(200);
  for (double& v : xs) v = value(rng);
  for (double base : {2.0, 0.1, 2.5, 10.0}) {
    CAPTURE(base);
    // float32 and float64: the power of the base in the exponent's own dtype.
    const Tensor x64 = tensor(xs, kFloat64);
    const std::vector<double> got64 = pow(base, x64).to_vector<double>();
    for (size_t i = 0; i < xs.size(); ++i) {
      CHECK(got64[i] == Approx(std::pow(base, xs[i])).epsilon(1e-14));
    }
    const Tensor x32 = x64.to(kFloat32);
    CHECK(pow(base, x32).dtype() == kFloat32);
    CHECK(pow(base, x32).to_vector<double>() ==
          pow(tensor({base}, kFloat32), x32).to_vector<double>());
    // 16 bits: the float32 power of the unrounded base, rounded once (0.1 is not a bfloat16).
    for (DType dtype : {kBFloat16, kFloat16}) {
      CAPTURE(dtype_name(dtype));
      const Tensor x = x64.to(dtype);
      const Tensor got = pow(base, x);
      CHECK(got.dtype() == dtype);
      CHECK(got.to_vector<double>() ==
            pow(tensor({base}, kFloat32), x.to(kFloat32)).to(dtype).to_vector<double>());
    }
  }
  // An integer exponent: an integer base stays integer, a float one gives float32.
  const Tensor n = tensor(std::vector<int64_t>{0, 1, 2, 10}, kInt64);
  CHECK(pow(2, n).dtype() == kInt64);
  CHECK(pow(2, n).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 4, 1024});
  CHECK(pow(0.5, n).dtype() == kFloat32);
  CHECK(pow(0.5, n).to_vector<double>() == std::vector<double>{1.0, 0.5, 0.25, 1.0 / 1024});
  // The gradient to the exponent: log(base) base^x, rounded to bfloat16 once.
  const Tensor e = tensor({0.5, 1.0, 2.0}, kBFloat16).requires_grad_();
  sum(pow(3.0, e)).backward();
  const std::vector<double> grad = e.grad().to_vector<double>();
  for (size_t i = 0; i < grad.size(); ++i) {
    const double want = std::log(3.0) * std::pow(3.0, std::vector<double>{0.5, 1.0, 2.0}[i]);
    CAPTURE(i, grad[i], want);
    CHECK(std::abs(grad[i] - want) <= 3 * std::ldexp(want, -8));
  }
  // Float32 on CUDA (torch's __rpow__), unlisted on the CPU.
  CHECK(amp::cast_policy(OpId::rpow, kCUDA) == CastPolicy::Fp32);
  {
    amp::Autocast guard(kCPU, kBFloat16);
    CHECK(pow(2.0, tensor({1.0}, kBFloat16)).dtype() == kBFloat16);
  }
}

TEST_CASE("a number operand keeps gradients and autocast as the tensor form", "[ops][number]") {
  // d(x * s)/dx = s, d(x / s)/dx = 1 / s, d(x ** p)/dx = p x^(p-1), rounded to bfloat16 once.
  const Tensor x = tensor({1.5, 2.0, 3.0}, kBFloat16).requires_grad_();
  sum(mul(x, 1.7) + div(x, 3.0) + pow(x, 2.5) - 0.25).backward();
  const std::vector<double> xv = {1.5, 2.0, 3.0};
  std::vector<double> expected;
  for (double v : xv) expected.push_back(1.7 + 1.0 / 3.0 + 2.5 * std::pow(v, 1.5));
  const std::vector<double> got = x.grad().to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i, got[i], expected[i]);
    CHECK(std::abs(got[i] - expected[i]) <= 3 * std::ldexp(std::abs(expected[i]), -8));
  }
  // The exponent 0 has no gradient, even at x = 0 (torch's pow_backward).
  const Tensor z = tensor({0.0, 2.0}, kFloat16).requires_grad_();
  sum(pow(z, 0)).backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0.0, 0.0});
  // Integer tensors and float32 keep the 0-d operand of the result dtype.
  CHECK((tensor(std::vector<int64_t>{3}) * 1.7).item<float>() == 3.0f * 1.7f);
  CHECK((tensor({3.0}) * 1.7).item<float>() == 3.0f * 1.7f);
  // pow under CUDA-style fp32 policy: autocast on the CPU leaves pow alone, and the result
  // stays bfloat16.
  {
    amp::Autocast guard(kCPU, kBFloat16);
    CHECK(pow(tensor({8.0}, kBFloat16), 1.7).dtype() == kBFloat16);
  }
}
