// amp::Fp8Autocast and the delayed-scaling recipe: the fp8 linear layers' forward and backward
// against float64 products of the quantized operands, the scale update rule step by step
// (history, margin, max and most recent, zero and non-finite amaxes), the weight cache, the
// trace, errors, and training that matches float32.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Matchers::Contains;

namespace {

std::vector<double> float64_values(const Tensor& t) {
  return t.to(kFloat64).contiguous().to_vector<double>();
}

// t * scale rounded to `dtype` the way the recipe quantizes (saturating), decoded to float64
// and divided by the scale again: the values the fp8 GEMM multiplies.
std::vector<double> dequantized(const Tensor& t, double scale, DType dtype) {
  std::vector<double> v =
      float64_values((t.to(kFloat32) * scale).to(dtype, CastOptions{.saturate = true}));
  for (double& x : v) x /= scale;
  return v;
}

// [M, K] x [N, K]^T in float64 (row-major vectors).
std::vector<double> product_nt(const std::vector<double>& a, const std::vector<double>& b,
                               int64_t M, int64_t K, int64_t N) {
  std::vector<double> out(size_t(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) s += a[size_t(i * K + k)] * b[size_t(j * K + k)];
      out[size_t(i * N + j)] = s;
    }
  return out;
}

std::vector<double> transposed(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[size_t(j * rows + i)] = a[size_t(i * cols + j)];
  return t;
}

// got within `relative` of the reference's scale (the largest |reference|), element by
// element, and never NaN.
void check_close(const Tensor& got, const std::vector<double>& want, double relative) {
  const std::vector<double> g = float64_values(got);
  REQUIRE(g.size() == want.size());
  double scale = 0.0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", float64 " << want[i]);
    REQUIRE(std::isfinite(g[i]));
    CHECK(std::abs(g[i] - want[i]) <= relative * scale);
  }
}

float scale_of(const amp::DelayedScaling& recipe, const Tensor& weight, ops::Fp8Slot slot) {
  const auto state = recipe.find(weight);
  REQUIRE(state != nullptr);
  return state->scale.to_vector<float>()[size_t(slot)];
}

}  // namespace

TEST_CASE("fp8 linear multiplies the E4M3 casts of input and weight with their scales") {
  manual_seed(21);
  const int64_t M = 6, K = 32, N = 10;
  const Tensor x = randn({M, K}) * 3.0;
  const Tensor w = (randn({N, K}) * 0.2).requires_grad_();
  const Tensor b = randn({N}).requires_grad_();
  amp::DelayedScaling recipe;
  Tensor y;
  {
    amp::Fp8Autocast fp8(recipe);
    CHECK(amp::is_fp8_enabled());
    y = nn::functional::linear(x, w, b);
  }
  CHECK_FALSE(amp::is_fp8_enabled());
  CHECK(y.dtype() == kFloat32);
  // The first step's scales are 1.
  std::vector<double> want = product_nt(dequantized(x, 1.0, kFloat8_e4m3fn),
                                        dequantized(w.detach(), 1.0, kFloat8_e4m3fn), M, K, N);
  const std::vector<double> bias = float64_values(b.detach());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) want[size_t(i * N + j)] += bias[size_t(j)];
  check_close(y, want, 1e-6);
  // And the fp8 result is close to the exact one, to E4M3's precision (3 mantissa bits).
  const Tensor exact = linear(x.to(kFloat64), w.detach().to(kFloat64), b.detach().to(kFloat64));
  check_close(y, float64_values(exact), 0.08);

  // The second step quantizes with 448 / amax of the first step's tensors.
  const double amax_x = float64_values(max(abs(x)))[0],
               amax_w = float64_values(max(abs(w.detach())))[0];
  {
    amp::Fp8Autocast fp8(recipe);
    CHECK(scale_of(recipe, w, ops::kFp8Input) == Approx(448.0 / amax_x).epsilon(1e-6));
    CHECK(scale_of(recipe, w, ops::kFp8Weight) == Approx(448.0 / amax_w).epsilon(1e-6));
    // No backward ran: the gradient's scale has no amax and stays 1.
    CHECK(scale_of(recipe, w, ops::kFp8GradOutput) == 1.0f);
    y = linear(x, w, b);
  }
  const double sx = scale_of(recipe, w, ops::kFp8Input), sw = scale_of(recipe, w, ops::kFp8Weight);
  want = product_nt(dequantized(x, sx, kFloat8_e4m3fn), dequantized(w.detach(), sw, kFloat8_e4m3fn),
                    M, K, N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) want[size_t(i * N + j)] += bias[size_t(j)];
  check_close(y, want, 1e-6);
}

