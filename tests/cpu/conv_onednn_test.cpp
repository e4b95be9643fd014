// Tests for conv2d's oneDNN convolution primitives and the choice between them and im2col
// (cpu/onednn_conv.cpp, NOTE [oneDNN convolutions]). Each direction on the forced oneDNN path
// is checked against float64 direct-convolution loops written here, in float32, bfloat16 and
// float16 (which runs the float32 primitives on widened tensors);
// the forced settings must show in conv_choices(), and auto's choice must give the same bits
// on every call.
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/nn_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/onednn.h"
#include "halfgrad/cpu/onednn_conv.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

namespace {

struct Case {
  const char* name;
  int64_t N, C, H, W, O, kH, kW;
  kernel::Conv2dParams params;
  bool bias;
};

const Case kCases[] = {
    {"3x3 padding 1 (the CNN's first layer)", 4, 1, 12, 12, 8, 3, 3, {.padding = {1, 1}}, true},
    {"3x3 padding 1 many channels", 3, 16, 9, 9, 32, 3, 3, {.padding = {1, 1}}, true},
    {"stride 2 non-square", 2, 3, 9, 7, 4, 3, 3, {.stride = {2, 2}, .padding = {1, 1}}, true},
    {"dilation 2 without bias", 2, 4, 9, 8, 6, 3, 3, {.dilation = {2, 2}}, false},
    {"groups 2", 2, 4, 6, 7, 6, 3, 3, {.padding = {1, 1}, .groups = 2}, true},
    {"depthwise batch 1",
     1,
     8,
     7,
     7,
     8,
     3,
     3,
     {.stride = {2, 1}, .padding = {1, 1}, .groups = 8},
     false},
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
    {"1x1 batch 1", 1, 5, 4, 4, 2, 1, 1, {}, false},
};

struct Reference {
  std::vector<double> y, dx, dw, db;
};

// y[n, o, oh, ow] = b[o] + sum x[n, c, ih, iw] w[o, c', ki, kj] over o's group's channels, with
// ih = oh sH - pH + ki dH (iw alike) inside the image; dx, dw, db the adjoints for dy.
Reference reference(const Case& c, const Tensor& x, const Tensor& w, const Tensor& b,
                    const Tensor& dy) {
  const kernel::Conv2dParams& p = c.params;
  const int64_t G = p.groups, Cg = c.C / G, Og = c.O / G;
  const int64_t Hout = (c.H + 2 * p.padding[0] - p.dilation[0] * (c.kH - 1) - 1) / p.stride[0] + 1;
  const int64_t Wout = (c.W + 2 * p.padding[1] - p.dilation[1] * (c.kW - 1) - 1) / p.stride[1] + 1;
  const std::vector<double> xv = values(x), wv = values(w), bv = optional_values(b),
                            dyv = values(dy);
  Reference r;
  r.y.assign(size_t(c.N * c.O * Hout * Wout), 0.0);
  r.dx.assign(xv.size(), 0.0);
  r.dw.assign(wv.size(), 0.0);
  r.db.assign(size_t(c.O), 0.0);
  for (int64_t n = 0; n < c.N; ++n) {
    for (int64_t o = 0; o < c.O; ++o) {
      const int64_t group = o / Og;
      for (int64_t oh = 0; oh < Hout; ++oh) {
        for (int64_t ow = 0; ow < Wout; ++ow) {
          const size_t yi = size_t(((n * c.O + o) * Hout + oh) * Wout + ow);
          double sum = bv.empty() ? 0.0 : bv[size_t(o)];
          r.db[size_t(o)] += dyv[yi];
          for (int64_t ci = 0; ci < Cg; ++ci) {
            for (int64_t ki = 0; ki < c.kH; ++ki) {
              for (int64_t kj = 0; kj < c.kW; ++kj) {
                const int64_t ih = oh * p.stride[0] - p.padding[0] + ki * p.dilation[0];
                const int64_t iw = ow * p.stride[1] - p.padding[1] + kj * p.dilation[1];
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const size_t xi = size_t(((n * c.C + group * Cg + ci) * c.H + ih) * c.W + iw);
                const size_t wi = size_t(((o * Cg + ci) * c.kH + ki) * c.kW + kj);
                sum += xv[xi] * wv[wi];
                r.dx[xi] += dyv[yi] * wv[wi];
                r.dw[wi] += dyv[yi] * xv[xi];
              }
            }
          }
          r.y[yi] = sum;
        }
      }
    }
  }
  return r;
}

// Restores the automatic choice when a test ends, however it ends.
struct PathGuard {
  explicit PathGuard(cpu::ConvPath path) { cpu::set_conv_path(path); }
  ~PathGuard() { cpu::set_conv_path(cpu::ConvPath::Auto); }
};

// Runs every case in dtype on the path now set and checks it against the float64 loops.
void check_against_reference(DType dtype, uint64_t seed) {
  for (const Case& c : kCases) {
    INFO(c.name << " " << dtype);
    const Tensor x = random_tensor({c.N, c.C, c.H, c.W}, seed++, dtype);
    const Tensor w = random_tensor({c.O, c.C / c.params.groups, c.kH, c.kW}, seed++, dtype);
    const Tensor b = c.bias ? random_tensor({c.O}, seed++, dtype) : Tensor();
    const Tensor y = cpu::conv_kernels.conv2d(x, w, b, c.params);
    const Tensor dy = random_tensor(y.sizes(), seed++, dtype);
    const Reference r = reference(c, x, w, b, dy);
    expect_result(y, dtype, y.sizes());
    expect_close(values(y), r.y, forward_tolerance(dtype), "y");
    const kernel::Conv2dBackward g =
        cpu::conv_kernels.conv2d_backward(dy, x, w, c.bias, c.params, {true, true, true});
    expect_result(g.dx, dtype, x.sizes());
    expect_result(g.dweight, dtype, w.sizes());
    expect_close(values(g.dx), r.dx, backward_tolerance(dtype), "dx");
    expect_close(values(g.dweight), r.dw, backward_tolerance(dtype), "dweight");
    if (c.bias) {
      expect_result(g.dbias, dtype, {c.O});
      expect_close(values(g.dbias), r.db, backward_tolerance(dtype), "dbias");
    } else {
      CHECK_FALSE(g.dbias.defined());
    }
    // The gradients asked for one at a time match the ones asked for together.
    const kernel::Conv2dBackward only_bias =
        cpu::conv_kernels.conv2d_backward(dy, x, w, c.bias, c.params, {false, false, true});
    CHECK_FALSE(only_bias.dx.defined());
    CHECK_FALSE(only_bias.dweight.defined());
    if (c.bias) expect_close(values(only_bias.dbias), r.db, backward_tolerance(dtype), "dbias");
    const kernel::Conv2dBackward only_weight =
        cpu::conv_kernels.conv2d_backward(dy, x, w, c.bias, c.params, {false, true, false});
    CHECK(values(only_weight.dweight) == values(g.dweight));
  }
}

}  // namespace

