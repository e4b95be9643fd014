// Tests for halfgrad/cpu/nn_kernels.h. Every forward is checked against a float64 reference
// written here with plain loops, every backward against central finite differences in
// float64 (L = sum(out * R) for a fixed random R), and the float32/float16/bfloat16 kernels
// against the float64 kernels run on the same (rounded) values.
#include "halfgrad/cpu/nn_kernels.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

constexpr DType kAllDTypes[] = {kFloat64, kFloat32, kFloat16, kBFloat16};
constexpr DType kLowDTypes[] = {kFloat32, kFloat16, kBFloat16};

// ---- inputs -------------------------------------------------------------------------------

// Seeded uniform values on [low, high), as a float64 tensor rounded to dtype.
Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = kFloat64, double low = -1.0,
                     double high = 1.0) {
  Generator gen(seed);
  std::vector<double> values(size_t(shape_numel(shape)));
  random::fill_uniform(kFloat64, values.data(), int64_t(values.size()), low, high, gen);
  return tensor(values, shape, kFloat64).to(dtype);
}

// The same values as t, laid out with the last two dims swapped in memory (not contiguous).
Tensor strided_copy(const Tensor& t) {
  Shape swapped = t.sizes();
  std::swap(swapped[t.dim() - 2], swapped[t.dim() - 1]);
  Tensor base = empty(swapped, t.dtype());
  Tensor view = base.transpose(-1, -2);
  view.copy_(t);
  return view;
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
Tensor f64(const Tensor& t) { return t.to(kFloat64); }

// ---- comparisons --------------------------------------------------------------------------

struct Tolerance {
  double atol;
  double rtol;
};

// Forward kernels see the same rounded inputs as the reference: what is left is float
// arithmetic and the one rounding of the output.
Tolerance forward_tolerance(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return {1e-12, 1e-10};
    case kFloat32:
      return {1e-5, 1e-5};
    case kFloat16:
      return {1e-3, 2e-3};
    default:
      return {8e-3, 1.6e-2};
  }
}

Tolerance backward_tolerance(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return {1e-10, 1e-9};
    case kFloat32:
      return {2e-5, 1e-4};
    case kFloat16:
      return {2e-3, 4e-3};
    default:
      return {1.6e-2, 3.2e-2};
  }
}

constexpr Tolerance kFiniteDifferenceTolerance{1e-6, 1e-5};

void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                  Tolerance tol, const std::string& what) {
  REQUIRE(actual.size() == expected.size());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const bool same_nan = std::isnan(actual[i]) && std::isnan(expected[i]);
    if (!same_nan &&
        !(std::abs(actual[i] - expected[i]) <= tol.atol + tol.rtol * std::abs(expected[i]))) {
      if (mismatches++ == 0) first = i;
    }
  }
  INFO(what << ": " << mismatches << " of " << actual.size() << " elements differ (atol "
            << tol.atol << ", rtol " << tol.rtol << ")");
  if (mismatches > 0) {
    INFO("first at element " << first << ": got " << actual[first] << ", expected "
                             << expected[first]);
    CHECK(mismatches == 0);
  } else {
    CHECK(mismatches == 0);
  }
}

void expect_close(const Tensor& actual, const Tensor& expected, Tolerance tol,
                  const std::string& what) {
  REQUIRE(actual.defined());
  REQUIRE(expected.defined());
  CHECK(actual.sizes() == expected.sizes());
  expect_close(values(actual), values(expected), tol, what);
}

// A result tensor: contiguous, of the dtype and shape asked.
void expect_result(const Tensor& t, DType dtype, const Shape& shape) {
  REQUIRE(t.defined());
  CHECK(t.dtype() == dtype);
  CHECK(t.sizes() == shape);
  CHECK(t.is_contiguous());
}

// ---- finite differences -------------------------------------------------------------------

double weighted_sum(const Tensor& out, const std::vector<double>& weights) {
  const std::vector<double> v = values(out);
  REQUIRE(v.size() == weights.size());
  double total = 0;
  for (size_t i = 0; i < v.size(); ++i) total += v[i] * weights[i];
  return total;
}

// dL/d(input) by central differences, L = sum(forward() * R). `input` is a contiguous float64
// tensor that forward() reads; its values are perturbed one at a time and restored.
std::vector<double> numeric_gradient(const Tensor& input, const std::function<Tensor()>& forward,
                                     const Tensor& R) {
  constexpr double h = 1e-6;
  REQUIRE(input.dtype() == kFloat64);
  REQUIRE(input.is_contiguous());
  const std::vector<double> weights = values(R);
  double* p = input.data_ptr<double>();
  std::vector<double> gradient(size_t(input.numel()));
  for (int64_t i = 0; i < input.numel(); ++i) {
    const double saved = p[i];
    p[i] = saved + h;
    const double plus = weighted_sum(forward(), weights);
    p[i] = saved - h;
    const double minus = weighted_sum(forward(), weights);
    p[i] = saved;
    gradient[size_t(i)] = (plus - minus) / (2 * h);
  }
  return gradient;
}

void check_gradient(const std::string& name, const Tensor& input,
                    const std::function<Tensor()>& forward, const Tensor& R,
                    const Tensor& analytic) {
  REQUIRE(analytic.defined());
  CHECK(analytic.dtype() == kFloat64);
  CHECK(analytic.sizes() == input.sizes());
  expect_close(values(analytic), numeric_gradient(input, forward, R), kFiniteDifferenceTolerance,
               "d" + name + " vs finite differences");
}

// ---- references ---------------------------------------------------------------------------

int64_t product(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= s[d];
  return n;
}

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

