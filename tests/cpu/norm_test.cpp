// Tests for the CPU norm kernels (kernel/norm.h, cpu/norm.cpp): softmax, log_softmax and the
// norms. Every forward is checked against a float64 reference written here with plain loops,
// every backward against central finite differences in float64 (L = sum(out * R) for a fixed
// random R), and the float32/float16/bfloat16 kernels against the float64 kernels run on the
// same (rounded) values.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/nn_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

std::vector<double> softmax_reference(const Tensor& x, int64_t dim, bool log) {
  const std::vector<double> v = values(x);
  const Shape& s = x.sizes();
  const size_t d = size_t(dim < 0 ? dim + x.dim() : dim);
  const int64_t outer = product(s, 0, d), size = s[d], inner = product(s, d + 1, s.size());
  std::vector<double> y(v.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const auto at = [&](int64_t k) { return size_t((o * size + k) * inner + i); };
      double max = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t k = 0; k < size; ++k) max = std::max(max, v[at(k)]);
      for (int64_t k = 0; k < size; ++k) sum += std::exp(v[at(k)] - max);
      for (int64_t k = 0; k < size; ++k) {
        y[at(k)] = log ? v[at(k)] - max - std::log(sum) : std::exp(v[at(k)] - max) / sum;
      }
    }
  }
  return y;
}

struct NormReference {
  std::vector<double> out, mean, rstd;
};

// Normalises the `count` values at index(set, k) for each set, with weight/bias at
// channel(set, k) (empty vectors: none).
template <class Index, class Channel>
NormReference normalize_reference(const std::vector<double>& x, int64_t sets, int64_t count,
                                  Index index, Channel channel, const std::vector<double>& w,
                                  const std::vector<double>& b, double eps) {
  NormReference ref{std::vector<double>(x.size()), {}, {}};
  for (int64_t set = 0; set < sets; ++set) {
    double mean = 0, var = 0;
    for (int64_t k = 0; k < count; ++k) mean += x[index(set, k)];
    mean /= double(count);
    for (int64_t k = 0; k < count; ++k) var += std::pow(x[index(set, k)] - mean, 2);
    var /= double(count);
    const double rstd = 1 / std::sqrt(var + eps);
    ref.mean.push_back(mean);
    ref.rstd.push_back(rstd);
    for (int64_t k = 0; k < count; ++k) {
      const size_t c = channel(set, k);
      ref.out[index(set, k)] =
          (x[index(set, k)] - mean) * rstd * (w.empty() ? 1.0 : w[c]) + (b.empty() ? 0.0 : b[c]);
    }
  }
  return ref;
}

NormReference layer_norm_reference(const Tensor& x, int64_t M, const Tensor& w, const Tensor& b,
                                   double eps) {
  return normalize_reference(
      values(x), x.numel() / M, M, [M](int64_t r, int64_t k) { return size_t(r * M + k); },
      [](int64_t, int64_t k) { return size_t(k); }, optional_values(w), optional_values(b), eps);
}

NormReference group_norm_reference(const Tensor& x, int64_t G, const Tensor& w, const Tensor& b,
                                   double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C), Cg = C / G;
  // Group set = n * G + g holds Cg * S contiguous values.
  return normalize_reference(
      values(x), N * G, Cg * S, [&](int64_t set, int64_t k) { return size_t(set * Cg * S + k); },
      [&](int64_t set, int64_t k) { return size_t((set % G) * Cg + k / S); }, optional_values(w),
      optional_values(b), eps);
}

NormReference batch_norm_training_reference(const Tensor& x, const Tensor& w, const Tensor& b,
                                            double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  // Channel set = c holds N runs of S values.
  return normalize_reference(
      values(x), C, N * S,
      [&](int64_t c, int64_t k) { return size_t(((k / S) * C + c) * S + k % S); },
      [](int64_t c, int64_t) { return size_t(c); }, optional_values(w), optional_values(b), eps);
}

std::vector<double> batch_norm_eval_reference(const Tensor& x, const Tensor& running_mean,
                                              const Tensor& running_var, const Tensor& w,
                                              const Tensor& b, double eps) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / (N * C);
  const std::vector<double> v = values(x), rm = values(running_mean), rv = values(running_var);
  const std::vector<double> wv = optional_values(w), bv = optional_values(b);
  std::vector<double> out(v.size());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t s = 0; s < S; ++s) {
        const size_t i = size_t((n * C + c) * S + s);
        out[i] = (v[i] - rm[size_t(c)]) / std::sqrt(rv[size_t(c)] + eps) *
                     (wv.empty() ? 1.0 : wv[size_t(c)]) +
                 (bv.empty() ? 0.0 : bv[size_t(c)]);
      }
    }
  }
  return out;
}

