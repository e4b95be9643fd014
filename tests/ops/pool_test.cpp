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
