// The CPU multi_tensor table's GradScaler and fused-step kernels (kernel/multi_tensor.h,
// cpu/multi_tensor.cpp), called directly: the unscale against float64 references, the flags, one
// fused step of each optimizer against its float64 formula, step counts of both kinds, skipped
// steps that change nothing, and bad arguments refused before anything is written. (The
// optimizers' tests cover the same kernels through SGD, Adam, RMSprop and Adagrad over many
// steps; tests/cpu/multi_tensor_norms_test.cpp the norms and checks.)
#include <cmath>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/nn_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Matchers::Contains;

namespace {

const kernel::MultiTensorKernels& k = cpu::multi_tensor_kernels;

Tensor scalar(double value) { return full({1}, value, kFloat32); }

// The bytes of a tensor, to compare "unchanged" exactly (NaN included).
std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

}  // namespace

TEST_CASE("multi_tensor unscale_and_check_ multiplies once and flags what it read",
          "[multi_tensor]") {
  const double scale = 1024.0;
  const Tensor inv_scale = k.reciprocal_scale(scalar(scale));
  CHECK(inv_scale.item<float>() == float(1.0 / scale));
  // 3.0's reciprocal is not exact: float(1 / 3) computed in double.
  CHECK(k.reciprocal_scale(scalar(3.0)).item<float>() == float(1.0 / 3.0));

  std::vector<Tensor> tensors;
  std::vector<std::vector<double>> before;
  uint64_t seed = 1;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{1}, Shape{37}, Shape{70001}, Shape{5, 9}}) {
      Tensor t = random_tensor(shape, seed++, dtype, -4000.0, 4000.0);
      if (shape.size() == 2) t = strided_copy(t);  // a strided tensor, written back in place
      before.push_back(values(t));
      tensors.push_back(t);
    }
  }
  const Tensor found_inf = k.new_flag(kCPU);
  CHECK(found_inf.item<float>() == 0.0f);
  k.unscale_and_check_(tensors, inv_scale, found_inf);
  CHECK(found_inf.item<float>() == 0.0f);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const DType dtype = tensors[i].dtype();
    const std::vector<double> got = values(tensors[i]);
    for (size_t j = 0; j < got.size(); ++j) {
      // One multiply in the compute type, one rounding to the dtype.
      const double want = dtype == kFloat64 ? before[i][j] * double(float(1.0 / scale))
                                            : double(float(before[i][j]) * float(1.0 / scale));
      const double rounded = Tensor(full({}, want, kFloat64)).to(dtype).item<double>();
      REQUIRE(got[j] == rounded);
    }
  }

  // A non-finite value read sets the flag (every value is still multiplied); a later clean
  // call never clears it.
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    for (DType dtype : kAllDTypes) {
      std::vector<double> v = values(random_tensor({100}, 9, dtype));
      v[50] = bad;
      Tensor t = tensor(v, {100}, kFloat64).to(dtype);
      const Tensor flag = k.new_flag(kCPU);
      k.unscale_and_check_(std::vector<Tensor>{t}, k.reciprocal_scale(scalar(2.0)), flag);
      CHECK(flag.item<float>() == 1.0f);
      CHECK(values(t)[0] == Tensor(full({}, v[0] * 0.5, kFloat64)).to(dtype).item<double>());
      k.unscale_and_check_(std::vector<Tensor>{random_tensor({4}, 3, dtype)},
                           k.reciprocal_scale(scalar(2.0)), flag);
      CHECK(flag.item<float>() == 1.0f);
    }
  }
}