// A norm backward's gradients against finite differences of forward: dx, and dweight and dbias
// when affine; without affine parameters neither may come back.
void check_norm_gradients(const Tensor& x, const Tensor& w, const Tensor& b,
                          const std::function<Tensor()>& forward, const Tensor& R,
                          const kernel::NormBackward& g, bool affine) {
  check_gradient("x", x, forward, R, g.dx);
  if (affine) {
    check_gradient("weight", w, forward, R, g.dweight);
    check_gradient("bias", b, forward, R, g.dbias);
  } else {
    CHECK_FALSE(g.dweight.defined());
    CHECK_FALSE(g.dbias.defined());
  }
}

// A low-precision norm backward's gradients against the float64 kernel's, ref.
void expect_close_to_float64(const kernel::NormBackward& g, const kernel::NormBackward& ref,
                             DType dtype) {
  expect_close(g.dx, ref.dx, backward_tolerance(dtype), "dx");
  expect_close(g.dweight, ref.dweight, backward_tolerance(dtype), "dweight");
  expect_close(g.dbias, ref.dbias, backward_tolerance(dtype), "dbias");
}

}  // namespace

// ---- softmax ------------------------------------------------------------------------------

namespace {

struct SoftmaxCase {
  Shape shape;
  int64_t dim;
};
// Rows (inner 1), columns (inner > 1), a softmax dim of 1, and inner > 64 (several slabs).
const SoftmaxCase kSoftmaxCases[] = {{{5, 7}, 1},    {{5, 7}, 0},     {{2, 3, 4}, -1},
                                     {{3, 4, 5}, 1}, {{2, 3, 70}, 1}, {{4, 1, 3}, 1},
                                     {{6}, 0}};

}  // namespace

TEST_CASE("softmax and log_softmax match a float64 reference in every dtype",
          "[nn_kernels][softmax]") {
  uint64_t seed = 100;
  for (const SoftmaxCase& c : kSoftmaxCases) {
    for (DType dtype : kAllDTypes) {
      for (bool log : {false, true}) {
        INFO("shape " << c.shape << " dim " << c.dim << " " << dtype << (log ? " log" : ""));
        const Tensor x = random_tensor(c.shape, ++seed, dtype, -4.0, 4.0);
        const Tensor before = x.clone();
        const Tensor y =
            log ? cpu::norm_kernels.log_softmax(x, c.dim) : cpu::norm_kernels.softmax(x, c.dim);
        expect_result(y, dtype, c.shape);
        expect_close(values(y), softmax_reference(x, c.dim, log), forward_tolerance(dtype),
                     "forward");
        CHECK(values(x) == values(before));  // inputs are never modified
        if (c.shape.size() >= 2) {
          const Tensor y_strided = log ? cpu::norm_kernels.log_softmax(strided_copy(x), c.dim)
                                       : cpu::norm_kernels.softmax(strided_copy(x), c.dim);
          CHECK(values(y_strided) == values(y));
        }
      }
    }
  }
}

TEST_CASE("softmax stays finite for inputs whose exp overflows", "[nn_kernels][softmax]") {
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    INFO(dtype);
    const double big = dtype == kFloat16 ? 60000.0 : 1.0e30;
    const Tensor x = tensor({big, big - 1, big - 2}, dtype);
    const std::vector<double> y = values(cpu::norm_kernels.softmax(x, 0));
    for (double v : y) CHECK(std::isfinite(v));
    const std::vector<double> ly =
        values(cpu::norm_kernels.log_softmax(tensor({-big, 0.0, 1.0}, dtype), 0));
    for (double v : ly) CHECK(std::isfinite(v));
  }
  const std::vector<double> y =
      values(cpu::norm_kernels.softmax(tensor({1000.0, 1001.0, 1002.0}), 0));
  CHECK(y[0] + y[1] + y[2] == Approx(1.0));
  CHECK(y[2] == Approx(std::exp(0.0) / (1 + std::exp(-1.0) + std::exp(-2.0))));
}