TEST_CASE("fp8 linear's backward multiplies E5M2 gradients with the saved E4M3 operands") {
  manual_seed(22);
  const int64_t M = 8, K = 16, N = 12;
  const Tensor x = (randn({2, M / 2, K}) * 2.0).requires_grad_();
  const Tensor w = (randn({N, K}) * 0.3).requires_grad_();
  const Tensor b = randn({N}).requires_grad_();
  const Tensor g = randn({2, M / 2, N}) * 0.01;
  amp::DelayedScaling recipe;
  {
    amp::Fp8Autocast fp8(recipe);
    const Tensor y = linear(x, w, b);
    CHECK(y.sizes() == Shape{2, M / 2, N});
    y.backward(g);
  }
  const std::vector<double> x8 = dequantized(x.detach().reshape({M, K}), 1.0, kFloat8_e4m3fn);
  const std::vector<double> w8 = dequantized(w.detach(), 1.0, kFloat8_e4m3fn);
  const std::vector<double> g8 = dequantized(g.reshape({M, N}), 1.0, kFloat8_e5m2);
  // dx = g8 @ w8: [M, N] x ([K, N])^T.
  check_close(x.grad().reshape({M, K}), product_nt(g8, transposed(w8, N, K), M, N, K), 1e-6);
  // dw = g8^T @ x8: [N, M] x ([K, M])^T.
  check_close(w.grad(), product_nt(transposed(g8, M, N), transposed(x8, M, K), N, M, K), 1e-6);
  // db from the unquantized gradient.
  std::vector<double> db(static_cast<size_t>(N), 0.0);
  const std::vector<double> gv = float64_values(g);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) db[size_t(j)] += gv[size_t(i * N + j)];
  check_close(b.grad(), db, 1e-6);
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(w.grad().dtype() == kFloat32);
  // The gradient's amax is in the history: the next step scales it to E5M2's 57344.
  const double amax_g = float64_values(max(abs(g)))[0];
  amp::Fp8Autocast next(recipe);
  CHECK(scale_of(recipe, w, ops::kFp8GradOutput) == Approx(57344.0 / amax_g).epsilon(1e-6));
}

TEST_CASE("fp8 linear_gelu is gelu of the fp8 product and differentiates through it") {
  manual_seed(23);
  const Tensor x = randn({4, 16}).requires_grad_();
  const Tensor w = (randn({8, 16}) * 0.25).requires_grad_();
  const Tensor b = randn({8}).requires_grad_();
  amp::DelayedScaling recipe;
  Tensor y, reference;
  {
    amp::Fp8Autocast fp8(recipe);
    y = linear_gelu(x, w, b, "tanh");
    reference = gelu(linear(x, w, b), "tanh");  // the same operands, the same scales
  }
  CHECK(bit_identical(y, reference));
  hg::sum(y).backward();
  // The same operands as fresh leaves, through the unfused form in the same step: the same
  // scales (every layer's first step has scale 1), so the same bits.
  const Tensor x2 = x.detach().clone().requires_grad_(), w2 = w.detach().clone().requires_grad_();
  const Tensor b2 = b.detach().clone().requires_grad_();
  {
    amp::Fp8Autocast fp8(recipe);
    hg::sum(gelu(linear(x2, w2, b2), "tanh")).backward();
  }
  CHECK(bit_identical(x.grad(), x2.grad()));
  CHECK(bit_identical(w.grad(), w2.grad()));
  CHECK(bit_identical(b.grad(), b2.grad()));
}

