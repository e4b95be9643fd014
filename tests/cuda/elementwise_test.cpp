// CUDA elementwise kernels (cuda::elementwise_kernels, kernel/elementwise.h) against the CPU
// kernels in float64: every unary kind, every binary op with broadcasting, strides and alpha,
// comparisons, where, masked_fill, clamp, addcmul/addcdiv, threshold_backward, copies between every
// dtype pair, fills, and the random fills (the same numbers as the CPU's); forward and backward
// through the public ops for the differentiable ones.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cuda/elementwise.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;
using kernel::Binary;
using kernel::Compare;
using kernel::Unary;

namespace {

const kernel::ElementwiseKernels& on_cpu = cpu::elementwise_kernels;
const kernel::ElementwiseKernels& on_cuda = cuda::elementwise_kernels;

const std::vector<DType> kFloating = {kFloat32, kFloat16, kBFloat16, kFloat64};
const std::vector<DType> kAllDTypes = {kFloat32, kFloat16, kBFloat16, kFloat64,
                                       kInt64,   kInt32,   kBool};

// Values in [low, high) rounded to dtype, on the CPU (the reference reads them in float64).
Tensor uniform_values(const Shape& shape, double low, double high, DType dtype) {
  return add(mul(rand(shape, kFloat64), high - low), low).to(dtype);
}

// Normal values times scale, as dtype (bool: the sign; never an exact zero for floats).
Tensor normal_values(const Shape& shape, DType dtype, double scale = 1.0) {
  const Tensor x = mul(randn(shape, kFloat64), scale);
  return dtype == kBool ? gt(x, 0.0) : x.to(dtype);
}

struct UnaryCase {
  Unary op;
  const char* name;
  double low, high;  // the inputs' range: inside the op's domain
};

const std::vector<UnaryCase> kUnaryCases = {
    {Unary::Neg, "neg", -3, 3},
    {Unary::Exp, "exp", -4, 4},
    {Unary::Log, "log", 0.1, 10},
    {Unary::Expm1, "expm1", -3, 3},
    {Unary::Log1p, "log1p", -0.5, 5},
    {Unary::Log2, "log2", 0.1, 10},
    {Unary::Log10, "log10", 0.1, 10},
    {Unary::Sqrt, "sqrt", 0.01, 9},
    {Unary::Rsqrt, "rsqrt", 0.1, 9},
    {Unary::Reciprocal, "reciprocal", 0.2, 5},
    {Unary::Abs, "abs", -3, 3},
    {Unary::Sin, "sin", -3, 3},
    {Unary::Cos, "cos", -3, 3},
    {Unary::Tanh, "tanh", -3, 3},
    {Unary::Sigmoid, "sigmoid", -6, 6},
    {Unary::Relu, "relu", -3, 3},
    {Unary::Gelu, "gelu", -4, 4},
    {Unary::GeluTanh, "gelu_tanh", -4, 4},
    {Unary::Silu, "silu", -5, 5},
    {Unary::Softplus, "softplus", -5, 25},  // both sides of the threshold 20
    {Unary::Sign, "sign", -3, 3},
    {Unary::Erf, "erf", -2, 2},
    {Unary::Square, "square", -3, 3},
    {Unary::GeluGrad, "gelu_grad", -4, 4},
    {Unary::GeluTanhGrad, "gelu_tanh_grad", -4, 4},
};

// The forward and the input gradients of f on CUDA against f on float64 CPU copies of the
// same (rounded) inputs and the same upstream gradient.
void check_forward_backward(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& cpu_inputs, DType dtype) {
  testing::check_forward_backward([&](const std::vector<Tensor>& in, bool) { return f(in); },
                                  cpu_inputs, dtype,
                                  [&](const Shape& shape) { return normal_values(shape, dtype); });
}

// The distance in representable values between two finite floats of one 16- or 32-bit
// dtype, from their bits (sign-magnitude mapped onto a line through zero).
int64_t ulp_distance(uint32_t a_bits, uint32_t b_bits, int width) {
  const uint32_t sign = uint32_t(1) << (width - 1);
  const auto line = [&](uint32_t bits) {
    const int64_t magnitude = int64_t(bits & (sign - 1));
    return (bits & sign) ? -magnitude : magnitude;
  };
  return std::abs(line(a_bits) - line(b_bits));
}

// The largest ulp distance between two CPU tensors of one 32- or 16-bit floating dtype.
int64_t max_ulp_distance(const Tensor& a, const Tensor& b) {
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.numel() == b.numel());
  const Tensor x = a.contiguous(), y = b.contiguous();
  int64_t worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    uint32_t u = 0, v = 0;
    const size_t width = x.element_size();
    std::memcpy(&u, static_cast<const char*>(x.data_ptr()) + i * int64_t(width), width);
    std::memcpy(&v, static_cast<const char*>(y.data_ptr()) + i * int64_t(width), width);
    worst = std::max(worst, ulp_distance(u, v, int(width * 8)));
  }
  return worst;
}

}  // namespace

// ---- unary -------------------------------------------------------------------------------