std::vector<double> optional_values(const Tensor& t) {
  return t.defined() ? values(t) : std::vector<double>();
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

// Direct convolution: y[n, o, oh, ow] = bias[o] + sum over (c in o's group, ki, kj) of
// x[n, c, oh sH - pH + ki dH, ow sW - pW + kj dW] w[o, c - group start, ki, kj].
Tensor conv2d_reference(const Tensor& x, const Tensor& w, const Tensor& bias,
                        const cpu::Conv2dParams& p) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t O = w.size(0), Cg = w.size(1), kH = w.size(2), kW = w.size(3);
  const int64_t Og = O / p.groups;
  const int64_t Hout = (H + 2 * p.padding[0] - p.dilation[0] * (kH - 1) - 1) / p.stride[0] + 1;
  const int64_t Wout = (W + 2 * p.padding[1] - p.dilation[1] * (kW - 1) - 1) / p.stride[1] + 1;
  const std::vector<double> xv = values(x), wv = values(w), bv = optional_values(bias);
  std::vector<double> y(size_t(N * O * Hout * Wout));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < O; ++o) {
      const int64_t group = o / Og;
      for (int64_t oh = 0; oh < Hout; ++oh) {
        for (int64_t ow = 0; ow < Wout; ++ow) {
          double sum = bv.empty() ? 0.0 : bv[size_t(o)];
          for (int64_t c = 0; c < Cg; ++c) {
            for (int64_t ki = 0; ki < kH; ++ki) {
              for (int64_t kj = 0; kj < kW; ++kj) {
                const int64_t ih = oh * p.stride[0] - p.padding[0] + ki * p.dilation[0];
                const int64_t iw = ow * p.stride[1] - p.padding[1] + kj * p.dilation[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                sum += xv[size_t(((n * C + group * Cg + c) * H + ih) * W + iw)] *
                       wv[size_t(((o * Cg + c) * kH + ki) * kW + kj)];
              }
            }
          }
          y[size_t(((n * O + o) * Hout + oh) * Wout + ow)] = sum;
        }
      }
    }
  }
  return tensor(y, {N, O, Hout, Wout}, kFloat64);
}

struct PoolReference {
  Tensor out;
  std::vector<int64_t> indices;  // max pooling only
};