TEST_CASE("multi_tensor GradScaler kernels refuse bad arguments and change nothing",
          "[multi_tensor]") {
  Tensor g = random_tensor({8}, 4, kFloat32);
  const std::vector<uint8_t> g_bytes = bytes_of(g);
  const Tensor flag = k.new_flag(kCPU);
  const std::vector<Tensor> list{g};
  CHECK_THROWS_WITH(k.unscale_and_check_(list, full({2}, 0.5, kFloat32), flag),
                    Contains("unscale_and_check_: expected inv_scale to be a one-element float32"));
  CHECK_THROWS_WITH(k.unscale_and_check_(list, full({1}, 0.5, kFloat64), flag),
                    Contains("got 1 element(s) of float64"));
  CHECK_THROWS_WITH(k.unscale_and_check_(list, scalar(0.5), Tensor()),
                    Contains("expected found_inf to be a one-element float32 tensor"));
  CHECK_THROWS_WITH(
      k.unscale_and_check_(std::vector<Tensor>{g, full({3}, 1, kInt32)}, scalar(0.5), flag),
      Contains("unscale_and_check_: expected floating tensors, got one of int32 (index 1)"));
  CHECK(bytes_of(g) == g_bytes);  // the first, valid, tensor was not touched either
  CHECK(flag.item<float>() == 0.0f);
  CHECK_THROWS_WITH(k.sum_flags({}), Contains("sum_flags: expected at least one flag, got none"));
  CHECK_THROWS_WITH(k.reciprocal_scale(full({1}, 2, kInt32)),
                    Contains("reciprocal_scale: expected the scale to be a one-element float32"));
#if HALFGRAD_HAS_CUDA
  CHECK_THROWS_WITH(k.new_flag(Device(kCUDA, 0)), Contains("new_flag: expected the CPU"));
#endif
  // Flags add in order.
  const std::vector<Tensor> flags{scalar(1), scalar(0), scalar(1), scalar(1)};
  CHECK(k.sum_flags(flags).item<float>() == 3.0f);
}

namespace {

// One Adam(W) step of element values in float64, torch's formulas (optim/adam.h's header).
double adam_reference(double p, double g, double& m, double& v, double step,
                      const kernel::AdamArgs& a, double inv_scale) {
  g *= inv_scale;
  if (a.maximize) g = -g;
  if (a.weight_decay != 0) {
    if (a.decoupled_weight_decay) {
      p *= 1 - a.lr * a.weight_decay;
    } else {
      g += a.weight_decay * p;
    }
  }
  m += (1 - a.beta1) * (g - m);
  v = a.beta2 * v + (1 - a.beta2) * g * g;
  const double denom = std::sqrt(v) / std::sqrt(1 - std::pow(a.beta2, step)) + a.eps;
  return p - a.lr / (1 - std::pow(a.beta1, step)) * m / denom;
}

}  // namespace

TEST_CASE("multi_tensor fused_adam_ takes one step of torch's formula and advances the count",
          "[multi_tensor]") {
  for (const bool decoupled : {false, true}) {
    for (DType step_dtype : {kInt64, kFloat32}) {
      INFO("decoupled " << decoupled << ", step count " << dtype_name(step_dtype));
      const int64_t n = 1000;
      const Tensor param = random_tensor({n}, 11, kFloat32);
      const Tensor grad = random_tensor({n}, 12, kFloat32, -300.0, 300.0);
      const Tensor exp_avg = random_tensor({n}, 13, kFloat32, -0.1, 0.1);
      const Tensor exp_avg_sq = random_tensor({n}, 14, kFloat32, 0.0, 0.01);
      const std::vector<double> p0 = values(param), g0 = values(grad);
      std::vector<double> m = values(exp_avg), v = values(exp_avg_sq);
      const Tensor step = full({1}, 4, step_dtype);  // four steps taken before this one
      const kernel::AdamArgs args{1e-2, 0.9, 0.999, 1e-8, 0.05, decoupled, false, false};
      kernel::AdamTensors t;
      t.params = {param};
      t.grads = {grad};
      t.exp_avgs = {exp_avg};
      t.exp_avg_sqs = {exp_avg_sq};
      t.steps = {step};
      k.fused_adam_(t, args, /*grad_scale=*/scalar(100.0), /*found_inf=*/scalar(0.0));
      CHECK(step.item<double>() == 5.0);
      const std::vector<double> got = values(param);
      for (int64_t i = 0; i < n; ++i) {
        const double want = adam_reference(p0[size_t(i)], g0[size_t(i)], m[size_t(i)], v[size_t(i)],
                                           5.0, args, double(float(1.0 / 100.0)));
        REQUIRE(got[size_t(i)] == Approx(want).epsilon(1e-5).margin(1e-6));
      }
      expect_close(values(exp_avg), m, {1e-7, 1e-5}, "exp_avg");
      expect_close(values(exp_avg_sq), v, {1e-9, 1e-5}, "exp_avg_sq");
    }
  }
}

