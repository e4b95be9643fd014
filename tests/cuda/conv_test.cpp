// conv2d (cuDNN, cuda/conv.cpp) and max_pool2d / avg_pool2d (cuda/pool.cu) on CUDA, forward
// and backward, against the CPU ops in float64 on the same (already rounded) inputs: groups,
// strides, padding, dilation, bias, odd and non-contiguous inputs, the graph-recording
// backward, pooling indices and determinism, and the kernels' own errors.
//
// Dims: N batch, C channels, O output channels, H/W height/width.
#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

constexpr DType kGpuDTypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};

struct ConvCase {
  Shape x, weight;
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
  bool bias;
};

const ConvCase kConvCases[] = {
    {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
    {{1, 4, 9, 9}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, true},    // groups, mixed params
    {{3, 6, 5, 8}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 6, false},   // depthwise
    {{2, 4, 11, 10}, {8, 4, 5, 5}, {2, 2}, {2, 2}, {2, 1}, 1, true},  // dilation 2
    {{2, 8, 6, 6}, {4, 2, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 4, true},    // 1x1, one channel out
    {{1, 3, 17, 1}, {5, 3, 3, 1}, {3, 1}, {0, 0}, {1, 1}, 1, true},   // odd sizes
    {{3, 1, 3, 257}, {1, 1, 3, 3}, {1, 2}, {1, 1}, {1, 1}, 1, false},
};

Tensor conv(const ConvCase& c, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return conv2d(x, weight, bias, c.stride, c.padding, c.dilation, c.groups);
}

// Products summed per output, per dx element and per dweight element.
int64_t conv_terms(const ConvCase& c, const Shape& out) {
  const int64_t per_output = c.weight[1] * c.weight[2] * c.weight[3];
  const int64_t per_dx = c.weight[0] / c.groups * c.weight[2] * c.weight[3];
  const int64_t per_dweight = out[0] * out[2] * out[3];
  return std::max({per_output, per_dx, per_dweight});
}

struct PoolCase {
  Shape x;
  std::array<int64_t, 2> kernel, stride, padding;
  bool count_include_pad;
  std::array<int64_t, 2> dilation{1, 1};  // max_pool2d's
  bool ceil_mode = false;
  int64_t divisor_override = 0;  // avg_pool2d's
};

const PoolCase kPoolCases[] = {
    {{2, 3, 8, 9}, {2, 2}, {0, 0}, {0, 0}, true},   // stride = kernel
    {{2, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1}, true},   // overlapping windows, padding
    {{1, 2, 7, 7}, {3, 2}, {1, 2}, {1, 1}, false},  // most positions in several windows
    {{3, 10, 9}, {3, 3}, {1, 1}, {1, 0}, false},    // 3-D [C, H, W]
    {{2, 2, 5, 6}, {2, 3}, {3, 1}, {1, 1}, true},   // stride > kernel: rows in no window
    // ceil_mode: a last window past the input; dilated taps; a divisor override.
    {{2, 3, 8, 9}, {3, 2}, {2, 2}, {1, 0}, true, {1, 1}, true, 0},
    {{2, 3, 9, 10}, {2, 3}, {2, 1}, {1, 1}, false, {2, 3}, true, 0},
    {{1, 2, 7, 8}, {3, 3}, {2, 3}, {1, 1}, true, {2, 1}, false, 4},
};

// avg_pool2d of a case (no dilation: torch's avg_pool2d has none).
Tensor avg_pool(const Tensor& x, const PoolCase& c) {
  return avg_pool2d(
      x, c.kernel, c.stride, c.padding, c.ceil_mode, c.count_include_pad,
      c.divisor_override > 0 ? std::optional<int64_t>(c.divisor_override) : std::nullopt);
}

kernel::Pool2dParams params_of(const PoolCase& c) {
  return {c.kernel,   c.stride,    c.padding,         c.count_include_pad,
          c.dilation, c.ceil_mode, c.divisor_override};
}

}  // namespace

TEST_CASE("CUDA conv2d matches float64", "[cuda][conv]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(201);
  for (DType dtype : kGpuDTypes) {
    for (const ConvCase& c : kConvCases) {
      CAPTURE(dtype, c.x, c.weight, c.groups);
      const Tensor x = gpu_randn(c.x, dtype), weight = gpu_randn(c.weight, dtype);
      const Tensor bias = c.bias ? gpu_randn({c.weight[0]}, dtype) : Tensor();
      const Tensor want = conv(c, f64(x), f64(weight), c.bias ? f64(bias) : Tensor());
      const Tolerance tol = sum_tolerance(dtype, conv_terms(c, want.sizes()));
      check_close(conv(c, x, weight, bias), want, dtype, tol, "conv2d");
      // The same input as a non-contiguous view (H and W swapped in memory).
      const Tensor x_view = x.transpose(2, 3).contiguous().transpose(2, 3);
      check_close(conv(c, x_view, weight, bias), want, dtype, tol, "conv2d, strided input");
    }
    // Unbatched [C, H, W].
    const ConvCase& c = kConvCases[0];
    const Tensor x = gpu_randn({3, 7, 6}, dtype), weight = gpu_randn(c.weight, dtype);
    check_close(conv(c, x, weight, {}), conv(c, f64(x), f64(weight), {}), dtype,
                sum_tolerance(dtype, 27), "conv2d, unbatched");
  }
}

TEST_CASE("CUDA conv2d gradients match float64", "[cuda][conv]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(202);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (const ConvCase& c : kConvCases) {
      CAPTURE(dtype, c.x, c.weight, c.groups);
      const Tensor x0 = gpu_randn(c.x, dtype), w0 = gpu_randn(c.weight, dtype);
      const Tensor b0 = c.bias ? gpu_randn({c.weight[0]}, dtype) : Tensor();
      const Tensor probe = conv(c, f64(x0), f64(w0), {});
      const Tensor g = gpu_randn(probe.sizes(), dtype);
      const Tolerance tol = sum_tolerance(dtype, conv_terms(c, probe.sizes()));
      // Leaves from the values (on their device), loss sum(conv * g).
      auto leaves = [&](bool gpu) {
        auto leaf = [&](const Tensor& t) {
          return t.defined() ? (gpu ? t.detach() : f64(t)).requires_grad_() : Tensor();
        };
        return std::array<Tensor, 3>{leaf(x0), leaf(w0), leaf(b0)};
      };
      auto loss = [&](const std::array<Tensor, 3>& t, const Tensor& weights) {
        return sum(mul(conv(c, t[0], t[1], t[2]), weights));
      };
      // backward(): the kernel's conv2d_backward on the saved tensors.
      const std::array<Tensor, 3> got = leaves(true), want = leaves(false);
      loss(got, g).backward();
      loss(want, f64(g)).backward();
      check_close(got[0].grad(), want[0].grad(), dtype, tol, "dx");
      check_close(got[1].grad(), want[1].grad(), dtype, tol, "dweight");
      if (c.bias) check_close(got[2].grad(), want[2].grad(), dtype, tol, "dbias");
      // create_graph: recorded as ops of their own, which call the kernel with a shape-only
      // stand-in for the tensor a gradient does not read.
      const std::array<Tensor, 3> got2 = leaves(true);
      const std::vector<Tensor> recorded =
          autograd::grad({loss(got2, g)}, {got2[0], got2[1]}, {}, false, /*create_graph=*/true);
      check_close(recorded[0], want[0].grad(), dtype, tol, "dx, create_graph");
      check_close(recorded[1], want[1].grad(), dtype, tol, "dweight, create_graph");
    }
  }
}

