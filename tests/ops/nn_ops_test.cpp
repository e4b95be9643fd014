// Tests for ops/nn_ops.h. Each op's forward in float32, float16 and bfloat16 against a float64
// reference written here with plain loops over the same (already rounded) inputs; gradients in
// the parameters' own dtypes; second derivatives (create_graph) against finite differences;
// autocast; and bad inputs, which must throw naming the op, what was expected and what was
// given, and leave every input as it was. (First derivatives of every op are checked by the
// gradcheck sweep, tests/ops/gradcheck_samples/nn_ops.cpp.)
//
// Dims: N batch, C channels, G groups, O output channels, H/W height/width, D embedding width.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/autograd/gradcheck.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

constexpr DType kDTypes[] = {kFloat32, kFloat16, kBFloat16};

// ---- inputs and comparisons -------------------------------------------------------------------

// Seeded standard normal values drawn in dtype (so already rounded to it), times scale.
Tensor random_input(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0) {
  manual_seed(seed);
  const Tensor x = randn(shape, dtype);
  return scale == 1.0 ? x : mul(x, scale);
}

// Seeded uniform values on [low, high) in dtype.
Tensor uniform_input(const Shape& shape, DType dtype, uint64_t seed, double low, double high) {
  manual_seed(seed);
  return add(mul(rand(shape, dtype), high - low), low);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

struct Tolerance {
  double atol;
  double rtol;
};

// What is left between a kernel and the reference on the same rounded inputs: float32
// arithmetic and one rounding of the output to dtype (half an ulp: 2^-11 relative for float16,
// 2^-8 for bfloat16). The outputs here are of order one, so the same bound serves as the
// absolute tolerance for values near zero.
Tolerance forward_tolerance(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return {1e-12, 1e-12};
    case kFloat32:
      return {1e-5, 1e-5};
    case kFloat16:
      return {2e-3, 2e-3};
    default:
      return {1e-2, 1e-2};
  }
}

// Gradients through a norm subtract means of the incoming gradient from it, so their values
// near zero come from cancellation between order-one terms: twice the forward bound.
Tolerance backward_tolerance(DType dtype) {
  const Tolerance t = forward_tolerance(dtype);
  return {2 * t.atol, 2 * t.rtol};
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, Tolerance tol,
                  const std::string& what) {
  REQUIRE(actual.defined());
  const std::vector<double> got = values(actual);
  REQUIRE(got.size() == expected.size());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - expected[i]) <= tol.atol + tol.rtol * std::abs(expected[i]))) {
      if (mismatches++ == 0) first = i;
    }
  }
  INFO(what << ": " << mismatches << " of " << got.size() << " elements differ (atol " << tol.atol
            << ", rtol " << tol.rtol << ")");
  if (mismatches > 0) INFO("first at " << first << ": " << got[first] << " vs " << expected[first]);
  CHECK(mismatches == 0);
}

void expect_result(const Tensor& actual, DType dtype, const Shape& shape,
                   const std::vector<double>& expected, const std::string& what,
                   std::optional<Tolerance> tol = std::nullopt) {
  REQUIRE(actual.defined());
  INFO(what);
  CHECK(actual.dtype() == dtype);
  CHECK(actual.sizes() == shape);
  expect_close(actual, expected, tol.value_or(forward_tolerance(dtype)), what);
}

// ---- float64 references (plain loops) -------------------------------------------------------

// softmax / log_softmax along dim d of x viewed as [outer, D, inner].
std::vector<double> softmax_reference(const std::vector<double>& x, const Shape& shape, int64_t dim,
                                      bool log) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= shape[i];
  for (size_t i = size_t(dim) + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t D = shape[dim];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      const auto at = [&](int64_t d) { return size_t((o * D + d) * inner + j); };
      double top = -INFINITY, total = 0;
      for (int64_t d = 0; d < D; ++d) top = std::max(top, x[at(d)]);
      for (int64_t d = 0; d < D; ++d) total += std::exp(x[at(d)] - top);
      for (int64_t d = 0; d < D; ++d) {
        y[at(d)] = log ? x[at(d)] - top - std::log(total) : std::exp(x[at(d)] - top) / total;
      }
    }
  }
  return y;
}

// Normalises `sets` sets of values: set s holds the elements members(s, k), k < count; the
// element gets weight/bias index param(element).
std::vector<double> normalize_reference(const std::vector<double>& x, int64_t sets, int64_t count,
                                        const std::function<size_t(int64_t, int64_t)>& member,
                                        const std::function<size_t(size_t)>& param,
                                        const std::vector<double>& weight,
                                        const std::vector<double>& bias, double eps) {
  std::vector<double> y(x.size());
  for (int64_t s = 0; s < sets; ++s) {
    double mean = 0, var = 0;
    for (int64_t k = 0; k < count; ++k) mean += x[member(s, k)];
    mean /= double(count);
    for (int64_t k = 0; k < count; ++k) var += (x[member(s, k)] - mean) * (x[member(s, k)] - mean);
    var /= double(count);
    for (int64_t k = 0; k < count; ++k) {
      const size_t i = member(s, k);
      const size_t p = param(i);
      const double w = weight.empty() ? 1.0 : weight[p], b = bias.empty() ? 0.0 : bias[p];
      y[i] = (x[i] - mean) / std::sqrt(var + eps) * w + b;
    }
  }
  return y;
}

std::vector<double> values_or_empty(const Tensor& t) {
  return t.defined() ? values(t) : std::vector<double>();
}

struct ConvConfig {
  Shape x_shape, w_shape;
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
  bool bias;
};

