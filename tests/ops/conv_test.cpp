// Tests for ops/conv.h: conv2d in float32, float16 and bfloat16 against a float64 reference
// written here with plain loops over the same (already rounded) inputs; conv2d and prelu
// under autocast; and the bad inputs of dropout, conv2d, the pooling ops and prelu, which must
// throw naming the op, what was expected and what was given, and leave every input as it was.
//
// Dims: N batch, C channels, O output channels, H/W height/width.
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

}  // namespace

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

// ---- autocast -----------------------------------------------------------------------------

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