TEST_CASE("cuda unary: every kind matches float64, contiguous and strided", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(11);
  for (const UnaryCase& c : kUnaryCases) {
    for (DType dtype : kFloating) {
      CAPTURE(c.name, dtype);
      // [37, 29]: odd sizes, so vector loops have tails; the transpose takes the strided path.
      const Tensor x = uniform_values({37, 29}, c.low, c.high, dtype);
      const Tensor got = on_cuda.unary(c.op, to_cuda(x));
      REQUIRE(got.is_cuda());
      REQUIRE(got.dtype() == dtype);
      REQUIRE(got.is_contiguous());
      require_close(got, on_cpu.unary(c.op, x.to(kFloat64)), dtype);

      const Tensor xt = x.transpose(0, 1);
      const Tensor got_t = on_cuda.unary(c.op, to_cuda(x).transpose(0, 1));
      REQUIRE(got_t.sizes() == Shape{29, 37});
      require_close(got_t, on_cpu.unary(c.op, xt.to(kFloat64)), dtype);

      // A slice starting one element in: contiguous but not 16-byte aligned.
      const Tensor tail = to_cuda(x).flatten().slice(0, 1, 1000);
      require_close(on_cuda.unary(c.op, tail),
                    on_cpu.unary(c.op, x.to(kFloat64).flatten().slice(0, 1, 1000)), dtype);
    }
  }
}

TEST_CASE("cuda unary: integer kinds are exact and bool or integer math is refused", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(12);
  for (DType dtype : {kInt64, kInt32}) {
    const Tensor x = normal_values({5, 41}, dtype, 1000.0);
    for (Unary op : {Unary::Neg, Unary::Abs, Unary::Sign, Unary::Relu, Unary::Square}) {
      CAPTURE(dtype, int(op));
      require_same_bits(on_cuda.unary(op, to_cuda(x)), on_cpu.unary(op, x));
      require_same_bits(on_cuda.unary(op, to_cuda(x).transpose(0, 1)),
                        on_cpu.unary(op, x.transpose(0, 1)));
    }
    REQUIRE_THROWS_WITH(on_cuda.unary(Unary::Exp, to_cuda(x)),
                        Contains("elementwise: expected a floating tensor"));
  }
  const Tensor b = to_cuda(normal_values({4}, kBool));
  REQUIRE_THROWS_WITH(on_cuda.unary(Unary::Neg, b), Contains("bool tensors are not supported"));
  REQUIRE(on_cuda.unary(Unary::Exp, to_cuda(empty({0, 3}))).sizes() == Shape{0, 3});
}

TEST_CASE("cuda unary ops: forward and backward match float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(13);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    double low, high;
    // Backward formulas of the form 1 - y (tanh, sigmoid, silu) cancel: a 16-bit y leaves
    // them far from the float64 value, on any device, so those run in float32/float64 only.
    bool in_16_bits;
  };
  const std::vector<Case> cases = {
      {"exp", [](const Tensor& x) { return hg::exp(x); }, -3, 3, true},
      {"log", [](const Tensor& x) { return hg::log(x); }, 0.2, 5, true},
      {"tanh", [](const Tensor& x) { return hg::tanh(x); }, -3, 3, false},
      {"sigmoid", [](const Tensor& x) { return hg::sigmoid(x); }, -5, 5, false},
      {"relu", [](const Tensor& x) { return hg::relu(x); }, -3, 3, true},
      {"gelu", [](const Tensor& x) { return hg::gelu(x); }, -4, 4, true},
      {"gelu tanh", [](const Tensor& x) { return hg::gelu(x, "tanh"); }, -4, 4, true},
      {"silu", [](const Tensor& x) { return hg::silu(x); }, -4, 4, false},
      {"sqrt", [](const Tensor& x) { return hg::sqrt(x); }, 0.2, 5, true},
  };
  for (const Case& c : cases) {
    for (DType dtype : kFloating) {
      if (is_reduced_precision(dtype) && !c.in_16_bits) continue;
      CAPTURE(c.name, dtype);
      check_forward_backward([&](const std::vector<Tensor>& in) { return c.op(in[0]); },
                             {uniform_values({9, 33}, c.low, c.high, dtype)}, dtype);
    }
  }
}

// ---- binary ------------------------------------------------------------------------------

