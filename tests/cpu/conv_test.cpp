// Tests for the CPU conv kernels (kernel/conv.h, cpu/conv.cpp). Every forward is checked
// against a float64 reference written here with plain loops,
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

// Direct convolution: y[n, o, oh, ow] = bias[o] + sum over (c in o's group, ki, kj) of
// x[n, c, oh sH - pH + ki dH, ow sW - pW + kj dW] w[o, c - group start, ki, kj].
Tensor conv2d_reference(const Tensor& x, const Tensor& w, const Tensor& bias,
                        const kernel::Conv2dParams& p) {
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

}  // namespace

// ---- conv2d -------------------------------------------------------------------------------

namespace {

struct ConvCase {
  const char* name;
  int64_t N, C, H, W, O, kH, kW;
  kernel::Conv2dParams params;
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
      const Tensor y = cpu::conv_kernels.conv2d(in.x, in.w, in.b, c.params);
      const Tensor expected = conv2d_reference(in.x, in.w, in.b, c.params);
      expect_result(y, dtype, expected.sizes());
      expect_close(y, expected, forward_tolerance(dtype), "conv2d");
      CHECK(values(in.x) == values(x_before));
      // Strided input and weight give the same result.
      CHECK(values(cpu::conv_kernels.conv2d(strided_copy(in.x), strided_copy(in.w), in.b,
                                            c.params)) == values(y));
    }
  }
}

TEST_CASE("conv2d backward matches finite differences", "[nn_kernels][conv2d]") {
  uint64_t seed = 2100;
  for (const ConvCase& c : kConvCases) {
    INFO(c.name);
    const ConvInputs in = conv_inputs(c, seed += 4, kFloat64);
    const auto forward = [&] { return cpu::conv_kernels.conv2d(in.x, in.w, in.b, c.params); };
    const Tensor R = random_tensor(forward().sizes(), seed + 3);
    const kernel::Conv2dBackward g =
        cpu::conv_kernels.conv2d_backward(R, in.x, in.w, c.bias, c.params, {true, true, true});
    check_gradient("x", in.x, forward, R, g.dx);
    check_gradient("weight", in.w, forward, R, g.dweight);
    if (c.bias) {
      check_gradient("bias", in.b, forward, R, g.dbias);
    } else {
      CHECK_FALSE(g.dbias.defined());
    }
    // Only what is asked for is computed.
    const kernel::Conv2dBackward only_weight =
        cpu::conv_kernels.conv2d_backward(R, in.x, in.w, c.bias, c.params, {false, true, false});
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
      const Tensor y = cpu::conv_kernels.conv2d(in.x, in.w, in.b, c.params);
      const Tensor dy = random_tensor(y.sizes(), seed + 3, dtype);
      const kernel::Conv2dBackward g =
          cpu::conv_kernels.conv2d_backward(dy, in.x, in.w, c.bias, c.params, {true, true, true});
      const kernel::Conv2dBackward ref = cpu::conv_kernels.conv2d_backward(
          f64(dy), f64(in.x), f64(in.w), c.bias, c.params, {true, true, true});
      expect_result(g.dx, dtype, in.x.sizes());
      expect_result(g.dweight, dtype, in.w.sizes());
      expect_close(g.dx, ref.dx, backward_tolerance(dtype), "dx");
      expect_close(g.dweight, ref.dweight, backward_tolerance(dtype), "dweight");
      if (c.bias) expect_close(g.dbias, ref.dbias, backward_tolerance(dtype), "dbias");
    }
  }
}