// Pooling by kernel offsets: window (oh, ow) reads x[oh sH - pH + ki, ow sW - pW + kj] for
// in-bounds positions; the first maximum wins; avg divides by kH kW with count_include_pad,
// else by the in-bounds count.
PoolReference pool_reference(const Tensor& x, const cpu::Pool2dParams& p, bool max) {
  const int64_t dims = x.dim(), H = x.size(-2), W = x.size(-1);
  const int64_t planes = x.numel() / (H * W);
  const int64_t sH = p.stride[0] ? p.stride[0] : p.kernel[0];
  const int64_t sW = p.stride[1] ? p.stride[1] : p.kernel[1];
  const int64_t Hout = (H + 2 * p.padding[0] - p.kernel[0]) / sH + 1;
  const int64_t Wout = (W + 2 * p.padding[1] - p.kernel[1]) / sW + 1;
  const std::vector<double> v = values(x);
  std::vector<double> out;
  std::vector<int64_t> indices;
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t oh = 0; oh < Hout; ++oh) {
      for (int64_t ow = 0; ow < Wout; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t best_index = -1, inside = 0;
        for (int64_t ki = 0; ki < p.kernel[0]; ++ki) {
          for (int64_t kj = 0; kj < p.kernel[1]; ++kj) {
            const int64_t ih = oh * sH - p.padding[0] + ki, iw = ow * sW - p.padding[1] + kj;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            const double value = v[size_t(plane * H * W + ih * W + iw)];
            ++inside;
            sum += value;
            if (value > best) best = value, best_index = ih * W + iw;
          }
        }
        if (max) {
          out.push_back(best);
          indices.push_back(best_index);
        } else {
          out.push_back(sum / double(p.count_include_pad ? p.kernel[0] * p.kernel[1] : inside));
        }
      }
    }
  }
  Shape out_shape = x.sizes();
  out_shape[size_t(dims - 2)] = Hout;
  out_shape[size_t(dims - 1)] = Wout;
  return {tensor(out, out_shape, kFloat64), indices};
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
        const Tensor y = log ? cpu::log_softmax(x, c.dim) : cpu::softmax(x, c.dim);
        expect_result(y, dtype, c.shape);
        expect_close(values(y), softmax_reference(x, c.dim, log), forward_tolerance(dtype),
                     "forward");
        CHECK(values(x) == values(before));  // inputs are never modified
        if (c.shape.size() >= 2) {
          const Tensor y_strided =
              log ? cpu::log_softmax(strided_copy(x), c.dim) : cpu::softmax(strided_copy(x), c.dim);
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
    const std::vector<double> y = values(cpu::softmax(x, 0));
    for (double v : y) CHECK(std::isfinite(v));
    const std::vector<double> ly = values(cpu::log_softmax(tensor({-big, 0.0, 1.0}, dtype), 0));
    for (double v : ly) CHECK(std::isfinite(v));
  }
  const std::vector<double> y = values(cpu::softmax(tensor({1000.0, 1001.0, 1002.0}), 0));
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
        return log ? cpu::log_softmax(x, c.dim) : cpu::softmax(x, c.dim);
      };
      const Tensor y = forward();
      const Tensor dx =
          log ? cpu::log_softmax_backward(R, y, c.dim) : cpu::softmax_backward(R, y, c.dim);
      check_gradient("x", x, forward, R, dx);
      // Strided dy and y give the same dx.
      if (c.shape.size() >= 2) {
        const Tensor dx_strided =
            log ? cpu::log_softmax_backward(strided_copy(R), strided_copy(y), c.dim)
                : cpu::softmax_backward(strided_copy(R), strided_copy(y), c.dim);
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
        const Tensor y = log ? cpu::log_softmax(x, c.dim) : cpu::softmax(x, c.dim);
        const auto backward = [&](const Tensor& g, const Tensor& out) {
          return log ? cpu::log_softmax_backward(g, out, c.dim)
                     : cpu::softmax_backward(g, out, c.dim);
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
    expect_close(values(cpu::softmax(x, dim)), softmax_reference(x, dim, false),
                 forward_tolerance(kFloat32), "softmax");
    expect_close(values(cpu::log_softmax(x, dim)), softmax_reference(x, dim, true),
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
        const cpu::NormForward f = cpu::layer_norm(x, normalized, w, b, 1e-5);
        const NormReference ref = layer_norm_reference(x, M, w, b, 1e-5);
        const DType stat_dtype = dtype == kFloat64 ? kFloat64 : kFloat32;
        expect_result(f.out, dtype, x_shape);
        expect_result(f.mean, stat_dtype, {x.numel() / M});
        expect_result(f.rstd, stat_dtype, {x.numel() / M});
        expect_close(values(f.out), ref.out, forward_tolerance(dtype), "out");
        expect_close(values(f.mean), ref.mean, forward_tolerance(stat_dtype), "mean");
        expect_close(values(f.rstd), ref.rstd, forward_tolerance(stat_dtype), "rstd");
        const cpu::NormForward strided = cpu::layer_norm(strided_copy(x), normalized, w, b, 1e-5);
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
      const auto forward = [&] { return cpu::layer_norm(x, normalized, w, b, 1e-5).out; };
      const cpu::NormForward f = cpu::layer_norm(x, normalized, w, b, 1e-5);
      const cpu::NormBackward g =
          cpu::layer_norm_backward(R, x, f.mean, f.rstd, normalized, w, affine);
      check_gradient("x", x, forward, R, g.dx);
      if (affine) {
        check_gradient("weight", w, forward, R, g.dweight);
        check_gradient("bias", b, forward, R, g.dbias);
      } else {
        CHECK_FALSE(g.dweight.defined());
        CHECK_FALSE(g.dbias.defined());
      }
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
    const cpu::NormForward f = cpu::layer_norm(x, normalized, w, b, 1e-5);
    const cpu::NormBackward g =
        cpu::layer_norm_backward(dy, x, f.mean, f.rstd, normalized, w, true);
    const cpu::NormForward f64_forward = cpu::layer_norm(f64(x), normalized, f64(w), f64(b), 1e-5);
    const cpu::NormBackward ref = cpu::layer_norm_backward(
        f64(dy), f64(x), f64_forward.mean, f64_forward.rstd, normalized, f64(w), true);
    expect_result(g.dx, dtype, x_shape);
    expect_result(g.dweight, dtype, normalized);
    expect_result(g.dbias, dtype, normalized);
    expect_close(g.dx, ref.dx, backward_tolerance(dtype), "dx");
    expect_close(g.dweight, ref.dweight, backward_tolerance(dtype), "dweight");
    expect_close(g.dbias, ref.dbias, backward_tolerance(dtype), "dbias");
  }
}

TEST_CASE("layer_norm takes float32 parameters with bfloat16 input", "[nn_kernels][layer_norm]") {
  const Tensor x = random_tensor({6, 8}, 800, kBFloat16);
  const Tensor w = random_tensor({8}, 801, kFloat32, 0.5, 1.5);
  const Tensor b = random_tensor({8}, 802, kFloat32);
  const cpu::NormForward f = cpu::layer_norm(x, {8}, w, b, 1e-5);
  expect_result(f.out, kBFloat16, {6, 8});
  expect_close(values(f.out), layer_norm_reference(x, 8, w, b, 1e-5).out,
               forward_tolerance(kBFloat16), "out");
  const Tensor dy = random_tensor({6, 8}, 803, kBFloat16);
  const cpu::NormBackward g = cpu::layer_norm_backward(dy, x, f.mean, f.rstd, {8}, w, true);
  CHECK(g.dx.dtype() == kBFloat16);
  CHECK(g.dweight.dtype() == kFloat32);
  CHECK(g.dbias.dtype() == kFloat32);
}

TEST_CASE("layer_norm of long rows uses the threaded path correctly", "[nn_kernels][layer_norm]") {
  const Tensor x = random_tensor({64, 1024}, 900, kFloat32);
  const Tensor w = random_tensor({1024}, 901, kFloat32);
  const Tensor b = random_tensor({1024}, 902, kFloat32);
  const Tensor dy = random_tensor({64, 1024}, 903, kFloat32);
  const cpu::NormForward f = cpu::layer_norm(x, {1024}, w, b, 1e-5);
  expect_close(values(f.out), layer_norm_reference(x, 1024, w, b, 1e-5).out,
               forward_tolerance(kFloat32), "out");
  const cpu::NormBackward g = cpu::layer_norm_backward(dy, x, f.mean, f.rstd, {1024}, w, true);
  const cpu::NormForward f_ref = cpu::layer_norm(f64(x), {1024}, f64(w), f64(b), 1e-5);
  const cpu::NormBackward ref =
      cpu::layer_norm_backward(f64(dy), f64(x), f_ref.mean, f_ref.rstd, {1024}, f64(w), true);
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
          const cpu::NormForward f = cpu::group_norm(x, groups, w, b, 1e-5);
          const NormReference ref = group_norm_reference(x, groups, w, b, 1e-5);
          const DType stat_dtype = dtype == kFloat64 ? kFloat64 : kFloat32;
          expect_result(f.out, dtype, shape);
          expect_result(f.mean, stat_dtype, {shape[0], groups});
          expect_result(f.rstd, stat_dtype, {shape[0], groups});
          expect_close(values(f.out), ref.out, forward_tolerance(dtype), "out");
          expect_close(values(f.mean), ref.mean, forward_tolerance(stat_dtype), "mean");
          expect_close(values(f.rstd), ref.rstd, forward_tolerance(stat_dtype), "rstd");
          CHECK(values(cpu::group_norm(strided_copy(x), groups, w, b, 1e-5).out) == values(f.out));
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
      const auto forward = [&] { return cpu::group_norm(x, groups, w, b, 1e-5).out; };
      const cpu::NormForward f = cpu::group_norm(x, groups, w, b, 1e-5);
      const cpu::NormBackward g = cpu::group_norm_backward(R, x, f.mean, f.rstd, groups, w, affine);
      check_gradient("x", x, forward, R, g.dx);
      if (affine) {
        check_gradient("weight", w, forward, R, g.dweight);
        check_gradient("bias", b, forward, R, g.dbias);
      } else {
        CHECK_FALSE(g.dweight.defined());
        CHECK_FALSE(g.dbias.defined());
      }
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
    const cpu::NormForward f = cpu::group_norm(x, 2, w, b, 1e-5);
    const cpu::NormBackward g = cpu::group_norm_backward(dy, x, f.mean, f.rstd, 2, w, true);
    const cpu::NormForward f_ref = cpu::group_norm(f64(x), 2, f64(w), f64(b), 1e-5);
    const cpu::NormBackward ref =
        cpu::group_norm_backward(f64(dy), f64(x), f_ref.mean, f_ref.rstd, 2, f64(w), true);
    expect_result(g.dx, dtype, shape);
    expect_close(g.dx, ref.dx, backward_tolerance(dtype), "dx");
    expect_close(g.dweight, ref.dweight, backward_tolerance(dtype), "dweight");
    expect_close(g.dbias, ref.dbias, backward_tolerance(dtype), "dbias");
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
        const cpu::NormForward f = cpu::batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5);
        const NormReference ref = batch_norm_training_reference(x, w, b, 1e-5);
        const DType stat_dtype = dtype == kFloat64 ? kFloat64 : kFloat32;
        expect_result(f.out, dtype, shape);
        expect_result(f.mean, stat_dtype, {C});
        expect_result(f.rstd, stat_dtype, {C});
        expect_close(values(f.out), ref.out, forward_tolerance(dtype), "out");
        expect_close(values(f.mean), ref.mean, forward_tolerance(stat_dtype), "mean");
        expect_close(values(f.rstd), ref.rstd, forward_tolerance(stat_dtype), "rstd");
        const cpu::NormForward strided =
            cpu::batch_norm(strided_copy(x), Tensor(), Tensor(), w, b, true, 0.1, 1e-5);
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
    cpu::batch_norm(x, running_mean, running_var, Tensor(), Tensor(), true, momentum, 1e-5);
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
  cpu::batch_norm(x, strided_mean, strided_var, Tensor(), Tensor(), true, 0.5, 1e-5);
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
    const cpu::NormForward f =
        cpu::batch_norm(x, running_mean, running_var, w, b, false, 0.1, 1e-5);
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
          return cpu::batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5).out;
        };
        const cpu::NormForward f = cpu::batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5);
        const cpu::NormBackward g =
            cpu::batch_norm_backward(R, x, f.mean, f.rstd, w, affine, training);
        check_gradient("x", x, forward, R, g.dx);
        if (affine) {
          check_gradient("weight", w, forward, R, g.dweight);
          check_gradient("bias", b, forward, R, g.dbias);
        } else {
          CHECK_FALSE(g.dweight.defined());
          CHECK_FALSE(g.dbias.defined());
        }
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
      const cpu::NormForward f =
          cpu::batch_norm(x, rm.clone(), rv.clone(), w, b, training, 0.1, 1e-5);
      const cpu::NormBackward g =
          cpu::batch_norm_backward(dy, x, f.mean, f.rstd, w, true, training);
      const cpu::NormForward f_ref =
          cpu::batch_norm(f64(x), rm.clone(), rv.clone(), f64(w), f64(b), training, 0.1, 1e-5);
      const cpu::NormBackward ref =
          cpu::batch_norm_backward(f64(dy), f64(x), f_ref.mean, f_ref.rstd, f64(w), true, training);
      expect_result(g.dx, dtype, shape);
      expect_close(g.dx, ref.dx, backward_tolerance(dtype), "dx");
      expect_close(g.dweight, ref.dweight, backward_tolerance(dtype), "dweight");
      expect_close(g.dbias, ref.dbias, backward_tolerance(dtype), "dbias");
    }
  }
}