TEST_CASE("softmax backward matches finite differences", "[nn_kernels][softmax]") {
  uint64_t seed = 200;
  for (const SoftmaxCase& c : kSoftmaxCases) {
    for (bool log : {false, true}) {
      INFO("shape " << c.shape << " dim " << c.dim << (log ? " log" : ""));
      const Tensor x = random_tensor(c.shape, ++seed, kFloat64, -2.0, 2.0);
      const Tensor R = random_tensor(c.shape, ++seed);
      const auto forward = [&] {
        return log ? cpu::norm_kernels.log_softmax(x, c.dim) : cpu::norm_kernels.softmax(x, c.dim);
      };
      const Tensor y = forward();
      const Tensor dx = log ? cpu::norm_kernels.log_softmax_backward(R, y, c.dim)
                            : cpu::norm_kernels.softmax_backward(R, y, c.dim);
      check_gradient("x", x, forward, R, dx);
      // Strided dy and y give the same dx.
      if (c.shape.size() >= 2) {
        const Tensor dx_strided =
            log ? cpu::norm_kernels.log_softmax_backward(strided_copy(R), strided_copy(y), c.dim)
                : cpu::norm_kernels.softmax_backward(strided_copy(R), strided_copy(y), c.dim);
        CHECK(values(dx_strided) == values(dx));
      }
    }
  }
}

TEST_CASE("softmax backward in low precision matches float64", "[nn_kernels][softmax]") {
  uint64_t seed = 300;
  for (const SoftmaxCase& c : kSoftmaxCases) {
    for (DType dtype : kLowDTypes) {
      for (bool log : {false, true}) {
        INFO("shape " << c.shape << " dim " << c.dim << " " << dtype << (log ? " log" : ""));
        const Tensor x = random_tensor(c.shape, ++seed, dtype, -3.0, 3.0);
        const Tensor dy = random_tensor(c.shape, ++seed, dtype);
        const Tensor y =
            log ? cpu::norm_kernels.log_softmax(x, c.dim) : cpu::norm_kernels.softmax(x, c.dim);
        const auto backward = [&](const Tensor& g, const Tensor& out) {
          return log ? cpu::norm_kernels.log_softmax_backward(g, out, c.dim)
                     : cpu::norm_kernels.softmax_backward(g, out, c.dim);
        };
        const Tensor dx = backward(dy, y);
        expect_result(dx, dtype, c.shape);
        expect_close(dx, backward(f64(dy), f64(y)), backward_tolerance(dtype), "dx");
      }
    }
  }
}

TEST_CASE("softmax of many rows and columns uses the threaded path correctly",
          "[nn_kernels][softmax]") {
  for (int64_t dim : {1, 0}) {
    const Tensor x = random_tensor({128, 512}, 400 + uint64_t(dim), kFloat32, -3.0, 3.0);
    expect_close(values(cpu::norm_kernels.softmax(x, dim)), softmax_reference(x, dim, false),
                 forward_tolerance(kFloat32), "softmax");
    expect_close(values(cpu::norm_kernels.log_softmax(x, dim)), softmax_reference(x, dim, true),
                 forward_tolerance(kFloat32), "log_softmax");
  }
}

// ---- layer_norm ---------------------------------------------------------------------------

TEST_CASE("layer_norm matches the explicit formula in every dtype", "[nn_kernels][layer_norm]") {
  uint64_t seed = 500;
  const Shape x_shape{3, 4, 5};
  for (const Shape& normalized : {Shape{5}, Shape{4, 5}}) {
    const int64_t M = shape_numel(normalized);
    for (DType dtype : kAllDTypes) {
      for (bool affine : {false, true}) {
        INFO("normalized_shape " << normalized << " " << dtype << (affine ? " affine" : ""));
        // A mean far from zero: the variance must not cancel away.
        const Tensor x = random_tensor(x_shape, ++seed, dtype, 2.0, 5.0);
        const Tensor w = affine ? random_tensor(normalized, ++seed, dtype, 0.5, 1.5) : Tensor();
        const Tensor b = affine ? random_tensor(normalized, ++seed, dtype) : Tensor();
        const kernel::NormForward f = cpu::norm_kernels.layer_norm(x, normalized, w, b, 1e-5);
        const NormReference ref = layer_norm_reference(x, M, w, b, 1e-5);
        const DType stat_dtype = dtype == kFloat64 ? kFloat64 : kFloat32;
        expect_result(f.out, dtype, x_shape);
        expect_result(f.mean, stat_dtype, {x.numel() / M});
        expect_result(f.rstd, stat_dtype, {x.numel() / M});
        expect_close(values(f.out), ref.out, forward_tolerance(dtype), "out");
        expect_close(values(f.mean), ref.mean, forward_tolerance(stat_dtype), "mean");
        expect_close(values(f.rstd), ref.rstd, forward_tolerance(stat_dtype), "rstd");
        const kernel::NormForward strided =
            cpu::norm_kernels.layer_norm(strided_copy(x), normalized, w, b, 1e-5);
        CHECK(values(strided.out) == values(f.out));
      }
    }
  }
}