// Direct convolution: y[n, o, i, j] = b[o] + sum over c, p, q of
// x[n, g Cg + c, i sH - pH + p dH, j sW - pW + q dW] w[o, c, p, q], g the group of o.
std::vector<double> conv2d_reference(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& b, const ConvConfig& c,
                                     Shape& out_shape) {
  const int64_t N = c.x_shape[0], C = c.x_shape[1], H = c.x_shape[2], W = c.x_shape[3];
  const int64_t O = c.w_shape[0], Cg = c.w_shape[1], kH = c.w_shape[2], kW = c.w_shape[3];
  const int64_t Og = O / c.groups;
  const int64_t Hout = (H + 2 * c.padding[0] - c.dilation[0] * (kH - 1) - 1) / c.stride[0] + 1;
  const int64_t Wout = (W + 2 * c.padding[1] - c.dilation[1] * (kW - 1) - 1) / c.stride[1] + 1;
  out_shape = {N, O, Hout, Wout};
  std::vector<double> y(size_t(N * O * Hout * Wout));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < O; ++o) {
      const int64_t g = o / Og;
      for (int64_t i = 0; i < Hout; ++i) {
        for (int64_t j = 0; j < Wout; ++j) {
          double total = b.empty() ? 0.0 : b[size_t(o)];
          for (int64_t ci = 0; ci < Cg; ++ci) {
            for (int64_t p = 0; p < kH; ++p) {
              for (int64_t q = 0; q < kW; ++q) {
                const int64_t h = i * c.stride[0] - c.padding[0] + p * c.dilation[0];
                const int64_t v = j * c.stride[1] - c.padding[1] + q * c.dilation[1];
                if (h < 0 || h >= H || v < 0 || v >= W) continue;
                total += x[size_t(((n * C + g * Cg + ci) * H + h) * W + v)] *
                         w[size_t(((o * Cg + ci) * kH + p) * kW + q)];
              }
            }
          }
          y[size_t(((n * O + o) * Hout + i) * Wout + j)] = total;
        }
      }
    }
  }
  return y;
}

struct PoolConfig {
  std::array<int64_t, 2> kernel, stride, padding;
  bool count_include_pad;
};

// Max or average over each window of each [H, W] plane; out_shape receives the result's shape.
std::vector<double> pool_reference(const std::vector<double>& x, const Shape& shape,
                                   const PoolConfig& c, bool max, Shape& out_shape) {
  const size_t dims = shape.size();
  const int64_t H = shape[dims - 2], W = shape[dims - 1];
  int64_t planes = 1;
  for (size_t d = 0; d + 2 < dims; ++d) planes *= shape[d];
  const int64_t sH = c.stride[0] == 0 ? c.kernel[0] : c.stride[0];
  const int64_t sW = c.stride[1] == 0 ? c.kernel[1] : c.stride[1];
  const int64_t Hout = (H + 2 * c.padding[0] - c.kernel[0]) / sH + 1;
  const int64_t Wout = (W + 2 * c.padding[1] - c.kernel[1]) / sW + 1;
  out_shape = shape;
  out_shape[dims - 2] = Hout;
  out_shape[dims - 1] = Wout;
  std::vector<double> y;
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t i = 0; i < Hout; ++i) {
      for (int64_t j = 0; j < Wout; ++j) {
        double best = -INFINITY, total = 0;
        int64_t inside = 0, padded = 0;
        for (int64_t p = 0; p < c.kernel[0]; ++p) {
          for (int64_t q = 0; q < c.kernel[1]; ++q) {
            const int64_t h = i * sH - c.padding[0] + p, v = j * sW - c.padding[1] + q;
            // A window position counts for the padded divisor while it lies in the input or
            // its padding.
            if (h < H + c.padding[0] && v < W + c.padding[1]) ++padded;
            if (h < 0 || h >= H || v < 0 || v >= W) continue;
            const double value = x[size_t((plane * H + h) * W + v)];
            best = std::max(best, value);
            total += value;
            ++inside;
          }
        }
        y.push_back(max ? best : total / double(c.count_include_pad ? padded : inside));
      }
    }
  }
  return y;
}

// ---- bad inputs ---------------------------------------------------------------------------

struct Snapshot {
  std::vector<double> data;
  uint64_t version;
};

// Runs f, which must throw an hg::Error whose message contains every one of `parts`, and
// checks that the tensors `inputs` kept their values and versions.
void expect_rejected(const std::function<void()>& f, const std::vector<Tensor>& inputs,
                     const std::vector<std::string>& parts) {
  std::vector<Snapshot> before;
  for (const Tensor& t : inputs) before.push_back({values(t), t.version()});
  std::string message;
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
  }
  INFO("message: " << message);
  REQUIRE_FALSE(message.empty());
  for (const std::string& part : parts) CHECK_THAT(message, Contains(part));
  for (size_t i = 0; i < inputs.size(); ++i) {
    CHECK(values(inputs[i]) == before[i].data);
    CHECK(inputs[i].version() == before[i].version);
  }
}

// The gradient of sum(f(x)^3) with respect to inputs[k], recorded (create_graph).
Tensor recorded_grad(const Tensor& y, const Tensor& input) {
  return autograd::grad({sum(mul(mul(y, y), y))}, {input}, {}, /*retain_graph=*/true,
                        /*create_graph=*/true)[0];
}

Tensor f64_input(const Shape& shape, uint64_t seed, double low = -2.0, double high = 2.0) {
  return uniform_input(shape, kFloat64, seed, low, high).requires_grad_();
}

}  // namespace

// ---- softmax / log_softmax --------------------------------------------------------------------

TEST_CASE("softmax and log_softmax match a float64 reference", "[nn_ops][softmax]") {
  const Shape shape{3, 5, 4};
  for (DType dtype : kDTypes) {
    const Tensor x = random_input(shape, dtype, 11, 3.0);
    const std::vector<double> xv = values(x);
    for (int64_t dim : {0, 1, -1}) {
      const int64_t d = dim < 0 ? dim + 3 : dim;
      const std::string what = std::string(dtype_name(dtype)) + " dim " + std::to_string(dim);
      expect_result(softmax(x, dim), dtype, shape, softmax_reference(xv, shape, d, false),
                    "softmax " + what);
      expect_result(log_softmax(x, dim), dtype, shape, softmax_reference(xv, shape, d, true),
                    "log_softmax " + what);
    }
    // An explicit dtype: the input is converted first and the result has that dtype.
    expect_result(softmax(x, 1, kFloat32), kFloat32, shape, softmax_reference(xv, shape, 1, false),
                  "softmax to float32");
    expect_result(log_softmax(x, 2, kFloat64), kFloat64, shape,
                  softmax_reference(xv, shape, 2, true), "log_softmax to float64");
  }
}