TEST_CASE("multi_tensor fused steps of SGD RMSprop and Adagrad match their float64 formulas",
          "[multi_tensor]") {
  const int64_t n = 777;
  const std::vector<double> p0 = values(random_tensor({n}, 21, kFloat32));
  const std::vector<double> g0 = values(random_tensor({n}, 22, kFloat32));
  SECTION("SGD with momentum: the first step sets the buffer, the next uses it") {
    const Tensor param = tensor(p0, {n}, kFloat32), grad = tensor(g0, {n}, kFloat32);
    const Tensor buffer = zeros({n}, kFloat32), step = full({1}, 0, kInt64);
    const kernel::SGDArgs args{0.1, 0.9, 0.25, 0.01, false, false};
    kernel::SGDTensors t;
    t.params = {param};
    t.grads = {grad};
    t.momentum_buffers = {buffer};
    t.steps = {step};
    std::vector<double> p = p0;
    std::vector<double> b(static_cast<size_t>(n));
    for (int s = 0; s < 2; ++s) {
      k.fused_sgd_(t, args, Tensor(), Tensor());
      for (size_t i = 0; i < size_t(n); ++i) {
        const double g = g0[i] + 0.01 * p[i];
        b[i] = s == 0 ? g : 0.9 * b[i] + 0.75 * g;
        p[i] -= 0.1 * b[i];
      }
    }
    CHECK(step.item<int64_t>() == 2);
    expect_close(values(param), p, {1e-6, 1e-5}, "param");
    expect_close(values(buffer), b, {1e-6, 1e-5}, "momentum_buffer");
  }
  SECTION("RMSprop centered with momentum") {
    const Tensor param = tensor(p0, {n}, kFloat32), grad = tensor(g0, {n}, kFloat32);
    const Tensor square_avg = zeros({n}, kFloat32), grad_avg = zeros({n}, kFloat32);
    const Tensor momentum_buffer = zeros({n}, kFloat32), step = full({1}, 0.0, kFloat32);
    const kernel::RMSpropArgs args{0.01, 0.99, 1e-8, 0.0, 0.5, true, false};
    kernel::RMSpropTensors t;
    t.params = {param};
    t.grads = {grad};
    t.square_avgs = {square_avg};
    t.grad_avgs = {grad_avg};
    t.momentum_buffers = {momentum_buffer};
    t.steps = {step};
    k.fused_rmsprop_(t, args, Tensor(), Tensor());
    std::vector<double> p = p0;
    for (size_t i = 0; i < size_t(n); ++i) {
      const double v = 0.01 * g0[i] * g0[i], ga = 0.01 * g0[i];
      const double buf = g0[i] / (std::sqrt(v - ga * ga) + 1e-8);
      p[i] -= 0.01 * buf;
    }
    CHECK(step.item<float>() == 1.0f);
    expect_close(values(param), p, {1e-6, 1e-4}, "param");
  }
  SECTION("Adagrad with lr decay reads the step count") {
    const Tensor param = tensor(p0, {n}, kFloat32), grad = tensor(g0, {n}, kFloat32);
    const Tensor sum = full({n}, 0.1, kFloat32), step = full({1}, 9, kInt64);
    const kernel::AdagradArgs args{0.1, 0.5, 0.0, 1e-10, false};
    kernel::AdagradTensors t;
    t.params = {param};
    t.grads = {grad};
    t.sums = {sum};
    t.steps = {step};
    k.fused_adagrad_(t, args, Tensor(), Tensor());
    std::vector<double> p = p0;
    const double clr = 0.1 / (1 + 9 * 0.5);  // the tenth step
    for (size_t i = 0; i < size_t(n); ++i) {
      p[i] -= clr * g0[i] / (std::sqrt(double(float(0.1)) + g0[i] * g0[i]) + 1e-10);
    }
    CHECK(step.item<int64_t>() == 10);
    expect_close(values(param), p, {1e-6, 1e-5}, "param");
  }
}