TEST_CASE("layer_norm backward matches finite differences", "[nn_kernels][layer_norm]") {
  uint64_t seed = 600;
  const Shape x_shape{3, 4, 5};
  for (const Shape& normalized : {Shape{5}, Shape{4, 5}}) {
    for (bool affine : {false, true}) {
      INFO("normalized_shape " << normalized << (affine ? " affine" : ""));
      const Tensor x = random_tensor(x_shape, ++seed);
      const Tensor w = affine ? random_tensor(normalized, ++seed, kFloat64, 0.5, 1.5) : Tensor();
      const Tensor b = affine ? random_tensor(normalized, ++seed) : Tensor();
      const Tensor R = random_tensor(x_shape, ++seed);
      const auto forward = [&] {
        return cpu::norm_kernels.layer_norm(x, normalized, w, b, 1e-5).out;
      };
      const kernel::NormForward f = cpu::norm_kernels.layer_norm(x, normalized, w, b, 1e-5);
      const kernel::NormBackward g =
          cpu::norm_kernels.layer_norm_backward(R, x, f.mean, f.rstd, normalized, w, affine);
      check_norm_gradients(x, w, b, forward, R, g, affine);
    }
  }
}

TEST_CASE("layer_norm backward in low precision matches float64", "[nn_kernels][layer_norm]") {
  uint64_t seed = 700;
  const Shape x_shape{4, 3, 6};
  const Shape normalized{3, 6};
  for (DType dtype : kLowDTypes) {
    INFO(dtype);
    const Tensor x = random_tensor(x_shape, ++seed, dtype);
    const Tensor w = random_tensor(normalized, ++seed, dtype, 0.5, 1.5);
    const Tensor b = random_tensor(normalized, ++seed, dtype);
    const Tensor dy = random_tensor(x_shape, ++seed, dtype);
    const kernel::NormForward f = cpu::norm_kernels.layer_norm(x, normalized, w, b, 1e-5);
    const kernel::NormBackward g =
        cpu::norm_kernels.layer_norm_backward(dy, x, f.mean, f.rstd, normalized, w, true);
    const kernel::NormForward f64_forward =
        cpu::norm_kernels.layer_norm(f64(x), normalized, f64(w), f64(b), 1e-5);
    const kernel::NormBackward ref = cpu::norm_kernels.layer_norm_backward(
        f64(dy), f64(x), f64_forward.mean, f64_forward.rstd, normalized, f64(w), true);
    expect_result(g.dx, dtype, x_shape);
    expect_result(g.dweight, dtype, normalized);
    expect_result(g.dbias, dtype, normalized);
    expect_close_to_float64(g, ref, dtype);
  }
}

TEST_CASE("layer_norm takes float32 parameters with bfloat16 input", "[nn_kernels][layer_norm]") {
  const Tensor x = random_tensor({6, 8}, 800, kBFloat16);
  const Tensor w = random_tensor({8}, 801, kFloat32, 0.5, 1.5);
  const Tensor b = random_tensor({8}, 802, kFloat32);
  const kernel::NormForward f = cpu::norm_kernels.layer_norm(x, {8}, w, b, 1e-5);
  expect_result(f.out, kBFloat16, {6, 8});
  expect_close(values(f.out), layer_norm_reference(x, 8, w, b, 1e-5).out,
               forward_tolerance(kBFloat16), "out");
  const Tensor dy = random_tensor({6, 8}, 803, kBFloat16);
  const kernel::NormBackward g =
      cpu::norm_kernels.layer_norm_backward(dy, x, f.mean, f.rstd, {8}, w, true);
  CHECK(g.dx.dtype() == kBFloat16);
  CHECK(g.dweight.dtype() == kFloat32);
  CHECK(g.dbias.dtype() == kFloat32);
}

TEST_CASE("layer_norm of long rows uses the threaded path correctly", "[nn_kernels][layer_norm]") {
  const Tensor x = random_tensor({64, 1024}, 900, kFloat32);
  const Tensor w = random_tensor({1024}, 901, kFloat32);
  const Tensor b = random_tensor({1024}, 902, kFloat32);
  const Tensor dy = random_tensor({64, 1024}, 903, kFloat32);
  const kernel::NormForward f = cpu::norm_kernels.layer_norm(x, {1024}, w, b, 1e-5);
  expect_close(values(f.out), layer_norm_reference(x, 1024, w, b, 1e-5).out,
               forward_tolerance(kFloat32), "out");
  const kernel::NormBackward g =
      cpu::norm_kernels.layer_norm_backward(dy, x, f.mean, f.rstd, {1024}, w, true);
  const kernel::NormForward f_ref =
      cpu::norm_kernels.layer_norm(f64(x), {1024}, f64(w), f64(b), 1e-5);
  const kernel::NormBackward ref = cpu::norm_kernels.layer_norm_backward(
      f64(dy), f64(x), f_ref.mean, f_ref.rstd, {1024}, f64(w), true);
  expect_close(g.dx, ref.dx, backward_tolerance(kFloat32), "dx");
  expect_close(g.dweight, ref.dweight, backward_tolerance(kFloat32), "dweight");
  expect_close(g.dbias, ref.dbias, backward_tolerance(kFloat32), "dbias");
}