TEST_CASE("batch_norm of many values per channel uses the threaded path correctly",
          "[nn_kernels][batch_norm]") {
  const Tensor x = random_tensor({8, 16, 32, 16}, 1800, kFloat32, -1.0, 2.0);
  const cpu::NormForward f =
      cpu::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  const NormReference ref = batch_norm_training_reference(x, Tensor(), Tensor(), 1e-5);
  expect_close(values(f.out), ref.out, {1e-4, 1e-4}, "out");
  expect_close(values(f.mean), ref.mean, {1e-6, 1e-5}, "mean");
}

// ---- conv2d -------------------------------------------------------------------------------

namespace {

struct ConvCase {
  const char* name;
  int64_t N, C, H, W, O, kH, kW;
  cpu::Conv2dParams params;
  bool bias;
};

const ConvCase kConvCases[] = {
    {"3x3", 2, 3, 6, 5, 4, 3, 3, {}, true},
    {"stride 2 padding 1", 2, 3, 7, 6, 4, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}, true},
    {"dilation 2", 2, 2, 7, 7, 3, 3, 3, {.dilation = {2, 2}}, true},
    {"groups 2", 2, 4, 5, 6, 6, 3, 3, {.padding = {1, 1}, .groups = 2}, true},
    {"depthwise", 2, 4, 6, 6, 4, 3, 3, {.stride = {2, 1}, .padding = {1, 1}, .groups = 4}, true},
    {"depthwise multiplier 2", 1, 3, 5, 5, 6, 2, 2, {.groups = 3}, false},
    {"non-square kernel",
     2,
     3,
     6,
     7,
     5,
     3,
     2,
     {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}},
     true},
    {"1x1 without bias", 3, 5, 4, 4, 2, 1, 1, {}, false},
    {"kernel as large as the padded input", 1, 2, 3, 3, 2, 5, 5, {.padding = {1, 1}}, true},
};

struct ConvInputs {
  Tensor x, w, b;
};

ConvInputs conv_inputs(const ConvCase& c, uint64_t seed, DType dtype) {
  return {random_tensor({c.N, c.C, c.H, c.W}, seed, dtype),
          random_tensor({c.O, c.C / c.params.groups, c.kH, c.kW}, seed + 1, dtype),
          c.bias ? random_tensor({c.O}, seed + 2, dtype) : Tensor()};
}

}  // namespace

TEST_CASE("conv2d matches direct convolution loops in every dtype", "[nn_kernels][conv2d]") {
  uint64_t seed = 2000;
  for (const ConvCase& c : kConvCases) {
    for (DType dtype : kAllDTypes) {
      INFO(c.name << " " << dtype);
      const ConvInputs in = conv_inputs(c, seed += 3, dtype);
      const Tensor x_before = in.x.clone();
      const Tensor y = cpu::conv2d(in.x, in.w, in.b, c.params);
      const Tensor expected = conv2d_reference(in.x, in.w, in.b, c.params);
      expect_result(y, dtype, expected.sizes());
      expect_close(y, expected, forward_tolerance(dtype), "conv2d");
      CHECK(values(in.x) == values(x_before));
      // Strided input and weight give the same result.
      CHECK(values(cpu::conv2d(strided_copy(in.x), strided_copy(in.w), in.b, c.params)) ==
            values(y));
    }
  }
}

TEST_CASE("conv2d backward matches finite differences", "[nn_kernels][conv2d]") {
  uint64_t seed = 2100;
  for (const ConvCase& c : kConvCases) {
    INFO(c.name);
    const ConvInputs in = conv_inputs(c, seed += 4, kFloat64);
    const auto forward = [&] { return cpu::conv2d(in.x, in.w, in.b, c.params); };
    const Tensor R = random_tensor(forward().sizes(), seed + 3);
    const cpu::Conv2dBackward g =
        cpu::conv2d_backward(R, in.x, in.w, c.bias, c.params, {true, true, true});
    check_gradient("x", in.x, forward, R, g.dx);
    check_gradient("weight", in.w, forward, R, g.dweight);
    if (c.bias) {
      check_gradient("bias", in.b, forward, R, g.dbias);
    } else {
      CHECK_FALSE(g.dbias.defined());
    }
    // Only what is asked for is computed.
    const cpu::Conv2dBackward only_weight =
        cpu::conv2d_backward(R, in.x, in.w, c.bias, c.params, {false, true, false});
    CHECK_FALSE(only_weight.dx.defined());
    CHECK_FALSE(only_weight.dbias.defined());
    CHECK(values(only_weight.dweight) == values(g.dweight));
  }
}