TEST_CASE("cuda binary: every op with broadcasting, strides and alpha matches float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(21);
  struct Case {
    Binary op;
    const char* name;
    double a_low, a_high, b_low, b_high;
  };
  const std::vector<Case> cases = {
      {Binary::Add, "add", -3, 3, -3, 3},         {Binary::Sub, "sub", -3, 3, -3, 3},
      {Binary::Mul, "mul", -3, 3, -3, 3},         {Binary::Div, "div", -3, 3, 0.5, 4},
      {Binary::Pow, "pow", 0.5, 2, -2, 2},        {Binary::Maximum, "maximum", -3, 3, -3, 3},
      {Binary::Minimum, "minimum", -3, 3, -3, 3},
  };
  for (const Case& c : cases) {
    for (DType dtype : kFloating) {
      for (double alpha : {1.0, -0.5}) {
        // alpha scales b for Add and Sub, and for Mul and Div of floats (op(a, alpha * b)).
        if (alpha != 1.0 && c.op != Binary::Add && c.op != Binary::Sub && c.op != Binary::Mul &&
            c.op != Binary::Div) {
          continue;
        }
        CAPTURE(c.name, dtype, alpha);
        // a: [3, 1, 17]; b: [6, 17] given as the transpose of a [17, 6] tensor.
        const Tensor a = uniform_values({3, 1, 17}, c.a_low, c.a_high, dtype);
        const Tensor b = uniform_values({17, 6}, c.b_low, c.b_high, dtype).transpose(0, 1);
        const Tensor got = on_cuda.binary(c.op, to_cuda(a),
                                          to_cuda(b.transpose(0, 1)).transpose(0, 1), dtype, alpha);
        REQUIRE(got.sizes() == Shape{3, 6, 17});
        REQUIRE(got.dtype() == dtype);
        require_close(got, on_cpu.binary(c.op, a.to(kFloat64), b.to(kFloat64), kFloat64, alpha),
                      dtype);
        // Contiguous operands of one shape: the vector path.
        const Tensor x = uniform_values({1001}, c.a_low, c.a_high, dtype);
        const Tensor y = uniform_values({1001}, c.b_low, c.b_high, dtype);
        require_close(on_cuda.binary(c.op, to_cuda(x), to_cuda(y), dtype, alpha),
                      on_cpu.binary(c.op, x.to(kFloat64), y.to(kFloat64), kFloat64, alpha), dtype);
        // A 0-d operand (a scalar) on either side.
        const Tensor s = uniform_values({}, c.b_low, c.b_high, dtype);
        require_close(on_cuda.binary(c.op, to_cuda(x), to_cuda(s), dtype, alpha),
                      on_cpu.binary(c.op, x.to(kFloat64), s.to(kFloat64), kFloat64, alpha), dtype);
      }
    }
    // Mixed input dtypes computed in float32.
    CAPTURE(c.name);
    const Tensor h = uniform_values({4, 9}, c.a_low, c.a_high, kFloat16);
    const Tensor bf = uniform_values({9}, c.b_low, c.b_high, kBFloat16);
    require_close(on_cuda.binary(c.op, to_cuda(h), to_cuda(bf), kFloat32, 1.0),
                  on_cpu.binary(c.op, h.to(kFloat64), bf.to(kFloat64), kFloat64, 1.0), kFloat32);
  }
}

TEST_CASE("cuda binary: NaN propagates through maximum and minimum", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : kFloating) {
    const Tensor a = to_cuda(tensor({nan, 1.0, 2.0, nan}).to(dtype));
    const Tensor b = to_cuda(tensor({0.0, nan, 3.0, nan}).to(dtype));
    for (Binary op : {Binary::Maximum, Binary::Minimum}) {
      CAPTURE(dtype, int(op));
      const std::vector<double> got = on_cuda.binary(op, a, b, dtype, 1.0).to_vector<double>();
      REQUIRE(std::isnan(got[0]));
      REQUIRE(std::isnan(got[1]));
      REQUIRE(got[2] == (op == Binary::Maximum ? 3.0 : 2.0));
      REQUIRE(std::isnan(got[3]));
    }
  }
}

TEST_CASE("cuda binary: integer ops match the CPU kernel exactly", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(22);
  for (DType dtype : {kInt64, kInt32}) {
    const Tensor a = normal_values({7, 13}, dtype, 100.0);
    const Tensor b = add(abs(normal_values({13}, dtype, 20.0)), 1);  // nonzero divisors
    const Tensor e = tensor(std::vector<int64_t>{0, 1, 2, 3, 5, -1, 7, 2, 1, 0, 4, 3, 6}).to(dtype);
    for (Binary op :
         {Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Maximum, Binary::Minimum}) {
      CAPTURE(dtype, int(op));
      require_same_bits(on_cuda.binary(op, to_cuda(a), to_cuda(b), dtype, 3.0),
                        on_cpu.binary(op, a, b, dtype, 3.0));
    }
    const Tensor base = normal_values({7, 13}, dtype, 4.0);
    require_same_bits(on_cuda.binary(Binary::Pow, to_cuda(base), to_cuda(e), dtype, 1.0),
                      on_cpu.binary(Binary::Pow, base, e, dtype, 1.0));
  }
  REQUIRE_THROWS_WITH(on_cuda.binary(Binary::Add, to_cuda(normal_values({3}, kBool)),
                                     to_cuda(normal_values({3}, kBool)), kBool, 1.0),
                      Contains("arithmetic on bool tensors is not supported"));
}

TEST_CASE("cuda binary_: in place, broadcast, aliased and strided", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(23);
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    const Tensor a = normal_values({6, 10}, dtype);
    const Tensor b = normal_values({10}, kFloat32);  // another dtype: converted to self's
    Tensor self = to_cuda(a);
    const uint64_t version = self.version();
    on_cuda.binary_(Binary::Add, self, to_cuda(b), 0.5);
    REQUIRE(self.version() > version);
    Tensor want = a.to(kFloat64);
    on_cpu.binary_(Binary::Add, want, b.to(dtype).to(kFloat64), 0.5);  // b in self's dtype
    require_close(self, want, dtype);

    // self read through a transposed view of itself: read in full before the write.
    Tensor square = to_cuda(normal_values({8, 8}, dtype));
    Tensor square_want = host(square).to(kFloat64);
    on_cuda.binary_(Binary::Mul, square, square.transpose(0, 1), 1.0);
    on_cpu.binary_(Binary::Mul, square_want, square_want.clone().transpose(0, 1), 1.0);
    require_close(square, square_want, dtype);

    // A non-contiguous self: every other column.
    Tensor wide = to_cuda(normal_values({5, 12}, dtype));
    const Tensor before = host(wide);
    Tensor columns = wide.slice(1, 0, 12, 2);
    on_cuda.binary_(Binary::Sub, columns, to_cuda(b.slice(0, 0, 6)), 2.0);
    Tensor wide_want = before.to(kFloat64);
    Tensor want_columns = wide_want.slice(1, 0, 12, 2);
    on_cpu.binary_(Binary::Sub, want_columns, b.slice(0, 0, 6).to(dtype).to(kFloat64), 2.0);
    require_close(wide, wide_want, dtype);
  }
  Tensor small = to_cuda(normal_values({3}, kFloat32));
  REQUIRE_THROWS_WITH(
      on_cuda.binary_(Binary::Add, small, to_cuda(normal_values({2, 3}, kFloat32)), 1.0),
      Contains("cannot be broadcast to the shape"));
}

