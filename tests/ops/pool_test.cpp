// Tests for ops/pool.h: max_pool2d and avg_pool2d in float32, float16 and bfloat16 against a
// float64 reference written here with plain loops over the same (already rounded) inputs, and
// max_pool2d's gradient.
//
// Dims: N batch, C channels, H/W height/width.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "ops/nn_test_util.h"

using namespace hg;
using namespace hg::testing;

namespace {

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

}  // namespace

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
        expect_result(avg_pool2d(x, c.kernel, c.stride, c.padding, false, c.count_include_pad),
                      dtype, out_shape, avg_expected, "avg_pool2d");
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

// ---- grid_sample ----------------------------------------------------------------------------

namespace {

// torch's grid_sampler_2d for one point, written out in float64 (aten/native/GridSampler.h's
// formulas): x, y in [-1, 1] of input [C, H, W] (row-major values), channel c.
struct GridReference {
  const std::vector<double>& v;
  int64_t C, H, W;
  std::string padding;
  bool align_corners;

  double unnormalize(double coordinate, int64_t size) const {
    return align_corners ? (coordinate + 1) / 2 * double(size - 1)
                         : ((coordinate + 1) * double(size) - 1) / 2;
  }
  static double reflect(double x, double twice_low, double twice_high) {
    if (twice_low == twice_high) return 0;
    const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
    x = std::fabs(x - low);
    const double extra = std::fmod(x, span);
    const int64_t flips = int64_t(std::floor(x / span));
    return flips % 2 == 0 ? extra + low : span - extra + low;
  }
  double pad(double x, int64_t size) const {
    const double last = double(size - 1);
    if (padding == "border") return std::clamp(x, 0.0, last);
    if (padding == "reflection") {
      const double r = align_corners ? reflect(x, 0, 2 * last) : reflect(x, -1, 2.0 * size - 1);
      return std::clamp(r, 0.0, last);
    }
    return x;
  }
  double at(int64_t c, double y, double x) const {
    if (x < 0 || x > double(W - 1) || y < 0 || y > double(H - 1)) return 0.0;
    return v[size_t((c * H + int64_t(y)) * W + int64_t(x))];
  }
  static double cubic(double t, int k) {  // the weight of the tap at offset k - 1
    const double A = -0.75;
    const auto near = [&](double d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };
    const auto far = [&](double d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };
    return k == 0 ? far(t + 1) : k == 1 ? near(t) : k == 2 ? near(1 - t) : far(2 - t);
  }
  double sample(int64_t c, double gx, double gy, const std::string& mode) const {
    double ix = unnormalize(gx, W), iy = unnormalize(gy, H);
    if (mode == "bicubic") {
      const double x0 = std::floor(ix), y0 = std::floor(iy);
      double total = 0;
      for (int j = 0; j < 4; ++j) {
        for (int i = 0; i < 4; ++i) {
          total +=
              cubic(ix - x0, i) * cubic(iy - y0, j) * at(c, pad(y0 - 1 + j, H), pad(x0 - 1 + i, W));
        }
      }
      return total;
    }
    ix = pad(ix, W);
    iy = pad(iy, H);
    if (mode == "nearest") return at(c, std::nearbyint(iy), std::nearbyint(ix));
    const double x0 = std::floor(ix), y0 = std::floor(iy), tx = ix - x0, ty = iy - y0;
    return (1 - tx) * (1 - ty) * at(c, y0, x0) + tx * (1 - ty) * at(c, y0, x0 + 1) +
           (1 - tx) * ty * at(c, y0 + 1, x0) + tx * ty * at(c, y0 + 1, x0 + 1);
  }
};

}  // namespace