TEST_CASE("conv2d on forced oneDNN matches float64 loops in float32 bfloat16 and float16",
          "[nn_kernels][conv2d][onednn]") {
  const PathGuard guard(cpu::ConvPath::OneDNN);
  CHECK(cpu::get_conv_path() == cpu::ConvPath::OneDNN);
  uint64_t seed = 7000;
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) check_against_reference(dtype, seed += 100);
  // The forced path shows in every choice: oneDNN wherever it has a real kernel, im2col only
  // where it has none.
  const std::vector<cpu::ConvChoice> choices = cpu::conv_choices();
  REQUIRE_FALSE(choices.empty());
  int64_t on_onednn = 0, float16_on_onednn = 0;
  for (const cpu::ConvChoice& choice : choices) {
    INFO(cpu::describe(choice));
    CHECK(choice.set);
    CHECK_FALSE(choice.measured);
    if (choice.path == cpu::ConvPath::OneDNN) {
      ++on_onednn;
      if (choice.dtype == kFloat16) ++float16_on_onednn;
    }
    if (choice.path == cpu::ConvPath::Im2col) {
      // im2col under a forced oneDNN only where oneDNN offers no kernel but its reference.
      const bool reference_only = choice.onednn_kernel.rfind("ref", 0) == 0 ||
                                  choice.onednn_kernel.find("could not") != std::string::npos ||
                                  choice.onednn_kernel.find("unimplemented") != std::string::npos;
      CHECK(reference_only);
    }
  }
  if (cpu::onednn_enabled()) {
    // The float32 forward of an ordinary 3x3 convolution runs on oneDNN, and float16 on its
    // float32 primitives.
    CHECK(on_onednn > 0);
    CHECK(float16_on_onednn > 0);
  } else {
    CHECK(on_onednn == 0);
  }
}