TEST_CASE("softmax stays finite where exp overflows and takes a dtype for integers",
          "[nn_ops][softmax]") {
  const Tensor x = tensor({1000.0, 999.0, -1000.0, 0.0}, {2, 2});
  const std::vector<double> y = values(softmax(x, 1));
  CHECK(y[0] == Approx(1 / (1 + std::exp(-1.0))));
  CHECK(y[2] == Approx(0.0).margin(1e-30));
  const Tensor ints = tensor(std::vector<int64_t>{1, 2, 3});
  expect_result(softmax(ints, 0, kFloat32), kFloat32, {3},
                softmax_reference({1, 2, 3}, {3}, 0, false), "softmax of int64 as float32");
}

TEST_CASE("softmax backward gives the input its dtype when a dtype is given", "[nn_ops][softmax]") {
  for (DType dtype : {kFloat16, kBFloat16}) {
    Tensor x = random_input({2, 6}, dtype, 3).requires_grad_();
    const Tensor r = random_input({2, 6}, kFloat32, 4);
    sum(mul(softmax(x, 1, kFloat32), r)).backward();
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == dtype);
    // The reference: y (r - sum(r y)) per row, in float64 on the same values.
    const std::vector<double> y = softmax_reference(values(x), {2, 6}, 1, false);
    const std::vector<double> rv = values(r);
    std::vector<double> expected(12);
    for (int row = 0; row < 2; ++row) {
      double dot = 0;
      for (int j = 0; j < 6; ++j) dot += rv[row * 6 + j] * y[row * 6 + j];
      for (int j = 0; j < 6; ++j) expected[row * 6 + j] = y[row * 6 + j] * (rv[row * 6 + j] - dot);
    }
    expect_close(x.grad(), expected, backward_tolerance(dtype), "softmax grad");
  }
}

// ---- norms ------------------------------------------------------------------------------------

TEST_CASE("layer_norm matches a float64 reference", "[nn_ops][layer_norm]") {
  const Shape shape{4, 3, 8};
  for (DType dtype : kDTypes) {
    const Tensor x = random_input(shape, dtype, 21, 2.0);
    for (const Shape& normalized : {Shape{8}, Shape{3, 8}}) {
      const int64_t M = shape_numel(normalized), rows = shape_numel(shape) / M;
      const auto member = [M](int64_t s, int64_t k) { return size_t(s * M + k); };
      const auto param = [M](size_t i) { return i % size_t(M); };
      // Parameters of x's dtype, float32 parameters (the mixed case), and none.
      for (DType param_dtype : {dtype, kFloat32}) {
        const Tensor weight = random_input(normalized, param_dtype, 22);
        const Tensor bias = random_input(normalized, param_dtype, 23);
        expect_result(layer_norm(x, normalized, weight, bias, 1e-5), dtype, shape,
                      normalize_reference(values(x), rows, M, member, param, values(weight),
                                          values(bias), 1e-5),
                      std::string("layer_norm ") + std::string(dtype_name(dtype)) + " params " +
                          std::string(dtype_name(param_dtype)));
      }
      expect_result(layer_norm(x, normalized, {}, {}, 1e-3), dtype, shape,
                    normalize_reference(values(x), rows, M, member, param, {}, {}, 1e-3),
                    "layer_norm without parameters");
    }
  }
}

TEST_CASE("group_norm matches a float64 reference", "[nn_ops][group_norm]") {
  for (DType dtype : kDTypes) {
    for (const Shape& shape : {Shape{2, 6, 5}, Shape{3, 6, 2, 3}, Shape{2, 6}}) {
      const int64_t N = shape[0], C = shape[1], S = shape_numel(shape) / (N * C);
      const Tensor x = random_input(shape, dtype, 31, 1.5);
      for (int64_t G : {1, 3, 6}) {
        const int64_t Cg = C / G;
        const auto member = [=](int64_t s, int64_t k) { return size_t(s * Cg * S + k); };
        const auto param = [=](size_t i) { return size_t(int64_t(i) / S % C); };
        for (DType param_dtype : {dtype, kFloat32}) {
          const Tensor weight = random_input({C}, param_dtype, 32);
          const Tensor bias = random_input({C}, param_dtype, 33);
          expect_result(group_norm(x, G, weight, bias), dtype, shape,
                        normalize_reference(values(x), N * G, Cg * S, member, param, values(weight),
                                            values(bias), 1e-5),
                        "group_norm G=" + std::to_string(G));
        }
        expect_result(group_norm(x, G), dtype, shape,
                      normalize_reference(values(x), N * G, Cg * S, member, param, {}, {}, 1e-5),
                      "group_norm without parameters");
      }
    }
  }
}

TEST_CASE("batch_norm training normalises per channel and updates the running statistics",
          "[nn_ops][batch_norm]") {
  const int64_t N = 4, C = 3, S = 5;
  const double momentum = 0.2, eps = 1e-4;
  for (DType dtype : kDTypes) {
    const Tensor x = random_input({N, C, S}, dtype, 41, 2.0);
    const std::vector<double> xv = values(x);
    const Tensor weight = random_input({C}, kFloat32, 42), bias = random_input({C}, dtype, 43);
    Tensor running_mean = random_input({C}, kFloat32, 44);
    Tensor running_var = uniform_input({C}, kFloat32, 45, 0.5, 1.5);
    const std::vector<double> old_mean = values(running_mean), old_var = values(running_var);
    const auto member = [=](int64_t c, int64_t k) { return size_t((k / S * C + c) * S + k % S); };
    const auto param = [=](size_t i) { return size_t(int64_t(i) / S % C); };
    const Tensor y =
        batch_norm(x, running_mean, running_var, weight, bias, /*training=*/true, momentum, eps);
    expect_result(
        y, dtype, {N, C, S},
        normalize_reference(xv, C, N * S, member, param, values(weight), values(bias), eps),
        "batch_norm training");
    // torch's update: the batch mean, and the unbiased batch variance.
    std::vector<double> new_mean(C), new_var(C);
    for (int64_t c = 0; c < C; ++c) {
      double mean = 0, squares = 0;
      for (int64_t k = 0; k < N * S; ++k) mean += xv[member(c, k)];
      mean /= double(N * S);
      for (int64_t k = 0; k < N * S; ++k) squares += std::pow(xv[member(c, k)] - mean, 2);
      new_mean[c] = (1 - momentum) * old_mean[c] + momentum * mean;
      new_var[c] = (1 - momentum) * old_var[c] + momentum * squares / double(N * S - 1);
    }
    expect_result(running_mean, kFloat32, {C}, new_mean, "running_mean");
    expect_result(running_var, kFloat32, {C}, new_var, "running_var");
    // Without running statistics: the same output.
    expect_result(batch_norm(x, {}, {}, weight, bias, true, momentum, eps), dtype, {N, C, S},
                  values(y.to(kFloat64)), "batch_norm training without running statistics");
  }
}