TEST_CASE("multi_tensor fused steps skip on found_inf and refuse bad lists untouched",
          "[multi_tensor]") {
  const Tensor param = random_tensor({64}, 31, kBFloat16),
               grad = random_tensor({64}, 32, kBFloat16);
  const Tensor exp_avg = zeros({64}, kFloat32), exp_avg_sq = zeros({64}, kFloat32);
  const Tensor step = full({1}, 3, kInt64);
  kernel::AdamTensors t;
  t.params = {param};
  t.grads = {grad};
  t.exp_avgs = {exp_avg};
  t.exp_avg_sqs = {exp_avg_sq};
  t.steps = {step};
  const kernel::AdamArgs args{1e-3, 0.9, 0.999, 1e-8, 0.0, true, false, false};
  const std::vector<uint8_t> p_bytes = bytes_of(param);

  k.fused_adam_(t, args, scalar(8.0), /*found_inf=*/scalar(1.0));
  CHECK(bytes_of(param) == p_bytes);
  CHECK(step.item<int64_t>() == 3);
  CHECK(values(exp_avg) == std::vector<double>(64, 0.0));

  kernel::AdamTensors short_list = t;
  short_list.steps.clear();
  CHECK_THROWS_WITH(k.fused_adam_(short_list, args, Tensor(), Tensor()),
                    Contains("fused_adam_: expected one gradient, exp_avg, exp_avg_sq and step per "
                             "parameter (1), got 1, 1, 1, 0 and 0"));
  kernel::AdamTensors wrong_state = t;
  wrong_state.exp_avg_sqs = {zeros({64}, kBFloat16)};
  CHECK_THROWS_WITH(
      k.fused_adam_(wrong_state, args, Tensor(), Tensor()),
      Contains("expected exp_avg_sq of parameter 0 to be a contiguous float32 tensor"));
  kernel::AdamTensors wrong_step = t;
  wrong_step.steps = {full({1}, 3, kInt32)};
  CHECK_THROWS_WITH(k.fused_adam_(wrong_step, args, Tensor(), Tensor()),
                    Contains("expected the step count of parameter 0 to be a one-element float32 "
                             "or int64 tensor on cpu, got 1 element(s) of int32"));
  kernel::AdamTensors strided = t;
  strided.grads = {random_tensor({64, 2}, 33, kBFloat16).select(1, 0)};
  CHECK_THROWS_WITH(k.fused_adam_(strided, args, Tensor(), Tensor()),
                    Contains("expected a contiguous gradient on cpu, got a non-contiguous one"));
  kernel::AdamArgs bf16 = args;
  bf16.bf16_params = true;
  CHECK_THROWS_WITH(k.fused_adam_(t, bf16, Tensor(), Tensor()),
                    Contains("bf16_params expects a first Philox block per parameter (1), got 0"));
  CHECK_THROWS_WITH(k.fused_adam_(t, args, full({1}, 8.0, kFloat64), Tensor()),
                    Contains("expected grad_scale to be a one-element float32 tensor"));
  CHECK(bytes_of(param) == p_bytes);
  CHECK(step.item<int64_t>() == 3);
}