// ---- group_norm ---------------------------------------------------------------------------

TEST_CASE("group_norm matches the explicit formula in every dtype", "[nn_kernels][group_norm]") {
  uint64_t seed = 1000;
  for (const Shape& shape : {Shape{2, 6, 3, 2}, Shape{3, 4}}) {
    for (int64_t groups : {1, 2, 3, 6}) {
      if (shape[1] % groups != 0) continue;
      for (DType dtype : kAllDTypes) {
        for (bool affine : {false, true}) {
          INFO("shape " << shape << " groups " << groups << " " << dtype
                        << (affine ? " affine" : ""));
          const int64_t C = shape[1];
          const Tensor x = random_tensor(shape, ++seed, dtype, -1.0, 3.0);
          const Tensor w = affine ? random_tensor({C}, ++seed, dtype, 0.5, 1.5) : Tensor();
          const Tensor b = affine ? random_tensor({C}, ++seed, dtype) : Tensor();
          const kernel::NormForward f = cpu::norm_kernels.group_norm(x, groups, w, b, 1e-5);
          const NormReference ref = group_norm_reference(x, groups, w, b, 1e-5);
          const DType stat_dtype = dtype == kFloat64 ? kFloat64 : kFloat32;
          expect_result(f.out, dtype, shape);
          expect_result(f.mean, stat_dtype, {shape[0], groups});
          expect_result(f.rstd, stat_dtype, {shape[0], groups});
          expect_close(values(f.out), ref.out, forward_tolerance(dtype), "out");
          expect_close(values(f.mean), ref.mean, forward_tolerance(stat_dtype), "mean");
          expect_close(values(f.rstd), ref.rstd, forward_tolerance(stat_dtype), "rstd");
          CHECK(values(cpu::norm_kernels.group_norm(strided_copy(x), groups, w, b, 1e-5).out) ==
                values(f.out));
        }
      }
    }
  }
}

TEST_CASE("group_norm backward matches finite differences", "[nn_kernels][group_norm]") {
  uint64_t seed = 1100;
  const Shape shape{2, 6, 3, 2};
  for (int64_t groups : {1, 3, 6}) {
    for (bool affine : {false, true}) {
      INFO("groups " << groups << (affine ? " affine" : ""));
      const Tensor x = random_tensor(shape, ++seed);
      const Tensor w = affine ? random_tensor({6}, ++seed, kFloat64, 0.5, 1.5) : Tensor();
      const Tensor b = affine ? random_tensor({6}, ++seed) : Tensor();
      const Tensor R = random_tensor(shape, ++seed);
      const auto forward = [&] { return cpu::norm_kernels.group_norm(x, groups, w, b, 1e-5).out; };
      const kernel::NormForward f = cpu::norm_kernels.group_norm(x, groups, w, b, 1e-5);
      const kernel::NormBackward g =
          cpu::norm_kernels.group_norm_backward(R, x, f.mean, f.rstd, groups, w, affine);
      check_norm_gradients(x, w, b, forward, R, g, affine);
    }
  }
}

TEST_CASE("group_norm backward in low precision matches float64", "[nn_kernels][group_norm]") {
  uint64_t seed = 1200;
  const Shape shape{3, 4, 5};
  for (DType dtype : kLowDTypes) {
    INFO(dtype);
    const Tensor x = random_tensor(shape, ++seed, dtype);
    const Tensor w = random_tensor({4}, ++seed, dtype, 0.5, 1.5);
    const Tensor b = random_tensor({4}, ++seed, dtype);
    const Tensor dy = random_tensor(shape, ++seed, dtype);
    const kernel::NormForward f = cpu::norm_kernels.group_norm(x, 2, w, b, 1e-5);
    const kernel::NormBackward g =
        cpu::norm_kernels.group_norm_backward(dy, x, f.mean, f.rstd, 2, w, true);
    const kernel::NormForward f_ref = cpu::norm_kernels.group_norm(f64(x), 2, f64(w), f64(b), 1e-5);
    const kernel::NormBackward ref = cpu::norm_kernels.group_norm_backward(
        f64(dy), f64(x), f_ref.mean, f_ref.rstd, 2, f64(w), true);
    expect_result(g.dx, dtype, shape);
    expect_close_to_float64(g, ref, dtype);
  }
}