TEST_CASE("batch_norm eval normalises with the running statistics and leaves them alone",
          "[nn_ops][batch_norm]") {
  const int64_t N = 2, C = 4, H = 3, W = 2;
  for (DType dtype : kDTypes) {
    const Tensor x = random_input({N, C, H, W}, dtype, 51);
    const Tensor running_mean = random_input({C}, dtype, 52, 0.5);
    const Tensor running_var = uniform_input({C}, dtype, 53, 0.5, 2.0);
    const Tensor weight = random_input({C}, dtype, 54), bias = random_input({C}, dtype, 55);
    const std::vector<double> rm = values(running_mean), rv = values(running_var);
    const std::vector<double> w = values(weight), b = values(bias), xv = values(x);
    const uint64_t versions = running_mean.version() + running_var.version();
    std::vector<double> expected(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t c = i / size_t(H * W) % size_t(C);
      expected[i] = (xv[i] - rm[c]) / std::sqrt(rv[c] + 1e-5) * w[c] + b[c];
    }
    expect_result(batch_norm(x, running_mean, running_var, weight, bias), dtype, {N, C, H, W},
                  expected, "batch_norm eval");
    CHECK(values(running_mean) == rm);
    CHECK(values(running_var) == rv);
    CHECK(running_mean.version() + running_var.version() == versions);
  }
}

TEST_CASE("norm gradients come back in each input's own dtype", "[nn_ops][norms]") {
  // A float16/bfloat16 input with float32 parameters (and a bias of yet another dtype), on
  // the fused path and on the recorded (create_graph) path; the values against float64.
  for (DType dtype : {kFloat16, kBFloat16}) {
    for (bool create_graph : {false, true}) {
      for (int op = 0; op < 3; ++op) {
        const Shape shape{4, 6, 3};
        Tensor x = random_input(shape, dtype, 61).requires_grad_();
        const Shape param_shape = op == 0 ? Shape{3} : Shape{6};
        Tensor weight = random_input(param_shape, kFloat32, 62).requires_grad_();
        Tensor bias = random_input(param_shape, kFloat64, 63).requires_grad_();
        const Tensor r = random_input(shape, dtype, 64);
        const auto run = [&](const Tensor& in, const Tensor& w, const Tensor& b) {
          switch (op) {
            case 0:
              return layer_norm(in, {3}, w, b);
            case 1:
              return group_norm(in, 3, w, b);
            default:
              return batch_norm(in, {}, {}, w, b, true);
          }
        };
        INFO("op " << op << " " << dtype_name(dtype) << " create_graph " << create_graph);
        const std::vector<Tensor> grads = autograd::grad(
            {sum(mul(run(x, weight, bias), r))}, {x, weight, bias}, {}, create_graph, create_graph);
        CHECK(grads[0].dtype() == dtype);
        CHECK(grads[1].dtype() == kFloat32);
        CHECK(grads[2].dtype() == kFloat64);
        // The same rounded values in float64.
        Tensor x64 = x.detach().to(kFloat64).requires_grad_();
        Tensor w64 = weight.detach().to(kFloat64).requires_grad_();
        Tensor b64 = bias.detach().requires_grad_();
        const std::vector<Tensor> expected =
            autograd::grad({sum(mul(run(x64, w64, b64), r.to(kFloat64)))}, {x64, w64, b64});
        expect_close(grads[0], values(expected[0]), backward_tolerance(dtype), "dx");
        expect_close(grads[1], values(expected[1]), backward_tolerance(dtype), "dweight");
        expect_close(grads[2], values(expected[2]), backward_tolerance(dtype), "dbias");
      }
    }
  }
}

// ---- embedding ----------------------------------------------------------------------------

TEST_CASE("embedding gathers rows and adds gradients back into them", "[nn_ops][embedding]") {
  for (DType dtype : kDTypes) {
    Tensor weight = random_input({6, 4}, dtype, 71).requires_grad_();
    const std::vector<int64_t> rows{5, 0, 2, 5, 3, 2};
    for (DType index_dtype : {kInt64, kInt32}) {
      const Tensor indices = tensor(rows, {2, 3}, index_dtype);
      const Tensor y = embedding(weight, indices);
      std::vector<double> expected;
      const std::vector<double> w = values(weight);
      for (int64_t r : rows) {
        for (int64_t j = 0; j < 4; ++j) expected.push_back(w[size_t(r * 4 + j)]);
      }
      expect_result(y, dtype, {2, 3, 4}, expected, "embedding", Tolerance{0, 0});
    }
    // A 0-d index gives one row.
    const std::vector<double> all_rows = values(weight);
    expect_result(embedding(weight, scalar_tensor(3, kInt64)), dtype, {4},
                  std::vector<double>(all_rows.begin() + 12, all_rows.begin() + 16),
                  "embedding of a 0-d index", Tolerance{0, 0});
    // Backward: each token's gradient row added to its row; padding_idx 2 gets none.
    const Tensor indices = tensor(rows, {2, 3});
    const Tensor r = random_input({2, 3, 4}, dtype, 72);
    sum(mul(embedding(weight, indices, /*padding_idx=*/2), r)).backward();
    std::vector<double> expected(24, 0.0);
    const std::vector<double> rv = values(r);
    for (size_t t = 0; t < rows.size(); ++t) {
      if (rows[t] == 2) continue;
      for (size_t j = 0; j < 4; ++j) expected[size_t(rows[t]) * 4 + j] += rv[t * 4 + j];
    }
    REQUIRE(weight.grad().defined());
    expect_result(weight.grad(), dtype, {6, 4}, expected, "embedding grad");
  }
}

