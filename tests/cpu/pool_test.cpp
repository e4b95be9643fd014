// Tests for the CPU pool kernels (kernel/pool.h, cpu/pool.cpp), and the errors of the
// embedding and dropout kernels. Every forward is checked against a float64 reference
// written here with plain loops,
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
#include <omp.h>

#include "cpu/nn_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

struct PoolReference {
  Tensor out;
  std::vector<int64_t> indices;  // max pooling only
};

// Pooling by kernel offsets: window (oh, ow) reads x[oh sH - pH + ki dH, ow sW - pW + kj dW]
// for in-bounds positions; the first maximum wins; avg divides by divisor_override when set,
// with count_include_pad by the window's rows and columns up to the input's right padding,
// else by the in-bounds count. ceil_mode rounds the output size up, dropping a last window
// that would start past the input and its left padding (torch's rule).
PoolReference pool_reference(const Tensor& x, const kernel::Pool2dParams& p, bool max) {
  const int64_t dims = x.dim(), H = x.size(-2), W = x.size(-1);
  const int64_t planes = x.numel() / (H * W);
  const int64_t sH = p.stride[0] ? p.stride[0] : p.kernel[0];
  const int64_t sW = p.stride[1] ? p.stride[1] : p.kernel[1];
  const auto out_size = [&](int64_t size, int64_t pad, int64_t kernel, int64_t stride,
                            int64_t dilation) {
    const double span = double(size + 2 * pad - dilation * (kernel - 1) - 1) / double(stride);
    int64_t out = int64_t(p.ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
    if (p.ceil_mode && (out - 1) * stride >= size + pad) --out;
    return out;
  };
  const int64_t Hout = out_size(H, p.padding[0], p.kernel[0], sH, p.dilation[0]);
  const int64_t Wout = out_size(W, p.padding[1], p.kernel[1], sW, p.dilation[1]);
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
            const int64_t ih = oh * sH - p.padding[0] + ki * p.dilation[0];
            const int64_t iw = ow * sW - p.padding[1] + kj * p.dilation[1];
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
          const int64_t h0 = oh * sH - p.padding[0], w0 = ow * sW - p.padding[1];
          const int64_t rows = std::min(h0 + p.kernel[0], H + p.padding[0]) - h0;
          const int64_t cols = std::min(w0 + p.kernel[1], W + p.padding[1]) - w0;
          const double divisor = p.divisor_override > 0 ? double(p.divisor_override)
                                 : p.count_include_pad  ? double(rows * cols)
                                                        : double(inside);
          out.push_back(sum / divisor);
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

// ---- pooling ------------------------------------------------------------------------------

namespace {

struct PoolCase {
  const char* name;
  Shape shape;
  kernel::Pool2dParams params;
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
    {"ceil_mode: a last window past the input",
     {2, 2, 8, 7},
     {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 0}, .ceil_mode = true}},
    {"ceil_mode without counting the padding",
     {1, 3, 9, 6},
     {.kernel = {2, 3},
      .stride = {2, 2},
      .padding = {1, 1},
      .count_include_pad = false,
      .ceil_mode = true}},
    {"a divisor override",
     {2, 2, 6, 6},
     {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .divisor_override = 5}},
};

}  // namespace

TEST_CASE("max_pool2d and avg_pool2d match reference loops in every dtype", "[nn_kernels][pool]") {
  uint64_t seed = 3000;
  for (const PoolCase& c : kPoolCases) {
    for (DType dtype : kAllDTypes) {
      INFO(c.name << " " << dtype);
      const Tensor x = random_tensor(c.shape, ++seed, dtype);
      const kernel::MaxPoolForward m = cpu::pool_kernels.max_pool2d(x, c.params);
      const PoolReference max_ref = pool_reference(x, c.params, true);
      expect_result(m.out, dtype, max_ref.out.sizes());
      expect_result(m.indices, kInt64, max_ref.out.sizes());
      expect_close(m.out, max_ref.out, {0, 0}, "max");  // exact: a max rounds nothing
      CHECK(m.indices.to_vector<int64_t>() == max_ref.indices);
      const Tensor a = cpu::pool_kernels.avg_pool2d(x, c.params);
      const PoolReference avg_ref = pool_reference(x, c.params, false);
      expect_result(a, dtype, avg_ref.out.sizes());
      expect_close(a, avg_ref.out, forward_tolerance(dtype), "avg");
      CHECK(values(cpu::pool_kernels.max_pool2d(strided_copy(x), c.params).out) == values(m.out));
      CHECK(values(cpu::pool_kernels.avg_pool2d(strided_copy(x), c.params)) == values(a));
    }
  }
}

TEST_CASE("max_pool2d with dilation reads every dilation-th position", "[nn_kernels][pool]") {
  uint64_t seed = 3050;
  for (const kernel::Pool2dParams& p :
       {kernel::Pool2dParams{
            .kernel = {2, 3}, .stride = {2, 1}, .padding = {1, 1}, .dilation = {2, 3}},
        kernel::Pool2dParams{.kernel = {3, 2},
        .stride = {1, 2},
        .padding = {1, 0},
        .dilation = {3, 2},
        .ceil_mode = true}}) {
    for (DType dtype : kAllDTypes) {
      INFO(dtype);
      const Tensor x = random_tensor({2, 3, 9, 10}, ++seed, dtype);
      const kernel::MaxPoolForward m = cpu::pool_kernels.max_pool2d(x, p);
      const PoolReference ref = pool_reference(x, p, true);
      expect_result(m.out, dtype, ref.out.sizes());
      expect_close(m.out, ref.out, {0, 0}, "max");
      CHECK(m.indices.to_vector<int64_t>() == ref.indices);
    }
  }
  CHECK_THROWS_WITH(cpu::pool_kernels.max_pool2d(random_tensor({1, 1, 4, 4}, 1, kFloat32),
                                                 {.kernel = {3, 3}, .dilation = {2, 2}}),
                    Contains("got kernel 3x3 dilated to 5x5"));
}

TEST_CASE("max_pool2d lets a NaN win its window", "[nn_kernels][pool]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = tensor({1.0, nan, 3.0, 2.0}, {1, 1, 2, 2}, kFloat32);
  const kernel::MaxPoolForward m = cpu::pool_kernels.max_pool2d(x, {.kernel = {2, 2}});
  CHECK(std::isnan(m.out.item<double>()));
  CHECK(m.indices.item<int64_t>() == 1);
}

TEST_CASE("max_pool2d over windows that tile the input keeps the generic values and indices",
          "[nn_kernels][pool]") {
  // NOTE [Tiling max pool]: stride equal to the kernel, no padding: rows widened once and
  // selects per tap, windows two columns wide in vector lanes (75 columns: 37 windows, two
  // vectors of 16 and a scalar tail on AVX-512, more vectors on narrower ISAs). Few distinct
  // values make ties (the first maximum wins), and NaNs, an inf and -infs sit in some windows;
  // odd sizes leave input rows and columns no window covers.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  uint64_t seed = 3100;
  for (const kernel::Pool2dParams& p :
       {kernel::Pool2dParams{.kernel = {2, 2}}, kernel::Pool2dParams{.kernel = {3, 2}},
        kernel::Pool2dParams{.kernel = {1, 4}}}) {
    for (DType dtype : kAllDTypes) {
      INFO(dtype << " kernel " << p.kernel[0] << "x" << p.kernel[1]);
      std::vector<double> v = values(random_tensor({2, 3, 9, 75}, ++seed, kFloat64));
      for (double& x : v) x = std::round(x * 2.0) / 2.0;  // -1, -0.5, 0, 0.5, 1: many ties
      v[5] = nan;
      v[40] = -inf;
      v[41] = -inf;
      v[120] = inf;
      v[1651] = nan;
      v[1654] = nan;
      v[1700] = nan;  // row 4, column 50: a window the second vector holds
      v[1701] = 1.0;
      const Tensor x = tensor(v, {2, 3, 9, 75}, dtype);
      const kernel::MaxPoolForward m = cpu::pool_kernels.max_pool2d(x, p);
      // torch's CPU rule, window by window: a tap wins when it is greater than the best so far
      // or NaN; the first tap's index when none does (a window of -inf only).
      const std::vector<double> stored = values(x);
      const int64_t H = 9, W = 75, kH = p.kernel[0], kW = p.kernel[1];
      const int64_t Hout = H / kH, Wout = W / kW;
      std::vector<double> want;
      std::vector<int64_t> want_indices;
      for (int64_t plane = 0; plane < 6; ++plane) {
        for (int64_t oh = 0; oh < Hout; ++oh) {
          for (int64_t ow = 0; ow < Wout; ++ow) {
            double best = -inf;
            int64_t index = oh * kH * W + ow * kW;
            for (int64_t i = 0; i < kH; ++i) {
              for (int64_t j = 0; j < kW; ++j) {
                const int64_t at = (oh * kH + i) * W + ow * kW + j;
                const double value = stored[size_t(plane * H * W + at)];
                if (value > best || std::isnan(value)) best = value, index = at;
              }
            }
            want.push_back(best);
            want_indices.push_back(index);
          }
        }
      }
      expect_result(m.out, dtype, Shape{2, 3, Hout, Wout});
      const std::vector<double> got = values(m.out);
      REQUIRE(got.size() == want.size());
      int64_t nans = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("output " << i);
        CHECK((got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))));
        nans += std::isnan(want[i]) ? 1 : 0;
      }
      CHECK(nans >= 3);
      CHECK(m.indices.to_vector<int64_t>() == want_indices);
    }
  }
}