TEST_CASE("DelayedScaling updates the scales from the amax history as its options say") {
  const Tensor w = full({16, 16}, 0.5).requires_grad_();
  auto step_with_amax = [&](amp::DelayedScaling& recipe, double amax) {
    amp::Fp8Autocast fp8(recipe);
    Tensor x = zeros({2, 16});
    x.narrow(1, 0, 1).fill_(amax);
    linear(x, w);
  };
  auto input_scale = [&](amp::DelayedScaling& recipe) {
    amp::Fp8Autocast fp8(recipe);  // opening the next step applies the update
    return double(scale_of(recipe, w, ops::kFp8Input));
  };
  SECTION("max over a history of 3 steps: an amax leaves after 3 updates") {
    amp::DelayedScaling recipe({.amax_history_len = 3});
    step_with_amax(recipe, 4.0);
    CHECK(input_scale(recipe) == Approx(448.0 / 4.0));  // the empty step records nothing
    step_with_amax(recipe, 2.0);
    CHECK(input_scale(recipe) == Approx(448.0 / 4.0));
    step_with_amax(recipe, 1.0);
    CHECK(input_scale(recipe) == Approx(448.0 / 4.0));
    step_with_amax(recipe, 1.0);  // history now 1, 1, 2
    CHECK(input_scale(recipe) == Approx(448.0 / 2.0));
  }
  SECTION("most recent amax") {
    amp::DelayedScaling recipe(
        {.amax_history_len = 3, .amax_compute_algo = amp::AmaxCompute::MostRecent});
    step_with_amax(recipe, 4.0);
    step_with_amax(recipe, 2.0);
    CHECK(input_scale(recipe) == Approx(448.0 / 2.0));
  }
  SECTION("margin halves the scale per step of margin") {
    amp::DelayedScaling recipe({.margin = 2});
    step_with_amax(recipe, 7.0);
    CHECK(input_scale(recipe) == Approx(448.0 / 7.0 / 4.0));
  }
  SECTION("an amax of 0, inf or NaN keeps the scale") {
    amp::DelayedScaling recipe({.amax_history_len = 1});
    step_with_amax(recipe, 8.0);
    CHECK(input_scale(recipe) == Approx(56.0));
    step_with_amax(recipe, 0.0);
    CHECK(input_scale(recipe) == Approx(56.0));
    step_with_amax(recipe, std::numeric_limits<double>::infinity());
    CHECK(input_scale(recipe) == Approx(56.0));
    step_with_amax(recipe, std::nan(""));
    CHECK(input_scale(recipe) == Approx(56.0));
    step_with_amax(recipe, 1.0);
    CHECK(input_scale(recipe) == Approx(448.0));
  }
  SECTION("the E4M3 format scales gradients to 448") {
    amp::DelayedScaling recipe({.fp8_format = amp::Fp8Format::E4M3});
    CHECK(recipe.fp8_dtype(ops::kFp8GradOutput) == kFloat8_e4m3fn);
    amp::DelayedScaling hybrid;
    CHECK(hybrid.fp8_dtype(ops::kFp8GradOutput) == kFloat8_e5m2);
    CHECK(hybrid.fp8_dtype(ops::kFp8Input) == kFloat8_e4m3fn);
  }
  CHECK_THROWS_WITH(amp::DelayedScaling({.amax_history_len = 0}),
                    Contains("expected amax_history_len >= 1, got 0"));
  CHECK_THROWS_WITH(amp::DelayedScaling({.margin = -1}), Contains("expected margin >= 0, got -1"));
}

TEST_CASE("a value past 448 over the scale saturates instead of becoming NaN") {
  const Tensor w = full({16, 16}, 1.0).requires_grad_();
  amp::DelayedScaling recipe({.amax_history_len = 1});
  {
    amp::Fp8Autocast fp8(recipe);
    linear(full({1, 16}, 1.0), w);  // the input's scale becomes 448
  }
  amp::Fp8Autocast fp8(recipe);
  const Tensor y = linear(full({1, 16}, 100.0), w);  // 100 * 448 saturates to 448 -> 1.0 each
  for (double v : float64_values(y)) CHECK(v == Approx(16.0));
}

TEST_CASE("Fp8Autocast casts each weight once per step and again after an in-place update") {
  Tensor w = randn({8, 16}).requires_grad_();
  const Tensor x = randn({4, 16});
  amp::DelayedScaling recipe;
  {
    amp::Fp8Autocast fp8(recipe);
    linear(x, w);
    linear(x * 2.0, w);
    CHECK(recipe.weight_casts() == 1);
    {
      amp::Fp8Autocast inner(recipe);  // the same recipe: the same step
      linear(x, w);
    }
    CHECK(recipe.weight_casts() == 1);
    {
      NoGradGuard no_grad;
      w.mul_(0.5);  // the optimizer's kind of update
    }
    linear(x, w);
    CHECK(recipe.weight_casts() == 2);
  }
  {
    amp::Fp8Autocast fp8(recipe);
    linear(x, w);
    CHECK(recipe.weight_casts() == 3);
  }
  CHECK(recipe.num_layers() == 1);
}