// ---- dropout ------------------------------------------------------------------------------

TEST_CASE("dropout keeps 1 - p of the elements scaled and is reproducible by seed",
          "[nn_ops][dropout]") {
  const double p = 0.3;
  std::vector<bool> first_pattern;
  for (DType dtype : kDTypes) {
    Tensor x = random_input({64, 64}, dtype, 81).requires_grad_();
    Generator generator(5);
    const Tensor y = dropout(x, p, true, &generator);
    REQUIRE(y.dtype() == dtype);
    // The scale is 1 / (1 - p) rounded to dtype, applied in float and rounded once.
    const double scale = scalar_tensor(1.0 / (1.0 - p), dtype).item<double>();
    const std::vector<double> xv = values(x), yv = values(y);
    std::vector<bool> kept(yv.size());
    std::vector<double> expected(yv.size());
    size_t kept_count = 0;
    for (size_t i = 0; i < yv.size(); ++i) {
      kept[i] = yv[i] != 0.0;
      kept_count += kept[i];
      expected[i] = kept[i] ? xv[i] * scale : 0.0;
    }
    expect_close(y, expected, forward_tolerance(dtype), "dropout values");
    // 4096 draws: the kept fraction is within 4 standard deviations (0.007 each) of 1 - p.
    CHECK(std::abs(double(kept_count) / double(yv.size()) - (1 - p)) < 0.03);
    // One seed, one mask, whatever the dtype.
    if (first_pattern.empty()) first_pattern = kept;
    CHECK(kept == first_pattern);
    // Backward multiplies by the same mask.
    sum(y).backward();
    std::vector<double> mask(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) mask[i] = kept[i] ? scale : 0.0;
    expect_result(x.grad(), dtype, {64, 64}, mask, "dropout grad", Tolerance{0, 0});
  }
}

TEST_CASE("dropout outside training returns the input and p 0 or 1 are exact",
          "[nn_ops][dropout]") {
  const Tensor x = random_input({5, 3}, kFloat16, 82);
  CHECK(dropout(x, 0.5, /*training=*/false).is_same(x));
  CHECK(values(dropout(x, 0.0)) == values(x));
  CHECK(values(dropout(x, 1.0)) == std::vector<double>(15, 0.0));
  // The default generator: seeding it repeats the mask.
  manual_seed(9);
  const std::vector<double> a = values(dropout(x));
  manual_seed(9);
  CHECK(values(dropout(x)) == a);
}

// ---- conv2d -------------------------------------------------------------------------------

TEST_CASE("conv2d matches direct convolution loops", "[nn_ops][conv2d]") {
  const ConvConfig configs[] = {
      {{2, 3, 5, 6}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},
      {{2, 4, 7, 6}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, true},
      {{1, 4, 6, 6}, {4, 1, 2, 2}, {2, 2}, {1, 1}, {2, 1}, 4, false},
  };
  for (DType dtype : kDTypes) {
    for (const ConvConfig& c : configs) {
      const Tensor x = random_input(c.x_shape, dtype, 91);
      const Tensor w = random_input(c.w_shape, dtype, 92, 0.5);
      const Tensor b = c.bias ? random_input({c.w_shape[0]}, dtype, 93) : Tensor();
      Shape out_shape;
      const std::vector<double> expected =
          conv2d_reference(values(x), values(w), values_or_empty(b), c, out_shape);
      expect_result(conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups), dtype, out_shape,
                    expected, "conv2d groups=" + std::to_string(c.groups));
    }
    // An unbatched [C, H, W] input gives a [O, Hout, Wout] result.
    const ConvConfig& c = configs[0];
    const Tensor x = random_input({3, 5, 6}, dtype, 94);
    const Tensor w = random_input(c.w_shape, dtype, 95, 0.5);
    Shape out_shape;
    const std::vector<double> expected =
        conv2d_reference(values(x), values(w), {},
                         {{1, 3, 5, 6}, c.w_shape, {1, 1}, {1, 1}, {1, 1}, 1, false}, out_shape);
    expect_result(conv2d(x, w, {}, {1, 1}, {1, 1}), dtype, {4, 5, 6}, expected, "conv2d unbatched");
  }
}

// ---- pooling ------------------------------------------------------------------------------

TEST_CASE("max_pool2d and avg_pool2d match reference loops", "[nn_ops][pool]") {
  const PoolConfig configs[] = {
      {{2, 2}, {0, 0}, {0, 0}, true},  // the default stride: the kernel
      {{3, 2}, {2, 1}, {1, 1}, true},
      {{3, 3}, {2, 2}, {1, 1}, false},
      {{2, 3}, {1, 3}, {1, 0}, false},
  };
  for (DType dtype : kDTypes) {
    for (const Shape& shape : {Shape{2, 3, 7, 6}, Shape{3, 5, 5}}) {
      const Tensor x = random_input(shape, dtype, 101);
      for (const PoolConfig& c : configs) {
        Shape out_shape;
        const std::vector<double> max_expected =
            pool_reference(values(x), shape, c, true, out_shape);
        expect_result(max_pool2d(x, c.kernel, c.stride, c.padding), dtype, out_shape, max_expected,
                      "max_pool2d", Tolerance{0, 0});
        const std::vector<double> avg_expected =
            pool_reference(values(x), shape, c, false, out_shape);
        expect_result(avg_pool2d(x, c.kernel, c.stride, c.padding, c.count_include_pad), dtype,
                      out_shape, avg_expected, "avg_pool2d");
      }
    }
  }
}