TEST_CASE("grid_sample matches torch's sampler in every mode and padding", "[nn_ops][pool]") {
  manual_seed(41);
  const int64_t N = 2, C = 2, H = 4, W = 5, Ho = 3, Wo = 4;
  for (DType dtype : {kFloat64, kFloat32, kBFloat16}) {
    CAPTURE(dtype);
    const Tensor x = randn({N, C, H, W}, kFloat32).to(dtype);
    // Points inside and up to 1.5 times the input's extent outside it, and one on a half pixel
    // (nearest rounds it to even).
    Tensor grid = (rand({N, Ho, Wo, 2}, kFloat32) * 3.0 - 1.5).to(dtype);
    const std::vector<double> xv = x.to_vector<double>();
    const std::vector<double> gv = grid.to_vector<double>();
    for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
      for (const char* padding : {"zeros", "border", "reflection"}) {
        for (bool align_corners : {false, true}) {
          CAPTURE(mode, padding, align_corners);
          const Tensor got = grid_sample(x, grid, mode, padding, align_corners);
          REQUIRE(got.sizes() == Shape{N, C, Ho, Wo});
          REQUIRE(got.dtype() == dtype);
          const std::vector<double> values = got.to_vector<double>();
          for (int64_t n = 0; n < N; ++n) {
            const std::vector<double> image(xv.begin() + n * C * H * W,
                                            xv.begin() + (n + 1) * C * H * W);
            const GridReference reference{image, C, H, W, padding, align_corners};
            for (int64_t c = 0; c < C; ++c) {
              for (int64_t p = 0; p < Ho * Wo; ++p) {
                const double gx = gv[size_t((n * Ho * Wo + p) * 2)];
                const double gy = gv[size_t((n * Ho * Wo + p) * 2 + 1)];
                const double want = reference.sample(c, gx, gy, mode);
                const double got_value = values[size_t((n * C + c) * Ho * Wo + p)];
                CAPTURE(n, c, p, gx, gy, want, got_value);
                // float32 sums of up to 16 taps; a bfloat16 result rounded once from them.
                const double tolerance = dtype == kFloat64   ? 1e-12
                                         : dtype == kFloat32 ? 1e-5
                                                             : 1e-2;
                CHECK(std::abs(got_value - want) <= tolerance * (1 + std::abs(want)));
              }
            }
          }
        }
      }
    }
  }
  // Hand-worked points: with align_corners, (-1, -1) and (1, 1) are the corner pixels and (0, 0)
  // of a 3 x 3 input its centre; without, -1 and 1 are the outer edges, so bilinear with zeros
  // gives a quarter of the corner pixel there.
  const Tensor image = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0}, {1, 1, 3, 3});
  const Tensor corners = tensor({-1.0, -1.0, 1.0, 1.0, 0.0, 0.0}, {1, 1, 3, 2});
  CHECK(grid_sample(image, corners, "bilinear", "zeros", true).to_vector<double>() ==
        std::vector<double>{1.0, 9.0, 5.0});
  CHECK(grid_sample(image, corners).to_vector<double>() == std::vector<double>{0.25, 2.25, 5.0});
  CHECK(grid_sample(image, corners, "bilinear", "border").to_vector<double>() ==
        std::vector<double>{1.0, 9.0, 5.0});
  // x = 0 with align_corners is pixel 0.5 of a 1 x 2 input: nearest rounds it to even, pixel 0.
  const Tensor pair = tensor({10.0, 20.0}, {1, 1, 1, 2});
  CHECK(grid_sample(pair, tensor({0.0, 0.0}, {1, 1, 1, 2}), "nearest", "zeros", true)
            .item<double>() == 10.0);
  // Gradients: to the input through the taps, to the grid through the weights.
  const Tensor leaf = image.clone().requires_grad_();
  const Tensor points = tensor({0.25, -0.5}, {1, 1, 1, 2}).requires_grad_();
  grid_sample(leaf, points, "bilinear", "zeros", true).backward();
  // x = 0.25 -> column 1.25, y = -0.5 -> row 0.5: weights 0.375, 0.125, 0.375, 0.125.
  CHECK(leaf.grad().to_vector<double>() ==
        std::vector<double>{0, 0.375, 0.125, 0, 0.375, 0.125, 0, 0, 0});
  // d/dx: (value right - value left) per pixel, times d(column)/dx = 1: rows 0 and 1 mixed.
  const std::vector<double> grid_grad = points.grad().to_vector<double>();
  CHECK(grid_grad[0] == Approx(1.0));  // one column to the right adds 1
  CHECK(grid_grad[1] == Approx(3.0));  // one row down adds 3
  CHECK_THROWS_WITH(
      grid_sample(image, corners.reshape({1, 3, 1, 2}).to(kFloat64)),
      Catch::Contains("grid_sample: expected grid of input's dtype float32, got float64"));
  CHECK_THROWS_WITH(grid_sample(image, corners, "area"),
                    Catch::Contains("grid_sample: expected mode \"bilinear\", \"nearest\" or "
                                    "\"bicubic\", got \"area\""));
  CHECK_THROWS_WITH(grid_sample(image, corners, "bilinear", "circular"),
                    Catch::Contains("grid_sample: expected padding_mode"));
  CHECK_THROWS_WITH(grid_sample(image, tensor({0.0, 0.0, 0.0}, {1, 1, 1, 3})),
                    Catch::Contains("grid_sample: expected grid of shape [1, Ho, Wo, 2]"));
  {
    amp::Autocast autocast(kCPU);  // float32 on the CPU (torch's grid_sampler)
    CHECK(grid_sample(image.to(kBFloat16), corners.to(kBFloat16)).dtype() == kFloat32);
  }
}