TEST_CASE("Fp8Autocast composes with autocast and shows in the trace") {
  manual_seed(24);
  const Tensor x = randn({4, 16});
  const Tensor w = randn({8, 16}).requires_grad_();
  amp::DelayedScaling recipe;
  amp::AutocastTrace trace;
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    amp::Fp8Autocast fp8(recipe);
    const Tensor y = linear(x, w);
    CHECK(y.dtype() == kBFloat16);  // the region's dtype
    const Tensor z = mm(x, w.t());  // not an fp8 op: autocast's lower precision
    CHECK(z.dtype() == kBFloat16);
    {
      amp::Fp8Autocast off(recipe, /*enabled=*/false);
      CHECK(linear(x, w).dtype() == kBFloat16);  // autocast's linear
    }
  }
  REQUIRE(trace.entries().size() >= 3);
  const std::string table = trace.table();
  CHECK_THAT(table, Contains("linear") && Contains("fp8"));
  int fp8_entries = 0;
  for (const amp::TraceEntry& e : trace.entries()) fp8_entries += e.fp8;
  CHECK(fp8_entries == 1);
  CHECK(op_runs_in_fp8(OpId::linear));
  CHECK(op_runs_in_fp8(OpId::linear_gelu));
  CHECK_FALSE(op_runs_in_fp8(OpId::mm));
}

TEST_CASE("Fp8Autocast leaves float64 layers exact and refuses what fp8 cannot do") {
  const Tensor w64 = randn({4, 16}, kFloat64).requires_grad_();
  const Tensor x64 = randn({2, 16}, kFloat64);
  amp::DelayedScaling recipe;
  Tensor y;
  {
    amp::Fp8Autocast fp8(recipe);
    y = linear(x64, w64);
  }
  CHECK(bit_identical(y, linear(x64, w64)));
  CHECK(recipe.num_layers() == 0);

  const Tensor w = randn({4, 16}).requires_grad_();
  const Tensor x = randn({2, 16}).requires_grad_();
  amp::Fp8Autocast fp8(recipe);
  const Tensor out = linear(x, w);
  const auto grads = autograd::grad({sum(out)}, {x}, {}, /*retain_graph=*/true,
                                    /*create_graph=*/false);
  CHECK(grads[0].sizes() == x.sizes());
  CHECK_THROWS_WITH(autograd::grad({sum(out)}, {x}, {}, true, /*create_graph=*/true),
                    Contains("no second derivative"));
  CHECK_THROWS_WITH(linear(x.to(kInt32), w), Contains("expected an input and a weight of float32"));
  CHECK_THROWS_WITH(linear(x, randn({4, 15})), Contains("must equal in_features (15)"));
}

TEST_CASE("a small network trains in fp8 to float32's loss") {
  // Regression of a fixed random two-layer network: fp8 (E4M3 forward, E5M2 backward, delayed
  // scaling with a 16-step history) ends within a few percent of float32's loss from the same
  // start, and both learn (loss down by 5x; 6.7x for both when written).
  auto run = [](bool fp8_on) {
    manual_seed(25);
    const Tensor teacher1 = randn({32, 16}) * 0.5, teacher2 = randn({1, 32}) * 0.5;
    nn::Sequential net;
    net.append(std::make_shared<nn::Linear>(16, 32));
    net.append(std::make_shared<nn::Tanh>());
    net.append(std::make_shared<nn::Linear>(32, 1));
    optim::Adam opt(net.parameters(), {.lr = 1e-2});
    amp::DelayedScaling recipe({.amax_history_len = 16});
    std::vector<double> losses;
    for (int step = 0; step < 300; ++step) {
      const Tensor x = randn({64, 16});
      const Tensor target = linear(tanh(linear(x, teacher1)), teacher2);
      opt.zero_grad();
      Tensor loss;
      {
        amp::Fp8Autocast fp8(recipe, fp8_on);
        loss = mse_loss(net.forward(x), target);
      }
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
    }
    double first = 0.0, last = 0.0;
    for (int i = 0; i < 20; ++i) {
      first += losses[size_t(i)] / 20.0;
      last += losses[losses.size() - 1 - size_t(i)] / 20.0;
    }
    return std::pair{first, last};
  };
  const auto [fp32_first, fp32_last] = run(false);
  const auto [fp8_first, fp8_last] = run(true);
  INFO("fp32 " << fp32_first << " -> " << fp32_last << ", fp8 " << fp8_first << " -> " << fp8_last);
  CHECK(fp32_last < fp32_first / 5.0);
  CHECK(fp8_last < fp8_first / 5.0);
  CHECK(fp8_last < 1.5 * fp32_last + 1e-3);
}