TEST_CASE("max_pool2d sends each gradient to its window's maximum", "[nn_ops][pool]") {
  // Overlapping windows: an element that is the maximum of two windows gets both gradients.
  Tensor x = tensor({1.0, 5.0, 2.0, 0.0, 3.0, 4.0, 7.0, 6.0, 8.0}, {1, 1, 3, 3}).requires_grad_();
  const Tensor y = max_pool2d(x, {2, 2}, {1, 1});
  CHECK(values(y) == std::vector<double>{5, 5, 7, 8});
  sum(mul(y, tensor({1.0, 10.0, 100.0, 1000.0}, {1, 1, 2, 2}))).backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 11, 0, 0, 0, 0, 100, 0, 1000});
}

// ---- prelu --------------------------------------------------------------------------------

TEST_CASE("prelu scales the negative part per channel", "[nn_ops][prelu]") {
  for (DType dtype : kDTypes) {
    const Shape shape{2, 3, 4, 2};
    const Tensor x = random_input(shape, dtype, 111);
    const std::vector<double> xv = values(x);
    const Tensor per_channel = random_input({3}, dtype, 112, 0.5);
    const std::vector<double> w = values(per_channel);
    std::vector<double> expected(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      expected[i] = xv[i] > 0 ? xv[i] : w[i / 8 % 3] * xv[i];
    }
    expect_result(prelu(x, per_channel), dtype, shape, expected, "prelu per channel");
    for (const Tensor& single : {full({1}, 0.25, dtype), scalar_tensor(0.25, dtype)}) {
      for (size_t i = 0; i < xv.size(); ++i) expected[i] = xv[i] > 0 ? xv[i] : 0.25 * xv[i];
      expect_result(prelu(x, single), dtype, shape, expected, "prelu one weight");
    }
    // A 1-D input takes a single weight.
    const Tensor v = random_input({7}, dtype, 113);
    std::vector<double> v_expected;
    for (double value : values(v)) v_expected.push_back(value > 0 ? value : 0.25 * value);
    expect_result(prelu(v, full({1}, 0.25, dtype)), dtype, {7}, v_expected, "prelu 1-D");
  }
}

// ---- second derivatives -----------------------------------------------------------------------

TEST_CASE("recorded backward formulas give the fused kernels' gradients", "[nn_ops][gradcheck]") {
  // The first-order values of the two backward paths (NOTE [Differentiable nn backwards]),
  // in float64 so that they must agree to rounding.
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  const Tensor running_mean = tensor({0.2, -0.4, 0.1}, kFloat64);
  const Tensor running_var = tensor({0.7, 1.3, 2.0}, kFloat64);
  const std::vector<std::pair<const char*, Fn>> cases = {
      {"softmax", [](auto& in) { return softmax(in[0], 1); }},
      {"log_softmax", [](auto& in) { return log_softmax(in[0], 0); }},
      {"layer_norm",
       [](auto& in) { return layer_norm(in[0], {4}, in[1].select(0, 0), in[2].select(0, 1)); }},
      {"group_norm", [](auto& in) { return group_norm(in[0], 3, in[1].select(1, 0)); }},
      {"batch_norm training",
       [](auto& in) {
         return batch_norm(in[0], {}, {}, in[1].select(1, 0), in[2].select(1, 1), true);
       }},
      {"batch_norm eval",
       [&](auto& in) {
         return batch_norm(in[0], running_mean, running_var, in[1].select(1, 0),
                           in[2].select(1, 1));
       }},
      {"conv2d",
       [](auto& in) {
         return conv2d(in[0].reshape({1, 3, 2, 4}), in[1].reshape({3, 1, 2, 2}), in[2].select(1, 1),
                       {1, 1}, {1, 0}, {1, 2}, 3);
       }},
      {"max_pool2d",
       [](auto& in) {
         return max_pool2d(in[0], {2, 2}, {1, 1}, {1, 1});
       }},
      {"avg_pool2d",
       [](auto& in) {
         return avg_pool2d(in[0], {2, 3}, {1, 1}, {1, 1}, false);
       }},
      {"embedding",
       [](auto& in) {
         return embedding(in[0].reshape({6, 4}), tensor(std::vector<int64_t>{5, 1, 5, 0}), 1);
       }},
      {"prelu", [](auto& in) { return prelu(in[0], in[1].select(1, 0)); }},
  };
  for (const auto& [name, fn] : cases) {
    INFO(name);
    const std::vector<Tensor> inputs{f64_input({2, 3, 4}, 31), f64_input({3, 4}, 32),
                                     f64_input({3, 4}, 33)};
    const Tensor y = fn(inputs);
    const Tensor r = uniform_input(y.sizes(), kFloat64, 34, -1.0, 1.0);
    const Tensor loss = sum(mul(y, r));
    const std::vector<Tensor> fused = autograd::grad({loss}, inputs, {}, true, false, true);
    const std::vector<Tensor> recorded = autograd::grad({loss}, inputs, {}, true, true, true);
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO("input " << i);
      REQUIRE(fused[i].defined() == recorded[i].defined());
      if (fused[i].defined()) expect_close(recorded[i], values(fused[i]), {1e-12, 1e-10}, name);
    }
  }
}