TEST_CASE("conv2d of larger images uses the threaded paths correctly", "[nn_kernels][conv2d]") {
  // Several images (threads over images) and one image (threads inside the matrix product),
  // in every dtype: products large enough that the 16-bit ones may take oneDNN's bfloat16
  // kernel (NOTE [conv2d's matrix product]), each path the measurement keeps checked here.
  for (DType dtype : kLowDTypes) {
    for (int64_t N : {4, 1}) {
      INFO("dtype " << dtype << ", N " << N);
      const kernel::Conv2dParams p{.padding = {1, 1}};
      const Tensor x = random_tensor({N, 8, 24, 24}, 2300 + uint64_t(N), dtype);
      const Tensor w = random_tensor({16, 8, 3, 3}, 2310, dtype);
      const Tensor b = random_tensor({16}, 2311, dtype);
      const Tensor y = cpu::conv_kernels.conv2d(x, w, b, p);
      expect_result(y, dtype, Shape{N, 16, 24, 24});
      expect_close(y, conv2d_reference(x, w, b, p),
                   dtype == kFloat32 ? Tolerance{1e-5, 1e-4} : forward_tolerance(dtype), "y");
      const Tensor dy = random_tensor(y.sizes(), 2312, dtype);
      const kernel::Conv2dBackward g =
          cpu::conv_kernels.conv2d_backward(dy, x, w, true, p, {true, true, true});
      const kernel::Conv2dBackward ref =
          cpu::conv_kernels.conv2d_backward(f64(dy), f64(x), f64(w), true, p, {true, true, true});
      const bool wide = dtype == kFloat32;
      expect_close(g.dx, ref.dx, wide ? Tolerance{1e-4, 1e-4} : backward_tolerance(dtype), "dx");
      expect_close(g.dweight, ref.dweight,
                   wide ? Tolerance{1e-3, 1e-4} : backward_tolerance(dtype), "dweight");
      expect_close(g.dbias, ref.dbias, wide ? Tolerance{1e-3, 1e-4} : backward_tolerance(dtype),
                   "dbias");
    }
  }
}

// ---- errors -------------------------------------------------------------------------------

TEST_CASE("conv2d rejects bad arguments with messages", "[nn_kernels][errors]") {
  const Tensor x = random_tensor({2, 3, 5, 5}, 6100, kFloat32);
  const Tensor w = random_tensor({4, 3, 3, 3}, 6101, kFloat32);
  CHECK_THROWS_WITH(
      cpu::conv_kernels.conv2d(random_tensor({3, 5, 5}, 1, kFloat32), w, Tensor(), {}),
      Contains("conv2d: expected a 4-D input [N, C, H, W], got 3-D (shape [3, 5, 5])"));
  CHECK_THROWS_WITH(
      cpu::conv_kernels.conv2d(x, random_tensor({4, 3, 3}, 2, kFloat32), Tensor(), {}),
      Contains("conv2d: expected a 4-D weight [O, C/groups, kH, kW], got 3-D"));
  CHECK_THROWS_WITH(
      cpu::conv_kernels.conv2d(x, random_tensor({4, 2, 3, 3}, 3, kFloat32), Tensor(), {}),
      Contains("conv2d: expected weight [O, C/groups=3, kH, kW] for an input of C=3 "
               "channels and groups=1, got weight shape [4, 2, 3, 3]"));
  CHECK_THROWS_WITH(cpu::conv_kernels.conv2d(x, w, Tensor(), {.groups = 2}),
                    Contains("conv2d: expected groups to divide the input channels C=3, got "
                             "groups=2"));
  CHECK_THROWS_WITH(
      cpu::conv_kernels.conv2d(random_tensor({1, 4, 5, 5}, 4, kFloat32),
                               random_tensor({3, 2, 3, 3}, 5, kFloat32), Tensor(), {.groups = 2}),
      Contains("expected groups to divide the output channels O=3"));
  CHECK_THROWS_WITH(
      cpu::conv_kernels.conv2d(x, random_tensor({4, 3, 6, 3}, 6, kFloat32), Tensor(), {}),
      Contains("conv2d: expected a kernel no larger than the padded input 5x5, got "
               "a kernel spanning 6x3"));
  CHECK_THROWS_WITH(cpu::conv_kernels.conv2d(x, w, Tensor(), {.dilation = {3, 3}}),
                    Contains("got a kernel spanning 7x7 (kernel 3x3, dilation 3x3)"));
  CHECK_THROWS_WITH(
      cpu::conv_kernels.conv2d(x, w.to(kFloat16), Tensor(), {}),
      Contains("conv2d: expected weight of dtype float32 (the input's), got float16"));
  CHECK_THROWS_WITH(cpu::conv_kernels.conv2d(x, w, zeros({3}), {}),
                    Contains("conv2d: expected bias ([O]) of shape [4], got shape [3]"));
  CHECK_THROWS_WITH(cpu::conv_kernels.conv2d(x, w, Tensor(), {.stride = {0, 1}}),
                    Contains("expected strides > 0, got stride (0, 1)"));
  CHECK_THROWS_WITH(
      cpu::conv_kernels.conv2d_backward(zeros({2, 4, 2, 2}), x, w, false, {}, {true, true, true}),
      Contains("conv2d_backward: expected grad_output [N, O, Hout, Wout] of shape "
               "[2, 4, 3, 3], got shape [2, 4, 2, 2]"));
}