// ---- batch_norm ---------------------------------------------------------------------------

TEST_CASE("batch_norm training matches the explicit formula in every dtype",
          "[nn_kernels][batch_norm]") {
  uint64_t seed = 1300;
  for (const Shape& shape : {Shape{3, 4, 2, 3}, Shape{5, 3}}) {
    const int64_t C = shape[1];
    for (DType dtype : kAllDTypes) {
      for (bool affine : {false, true}) {
        INFO("shape " << shape << " " << dtype << (affine ? " affine" : ""));
        const Tensor x = random_tensor(shape, ++seed, dtype, 1.0, 4.0);
        const Tensor w = affine ? random_tensor({C}, ++seed, dtype, 0.5, 1.5) : Tensor();
        const Tensor b = affine ? random_tensor({C}, ++seed, dtype) : Tensor();
        const kernel::NormForward f =
            cpu::norm_kernels.batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5);
        const NormReference ref = batch_norm_training_reference(x, w, b, 1e-5);
        const DType stat_dtype = dtype == kFloat64 ? kFloat64 : kFloat32;
        expect_result(f.out, dtype, shape);
        expect_result(f.mean, stat_dtype, {C});
        expect_result(f.rstd, stat_dtype, {C});
        expect_close(values(f.out), ref.out, forward_tolerance(dtype), "out");
        expect_close(values(f.mean), ref.mean, forward_tolerance(stat_dtype), "mean");
        expect_close(values(f.rstd), ref.rstd, forward_tolerance(stat_dtype), "rstd");
        const kernel::NormForward strided = cpu::norm_kernels.batch_norm(
            strided_copy(x), Tensor(), Tensor(), w, b, true, 0.1, 1e-5);
        CHECK(values(strided.out) == values(f.out));
      }
    }
  }
}

TEST_CASE("batch_norm updates the running statistics as torch does", "[nn_kernels][batch_norm]") {
  // running = (1 - momentum) * running + momentum * statistic, with the unbiased variance.
  const Shape shape{4, 3, 2, 2};
  const int64_t count = 4 * 2 * 2;
  for (DType dtype : {kFloat32, kFloat16, kFloat64}) {
    INFO(dtype);
    const Tensor x = random_tensor(shape, 1400, dtype, -2.0, 3.0);
    const Tensor rm_start = random_tensor({3}, 1401, kFloat32);
    const Tensor rv_start = random_tensor({3}, 1402, kFloat32, 0.5, 2.0);
    Tensor running_mean = rm_start.clone(), running_var = rv_start.clone();
    const double momentum = 0.1;
    cpu::norm_kernels.batch_norm(x, running_mean, running_var, Tensor(), Tensor(), true, momentum,
                                 1e-5);
    const NormReference ref = batch_norm_training_reference(x, Tensor(), Tensor(), 1e-5);
    std::vector<double> expected_mean, expected_var;
    for (size_t c = 0; c < 3; ++c) {
      const double biased_var = 1 / (ref.rstd[c] * ref.rstd[c]) - 1e-5;
      expected_mean.push_back((1 - momentum) * values(rm_start)[c] + momentum * ref.mean[c]);
      expected_var.push_back((1 - momentum) * values(rv_start)[c] +
                             momentum * biased_var * count / (count - 1));
    }
    CHECK(running_mean.dtype() == kFloat32);
    expect_close(values(running_mean), expected_mean, {1e-6, 1e-6}, "running_mean");
    expect_close(values(running_var), expected_var, {1e-6, 1e-6}, "running_var");
  }
  // Strided running statistics are updated in place through their view.
  Tensor base = random_tensor({3, 2}, 1403, kFloat32, 0.5, 1.0);
  Tensor strided_mean = base.select(1, 0), strided_var = base.select(1, 1);
  const std::vector<double> var_before = values(strided_var);
  const Tensor x = random_tensor({4, 3}, 1404, kFloat32);
  cpu::norm_kernels.batch_norm(x, strided_mean, strided_var, Tensor(), Tensor(), true, 0.5, 1e-5);
  CHECK(values(base.select(1, 1)) == values(strided_var));
  CHECK(values(strided_var) != var_before);
}