TEST_CASE("nn ops differentiate twice through create_graph", "[nn_ops][gradcheck]") {
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  struct Case {
    const char* name;
    Fn fn;
    std::vector<Tensor> inputs;
  };
  const Tensor running_mean = tensor({0.2, -0.4, 0.1}, kFloat64);
  const Tensor running_var = tensor({0.7, 1.3, 2.0}, kFloat64);
  const std::vector<Case> cases = {
      {"softmax",
       [](auto& in) { return recorded_grad(softmax(in[0], 1), in[0]); },
       {f64_input({2, 4}, 1)}},
      {"log_softmax",
       [](auto& in) { return recorded_grad(log_softmax(in[0], 0), in[0]); },
       {f64_input({3, 2}, 2)}},
      {"layer_norm by x",
       [](auto& in) {
         return recorded_grad(layer_norm(in[0], {2, 3}, in[1], in[2]), in[0]);
       },
       {f64_input({2, 2, 3}, 3), f64_input({2, 3}, 4), f64_input({2, 3}, 5)}},
      {"layer_norm by weight",
       [](auto& in) { return recorded_grad(layer_norm(in[0], {3}, in[1], in[2]), in[1]); },
       {f64_input({2, 3}, 6), f64_input({3}, 7), f64_input({3}, 8)}},
      {"group_norm by x",
       [](auto& in) { return recorded_grad(group_norm(in[0], 2, in[1], in[2]), in[0]); },
       {f64_input({2, 4, 2}, 9), f64_input({4}, 10), f64_input({4}, 11)}},
      {"group_norm by weight",
       [](auto& in) { return recorded_grad(group_norm(in[0], 2, in[1]), in[1]); },
       {f64_input({2, 4, 2}, 12), f64_input({4}, 13)}},
      {"batch_norm training by x",
       [](auto& in) { return recorded_grad(batch_norm(in[0], {}, {}, in[1], in[2], true), in[0]); },
       {f64_input({3, 3, 2}, 14), f64_input({3}, 15), f64_input({3}, 16)}},
      {"batch_norm eval by x and weight",
       [&](auto& in) {
         const Tensor y = batch_norm(in[0], running_mean, running_var, in[1], in[2]);
         return add(recorded_grad(y, in[0]), sum(recorded_grad(y, in[1])));
       },
       {f64_input({2, 3, 2}, 17), f64_input({3}, 18), f64_input({3}, 19)}},
      {"max_pool2d",
       [](auto& in) {
         return recorded_grad(max_pool2d(in[0], {2, 2}, {1, 2}, {1, 1}), in[0]);
       },
       {f64_input({1, 2, 4, 5}, 20)}},
      {"dropout",
       [](auto& in) {
         Generator generator(3);
         return recorded_grad(dropout(in[0], 0.5, true, &generator), in[0]);
       },
       {f64_input({4, 4}, 21)}},
      {"prelu",
       [](auto& in) {
         const Tensor y = prelu(in[0], in[1]);
         return add(recorded_grad(y, in[0]), sum(recorded_grad(y, in[1])));
       },
       {f64_input({2, 3, 2}, 22), f64_input({3}, 23)}},
      {"conv2d by bias",
       [](auto& in) {
         return recorded_grad(conv2d(in[0], in[1], in[2], {1, 1}, {1, 1}), in[2]);
       },
       {f64_input({1, 2, 3, 3}, 24), f64_input({2, 2, 2, 2}, 25), f64_input({2}, 26)}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    CHECK_NOTHROW(autograd::gradcheck(c.fn, c.inputs));
  }
}

// ---- autocast -----------------------------------------------------------------------------

TEST_CASE("nn ops have torch.amp's autocast policies", "[nn_ops][autocast]") {
  using P = CastPolicy;
  const auto policies = [](OpId op) {
    return std::pair{amp::cast_policy(op, kCUDA), amp::cast_policy(op, kCPU)};
  };
  for (OpId op : {OpId::softmax, OpId::log_softmax, OpId::layer_norm, OpId::group_norm}) {
    CHECK((policies(op) == std::pair{P::Fp32, P::Unlisted}));
  }
  for (OpId op : {OpId::conv2d, OpId::prelu}) {
    CHECK((policies(op) == std::pair{P::LowerPrecision, P::LowerPrecision}));
  }
  for (OpId op :
       {OpId::batch_norm, OpId::embedding, OpId::dropout, OpId::max_pool2d, OpId::avg_pool2d}) {
    CHECK((policies(op) == std::pair{P::Unlisted, P::Unlisted}));
  }
}

TEST_CASE("conv2d and prelu run in the autocast dtype and an explicit dtype is kept",
          "[nn_ops][autocast]") {
  const Tensor x = random_input({1, 2, 4, 4}, kFloat32, 121);
  const Tensor w = random_input({3, 2, 3, 3}, kFloat32, 122);
  const Tensor b = random_input({3}, kFloat32, 123);
  for (DType low : {kBFloat16, kFloat16}) {
    amp::Autocast autocast(kCPU, low);
    const Tensor y = conv2d(x, w, b, {1, 1}, {1, 1});
    CHECK(y.dtype() == low);
    CHECK(prelu(y, full({3}, 0.1)).dtype() == low);
    // Unlisted on the CPU: as called.
    CHECK(layer_norm(x, {4}).dtype() == kFloat32);
    CHECK(softmax(y, 1).dtype() == low);
  }
  // With softmax's CPU policy set to float32, an explicit dtype still wins.
  amp::set_cast_policy(OpId::softmax, kCPU, CastPolicy::Fp32);
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    const Tensor h = x.to(kBFloat16);
    CHECK(softmax(h, 1).dtype() == kFloat32);
    CHECK(softmax(h, 1, kBFloat16).dtype() == kBFloat16);
  }
  amp::reset_cast_policies();
}

// ---- bad inputs ---------------------------------------------------------------------------

TEST_CASE("softmax rejects bad inputs with messages", "[nn_ops][errors]") {
  const Tensor x = random_input({2, 3}, kFloat32, 131);
  const Tensor ints = tensor(std::vector<int64_t>{1, 2, 3});
  expect_rejected([&] { softmax(x, 2); }, {x}, {"softmax", "dim", "[-2, 1]", "got 2"});
  expect_rejected([&] { log_softmax(x, -3); }, {x}, {"log_softmax", "[-2, 1]", "got -3"});
  expect_rejected([&] { softmax(ints, 0); }, {ints}, {"softmax", "floating", "int64"});
  expect_rejected([&] { log_softmax(x, 0, kInt32); }, {x},
                  {"log_softmax", "expected a floating dtype", "int32"});
}