TEST_CASE("cuda binary ops: forward and backward match float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(24);
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    check_forward_backward([](const std::vector<Tensor>& in) { return hg::mul(in[0], in[1]); },
                           {normal_values({7, 19}, dtype), normal_values({7, 19}, dtype)}, dtype);
    check_forward_backward([](const std::vector<Tensor>& in) { return hg::div(in[0], in[1]); },
                           {normal_values({7, 19}, dtype), uniform_values({7, 19}, 0.5, 3, dtype)},
                           dtype);
    check_forward_backward([](const std::vector<Tensor>& in) { return hg::add(in[0], in[1], 0.5); },
                           {normal_values({7, 19}, dtype), normal_values({7, 19}, dtype)}, dtype);
    check_forward_backward([](const std::vector<Tensor>& in) { return hg::maximum(in[0], in[1]); },
                           {normal_values({7, 19}, dtype), normal_values({7, 19}, dtype)}, dtype);
    if (dtype == kFloat32 || dtype == kFloat64) {
      // Broadcast: b's gradient sums over the rows (a float32 sum of a few terms).
      check_forward_backward([](const std::vector<Tensor>& in) { return hg::mul(in[0], in[1]); },
                             {normal_values({5, 19}, dtype), normal_values({19}, dtype)}, dtype);
    }
  }
}

// ---- comparisons -------------------------------------------------------------------------

TEST_CASE("cuda compare: every op, broadcast and strided, matches the CPU exactly", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(31);
  for (DType dtype : kAllDTypes) {
    // Values on a coarse grid, so that ties (Eq, Le, Ge) occur.
    const auto coarse = [&](const Shape& shape) {
      if (dtype == kBool) return normal_values(shape, kBool);
      return normal_values(shape, kInt64, 2.0).to(dtype);  // small integers
    };
    const Tensor a = coarse({4, 1, 9});
    const Tensor base = coarse({9, 5});
    const Tensor b = base.transpose(0, 1);  // [5, 9], strided
    for (Compare op :
         {Compare::Eq, Compare::Ne, Compare::Lt, Compare::Le, Compare::Gt, Compare::Ge}) {
      CAPTURE(dtype, int(op));
      const Tensor got = on_cuda.compare(op, to_cuda(a), to_cuda(base).transpose(0, 1), dtype);
      REQUIRE(got.dtype() == kBool);
      require_same_bits(got, on_cpu.compare(op, a, b, dtype));
      const Tensor flat_a = coarse({1003}), flat_b = coarse({1003});
      require_same_bits(on_cuda.compare(op, to_cuda(flat_a), to_cuda(flat_b), dtype),
                        on_cpu.compare(op, flat_a, flat_b, dtype));
    }
  }
  // Mixed dtypes compared in float32.
  const Tensor h = normal_values({50}, kInt64, 2.0).to(kFloat16);
  const Tensor f = normal_values({50}, kInt64, 2.0).to(kFloat32);
  require_same_bits(on_cuda.compare(Compare::Le, to_cuda(h), to_cuda(f), kFloat32),
                    on_cpu.compare(Compare::Le, h, f, kFloat32));
}

// ---- where, masked_fill ------------------------------------------------------------------

TEST_CASE("cuda where: every dtype, broadcast and strided, matches the CPU exactly", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(41);
  for (DType dtype : kAllDTypes) {
    CAPTURE(dtype);
    const Tensor condition = normal_values({3, 1, 8}, kBool);
    const Tensor a = normal_values({5, 8}, dtype, 10.0);
    const Tensor base = normal_values({8, 3}, dtype, 10.0);
    const Tensor b = base.transpose(0, 1).unsqueeze(1);  // [3, 1, 8], strided
    const Tensor got =
        on_cuda.where(to_cuda(condition), to_cuda(a), to_cuda(base).transpose(0, 1).unsqueeze(1));
    REQUIRE(got.sizes() == Shape{3, 5, 8});
    require_same_bits(got, on_cpu.where(condition, a, b));
    const Tensor c2 = normal_values({777}, kBool);
    const Tensor x = normal_values({777}, dtype, 10.0), y = normal_values({777}, dtype, 10.0);
    require_same_bits(on_cuda.where(to_cuda(c2), to_cuda(x), to_cuda(y)), on_cpu.where(c2, x, y));
    // Through the public op, with a gradient for floating inputs.
    if (is_floating_point(dtype)) {
      check_forward_backward(
          [&](const std::vector<Tensor>& in) {
            return hg::where(in[0].is_cuda() ? to_cuda(c2) : c2, in[0], in[1]);
          },
          {x, y}, dtype);
    }
  }
  const Tensor a = to_cuda(normal_values({4}, kFloat32));
  REQUIRE_THROWS_WITH(on_cuda.where(a, a, a),
                      Contains("where: expected a condition of dtype bool"));
  const Tensor c = to_cuda(normal_values({4}, kBool));
  REQUIRE_THROWS_WITH(on_cuda.where(c, a, to_cuda(normal_values({4}, kFloat16))),
                      Contains("where: expected b of dtype float32"));
  REQUIRE_THROWS_WITH(on_cuda.where(c, a, to_cuda(normal_values({3}, kFloat32))),
                      Contains("cannot be broadcast together"));
}