TEST_CASE("pooling backward matches finite differences", "[nn_kernels][pool]") {
  uint64_t seed = 3100;
  for (const PoolCase& c : kPoolCases) {
    INFO(c.name);
    // Continuous random values: no ties, so the max is differentiable at x.
    const Tensor x = random_tensor(c.shape, ++seed);
    const kernel::MaxPoolForward m = cpu::pool_kernels.max_pool2d(x, c.params);
    const Tensor R = random_tensor(m.out.sizes(), ++seed);
    check_gradient(
        "x (max)", x, [&] { return cpu::pool_kernels.max_pool2d(x, c.params).out; }, R,
        cpu::pool_kernels.max_pool2d_backward(R, m.indices, x.sizes()));
    check_gradient(
        "x (avg)", x, [&] { return cpu::pool_kernels.avg_pool2d(x, c.params); }, R,
        cpu::pool_kernels.avg_pool2d_backward(R, x.sizes(), c.params));
  }
}

TEST_CASE("pooling backward in low precision matches float64", "[nn_kernels][pool]") {
  uint64_t seed = 3200;
  for (const PoolCase& c : kPoolCases) {
    for (DType dtype : kLowDTypes) {
      INFO(c.name << " " << dtype);
      const Tensor x = random_tensor(c.shape, ++seed, dtype);
      const kernel::MaxPoolForward m = cpu::pool_kernels.max_pool2d(x, c.params);
      const Tensor dy = random_tensor(m.out.sizes(), ++seed, dtype);
      const Tensor dx_max = cpu::pool_kernels.max_pool2d_backward(dy, m.indices, x.sizes());
      expect_result(dx_max, dtype, x.sizes());
      expect_close(dx_max, cpu::pool_kernels.max_pool2d_backward(f64(dy), m.indices, x.sizes()),
                   backward_tolerance(dtype), "dx (max)");
      const Tensor dx_avg = cpu::pool_kernels.avg_pool2d_backward(dy, x.sizes(), c.params);
      expect_result(dx_avg, dtype, x.sizes());
      expect_close(dx_avg, cpu::pool_kernels.avg_pool2d_backward(f64(dy), x.sizes(), c.params),
                   backward_tolerance(dtype), "dx (avg)");
    }
  }
}