TEST_CASE("conv2d backward in low precision matches float64", "[nn_kernels][conv2d]") {
  uint64_t seed = 2200;
  for (const ConvCase& c : kConvCases) {
    for (DType dtype : kLowDTypes) {
      INFO(c.name << " " << dtype);
      const ConvInputs in = conv_inputs(c, seed += 4, dtype);
      const Tensor y = cpu::conv2d(in.x, in.w, in.b, c.params);
      const Tensor dy = random_tensor(y.sizes(), seed + 3, dtype);
      const cpu::Conv2dBackward g =
          cpu::conv2d_backward(dy, in.x, in.w, c.bias, c.params, {true, true, true});
      const cpu::Conv2dBackward ref =
          cpu::conv2d_backward(f64(dy), f64(in.x), f64(in.w), c.bias, c.params, {true, true, true});
      expect_result(g.dx, dtype, in.x.sizes());
      expect_result(g.dweight, dtype, in.w.sizes());
      expect_close(g.dx, ref.dx, backward_tolerance(dtype), "dx");
      expect_close(g.dweight, ref.dweight, backward_tolerance(dtype), "dweight");
      if (c.bias) expect_close(g.dbias, ref.dbias, backward_tolerance(dtype), "dbias");
    }
  }
}

TEST_CASE("conv2d of larger images uses the threaded paths correctly", "[nn_kernels][conv2d]") {
  // Several images (threads over images) and one image (threads inside the matrix product).
  for (int64_t N : {4, 1}) {
    INFO("N " << N);
    const cpu::Conv2dParams p{.padding = {1, 1}};
    const Tensor x = random_tensor({N, 8, 24, 24}, 2300 + uint64_t(N), kFloat32);
    const Tensor w = random_tensor({16, 8, 3, 3}, 2310, kFloat32);
    const Tensor b = random_tensor({16}, 2311, kFloat32);
    const Tensor y = cpu::conv2d(x, w, b, p);
    expect_close(y, conv2d_reference(x, w, b, p), {1e-5, 1e-4}, "y");
    const Tensor dy = random_tensor(y.sizes(), 2312, kFloat32);
    const cpu::Conv2dBackward g = cpu::conv2d_backward(dy, x, w, true, p, {true, true, true});
    const cpu::Conv2dBackward ref =
        cpu::conv2d_backward(f64(dy), f64(x), f64(w), true, p, {true, true, true});
    expect_close(g.dx, ref.dx, {1e-4, 1e-4}, "dx");
    expect_close(g.dweight, ref.dweight, {1e-3, 1e-4}, "dweight");
    expect_close(g.dbias, ref.dbias, {1e-3, 1e-4}, "dbias");
  }
}

// ---- pooling ------------------------------------------------------------------------------