TEST_CASE("conv2d on forced im2col matches float64 loops and takes no oneDNN path",
          "[nn_kernels][conv2d][onednn]") {
  const PathGuard guard(cpu::ConvPath::Im2col);
  uint64_t seed = 7500;
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) check_against_reference(dtype, seed += 100);
  const std::vector<cpu::ConvChoice> choices = cpu::conv_choices();
  for (const cpu::ConvChoice& choice : choices) {
    INFO(cpu::describe(choice));
    CHECK(choice.path == cpu::ConvPath::Im2col);
    CHECK(choice.set);
  }
}

TEST_CASE("conv2d's automatic choice gives the same bits on every call",
          "[nn_kernels][conv2d][onednn]") {
  const PathGuard guard(cpu::ConvPath::Auto);
  cpu::detail::clear_conv_choices();
  const kernel::Conv2dParams p{.padding = {1, 1}};
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) {
    INFO(dtype);
    const Tensor x = random_tensor({8, 16, 14, 14}, 8001, dtype);
    const Tensor w = random_tensor({32, 16, 3, 3}, 8002, dtype);
    const Tensor b = random_tensor({32}, 8003, dtype);
    const Tensor dy = random_tensor({8, 32, 14, 14}, 8004, dtype);
    // The first call measures; the later ones look the choice up.
    const Tensor y1 = cpu::conv_kernels.conv2d(x, w, b, p);
    const kernel::Conv2dBackward g1 =
        cpu::conv_kernels.conv2d_backward(dy, x, w, true, p, {true, true, true});
    for (int call = 0; call < 3; ++call) {
      CHECK(values(cpu::conv_kernels.conv2d(x, w, b, p)) == values(y1));
      const kernel::Conv2dBackward g =
          cpu::conv_kernels.conv2d_backward(dy, x, w, true, p, {true, true, true});
      CHECK(values(g.dx) == values(g1.dx));
      CHECK(values(g.dweight) == values(g1.dweight));
      CHECK(values(g.dbias) == values(g1.dbias));
    }
  }
  const std::vector<cpu::ConvChoice> choices = cpu::conv_choices();
  if (cpu::onednn_enabled()) {
    // Three dtypes, three directions, each measured once and then looked up.
    CHECK(choices.size() == 9);
    for (const cpu::ConvChoice& choice : choices) {
      INFO(cpu::describe(choice));
      CHECK_FALSE(choice.set);
      CHECK(choice.calls == 4);
      if (choice.measured) CHECK(choice.microseconds.size() == 2);
    }
  }
}

TEST_CASE("conv2d on oneDNN leaves float64 on im2col", "[nn_kernels][conv2d][onednn]") {
  const PathGuard guard(cpu::ConvPath::OneDNN);
  const kernel::Conv2dParams p{.padding = {1, 1}};
  const Tensor x = random_tensor({2, 3, 5, 5}, 8101, kFloat64);
  const Tensor w = random_tensor({4, 3, 3, 3}, 8102, kFloat64);
  const Tensor y = cpu::conv_kernels.conv2d(x, w, Tensor(), p);
  CHECK(y.dtype() == kFloat64);
  for (const cpu::ConvChoice& choice : cpu::conv_choices()) CHECK(choice.dtype != kFloat64);
}

TEST_CASE("conv2d on forced oneDNN handles an empty batch", "[nn_kernels][conv2d][onednn]") {
  const PathGuard guard(cpu::ConvPath::OneDNN);
  const kernel::Conv2dParams p{.padding = {1, 1}};
  const Tensor x = random_tensor({0, 3, 5, 5}, 8201, kFloat32);
  const Tensor w = random_tensor({4, 3, 3, 3}, 8202, kFloat32);
  const Tensor b = random_tensor({4}, 8203, kFloat32);
  const Tensor y = cpu::conv_kernels.conv2d(x, w, b, p);
  CHECK(y.sizes() == Shape{0, 4, 5, 5});
  const kernel::Conv2dBackward g =
      cpu::conv_kernels.conv2d_backward(y, x, w, true, p, {true, true, true});
  CHECK(g.dx.sizes() == x.sizes());
  // No image: the weight and bias gradients are zero.
  for (double v : values(g.dweight)) CHECK(v == 0.0);
  for (double v : values(g.dbias)) CHECK(v == 0.0);
}