TEST_CASE("norms reject bad inputs with messages and leave the running statistics alone",
          "[nn_ops][errors]") {
  const Tensor x = random_input({2, 4, 3}, kFloat32, 141);
  const Tensor w4 = random_input({4}, kFloat32, 142), w3 = random_input({3}, kFloat32, 143);
  const Tensor ints = tensor(std::vector<int64_t>{1, 2, 3, 4}, {2, 2});
  expect_rejected([&] { layer_norm(x, {4}); }, {x},
                  {"layer_norm", "normalized_shape [4]", "[2, 4, 3]"});
  expect_rejected([&] { layer_norm(x, {3}, w4); }, {x, w4},
                  {"layer_norm", "weight", "shape [3]", "got shape [4]"});
  expect_rejected([&] { layer_norm(ints, {2}); }, {ints}, {"layer_norm", "floating", "int64"});
  expect_rejected([&] { group_norm(x, 3); }, {x}, {"group_norm", "divide", "C=4", "num_groups=3"});
  expect_rejected([&] { group_norm(x, 2, w3); }, {x, w3},
                  {"group_norm", "weight", "[4]", "got shape [3]"});
  expect_rejected([&] { group_norm(w4, 2); }, {w4}, {"group_norm", "at least 2 dims", "1-D"});
  Tensor running_mean = zeros({4}), running_var = ones({4});
  const Tensor short_var = ones({3});
  expect_rejected([&] { batch_norm(x, running_mean, short_var, w4, {}, true); },
                  {x, running_mean, short_var}, {"batch_norm", "running_var", "[4]", "[3]"});
  expect_rejected([&] { batch_norm(x, running_mean, running_var, w3, {}, true); },
                  {x, running_mean, running_var, w3}, {"batch_norm", "weight", "[4]", "[3]"});
  expect_rejected([&] { batch_norm(x, {}, {}); }, {x},
                  {"batch_norm", "running_mean and running_var in eval mode", "neither"});
  expect_rejected([&] { batch_norm(x.slice(0, 0, 1).slice(2, 0, 1), {}, {}, {}, {}, true); }, {x},
                  {"batch_norm", "more than 1 value per channel", "[1, 4, 1]"});
}

TEST_CASE("embedding rejects bad inputs with messages", "[nn_ops][errors]") {
  const Tensor weight = random_input({5, 3}, kFloat32, 151);
  const Tensor indices = tensor(std::vector<int64_t>{0, 4, 5, 1});
  const Tensor negative = tensor(std::vector<int64_t>{0, -1});
  const Tensor float_indices = tensor({0.0, 1.0});
  const Tensor row = random_input({5}, kFloat32, 152);
  expect_rejected([&] { embedding(weight, indices); }, {weight, indices},
                  {"embedding", "[0, 5)", "got 5 at element 2"});
  expect_rejected([&] { embedding(weight, negative); }, {weight, negative},
                  {"embedding", "[0, 5)", "got -1 at element 1"});
  expect_rejected([&] { embedding(weight, float_indices); }, {weight, float_indices},
                  {"embedding", "int64 or int32", "float32"});
  expect_rejected([&] { embedding(row, tensor(std::vector<int64_t>{0})); }, {row},
                  {"embedding", "2-D weight", "1-D (shape [5])"});
  expect_rejected([&] { embedding(weight, tensor(std::vector<int64_t>{0}), 5); }, {weight},
                  {"embedding", "padding_idx in [-1, 5)", "got 5"});
}

TEST_CASE("dropout conv2d pooling and prelu reject bad inputs with messages", "[nn_ops][errors]") {
  const Tensor x = random_input({1, 4, 5, 5}, kFloat32, 161);
  const Tensor w = random_input({2, 4, 3, 3}, kFloat32, 162);
  const Tensor ints = tensor(std::vector<int64_t>{1, -2, 3, 4}, {1, 1, 2, 2});
  expect_rejected([&] { dropout(x, 1.5); }, {x}, {"dropout", "[0, 1]", "p=1.5"});
  expect_rejected([&] { dropout(ints, 0.5); }, {ints}, {"dropout", "floating", "int64"});
  expect_rejected([&] { conv2d(x, w.slice(1, 0, 3)); }, {x, w},
                  {"conv2d", "C/groups=4", "[2, 3, 3, 3]"});
  expect_rejected(
      [&] {
        conv2d(x, w, {}, {1, 1}, {0, 0}, {1, 1}, 3);
      },
      {x, w}, {"conv2d", "divide the input channels C=4", "groups=3"});
  expect_rejected([&] { conv2d(x.unsqueeze(0), w); }, {x, w},
                  {"conv2d", "3-D [C, H, W] or 4-D", "5-D"});
  expect_rejected([&] { conv2d(x, w.to(kFloat16)); }, {x, w},
                  {"conv2d", "weight of dtype float32", "float16"});
  expect_rejected([&] { conv2d(x, w, ones({3})); }, {x, w}, {"conv2d", "bias", "[2]", "[3]"});
  expect_rejected([&] { conv2d(x, w, {}, {0, 1}); }, {x, w}, {"conv2d", "strides > 0", "(0, 1)"});
  expect_rejected(
      [&] {
        max_pool2d(x.select(0, 0).select(0, 0), {2, 2});
      },
      {x}, {"max_pool2d", "3-D [C, H, W] or 4-D", "2-D"});
  expect_rejected(
      [&] {
        avg_pool2d(x, {2, 2}, {}, {2, 1});
      },
      {x}, {"avg_pool2d", "half the kernel", "padding 2x1"});
  expect_rejected(
      [&] {
        max_pool2d(x, {6, 2});
      },
      {x}, {"max_pool2d", "no larger than the padded input 5x5", "kernel 6x2"});
  expect_rejected([&] { avg_pool2d(ints, {1, 1}); }, {ints}, {"avg_pool2d", "floating", "int64"});
  const Tensor three = full({3}, 0.25);
  expect_rejected([&] { prelu(x, three); }, {x, three},
                  {"prelu", "one per channel (C=4", "got 3 elements"});
  expect_rejected([&] { prelu(x, full({1}, 0.25, kFloat16)); }, {x},
                  {"prelu", "weight of the input's dtype float32", "float16"});
  expect_rejected([&] { prelu(x, full({2, 2}, 0.25)); }, {x}, {"prelu", "0-D or 1-D", "2-D"});
  expect_rejected([&] { prelu(ints, full({1}, 0.25)); }, {ints}, {"prelu", "floating", "int64"});
}