namespace {

struct PoolCase {
  const char* name;
  Shape shape;
  cpu::Pool2dParams params;
};

const PoolCase kPoolCases[] = {
    {"kernel 2 default stride", {2, 3, 6, 6}, {.kernel = {2, 2}}},
    {"overlapping with padding",
     {2, 3, 7, 6},
     {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
    {"non-square", {2, 2, 5, 7}, {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}}},
    {"padding without counting it",
     {1, 2, 6, 5},
     {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false}},
    {"3-D input", {3, 5, 5}, {.kernel = {3, 2}, .stride = {1, 1}, .padding = {1, 0}}},
};

}  // namespace

TEST_CASE("max_pool2d and avg_pool2d match reference loops in every dtype", "[nn_kernels][pool]") {
  uint64_t seed = 3000;
  for (const PoolCase& c : kPoolCases) {
    for (DType dtype : kAllDTypes) {
      INFO(c.name << " " << dtype);
      const Tensor x = random_tensor(c.shape, ++seed, dtype);
      const cpu::MaxPoolForward m = cpu::max_pool2d(x, c.params);
      const PoolReference max_ref = pool_reference(x, c.params, true);
      expect_result(m.out, dtype, max_ref.out.sizes());
      expect_result(m.indices, kInt64, max_ref.out.sizes());
      expect_close(m.out, max_ref.out, {0, 0}, "max");  // exact: a max rounds nothing
      CHECK(m.indices.to_vector<int64_t>() == max_ref.indices);
      const Tensor a = cpu::avg_pool2d(x, c.params);
      const PoolReference avg_ref = pool_reference(x, c.params, false);
      expect_result(a, dtype, avg_ref.out.sizes());
      expect_close(a, avg_ref.out, forward_tolerance(dtype), "avg");
      CHECK(values(cpu::max_pool2d(strided_copy(x), c.params).out) == values(m.out));
      CHECK(values(cpu::avg_pool2d(strided_copy(x), c.params)) == values(a));
    }
  }
}

TEST_CASE("max_pool2d lets a NaN win its window", "[nn_kernels][pool]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = tensor({1.0, nan, 3.0, 2.0}, {1, 1, 2, 2}, kFloat32);
  const cpu::MaxPoolForward m = cpu::max_pool2d(x, {.kernel = {2, 2}});
  CHECK(std::isnan(m.out.item<double>()));
  CHECK(m.indices.item<int64_t>() == 1);
}

TEST_CASE("pooling backward matches finite differences", "[nn_kernels][pool]") {
  uint64_t seed = 3100;
  for (const PoolCase& c : kPoolCases) {
    INFO(c.name);
    // Continuous random values: no ties, so the max is differentiable at x.
    const Tensor x = random_tensor(c.shape, ++seed);
    const cpu::MaxPoolForward m = cpu::max_pool2d(x, c.params);
    const Tensor R = random_tensor(m.out.sizes(), ++seed);
    check_gradient(
        "x (max)", x, [&] { return cpu::max_pool2d(x, c.params).out; }, R,
        cpu::max_pool2d_backward(R, m.indices, x.sizes()));
    check_gradient(
        "x (avg)", x, [&] { return cpu::avg_pool2d(x, c.params); }, R,
        cpu::avg_pool2d_backward(R, x.sizes(), c.params));
  }
}

TEST_CASE("pooling backward in low precision matches float64", "[nn_kernels][pool]") {
  uint64_t seed = 3200;
  for (const PoolCase& c : kPoolCases) {
    for (DType dtype : kLowDTypes) {
      INFO(c.name << " " << dtype);
      const Tensor x = random_tensor(c.shape, ++seed, dtype);
      const cpu::MaxPoolForward m = cpu::max_pool2d(x, c.params);
      const Tensor dy = random_tensor(m.out.sizes(), ++seed, dtype);
      const Tensor dx_max = cpu::max_pool2d_backward(dy, m.indices, x.sizes());
      expect_result(dx_max, dtype, x.sizes());
      expect_close(dx_max, cpu::max_pool2d_backward(f64(dy), m.indices, x.sizes()),
                   backward_tolerance(dtype), "dx (max)");
      const Tensor dx_avg = cpu::avg_pool2d_backward(dy, x.sizes(), c.params);
      expect_result(dx_avg, dtype, x.sizes());
      expect_close(dx_avg, cpu::avg_pool2d_backward(f64(dy), x.sizes(), c.params),
                   backward_tolerance(dtype), "dx (avg)");
    }
  }
}

// ---- embedding ----------------------------------------------------------------------------

namespace {

Tensor gather_rows(const Tensor& weight, const std::vector<int64_t>& rows, const Shape& shape) {
  const int64_t D = weight.size(1);
  const std::vector<double> w = values(weight);
  std::vector<double> out;
  for (int64_t row : rows) {
    out.insert(out.end(), w.begin() + row * D, w.begin() + (row + 1) * D);
  }
  Shape out_shape = shape;
  out_shape.push_back(D);
  return tensor(out, out_shape, kFloat64);
}

std::vector<double> embedding_backward_reference(const Tensor& dy, const std::vector<int64_t>& rows,
                                                 int64_t num_embeddings, int64_t padding_idx) {
  const int64_t D = dy.size(-1);
  const std::vector<double> g = values(dy);
  std::vector<double> dw(size_t(num_embeddings * D), 0.0);
  for (size_t t = 0; t < rows.size(); ++t) {
    if (rows[t] == padding_idx) continue;
    for (int64_t j = 0; j < D; ++j) dw[size_t(rows[t] * D + j)] += g[t * size_t(D) + size_t(j)];
  }
  return dw;
}

}  // namespace

TEST_CASE("embedding_backward adds rows of dy into the rows they came from",
          "[nn_kernels][embedding]") {
  const int64_t num_embeddings = 10;
  // Repeats (rows 3 and 7 several times) so additions pile up; row 2 is the padding row.
  const std::vector<int64_t> rows{3, 7, 2, 3, 0, 9, 7, 3, 2, 5, 7, 1};
  const Shape index_shape{3, 4};
  const Tensor indices = tensor(rows, index_shape);
  for (int64_t D : {5, 70}) {
    for (int64_t padding_idx : {-1, 2}) {
      for (DType dtype : kAllDTypes) {
        INFO("D " << D << " padding_idx " << padding_idx << " " << dtype);
        const Tensor dy = random_tensor({3, 4, D}, 4000 + uint64_t(D), dtype);
        const Tensor dw = cpu::embedding_backward(dy, indices, num_embeddings, padding_idx);
        expect_result(dw, dtype, {num_embeddings, D});
        expect_close(values(dw),
                     embedding_backward_reference(dy, rows, num_embeddings, padding_idx),
                     forward_tolerance(dtype), "dweight");
        if (padding_idx >= 0) {
          for (int64_t j = 0; j < D; ++j) CHECK(values(dw)[size_t(padding_idx * D + j)] == 0.0);
        }
        CHECK(values(cpu::embedding_backward(dy, indices.to(kInt32), num_embeddings,
                                             padding_idx)) == values(dw));
      }
    }
  }
}

TEST_CASE("embedding_backward matches finite differences of the gather",
          "[nn_kernels][embedding]") {
  const std::vector<int64_t> rows{4, 1, 4, 0, 2, 4};
  const Tensor weight = random_tensor({5, 3}, 4100);
  const Tensor R = random_tensor({2, 3, 3}, 4101);
  check_gradient(
      "weight", weight,
      [&] {
        return gather_rows(weight, rows, {2, 3});
      },
      R, cpu::embedding_backward(R, tensor(rows, {2, 3}), 5, -1));
}

// ---- dropout ------------------------------------------------------------------------------

TEST_CASE("dropout is reproducible by seed and keeps 1 - p of the elements",
          "[nn_kernels][dropout]") {
  const int64_t n = 200000;
  const Tensor x = random_tensor({n / 100, 100}, 5000, kFloat32);
  for (double p : {0.1, 0.5, 0.8}) {
    INFO("p " << p);
    Generator gen(42), same(42), other(43);
    const cpu::DropoutForward d = cpu::dropout(x, p, gen);
    expect_result(d.out, kFloat32, x.sizes());
    expect_result(d.mask, kFloat32, x.sizes());
    CHECK(values(cpu::dropout(x, p, same).mask) == values(d.mask));
    CHECK(values(cpu::dropout(x, p, other).mask) != values(d.mask));
    CHECK(values(cpu::dropout(x, p, gen).mask) != values(d.mask));  // the stream moved on

    const std::vector<double> mask = values(d.mask), xv = values(x), out = values(d.out);
    const double scale = double(float(1.0 / (1.0 - p)));
    int64_t kept = 0;
    double mask_sum = 0;
    bool values_ok = true, out_ok = true;
    for (size_t i = 0; i < mask.size(); ++i) {
      kept += mask[i] != 0.0;
      mask_sum += mask[i];
      values_ok = values_ok && (mask[i] == 0.0 || mask[i] == scale);
      out_ok = out_ok && out[i] == double(float(xv[i]) * float(mask[i]));
    }
    CHECK(values_ok);
    CHECK(out_ok);
    // Six standard deviations of a binomial fraction and of the mask's mean.
    const double kept_fraction = double(kept) / double(n);
    CHECK(std::abs(kept_fraction - (1 - p)) <= 6 * std::sqrt(p * (1 - p) / double(n)));
    CHECK(std::abs(mask_sum / double(n) - 1.0) <= 6 * std::sqrt(p / (1 - p) / double(n)));
  }
}

TEST_CASE("dropout draws the same mask pattern for every dtype", "[nn_kernels][dropout]") {
  const Tensor x32 = random_tensor({50, 40}, 5100, kFloat32, 0.5, 1.5);
  Generator reference_gen(7);
  const std::vector<double> reference = values(cpu::dropout(x32, 0.3, reference_gen).mask);
  for (DType dtype : kAllDTypes) {
    INFO(dtype);
    Generator gen(7);
    const Tensor x = x32.to(dtype);
    const cpu::DropoutForward d = cpu::dropout(strided_copy(x), 0.3, gen);
    expect_result(d.mask, dtype, x.sizes());
    const std::vector<double> mask = values(d.mask), out = values(d.out), xv = values(x);
    const double scale = values(tensor({1.0 / 0.7}, dtype))[0];
    bool same_pattern = true, out_ok = true;
    for (size_t i = 0; i < mask.size(); ++i) {
      same_pattern = same_pattern && ((mask[i] != 0) == (reference[i] != 0));
      same_pattern = same_pattern && (mask[i] == 0 || mask[i] == scale);
      const double expected = values(tensor({xv[i] * mask[i]}, dtype))[0];
      out_ok = out_ok && (dtype == kFloat32 || dtype == kFloat64
                              ? std::abs(out[i] - expected) <= 1e-6 * std::abs(expected)
                              : out[i] == expected);
    }
    CHECK(same_pattern);
    CHECK(out_ok);
  }
}

TEST_CASE("dropout with p 0 is the identity and with p 1 zeros", "[nn_kernels][dropout]") {
  for (DType dtype : kAllDTypes) {
    INFO(dtype);
    const Tensor x = random_tensor({7, 9}, 5200, dtype);
    Generator gen(3);
    const cpu::DropoutForward keep_all = cpu::dropout(x, 0.0, gen);
    CHECK(values(keep_all.out) == values(x));
    CHECK(values(keep_all.mask) == std::vector<double>(63, 1.0));
    CHECK_FALSE(keep_all.out.shares_storage(x));
    const cpu::DropoutForward drop_all = cpu::dropout(x, 1.0, gen);
    CHECK(values(drop_all.out) == std::vector<double>(63, 0.0));
    CHECK(values(drop_all.mask) == std::vector<double>(63, 0.0));
    CHECK(gen.offset() == 0);  // neither drew
  }
}

// ---- errors -------------------------------------------------------------------------------

TEST_CASE("softmax and norm kernels reject bad arguments with messages", "[nn_kernels][errors]") {
  const Tensor x = random_tensor({2, 3}, 6000, kFloat32);
  CHECK_THROWS_WITH(
      cpu::softmax(arange(6).reshape({2, 3}), 1),
      Contains("softmax: expected input of a floating dtype") && Contains("got int64"));
  CHECK_THROWS_WITH(cpu::log_softmax(x, 2), Contains("log_softmax: dim out of range"));
  CHECK_THROWS_WITH(cpu::softmax_backward(random_tensor({3, 2}, 6001, kFloat32), x, 1),
                    Contains("softmax_backward: expected grad_output (the output's shape) of "
                             "shape [2, 3], got shape [3, 2]"));
  CHECK_THROWS_WITH(cpu::softmax_backward(x.to(kFloat16), x, 1),
                    Contains("expected grad_output of the output's dtype float32, got "
                             "grad_output of dtype float16"));

  const Tensor x3 = random_tensor({2, 3, 4}, 6002, kFloat32);
  CHECK_THROWS_WITH(cpu::layer_norm(x3, {3}, Tensor(), Tensor(), 1e-5),
                    Contains("layer_norm: expected an input whose trailing dims are "
                             "normalized_shape [3], got input shape [2, 3, 4]"));
  CHECK_THROWS_WITH(cpu::layer_norm(x3, {4}, random_tensor({5}, 1, kFloat32), Tensor(), 1e-5),
                    Contains("layer_norm: expected weight (of normalized_shape) of shape [4], "
                             "got shape [5]"));
  CHECK_THROWS_WITH(cpu::layer_norm(x3, {}, Tensor(), Tensor(), 1e-5),
                    Contains("expected a non-empty normalized_shape"));

  const Tensor x4 = random_tensor({2, 6, 3}, 6003, kFloat32);
  CHECK_THROWS_WITH(cpu::group_norm(x4, 4, Tensor(), Tensor(), 1e-5),
                    Contains("group_norm: expected num_groups to divide the channels C=6, got "
                             "num_groups=4"));
  CHECK_THROWS_WITH(cpu::group_norm(random_tensor({6}, 2, kFloat32), 2, Tensor(), Tensor(), 1e-5),
                    Contains("group_norm: expected an input [N, C, *] of at least 2 dims, got "
                             "1-D (shape [6])"));
  CHECK_THROWS_WITH(cpu::group_norm(x4, 3, random_tensor({3}, 3, kFloat32), Tensor(), 1e-5),
                    Contains("expected weight ([C]) of shape [6], got shape [3]"));

  CHECK_THROWS_WITH(cpu::batch_norm(x4, Tensor(), Tensor(), random_tensor({4}, 4, kFloat32),
                                    Tensor(), true, 0.1, 1e-5),
                    Contains("batch_norm: expected weight ([C]) of shape [6], got shape [4]"));
  CHECK_THROWS_WITH(cpu::batch_norm(x4, Tensor(), Tensor(), Tensor(), Tensor(), false, 0.1, 1e-5),
                    Contains("batch_norm: expected running_mean and running_var in eval mode"));
  CHECK_THROWS_WITH(cpu::batch_norm(random_tensor({1, 3}, 5, kFloat32), Tensor(), Tensor(),
                                    Tensor(), Tensor(), true, 0.1, 1e-5),
                    Contains("expected more than 1 value per channel when training, got input "
                             "shape [1, 3]"));
  CHECK_THROWS_WITH(cpu::batch_norm(x4, zeros({6}), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5),
                    Contains("expected running_mean and running_var both given or both absent"));
  CHECK_THROWS_WITH(cpu::batch_norm_backward(x, x4, zeros({6}), ones({6}), Tensor(), false, true),
                    Contains("batch_norm_backward: expected grad_output (the input's shape) of "
                             "shape [2, 6, 3], got shape [2, 3]"));
  CHECK_THROWS_WITH(cpu::layer_norm_backward(x3, x3, zeros({5}), ones({6}), {4}, Tensor(), false),
                    Contains("layer_norm_backward: expected mean with 6 elements (shape [6]), "
                             "got shape [5]"));
}

TEST_CASE("conv2d rejects bad arguments with messages", "[nn_kernels][errors]") {
  const Tensor x = random_tensor({2, 3, 5, 5}, 6100, kFloat32);
  const Tensor w = random_tensor({4, 3, 3, 3}, 6101, kFloat32);
  CHECK_THROWS_WITH(
      cpu::conv2d(random_tensor({3, 5, 5}, 1, kFloat32), w, Tensor(), {}),
      Contains("conv2d: expected a 4-D input [N, C, H, W], got 3-D (shape [3, 5, 5])"));
  CHECK_THROWS_WITH(cpu::conv2d(x, random_tensor({4, 3, 3}, 2, kFloat32), Tensor(), {}),
                    Contains("conv2d: expected a 4-D weight [O, C/groups, kH, kW], got 3-D"));
  CHECK_THROWS_WITH(cpu::conv2d(x, random_tensor({4, 2, 3, 3}, 3, kFloat32), Tensor(), {}),
                    Contains("conv2d: expected weight [O, C/groups=3, kH, kW] for an input of C=3 "
                             "channels and groups=1, got weight shape [4, 2, 3, 3]"));
  CHECK_THROWS_WITH(cpu::conv2d(x, w, Tensor(), {.groups = 2}),
                    Contains("conv2d: expected groups to divide the input channels C=3, got "
                             "groups=2"));
  CHECK_THROWS_WITH(cpu::conv2d(random_tensor({1, 4, 5, 5}, 4, kFloat32),
                                random_tensor({3, 2, 3, 3}, 5, kFloat32), Tensor(), {.groups = 2}),
                    Contains("expected groups to divide the output channels O=3"));
  CHECK_THROWS_WITH(cpu::conv2d(x, random_tensor({4, 3, 6, 3}, 6, kFloat32), Tensor(), {}),
                    Contains("conv2d: expected a kernel no larger than the padded input 5x5, got "
                             "a kernel spanning 6x3"));
  CHECK_THROWS_WITH(cpu::conv2d(x, w, Tensor(), {.dilation = {3, 3}}),
                    Contains("got a kernel spanning 7x7 (kernel 3x3, dilation 3x3)"));
  CHECK_THROWS_WITH(
      cpu::conv2d(x, w.to(kFloat16), Tensor(), {}),
      Contains("conv2d: expected weight of dtype float32 (the input's), got float16"));
  CHECK_THROWS_WITH(cpu::conv2d(x, w, zeros({3}), {}),
                    Contains("conv2d: expected bias ([O]) of shape [4], got shape [3]"));
  CHECK_THROWS_WITH(cpu::conv2d(x, w, Tensor(), {.stride = {0, 1}}),
                    Contains("expected strides > 0, got stride (0, 1)"));
  CHECK_THROWS_WITH(cpu::conv2d_backward(zeros({2, 4, 2, 2}), x, w, false, {}, {true, true, true}),
                    Contains("conv2d_backward: expected grad_output [N, O, Hout, Wout] of shape "
                             "[2, 4, 3, 3], got shape [2, 4, 2, 2]"));
}

TEST_CASE("pooling embedding and dropout reject bad arguments with messages",
          "[nn_kernels][errors]") {
  const Tensor x = random_tensor({1, 2, 3, 3}, 6200, kFloat32);
  CHECK_THROWS_WITH(cpu::max_pool2d(x, {.kernel = {4, 4}}),
                    Contains("max_pool2d: expected a kernel no larger than the padded input 3x3, "
                             "got kernel 4x4"));
  CHECK_THROWS_WITH(cpu::avg_pool2d(x, {.kernel = {3, 3}, .padding = {2, 2}}),
                    Contains("avg_pool2d: expected a padding between 0 and half the kernel 3x3, "
                             "got padding 2x2"));
  CHECK_THROWS_WITH(cpu::max_pool2d(random_tensor({3, 3}, 1, kFloat32), {.kernel = {2, 2}}),
                    Contains("max_pool2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got "
                             "2-D (shape [3, 3])"));
  CHECK_THROWS_WITH(cpu::avg_pool2d(x, {.kernel = {0, 2}}),
                    Contains("expected a kernel > 0, got kernel 0x2"));
  const cpu::MaxPoolForward m = cpu::max_pool2d(x, {.kernel = {2, 2}});
  CHECK_THROWS_WITH(cpu::max_pool2d_backward(m.out, full({1, 2, 1, 1}, int64_t(9)), x.sizes()),
                    Contains("max_pool2d_backward: expected indices in [0, 9) (flat positions in "
                             "a 3x3 plane), got 9 at element 0"));
  CHECK_THROWS_WITH(cpu::max_pool2d_backward(m.out, m.indices.to(kFloat32), x.sizes()),
                    Contains("expected int64 indices (from max_pool2d), got float32"));
  CHECK_THROWS_WITH(cpu::avg_pool2d_backward(zeros({1, 2, 2, 2}), x.sizes(), {.kernel = {2, 2}}),
                    Contains("avg_pool2d_backward: expected grad_output (avg_pool2d's output "
                             "shape) of shape [1, 2, 1, 1], got shape [1, 2, 2, 2]"));

  const Tensor indices = tensor(std::vector<int64_t>{1, 10, 3});
  const Tensor dy = random_tensor({3, 4}, 6201, kFloat32);
  CHECK_THROWS_WITH(cpu::embedding_backward(dy, indices, 10, -1),
                    Contains("embedding_backward: expected indices in [0, 10) (num_embeddings), "
                             "got 10 at element 1"));
  CHECK_THROWS_WITH(cpu::embedding_backward(dy, indices.to(kFloat32), 10, -1),
                    Contains("expected int64 or int32 indices, got float32"));
  CHECK_THROWS_WITH(cpu::embedding_backward(random_tensor({2, 4}, 2, kFloat32), indices, 12, -1),
                    Contains("expected grad_output of shape [*indices' shape, D] for indices of "
                             "shape [3], got shape [2, 4]"));
  CHECK_THROWS_WITH(cpu::embedding_backward(dy, indices, 12, 12),
                    Contains("expected padding_idx in [-1, 12) (-1 for none), got 12"));

  Generator gen(1);
  for (double p : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    CHECK_THROWS_WITH(cpu::dropout(x, p, gen),
                      Contains("dropout: expected a probability p in [0, 1], got p="));
  }
  CHECK_THROWS_WITH(cpu::dropout(arange(4), 0.5, gen),
                    Contains("dropout: expected input of a floating dtype"));
}