TEST_CASE("batch_norm eval mode normalises with the running statistics",
          "[nn_kernels][batch_norm]") {
  uint64_t seed = 1500;
  const Shape shape{2, 3, 4};
  for (DType dtype : kAllDTypes) {
    INFO(dtype);
    const Tensor x = random_tensor(shape, ++seed, dtype);
    const Tensor w = random_tensor({3}, ++seed, dtype, 0.5, 1.5);
    const Tensor b = random_tensor({3}, ++seed, dtype);
    Tensor running_mean = random_tensor({3}, ++seed, kFloat32);
    Tensor running_var = random_tensor({3}, ++seed, kFloat32, 0.5, 2.0);
    const std::vector<double> rm = values(running_mean), rv = values(running_var);
    const kernel::NormForward f =
        cpu::norm_kernels.batch_norm(x, running_mean, running_var, w, b, false, 0.1, 1e-5);
    expect_result(f.out, dtype, shape);
    expect_close(values(f.out), batch_norm_eval_reference(x, running_mean, running_var, w, b, 1e-5),
                 forward_tolerance(dtype), "out");
    CHECK(values(running_mean) == rm);  // eval leaves them alone
    CHECK(values(running_var) == rv);
    expect_close(values(f.mean), rm, {0, 0}, "mean (the running mean)");
  }
}

TEST_CASE("batch_norm backward matches finite differences", "[nn_kernels][batch_norm]") {
  uint64_t seed = 1600;
  for (const Shape& shape : {Shape{3, 4, 2, 3}, Shape{5, 2}}) {
    const int64_t C = shape[1];
    for (bool training : {true, false}) {
      for (bool affine : {false, true}) {
        INFO("shape " << shape << (training ? " training" : " eval") << (affine ? " affine" : ""));
        const Tensor x = random_tensor(shape, ++seed);
        const Tensor w = affine ? random_tensor({C}, ++seed, kFloat64, 0.5, 1.5) : Tensor();
        const Tensor b = affine ? random_tensor({C}, ++seed) : Tensor();
        const Tensor rm = training ? Tensor() : random_tensor({C}, ++seed, kFloat32);
        const Tensor rv = training ? Tensor() : random_tensor({C}, ++seed, kFloat32, 0.5, 2.0);
        const Tensor R = random_tensor(shape, ++seed);
        const auto forward = [&] {
          return cpu::norm_kernels.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5).out;
        };
        const kernel::NormForward f =
            cpu::norm_kernels.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5);
        const kernel::NormBackward g =
            cpu::norm_kernels.batch_norm_backward(R, x, f.mean, f.rstd, w, affine, training);
        check_norm_gradients(x, w, b, forward, R, g, affine);
      }
    }
  }
}

TEST_CASE("batch_norm backward in low precision matches float64", "[nn_kernels][batch_norm]") {
  uint64_t seed = 1700;
  const Shape shape{4, 3, 5};
  for (DType dtype : kLowDTypes) {
    for (bool training : {true, false}) {
      INFO(dtype << (training ? " training" : " eval"));
      const Tensor x = random_tensor(shape, ++seed, dtype);
      const Tensor w = random_tensor({3}, ++seed, dtype, 0.5, 1.5);
      const Tensor b = random_tensor({3}, ++seed, dtype);
      const Tensor rm = random_tensor({3}, ++seed, kFloat32);
      const Tensor rv = random_tensor({3}, ++seed, kFloat32, 0.5, 2.0);
      const Tensor dy = random_tensor(shape, ++seed, dtype);
      const kernel::NormForward f =
          cpu::norm_kernels.batch_norm(x, rm.clone(), rv.clone(), w, b, training, 0.1, 1e-5);
      const kernel::NormBackward g =
          cpu::norm_kernels.batch_norm_backward(dy, x, f.mean, f.rstd, w, true, training);
      const kernel::NormForward f_ref = cpu::norm_kernels.batch_norm(
          f64(x), rm.clone(), rv.clone(), f64(w), f64(b), training, 0.1, 1e-5);
      const kernel::NormBackward ref = cpu::norm_kernels.batch_norm_backward(
          f64(dy), f64(x), f_ref.mean, f_ref.rstd, f64(w), true, training);
      expect_result(g.dx, dtype, shape);
      expect_close_to_float64(g, ref, dtype);
    }
  }
}

TEST_CASE("batch_norm of many values per channel uses the threaded path correctly",
          "[nn_kernels][batch_norm]") {
  const Tensor x = random_tensor({8, 16, 32, 16}, 1800, kFloat32, -1.0, 2.0);
  const kernel::NormForward f =
      cpu::norm_kernels.batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  const NormReference ref = batch_norm_training_reference(x, Tensor(), Tensor(), 1e-5);
  expect_close(values(f.out), ref.out, {1e-4, 1e-4}, "out");
  expect_close(values(f.mean), ref.mean, {1e-6, 1e-5}, "mean");
}