TEST_CASE("CUDA conv2d handles empty inputs", "[cuda][conv]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;  // zeros must be written, not found
  manual_seed(203);
  const Tensor bias = gpu_randn({4}, kFloat32);
  // No input channels: the output is the bias alone.
  const Tensor y = conv2d(gpu_randn({2, 0, 5, 5}, kFloat32), gpu_randn({4, 0, 3, 3}, kFloat32),
                          bias, {1, 1}, {1, 1});
  check_close(y, f64(bias).view({1, 4, 1, 1}).expand({2, 4, 5, 5}), kFloat32, {0, 0},
              "conv2d, C = 0");
  CHECK(conv2d(gpu_randn({0, 3, 5, 5}, kFloat32), gpu_randn({4, 3, 3, 3}, kFloat32)).sizes() ==
        Shape{0, 4, 3, 3});
}

TEST_CASE("CUDA conv2d kernels reject bad arguments naming them", "[cuda][conv]") {
  HG_REQUIRE_CUDA();
  manual_seed(204);
  const Tensor x = gpu_randn({2, 4, 6, 6}, kFloat32), weight = gpu_randn({6, 2, 3, 3}, kFloat32);
  const kernel::Conv2dParams grouped{.groups = 2};
  CHECK(cuda::conv_kernels.conv2d(x, weight, {}, grouped).sizes() == Shape{2, 6, 4, 4});
  CHECK_THROWS_WITH(cuda::conv_kernels.conv2d(x, weight, {}, {}),
                    Contains("expected weight [O, C/groups=4"));
  CHECK_THROWS_WITH(cuda::conv_kernels.conv2d(x, weight, {}, {.groups = 3}),
                    Contains("expected groups to divide the input channels C=4"));
  CHECK_THROWS_WITH(cuda::conv_kernels.conv2d(x, weight.to(Device(kCPU)), {}, grouped),
                    Contains("expected weight on a CUDA device"));
  CHECK_THROWS_WITH(cuda::conv_kernels.conv2d(x, weight.to(kFloat16), {}, grouped),
                    Contains("expected weight of dtype float32"));
  CHECK_THROWS_WITH(cuda::conv_kernels.conv2d(x, weight, {}, {.stride = {0, 1}, .groups = 2}),
                    Contains("expected strides > 0"));
  CHECK_THROWS_WITH(cuda::conv_kernels.conv2d(x, gpu_randn({6, 2, 7, 3}, kFloat32), {}, grouped),
                    Contains("expected a kernel no larger than the padded input"));
  CHECK_THROWS_WITH(cuda::conv_kernels.conv2d(x, weight, gpu_randn({5}, kFloat32), grouped),
                    Contains("expected bias ([O]) of shape [6]"));
  CHECK_THROWS_WITH(cuda::conv_kernels.conv2d_backward(gpu_randn({2, 6, 5, 4}, kFloat32), x, weight,
                                                       false, grouped, {true, true, false}),
                    Contains("expected grad_output [N, O, Hout, Wout] of shape [2, 6, 4, 4]"));
}