// Overlapping 3x3 windows at stride 1 send up to nine taps to one position: a 16-bit sum must be
// rounded once (equal to the float64 sum rounded to the dtype: the few 16-bit taps sum exactly
// in float32), and the bits must not depend on the threads the planes run on.
TEST_CASE("max_pool2d backward rounds each position's sum once on any thread count",
          "[nn_kernels][pool]") {
  const kernel::Pool2dParams params{.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}};
  uint64_t seed = 3300;
  for (DType dtype : kLowDTypes) {
    INFO(dtype);
    const Tensor x = random_tensor({4, 24, 12, 12}, ++seed, dtype);
    const kernel::MaxPoolForward m = cpu::pool_kernels.max_pool2d(x, params);
    const Tensor dy = random_tensor(m.out.sizes(), ++seed, dtype);
    const Tensor want =
        cpu::pool_kernels.max_pool2d_backward(f64(dy), m.indices, x.sizes()).to(dtype);
    std::vector<double> first;
    for (int threads : {1, 2, 3}) {
      INFO(threads << " threads");
      const int before = omp_get_max_threads();
      omp_set_num_threads(threads);
      const Tensor dx = cpu::pool_kernels.max_pool2d_backward(dy, m.indices, x.sizes());
      omp_set_num_threads(before);
      expect_result(dx, dtype, x.sizes());
      const std::vector<double> got = dx.to(kFloat64).to_vector<double>();
      if (first.empty()) first = got;
      CHECK(got == first);
      if (dtype == kFloat32) {  // float32 taps do not sum exactly in float32
        expect_close(dx, want, backward_tolerance(dtype), "dx");
      } else {
        CHECK(got == want.to(kFloat64).to_vector<double>());
      }
    }
  }
}