// ---- errors -------------------------------------------------------------------------------

TEST_CASE("softmax and norm kernels reject bad arguments with messages", "[nn_kernels][errors]") {
  const Tensor x = random_tensor({2, 3}, 6000, kFloat32);
  CHECK_THROWS_WITH(
      cpu::norm_kernels.softmax(arange(6).reshape({2, 3}), 1),
      Contains("softmax: expected input of a floating dtype") && Contains("got int64"));
  CHECK_THROWS_WITH(cpu::norm_kernels.log_softmax(x, 2), Contains("log_softmax: dim out of range"));
  CHECK_THROWS_WITH(cpu::norm_kernels.softmax_backward(random_tensor({3, 2}, 6001, kFloat32), x, 1),
                    Contains("softmax_backward: expected grad_output (the output's shape) of "
                             "shape [2, 3], got shape [3, 2]"));
  CHECK_THROWS_WITH(cpu::norm_kernels.softmax_backward(x.to(kFloat16), x, 1),
                    Contains("expected grad_output of the output's dtype float32, got "
                             "grad_output of dtype float16"));

  const Tensor x3 = random_tensor({2, 3, 4}, 6002, kFloat32);
  CHECK_THROWS_WITH(cpu::norm_kernels.layer_norm(x3, {3}, Tensor(), Tensor(), 1e-5),
                    Contains("layer_norm: expected an input whose trailing dims are "
                             "normalized_shape [3], got input shape [2, 3, 4]"));
  CHECK_THROWS_WITH(
      cpu::norm_kernels.layer_norm(x3, {4}, random_tensor({5}, 1, kFloat32), Tensor(), 1e-5),
      Contains("layer_norm: expected weight (of normalized_shape) of shape [4], "
               "got shape [5]"));
  CHECK_THROWS_WITH(cpu::norm_kernels.layer_norm(x3, {}, Tensor(), Tensor(), 1e-5),
                    Contains("expected a non-empty normalized_shape"));

  const Tensor x4 = random_tensor({2, 6, 3}, 6003, kFloat32);
  CHECK_THROWS_WITH(cpu::norm_kernels.group_norm(x4, 4, Tensor(), Tensor(), 1e-5),
                    Contains("group_norm: expected num_groups to divide the channels C=6, got "
                             "num_groups=4"));
  CHECK_THROWS_WITH(
      cpu::norm_kernels.group_norm(random_tensor({6}, 2, kFloat32), 2, Tensor(), Tensor(), 1e-5),
      Contains("group_norm: expected an input [N, C, *] of at least 2 dims, got "
               "1-D (shape [6])"));
  CHECK_THROWS_WITH(
      cpu::norm_kernels.group_norm(x4, 3, random_tensor({3}, 3, kFloat32), Tensor(), 1e-5),
      Contains("expected weight ([C]) of shape [6], got shape [3]"));

  CHECK_THROWS_WITH(
      cpu::norm_kernels.batch_norm(x4, Tensor(), Tensor(), random_tensor({4}, 4, kFloat32),
                                   Tensor(), true, 0.1, 1e-5),
      Contains("batch_norm: expected weight ([C]) of shape [6], got shape [4]"));
  CHECK_THROWS_WITH(
      cpu::norm_kernels.batch_norm(x4, Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 1e-5),
      Contains("batch_norm: expected running_mean and running_var in eval mode"));
  CHECK_THROWS_WITH(cpu::norm_kernels.batch_norm(random_tensor({1, 3}, 5, kFloat32), Tensor(),
                                                 Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
                    Contains("expected more than 1 value per channel when training, got input "
                             "shape [1, 3]"));
  CHECK_THROWS_WITH(
      cpu::norm_kernels.batch_norm(x4, zeros({6}), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
      Contains("expected running_mean and running_var both given or both absent"));
  CHECK_THROWS_WITH(
      cpu::norm_kernels.batch_norm_backward(x, x4, zeros({6}), ones({6}), Tensor(), false, true),
      Contains("batch_norm_backward: expected grad_output (the input's shape) of "
               "shape [2, 6, 3], got shape [2, 3]"));
  CHECK_THROWS_WITH(
      cpu::norm_kernels.layer_norm_backward(x3, x3, zeros({5}), ones({6}), {4}, Tensor(), false),
      Contains("layer_norm_backward: expected mean with 6 elements (shape [6]), "
               "got shape [5]"));
}