TEST_CASE("cuda masked_fill: broadcast masks, every dtype, value conversion", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(42);
  for (DType dtype : kAllDTypes) {
    CAPTURE(dtype);
    const Tensor x = normal_values({6, 11}, dtype, 10.0);
    const Tensor mask = normal_values({11}, kBool);
    const Scalar value = dtype == kBool ? Scalar(true) : Scalar(-2.0);
    require_same_bits(on_cuda.masked_fill(to_cuda(x), to_cuda(mask), value),
                      on_cpu.masked_fill(x, mask, value));
    // A mask with more dims than x, x transposed.
    const Tensor mask3 = normal_values({2, 11, 6}, kBool);
    require_same_bits(
        on_cuda.masked_fill(to_cuda(x).transpose(0, 1), to_cuda(mask3), Scalar(int64_t(3))),
        on_cpu.masked_fill(x.transpose(0, 1), mask3, Scalar(int64_t(3))));
  }
  const Tensor ints = to_cuda(normal_values({5}, kInt32, 10.0));
  const Tensor mask = to_cuda(normal_values({5}, kBool));
  REQUIRE_THROWS_WITH(on_cuda.masked_fill(ints, mask, 1e20),
                      Contains("masked_fill: value 1e+20 cannot be converted to int32"));
  REQUIRE_THROWS_WITH(on_cuda.masked_fill(ints, ints, 1),
                      Contains("masked_fill: expected a mask of dtype bool"));
}

// ---- clamp, addcmul / addcdiv, threshold_backward ----------------------------------------

TEST_CASE("cuda clamp: both bounds, one bound, NaN stays NaN, integers", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(51);
  const std::vector<std::pair<std::optional<double>, std::optional<double>>> bounds = {
      {-0.5, 0.75}, {-0.5, std::nullopt}, {std::nullopt, 0.75}, {std::nullopt, std::nullopt}};
  for (DType dtype : kFloating) {
    for (const auto& [low, high] : bounds) {
      CAPTURE(dtype, low.has_value(), high.has_value());
      const Tensor x = normal_values({13, 7}, dtype);
      require_close(on_cuda.clamp(to_cuda(x), low, high), on_cpu.clamp(x.to(kFloat64), low, high),
                    dtype);
      require_close(on_cuda.clamp(to_cuda(x).transpose(0, 1), low, high),
                    on_cpu.clamp(x.transpose(0, 1).to(kFloat64), low, high), dtype);
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> got =
        on_cuda.clamp(to_cuda(tensor({nan, -3.0, 3.0}).to(dtype)), -1.0, 1.0).to_vector<double>();
    REQUIRE(std::isnan(got[0]));
    REQUIRE(got[1] == -1.0);
    REQUIRE(got[2] == 1.0);
  }
  for (DType dtype : {kInt64, kInt32}) {
    const Tensor x = normal_values({40}, dtype, 50.0);
    require_same_bits(on_cuda.clamp(to_cuda(x), -10.0, 20.0), on_cpu.clamp(x, -10.0, 20.0));
  }
  REQUIRE_THROWS_WITH(on_cuda.clamp(to_cuda(normal_values({3}, kBool)), 0.0, 1.0),
                      Contains("clamp: bool tensors are not supported"));
  // The public op, forward and backward.
  for (DType dtype : kFloating) {
    check_forward_backward(
        [](const std::vector<Tensor>& in) { return hg::clamp(in[0], -0.5, 0.75); },
        {normal_values({21}, dtype)}, dtype);
  }
}

TEST_CASE("cuda addcmul and addcdiv: three broadcast operands match float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(52);
  for (DType dtype : kFloating) {
    CAPTURE(dtype);
    const Tensor self = normal_values({4, 1, 6}, dtype);
    const Tensor t1 = normal_values({6, 5}, dtype).transpose(0, 1);  // [5, 6], strided
    const Tensor t2 = uniform_values({6}, 0.5, 2, dtype);
    const Tensor t1_cuda = to_cuda(t1.contiguous());
    require_close(
        on_cuda.addcmul(to_cuda(self), t1_cuda, to_cuda(t2), 0.5, dtype),
        on_cpu.addcmul(self.to(kFloat64), t1.to(kFloat64), t2.to(kFloat64), 0.5, kFloat64), dtype);
    require_close(
        on_cuda.addcdiv(to_cuda(self), to_cuda(t1.transpose(0, 1).contiguous()).transpose(0, 1),
                        to_cuda(t2), -1.5, dtype),
        on_cpu.addcdiv(self.to(kFloat64), t1.to(kFloat64), t2.to(kFloat64), -1.5, kFloat64), dtype);
    check_forward_backward(
        [](const std::vector<Tensor>& in) { return hg::addcmul(in[0], in[1], in[2], 0.5); },
        {normal_values({3, 8}, dtype), normal_values({3, 8}, dtype), normal_values({3, 8}, dtype)},
        dtype);
    check_forward_backward(
        [](const std::vector<Tensor>& in) { return hg::addcdiv(in[0], in[1], in[2], 0.5); },
        {normal_values({3, 8}, dtype), normal_values({3, 8}, dtype),
         uniform_values({3, 8}, 0.5, 2, dtype)},
        dtype);
  }
  // Mixed dtypes computed in float32; integers computed exactly.
  const Tensor h = normal_values({7}, kFloat16), f = normal_values({7}, kFloat32);
  require_close(on_cuda.addcmul(to_cuda(h), to_cuda(f), to_cuda(h), 2.0, kFloat32),
                on_cpu.addcmul(h.to(kFloat64), f.to(kFloat64), h.to(kFloat64), 2.0, kFloat64),
                kFloat32);
  const Tensor i = normal_values({9}, kInt64, 30.0);
  require_same_bits(on_cuda.addcmul(to_cuda(i), to_cuda(i), to_cuda(i), 2.0, kInt64),
                    on_cpu.addcmul(i, i, i, 2.0, kInt64));
}

TEST_CASE("cuda threshold_backward: a select matching the CPU exactly", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(53);
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32}) {
    CAPTURE(dtype);
    const Tensor x = normal_values({9, 14}, dtype, 3.0);
    Tensor grad = normal_values({9, 14}, dtype, 3.0);
    if (is_floating_point(dtype)) {  // infinite gradients where x <= 0 still give 0
      grad = on_cpu.where(on_cpu.compare(Compare::Le, x, zeros({}, dtype), dtype),
                          full({9, 14}, inf, dtype), grad);
    }
    require_same_bits(on_cuda.threshold_backward(to_cuda(grad), to_cuda(x), 0.0),
                      on_cpu.threshold_backward(grad, x, 0.0));
    require_same_bits(
        on_cuda.threshold_backward(to_cuda(grad).transpose(0, 1), to_cuda(x).transpose(0, 1), 0.5),
        on_cpu.threshold_backward(grad.transpose(0, 1), x.transpose(0, 1), 0.5));
  }
  const Tensor x = to_cuda(normal_values({4}, kFloat32));
  REQUIRE_THROWS_WITH(on_cuda.threshold_backward(to_cuda(normal_values({4}, kFloat16)), x, 0.0),
                      Contains("threshold_backward: expected a gradient of the input's shape"));
}