TEST_CASE("CUDA max_pool2d and avg_pool2d match float64 forward and backward", "[cuda][pool]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(205);
  for (DType dtype : kGpuDTypes) {
    for (const PoolCase& c : kPoolCases) {
      CAPTURE(dtype, c.x, c.kernel, c.stride, c.padding, c.count_include_pad);
      const Tensor x0 = gpu_randn(c.x, dtype);
      const Tensor x_view = x0.transpose(-2, -1).contiguous().transpose(-2, -1);
      const Tolerance exact{0, 0}, tol = tolerance_for(dtype);
      for (const Tensor& input : {x0, x_view}) {
        CAPTURE(input.is_contiguous());
        check_close(max_pool2d(input, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode),
                    max_pool2d(f64(input), c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode),
                    dtype, exact, "max_pool2d");
        check_close(avg_pool(input, c), avg_pool(f64(input), c), dtype, tol, "avg_pool2d");
      }
      // The indices are the CPU kernel's, in the same dtype (ties included).
      const kernel::MaxPoolForward got = cuda::pool_kernels.max_pool2d(x_view, params_of(c));
      const kernel::MaxPoolForward want =
          cpu::pool_kernels.max_pool2d(x0.to(Device(kCPU)), params_of(c));
      CHECK(got.indices.dtype() == kInt64);
      CHECK(got.indices.to(Device(kCPU)).to_vector<int64_t>() == want.indices.to_vector<int64_t>());
      // Gradients: each dy goes to its window's maximum, or is shared over its window.
      for (bool use_max : {true, false}) {
        CAPTURE(use_max);
        // Upstream weights of each pool's own output shape (a dilated max window differs).
        const Tensor g = gpu_randn(use_max ? want.out.sizes() : avg_pool(x0, c).sizes(), dtype);
        auto pooled_grad = [&](const Tensor& input, const Tensor& weights) {
          const Tensor leaf = input.detach().requires_grad_();
          const Tensor y =
              use_max ? max_pool2d(leaf, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode)
                      : avg_pool(leaf, c);
          sum(mul(y, weights)).backward();
          return leaf.grad();
        };
        check_close(pooled_grad(x0, g), pooled_grad(f64(x0), f64(g)), dtype, tol,
                    use_max ? "max_pool2d backward" : "avg_pool2d backward");
      }
    }
  }
}