TEST_CASE("fp8 linear on CUDA matches the CPU emulation", "[cuda]") {
  HG_REQUIRE_CUDA();
  manual_seed(26);
  const Tensor x = randn({32, 64}) * 2.0;
  const Tensor w = (randn({48, 64}) * 0.1).requires_grad_();
  const Tensor b = randn({48}).requires_grad_();
  const Tensor g = randn({32, 48});
  const Tensor wc = w.detach().to(kCUDA).requires_grad_(),
               bc = b.detach().to(kCUDA).requires_grad_();
  amp::DelayedScaling cpu_recipe, gpu_recipe;
  for (int step = 0; step < 3; ++step) {
    Tensor y_cpu, y_gpu;
    {
      amp::Fp8Autocast fp8(cpu_recipe);
      y_cpu = linear(x, w, b);
    }
    {
      amp::Fp8Autocast fp8(gpu_recipe);
      y_gpu = linear(x.to(kCUDA), wc, bc);
    }
    y_cpu.backward(g);
    y_gpu.backward(g.to(kCUDA));
    check_close(y_gpu.cpu(), float64_values(y_cpu), 1e-5);
    check_close(wc.grad().cpu(), float64_values(w.grad()), 1e-5);
    check_close(bc.grad().cpu(), float64_values(b.grad()), 1e-5);
  }
}

TEST_CASE("the precision audit measures an fp8 linear against its float64 product") {
  manual_seed(27);
  const Tensor x = randn({16, 32});
  const Tensor w = (randn({24, 32}) * 0.2).requires_grad_();
  amp::DelayedScaling recipe;
  for (int warmup = 0; warmup < 2; ++warmup) {  // scales from amaxes, not the first step's 1
    amp::Fp8Autocast fp8(recipe);
    linear(x, w);
  }
  amp::PrecisionAudit audit;
  Tensor y;
  {
    amp::Fp8Autocast fp8(recipe);
    y = linear(x, w);
  }
  audit.stop();
  REQUIRE(audit.ops().size() == 1);
  const amp::OpPrecision& entry = audit.ops()[0];
  REQUIRE(entry.measured());
  CHECK(entry.fp8);
  CHECK_THAT(audit.table(), Contains("fp8"));
  // The audit's error is the norm-wise one of y against the float64 product of the unquantized
  // operands, which the test computes itself; E4M3 keeps 3 mantissa bits, so it is a few
  // percent, far above float32's rounding.
  const std::vector<double> want = float64_values(linear(x.to(kFloat64), w.detach().to(kFloat64)));
  const std::vector<double> got = float64_values(y);
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  const double rel_error = std::sqrt(diff / norm);
  CHECK(entry.rel_error == Approx(rel_error).epsilon(1e-6));
  CHECK(entry.rel_error > 1e-3);
  CHECK(entry.rel_error < 0x1p-4);
}

TEST_CASE("fp8 linear frees its saved operands after backward, as every op does") {
  const Tensor x = randn({4, 16}).requires_grad_();
  const Tensor w = randn({8, 16}).requires_grad_();
  amp::DelayedScaling recipe;
  Tensor y;
  {
    amp::Fp8Autocast fp8(recipe);
    y = hg::sum(linear_gelu(x, w, Tensor(), "none"));
  }
  y.backward();
  CHECK_THROWS_WITH(y.backward(), Contains("retain_graph"));
}

TEST_CASE("a checkpointed segment recomputes its fp8 layers in fp8 and backward runs without") {
  // The recipe is part of the autocast mode: the recomputation in backward replays it, so the
  // gradients are those of the segment run plainly; a linear called while backward runs (with
  // the mode off) is not fp8.
  manual_seed(28);
  const Tensor x = randn({8, 16});
  auto run = [&](bool checkpointed) {
    manual_seed(29);
    const Tensor w1 = (randn({32, 16}) * 0.3).requires_grad_();
    const Tensor w2 = (randn({4, 32}) * 0.3).requires_grad_();
    amp::DelayedScaling recipe;
    Tensor loss;
    {
      amp::Fp8Autocast fp8(recipe);
      auto segment = [&](const Tensor& input) { return gelu(linear(input, w1)); };
      const Tensor h = checkpointed ? hg::utils::checkpoint(segment, x) : segment(x);
      loss = hg::sum(linear(h, w2));
    }
    loss.backward();
    CHECK(recipe.weight_casts() == 2);  // the recomputation reused the step's weight cast
    return std::pair{w1.grad(), w2.grad()};
  };
  const auto [plain1, plain2] = run(false);
  const auto [ckpt1, ckpt2] = run(true);
  CHECK(bit_identical(plain1, ckpt1));
  CHECK(bit_identical(plain2, ckpt2));
  amp::DelayedScaling recipe;
  amp::Fp8Autocast fp8(recipe);
  {
    AutocastModeGuard off(autocast_mode().all_off());  // as the engine runs backward
    CHECK_FALSE(amp::is_fp8_enabled());
  }
  CHECK(amp::is_fp8_enabled());
}