// ---- errors -------------------------------------------------------------------------------

TEST_CASE("pooling embedding and dropout reject bad arguments with messages",
          "[nn_kernels][errors]") {
  const Tensor x = random_tensor({1, 2, 3, 3}, 6200, kFloat32);
  CHECK_THROWS_WITH(cpu::pool_kernels.max_pool2d(x, {.kernel = {4, 4}}),
                    Contains("max_pool2d: expected a kernel no larger than the padded input 3x3, "
                             "got kernel 4x4"));
  CHECK_THROWS_WITH(cpu::pool_kernels.avg_pool2d(x, {.kernel = {3, 3}, .padding = {2, 2}}),
                    Contains("avg_pool2d: expected a padding between 0 and half the kernel 3x3, "
                             "got padding 2x2"));
  CHECK_THROWS_WITH(
      cpu::pool_kernels.max_pool2d(random_tensor({3, 3}, 1, kFloat32), {.kernel = {2, 2}}),
      Contains("max_pool2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got "
               "2-D (shape [3, 3])"));
  CHECK_THROWS_WITH(cpu::pool_kernels.avg_pool2d(x, {.kernel = {0, 2}}),
                    Contains("expected a kernel > 0, got kernel 0x2"));
  const kernel::MaxPoolForward m = cpu::pool_kernels.max_pool2d(x, {.kernel = {2, 2}});
  CHECK_THROWS_WITH(
      cpu::pool_kernels.max_pool2d_backward(m.out, full({1, 2, 1, 1}, int64_t(9)), x.sizes()),
      Contains("max_pool2d_backward: expected indices in [0, 9) (flat positions in "
               "a 3x3 plane), got 9 at element 0"));
  // The first bad index is named, wherever it lies; a later plane's bad one too.
  Tensor bad_indices = m.indices.clone();
  bad_indices.data_ptr<int64_t>()[1] = -1;
  CHECK_THROWS_WITH(cpu::pool_kernels.max_pool2d_backward(m.out, bad_indices, x.sizes()),
                    Contains("got -1 at element 1"));
  CHECK_THROWS_WITH(cpu::pool_kernels.max_pool2d_backward(m.out, m.indices.to(kFloat32), x.sizes()),
                    Contains("expected int64 indices (from max_pool2d), got float32"));
  CHECK_THROWS_WITH(
      cpu::pool_kernels.avg_pool2d_backward(zeros({1, 2, 2, 2}), x.sizes(), {.kernel = {2, 2}}),
      Contains("avg_pool2d_backward: expected grad_output (avg_pool2d's output "
               "shape) of shape [1, 2, 1, 1], got shape [1, 2, 2, 2]"));

  const Tensor indices = tensor(std::vector<int64_t>{1, 10, 3});
  const Tensor dy = random_tensor({3, 4}, 6201, kFloat32);
  CHECK_THROWS_WITH(cpu::embedding_kernels.embedding_backward(dy, indices, 10, -1),
                    Contains("embedding_backward: expected indices in [0, 10) (num_embeddings), "
                             "got 10 at element 1"));
  CHECK_THROWS_WITH(cpu::embedding_kernels.embedding_backward(dy, indices.to(kFloat32), 10, -1),
                    Contains("expected int64 or int32 indices, got float32"));
  CHECK_THROWS_WITH(cpu::embedding_kernels.embedding_backward(random_tensor({2, 4}, 2, kFloat32),
                                                              indices, 12, -1),
                    Contains("expected grad_output of shape [*indices' shape, D] for indices of "
                             "shape [3], got shape [2, 4]"));
  CHECK_THROWS_WITH(cpu::embedding_kernels.embedding_backward(dy, indices, 12, 12),
                    Contains("expected padding_idx in [-1, 12) (-1 for none), got 12"));

  Generator gen(1);
  for (double p : {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    CHECK_THROWS_WITH(cpu::dropout_kernels.dropout(x, p, gen),
                      Contains("dropout: expected a probability p in [0, 1], got p="));
  }
  CHECK_THROWS_WITH(cpu::dropout_kernels.dropout(arange(4), 0.5, gen),
                    Contains("dropout: expected input of a floating dtype"));
}