// ---- copies ------------------------------------------------------------------------------

TEST_CASE("cuda copy_elements: every dtype pair, contiguous and strided", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(61);
  // Scales that fit every integer destination; int64 values above 2^24 round in float and
  // the 16-bit floats (int64 -> bfloat16 must round once, as on the CPU).
  const auto source = [](DType dtype, const Shape& shape) {
    switch (dtype) {
      case kInt64:
        return normal_values(shape, kInt64, 1e12);
      case kInt32:
        return normal_values(shape, kInt32, 1e8);
      default:
        return normal_values(shape, dtype, 40.0);
    }
  };
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      CAPTURE(from, to);
      // Contiguous, 16-byte aligned, odd length.
      const Tensor src = source(from, {1027});
      Tensor want = empty({1027}, to);
      want.copy_(src);
      Tensor dst = empty({1027}, {.dtype = to, .device = kCUDA});
      cuda::copy_elements(dst, to_cuda(src));
      require_same_bits(dst, want);

      // Strided on both sides: a transposed source into every other column of a matrix whose
      // other columns must stay untouched.
      const Tensor base = source(from, {5, 6});
      Tensor big = zeros({6, 10}, {.dtype = to, .device = kCUDA});
      Tensor columns = big.slice(1, 0, 10, 2);
      cuda::copy_elements(columns, to_cuda(base).transpose(0, 1));
      Tensor big_want = zeros({6, 10}, to);
      big_want.slice(1, 0, 10, 2).copy_(base.transpose(0, 1));
      require_same_bits(big, big_want);

      // A broadcast source (stride 0), as copy_ passes an expanded one.
      const Tensor row = source(from, {6});
      Tensor spread = empty({4, 6}, {.dtype = to, .device = kCUDA});
      cuda::copy_elements(spread, to_cuda(row).expand({4, 6}));
      Tensor spread_want = empty({4, 6}, to);
      spread_want.copy_(row.expand({4, 6}));
      require_same_bits(spread, spread_want);

      // An expanded 0-d source: one dim, dense for dst, stride 0 for the source.
      const Tensor one = source(from, {1}).reshape({});
      Tensor filled = empty({1000}, {.dtype = to, .device = kCUDA});
      cuda::copy_elements(filled, to_cuda(one).expand({1000}));
      Tensor filled_want = empty({1000}, to);
      filled_want.copy_(one.expand({1000}));
      require_same_bits(filled, filled_want);
    }
  }
  // Transposing copies (NOTE [Transposing copies]): sizes not multiples of the 32 x 32 tile,
  // with a batch dim, and from a source whose rows are a slice of a wider matrix.
  for (DType dtype : kAllDTypes) {
    CAPTURE(dtype);
    const Tensor x = source(dtype, {3, 45, 70});
    Tensor dst = empty({3, 70, 45}, {.dtype = dtype, .device = kCUDA});
    cuda::copy_elements(dst, to_cuda(x).transpose(1, 2));
    require_same_bits(dst, x.transpose(1, 2).contiguous());
    const Tensor wide = source(dtype, {70, 50});
    Tensor narrow = empty({45, 70}, {.dtype = dtype, .device = kCUDA});
    cuda::copy_elements(narrow, to_cuda(wide).slice(1, 0, 45).transpose(0, 1));
    require_same_bits(narrow, wide.slice(1, 0, 45).transpose(0, 1).contiguous());
    // Into a transposed destination from a contiguous source (the write side strided).
    Tensor square = empty({33, 33}, {.dtype = dtype, .device = kCUDA});
    const Tensor values = source(dtype, {33, 33});
    cuda::copy_elements(square.transpose(0, 1), to_cuda(values));
    require_same_bits(square, values.transpose(0, 1).contiguous());
  }
  // Floating -> integer saturates on CUDA, NaN giving 0 (NOTE [Float to integer on CUDA]).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (DType from : kFloating) {
    const Tensor out_of_range = to_cuda(tensor({1e30, -1e30, nan, inf, -inf, -2.75}).to(from));
    Tensor i64 = empty({6}, {.dtype = kInt64, .device = kCUDA});
    cuda::copy_elements(i64, out_of_range);
    const int64_t max64 = std::numeric_limits<int64_t>::max();
    const int64_t min64 = std::numeric_limits<int64_t>::min();
    REQUIRE(i64.to_vector<int64_t>() == std::vector<int64_t>{max64, min64, 0, max64, min64, -2});
    Tensor i32 = empty({6}, {.dtype = kInt32, .device = kCUDA});
    cuda::copy_elements(i32, out_of_range);
    const int32_t max32 = std::numeric_limits<int32_t>::max();
    const int32_t min32 = std::numeric_limits<int32_t>::min();
    REQUIRE(i32.to_vector<int32_t>() == std::vector<int32_t>{max32, min32, 0, max32, min32, -2});
  }
  // The public conversions that copy on CUDA.
  const Tensor x = normal_values({33, 17}, kFloat32);
  require_same_bits(to_cuda(x).to(kFloat16), x.to(kFloat16));
  require_same_bits(to_cuda(x).to(kBFloat16).to(kFloat32), x.to(kBFloat16).to(kFloat32));
  require_same_bits(to_cuda(x).transpose(0, 1).contiguous(), x.transpose(0, 1).contiguous());
  require_same_bits(to_cuda(x).clone(), x);
  REQUIRE_THROWS_WITH(cuda::copy_elements(to_cuda(empty({3})), to_cuda(empty({4}))),
                      Contains("copy_: expected a source of the destination's shape"));
}

