// Tests for ops/norm.h: softmax, log_softmax and the norms, in float32, float16 and bfloat16
// against a float64 reference written here with plain loops over the same (already rounded)
// inputs; gradients in the parameters' own dtypes; and bad inputs, which must throw naming the
// op, what was expected and what was given, and leave every input as it was. Also the checks
// that span every nn op: the recorded backward formulas against the fused kernels, second
// derivatives (create_graph) against finite differences, and the autocast policies. (First
// derivatives of every op are checked by the gradcheck sweep,
// tests/ops/gradcheck_samples/nn.cpp.)
//
// Dims: N batch, C channels, G groups.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/autograd/gradcheck.h"
#include "halfgrad/halfgrad.h"
#include "ops/nn_test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

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

TEST_CASE("softmin is softmax of the negated input, and takes a dtype", "[nn_ops][softmax]") {
  const Shape shape{3, 5, 4};
  for (DType dtype : kDTypes) {
    const Tensor x = random_input(shape, dtype, 12, 3.0);
    std::vector<double> negated = values(x);
    for (double& v : negated) v = -v;
    for (int64_t dim : {0, 2}) {
      expect_result(softmin(x, dim), dtype, shape, softmax_reference(negated, shape, dim, false),
                    "softmin " + std::string(dtype_name(dtype)));
    }
    expect_result(softmin(x, 1, kFloat64), kFloat64, shape,
                  softmax_reference(negated, shape, 1, false), "softmin to float64");
  }
  const Tensor ints = tensor(std::vector<int64_t>{1, 2, 3});
  expect_result(softmin(ints, 0, kFloat32), kFloat32, {3},
                softmax_reference({-1, -2, -3}, {3}, 0, false), "softmin of int64 as float32");
  CHECK_THROWS_WITH(softmin(tensor({1.0, 2.0}), 3), Catch::Contains("softmin"));
  CHECK_THROWS_WITH(
      softmin(ints, 0),
      Catch::Contains("softmin: expected a floating tensor or a dtype argument, got int64"));
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
         return avg_pool2d(in[0], {2, 3}, {1, 1}, {1, 1}, false, false);
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