TEST_CASE("CUDA pooling backward repeats bit for bit and sums as the CPU does", "[cuda][pool]") {
  HG_REQUIRE_CUDA();
  manual_seed(206);
  // Overlapping windows, so that positions collect several gradients; float32, where the
  // CPU's summation order gives the same bits.
  const PoolCase c{{4, 3, 15, 14}, {3, 3}, {1, 1}, {1, 1}, false};
  const Tensor x = gpu_randn(c.x, kFloat32);
  const kernel::MaxPoolForward forward = cuda::pool_kernels.max_pool2d(x, params_of(c));
  const Tensor dy = gpu_randn(forward.out.sizes(), kFloat32);
  const Tensor dx = cuda::pool_kernels.max_pool2d_backward(dy, forward.indices, c.x);
  for (int repeat = 0; repeat < 3; ++repeat) {
    CHECK(values_of(cuda::pool_kernels.max_pool2d_backward(dy, forward.indices, c.x)) ==
          values_of(dx));
  }
  CHECK(values_of(dx) == values_of(cpu::pool_kernels.max_pool2d_backward(
                             dy.to(Device(kCPU)), forward.indices.to(Device(kCPU)), c.x)));
  const Tensor avg_dx = cuda::pool_kernels.avg_pool2d_backward(dy, c.x, params_of(c));
  CHECK(values_of(avg_dx) ==
        values_of(cpu::pool_kernels.avg_pool2d_backward(dy.to(Device(kCPU)), c.x, params_of(c))));
  CHECK(values_of(avg_dx) ==
        values_of(cuda::pool_kernels.avg_pool2d_backward(dy, c.x, params_of(c))));
}

TEST_CASE("CUDA pooling kernels reject bad arguments naming them", "[cuda][pool]") {
  HG_REQUIRE_CUDA();
  manual_seed(207);
  const Tensor x = gpu_randn({2, 3, 6, 6}, kFloat32);
  CHECK_THROWS_WITH(avg_pool2d(x, {2, 2}, {0, 0}, {2, 2}),
                    Contains("expected a padding between 0 and half the kernel"));
  CHECK_THROWS_WITH(cuda::pool_kernels.max_pool2d(gpu_randn({6, 6}, kFloat32), {.kernel = {2, 2}}),
                    Contains("expected a 3-D [C, H, W] or 4-D [N, C, H, W] input"));
  CHECK_THROWS_WITH(cuda::pool_kernels.max_pool2d(x.to(Device(kCPU)), {.kernel = {2, 2}}),
                    Contains("expected input on a CUDA device"));
  const kernel::MaxPoolForward forward = cuda::pool_kernels.max_pool2d(x, {.kernel = {2, 2}});
  const Tensor dy = gpu_randn(forward.out.sizes(), kFloat32);
  CHECK_THROWS_WITH(
      cuda::pool_kernels.max_pool2d_backward(dy, forward.indices.to(kInt32), x.sizes()),
      Contains("expected int64 indices"));
  CHECK_THROWS_WITH(cuda::pool_kernels.avg_pool2d_backward(dy, {2, 3, 9, 9}, {.kernel = {2, 2}}),
                    Contains("expected grad_output (avg_pool2d's output shape) of shape"));
  // An index outside the 6x6 plane is found on the device and reported at the next wait.
  const Tensor bad = full(forward.out.sizes(), 36, kInt64).to(kGpu);
  cuda::pool_kernels.max_pool2d_backward(dy, bad, x.sizes());
  CHECK_THROWS_WITH(cuda::synchronize(), Contains("36"));
  cuda::synchronize();  // the report is cleared once raised
}