TEST_CASE("cuda copy_elements and fill: a view with offsets past 2^31 (64-bit indexing)",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  // 2^31 + 64 bytes: a view of every other element has offsets above int32's range.
  const int64_t n = (int64_t(1) << 31) + 64;
  Tensor big = zeros({n}, {.dtype = kBool, .device = kCUDA});
  Tensor every_other = big.slice(0, 1, n, 2);
  cuda::fill(every_other, true);
  const std::vector<bool> head = big.slice(0, 0, 6).to_vector<bool>();
  REQUIRE(head == std::vector<bool>{false, true, false, true, false, true});
  const std::vector<bool> tail = big.slice(0, n - 6, n).to_vector<bool>();
  REQUIRE(tail == std::vector<bool>{false, true, false, true, false, true});
  // And back: the strided view copied into a contiguous tensor.
  Tensor packed = empty({every_other.numel()}, {.dtype = kBool, .device = kCUDA});
  cuda::copy_elements(packed, every_other);
  const std::vector<bool> packed_tail = packed.slice(0, packed.numel() - 3).to_vector<bool>();
  REQUIRE(packed_tail == std::vector<bool>{true, true, true});
}

// ---- fills -------------------------------------------------------------------------------

TEST_CASE("cuda fill: every dtype, memset and vector paths, strided views", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : kAllDTypes) {
    const std::vector<Scalar> values =
        dtype == kBool ? std::vector<Scalar>{true, false}
        : is_floating_point(dtype)
            ? std::vector<Scalar>{0.0, 1.5, -3.0, int64_t(7)}
            : std::vector<Scalar>{int64_t(0), int64_t(-1), int64_t(123456), 2.0};
    for (const Scalar& value : values) {
      CAPTURE(dtype, value.to_double());
      Tensor t = empty({1001}, {.dtype = dtype, .device = kCUDA});
      cuda::fill(t, value);
      Tensor want = empty({1001}, dtype);
      want.fill_(value);
      require_same_bits(t, want);
      // Every third row of a matrix, transposed: the rows between keep their values.
      Tensor m = zeros({9, 7}, {.dtype = dtype, .device = kCUDA});
      cuda::fill(m.slice(0, 0, 9, 3).transpose(0, 1), value);
      Tensor m_want = zeros({9, 7}, dtype);
      m_want.slice(0, 0, 9, 3).fill_(value);
      require_same_bits(m, m_want);
    }
  }
  Tensor ints = empty({4}, {.dtype = kInt32, .device = kCUDA});
  REQUIRE_THROWS_WITH(cuda::fill(ints, 1e20), Contains("fill_: value 1e+20 cannot be converted"));
  Tensor scalar = zeros({1}, {.dtype = kFloat32, .device = kCUDA});
  REQUIRE_THROWS_WITH(cuda::fill(scalar.expand({5}), 1.0), Contains("share memory"));
}

// ---- random fills ------------------------------------------------------------------------

TEST_CASE("cuda fill_uniform and fill_normal draw the CPU's numbers", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : kFloating) {
    for (int64_t n : {int64_t(1), int64_t(1001), int64_t(4096)}) {
      CAPTURE(dtype, n);
      Generator on_cuda(1234), on_cpu(1234);
      // A first draw moves both generators off block 0.
      Tensor warm = empty({3}, {.dtype = dtype, .device = kCUDA});
      cuda::fill_uniform(warm, 0.0, 1.0, on_cuda);
      std::vector<char> scratch(3 * element_size(dtype));
      random::fill_uniform(dtype, scratch.data(), 3, 0.0, 1.0, on_cpu);
      REQUIRE(on_cuda.offset() == on_cpu.offset());

      Tensor got = empty({n}, {.dtype = dtype, .device = kCUDA});
      Tensor want = empty({n}, dtype);
      cuda::fill_uniform(got, -2.0, 3.0, on_cuda);
      random::fill_uniform(dtype, want.data_ptr(), n, -2.0, 3.0, on_cpu);
      REQUIRE(on_cuda.offset() == on_cpu.offset());
      require_same_bits(got, want);

      // [1, 2): in bfloat16 some draws round up to 2 and are clamped back.
      cuda::fill_uniform(got, 1.0, 2.0, on_cuda);
      random::fill_uniform(dtype, want.data_ptr(), n, 1.0, 2.0, on_cpu);
      require_same_bits(got, want);

      cuda::fill_normal(got, 0.5, 2.0, on_cuda);
      random::fill_normal(dtype, want.data_ptr(), n, 0.5, 2.0, on_cpu);
      REQUIRE(on_cuda.offset() == on_cpu.offset());
      if (dtype == kFloat64) {
        // log, sqrt, cos and sin in double may differ in the last ulp between host and device.
        require_close(got, want, kFloat64);
      } else {
        REQUIRE(max_ulp_distance(host(got), want) <= 1);
      }
    }
  }
  // The public factories, seeded by manual_seed.
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    manual_seed(77);
    const Tensor got = rand({513}, {.dtype = dtype, .device = kCUDA});
    manual_seed(77);
    require_same_bits(got, rand({513}, dtype));
    manual_seed(78);
    const Tensor got_normal = randn({513}, {.dtype = dtype, .device = kCUDA});
    manual_seed(78);
    REQUIRE(max_ulp_distance(host(got_normal), randn({513}, dtype)) <= 1);
  }
  Generator gen(5);
  Tensor floats = empty({8}, {.dtype = kFloat32, .device = kCUDA});
  REQUIRE_THROWS_WITH(cuda::fill_uniform(floats, 1.0, 1.0, gen),
                      Contains("uniform: expected low < high"));
  REQUIRE_THROWS_WITH(cuda::fill_normal(floats, 0.0, -1.0, gen),
                      Contains("normal: expected a finite std >= 0"));
  Tensor ints = empty({8}, {.dtype = kInt32, .device = kCUDA});
  REQUIRE_THROWS_WITH(cuda::fill_uniform(ints, 0.0, 1.0, gen),
                      Contains("expected a floating dtype"));
  REQUIRE(gen.offset() == 0);  // failed draws reserve nothing
}

TEST_CASE("CUDA applies a number to a 16-bit tensor in float32 as the CPU",
          "[cuda][elementwise][number]") {
  HG_REQUIRE_CUDA();
  manual_seed(41);
  for (DType dtype : {kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = mul(randn({1000}), 20.0).to(dtype);
    const Tensor g = x.to(kCUDA);
    for (double s : {1.7, 0.1, 3.3333, -7.77}) {
      CAPTURE(s);
      CHECK(bit_identical(add(g, s).to(kCPU), add(x, s)));
      CHECK(bit_identical(sub(g, s).to(kCPU), sub(x, s)));
      CHECK(bit_identical(mul(g, s).to(kCPU), mul(x, s)));
      CHECK(bit_identical(div(g, s).to(kCPU), div(x, s)));
      Tensor inplace = g.clone();
      inplace.mul_(s);
      CHECK(bit_identical(inplace.to(kCPU), mul(x, s)));
    }
    // pow's float32 results may differ by an ulp of float32 between the backends' pow; after
    // rounding to 16 bits they agree with the float64 value to half a 16-bit ulp plus that.
    const Tensor base = add(abs(x), 0.5);
    const std::vector<double> got = pow(base.to(kCUDA), 1.7).to(kCPU).to_vector<double>();
    const std::vector<double> b = base.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      const double want = std::pow(b[i], double(float(1.7)));
      CHECK(std::abs(got[i] - want) <=
            std::ldexp(std::abs(want), dtype == kBFloat16 ? -8 : -11) * 1.01);
    }
  }
}
