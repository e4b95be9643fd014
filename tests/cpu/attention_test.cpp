// The CPU attention kernels (cpu/attention.cpp, NOTE [CPU attention]) against float64 loops:
// out, lse and the three gradients, in every floating dtype, causal or not, L != S, on 2- to
// 5-dim inputs and on the strided views nn::MultiheadAttention hands them.
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "halfgrad/config.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/cpu/attention.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/linalg.h"
#include "nn_test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

// One head in float64: q [L, E], k and v [S, E] (row-major values), dout [L, E].
struct Head {
  std::vector<double> out, lse, dq, dk, dv;
};

Head reference_head(const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& dout, int64_t L,
                    int64_t S, int64_t E, bool causal, double scale) {
  Head h{std::vector<double>(size_t(L * E)), std::vector<double>(size_t(L)),
         std::vector<double>(size_t(L * E)), std::vector<double>(size_t(S * E)),
         std::vector<double>(size_t(S * E))};
  for (int64_t i = 0; i < L; ++i) {
    std::vector<double> p(size_t(S), 0.0);
    double top = -INFINITY;
    for (int64_t j = 0; j < S && (!causal || j <= i); ++j) {
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += q[size_t(i * E + e)] * k[size_t(j * E + e)];
      p[size_t(j)] = dot * scale;
      top = std::max(top, p[size_t(j)]);
    }
    double total = 0;
    for (int64_t j = 0; j < S && (!causal || j <= i); ++j) {
      total += p[size_t(j)] = std::exp(p[size_t(j)] - top);
    }
    h.lse[size_t(i)] = top + std::log(total);
    for (int64_t j = 0; j < S; ++j) p[size_t(j)] /= total;  // masked keys stay 0
    // out = P v; dv += P^T dout; dP = dout v^T; dS = P (dP - rowsum(dP P)).
    std::vector<double> dp(size_t(S), 0.0);
    double delta = 0;
    for (int64_t j = 0; j < S; ++j) {
      for (int64_t e = 0; e < E; ++e) {
        h.out[size_t(i * E + e)] += p[size_t(j)] * v[size_t(j * E + e)];
        h.dv[size_t(j * E + e)] += p[size_t(j)] * dout[size_t(i * E + e)];
        dp[size_t(j)] += dout[size_t(i * E + e)] * v[size_t(j * E + e)];
      }
      delta += dp[size_t(j)] * p[size_t(j)];
    }
    for (int64_t j = 0; j < S; ++j) {
      const double ds = p[size_t(j)] * (dp[size_t(j)] - delta) * scale;
      for (int64_t e = 0; e < E; ++e) {
        h.dq[size_t(i * E + e)] += ds * k[size_t(j * E + e)];
        h.dk[size_t(j * E + e)] += ds * q[size_t(i * E + e)];
      }
    }
  }
  return h;
}

// Every head of q [N..., L, E], k and v [N..., S, E], dout like q, concatenated in order.
Head reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, bool causal,
               double scale) {
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), N = q.numel() / (L * E);
  const Tensor q3 = f64(q).reshape({N, L, E}), k3 = f64(k).reshape({N, S, E}),
               v3 = f64(v).reshape({N, S, E}), d3 = f64(dout).reshape({N, L, E});
  Head all;
  for (int64_t n = 0; n < N; ++n) {
    const Head h =
        reference_head(values(q3.select(0, n)), values(k3.select(0, n)), values(v3.select(0, n)),
                       values(d3.select(0, n)), L, S, E, causal, scale);
    for (auto [to, from] :
         {std::pair{&all.out, &h.out}, std::pair{&all.lse, &h.lse}, std::pair{&all.dq, &h.dq},
          std::pair{&all.dk, &h.dk}, std::pair{&all.dv, &h.dv}}) {
      to->insert(to->end(), from->begin(), from->end());
    }
  }
  return all;
}

// 16-bit scores and probabilities are rounded before their products: looser than the
// elementwise kernels' tolerances.
Tolerance attention_tolerance(DType dtype) {
  return per_dtype<Tolerance>(dtype, {1e-12, 1e-10}, {2e-5, 1e-4}, {6e-3, 6e-3}, {4e-2, 4e-2});
}

// [B, H, T, E] as nn::MultiheadAttention makes it: a transposed view of [B, T, H, E].
Tensor head_view(const Shape& bhte, uint64_t seed, DType dtype) {
  return random_tensor({bhte[0], bhte[2], bhte[1], bhte[3]}, seed, dtype, -2.0, 2.0)
      .transpose(1, 2);
}

struct Case {
  const char* name;
  Tensor q, k, v;
};

std::vector<Case> cases(DType dtype) {
  return {
      {"2-d, L 5, S 7", random_tensor({5, 4}, 1, dtype, -2, 2),
       random_tensor({7, 4}, 2, dtype, -2, 2), random_tensor({7, 4}, 3, dtype, -2, 2)},
      {"3-d, L 4, S 6", random_tensor({3, 4, 8}, 4, dtype, -2, 2),
       random_tensor({3, 6, 8}, 5, dtype, -2, 2), random_tensor({3, 6, 8}, 6, dtype, -2, 2)},
      {"4-d views of [B, T, H, E]", head_view({2, 3, 5, 4}, 7, dtype),
       head_view({2, 3, 5, 4}, 8, dtype), head_view({2, 3, 5, 4}, 9, dtype)},
      {"5-d, L 1, S 3", random_tensor({2, 2, 2, 1, 3}, 10, dtype, -2, 2),
       random_tensor({2, 2, 2, 3, 3}, 11, dtype, -2, 2),
       random_tensor({2, 2, 2, 3, 3}, 12, dtype, -2, 2)},
      {"E 1, S 1", random_tensor({2, 3, 1}, 13, dtype, -2, 2),
       random_tensor({2, 1, 1}, 14, dtype, -2, 2), random_tensor({2, 1, 1}, 15, dtype, -2, 2)},
      // E a whole number of AVX-512 vectors, S not, L != S
      {"3-d, L 7, S 21, E 16", random_tensor({2, 7, 16}, 17, dtype, -2, 2),
       random_tensor({2, 21, 16}, 18, dtype, -2, 2), random_tensor({2, 21, 16}, 19, dtype, -2, 2)},
      // (values under a third of the others': with E 32 and inputs up to 2 the scores grow
      // large enough that a score rounded to bfloat16 before its exponential, as the batched
      // path rounds it, moves P by more than the tolerance)
      {"4-d, L 9, S 9, E 32", random_tensor({2, 2, 9, 32}, 20, dtype, -0.6, 0.6),
       random_tensor({2, 2, 9, 32}, 25, dtype, -0.6, 0.6),
       random_tensor({2, 2, 9, 32}, 26, dtype, -0.6, 0.6)},
      // The per-head path's tiles and blocks (NOTE [Attention by heads]): the larger CPU GPT's
      // heads as MultiheadAttention hands them; S past one tile of pairs along E (E 40) and
      // not a whole number of key blocks; L > S with odd L and E.
      {"4-d views, L 64, S 64, E 32",
       random_tensor({1, 64, 2, 32}, 60, dtype, -0.6, 0.6).transpose(1, 2),
       random_tensor({1, 64, 2, 32}, 61, dtype, -0.6, 0.6).transpose(1, 2),
       random_tensor({1, 64, 2, 32}, 62, dtype, -0.6, 0.6).transpose(1, 2)},
      {"3-d, L 40, S 70, E 40", random_tensor({2, 40, 40}, 63, dtype, -0.6, 0.6),
       random_tensor({2, 70, 40}, 64, dtype, -0.6, 0.6),
       random_tensor({2, 70, 40}, 65, dtype, -0.6, 0.6)},
      {"3-d, L 37, S 20, E 17", random_tensor({2, 37, 17}, 66, dtype, -0.6, 0.6),
       random_tensor({2, 20, 17}, 67, dtype, -0.6, 0.6),
       random_tensor({2, 20, 17}, 68, dtype, -0.6, 0.6)},
  };
}

// Sets the CPU attention path for a scope (NOTE [Attention by heads]), then back to Auto.
struct PathFor {
  explicit PathFor(cpu::AttentionPath path) { cpu::set_attention_path(path); }
  ~PathFor() { cpu::set_attention_path(cpu::AttentionPath::Auto); }
  PathFor(const PathFor&) = delete;
  PathFor& operator=(const PathFor&) = delete;
};

Shape rows_of(const Tensor& q) {
  Shape rows;
  for (int64_t d = 0; d + 1 < q.dim(); ++d) rows.push_back(q.size(d));
  return rows;
}

}  // namespace

TEST_CASE("CPU attention kernels: out, lse and gradients match float64 loops", "[attention]") {
  const kernel::AttentionKernels& kernels = cpu::attention_kernels;
  for (cpu::AttentionPath path : {cpu::AttentionPath::Auto, cpu::AttentionPath::Batched}) {
    const PathFor path_for(path);
    for (DType dtype : kAllDTypes) {
      for (const Case& c : cases(dtype)) {
        for (bool causal : {false, true}) {
          CAPTURE(path == cpu::AttentionPath::Auto, dtype, c.name, causal);
          CAPTURE(cpu::attention_path_name(dtype, c.q.size(-2), c.k.size(-2), c.q.size(-1)));
          const double scale = causal ? 0.7 : 1.0 / std::sqrt(double(c.q.size(-1)));
          REQUIRE(kernels.fits(c.q, c.k, c.v));
          const Tensor dout = random_tensor(c.q.sizes(), 16, dtype);
          const Head want = reference(c.q, c.k, c.v, dout, causal, scale);
          // Every case here is small enough for the forward to keep P when asked (NOTE [CPU
          // attention keeps P]); the backward runs with it and without it.
          const kernel::FlashForward fwd = kernels.forward(c.q, c.k, c.v, causal, scale, true);
          expect_result(fwd.out, dtype, c.q.sizes());
          expect_result(fwd.lse, dtype == kFloat64 ? kFloat64 : kFloat32, rows_of(c.q));
          REQUIRE(fwd.probs.defined());
          CHECK_FALSE(kernels.forward(c.q, c.k, c.v, causal, scale, false).probs.defined());
          const Tolerance tol = attention_tolerance(dtype);
          expect_close(values(fwd.out), want.out, tol, "out");
          expect_close(values(fwd.lse), want.lse, tol, "lse");
          for (bool kept : {true, false}) {
            CAPTURE(kept);
            const kernel::FlashBackward bwd = kernels.backward(
                dout, c.q, c.k, c.v, fwd.out, fwd.lse, kept ? fwd.probs : Tensor(), causal, scale);
            expect_result(bwd.dq, dtype, c.q.sizes());
            expect_result(bwd.dk, dtype, c.k.sizes());
            expect_result(bwd.dv, dtype, c.v.sizes());
            expect_close(values(bwd.dq), want.dq, tol, "dq");
            expect_close(values(bwd.dk), want.dk, tol, "dk");
            expect_close(values(bwd.dv), want.dv, tol, "dv");
          }
        }
      }
    }
  }
}

TEST_CASE("CPU attention by heads: where it runs, and the batched path's results", "[attention]") {
#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
  const bool heads_here = cpu_has_avx512_bf16();
#else
  const bool heads_here = false;
#endif
  const std::string by_heads = heads_here ? "heads" : "batched";
  CHECK(cpu::attention_path_name(kBFloat16, 64, 64, 32) == by_heads);
  CHECK(cpu::attention_path_name(kBFloat16, 9, 9, 12) == by_heads);
  CHECK(cpu::attention_path_name(kBFloat16, 128, 256, 256) == by_heads);
  // Not bfloat16, or past the buffers' sizes: L S (S rounded up to 16) over 32768, E over 256.
  CHECK(std::string(cpu::attention_path_name(kFloat32, 64, 64, 32)) == "batched");
  CHECK(std::string(cpu::attention_path_name(kFloat16, 64, 64, 32)) == "batched");
  CHECK(std::string(cpu::attention_path_name(kBFloat16, 256, 256, 64)) == "batched");
  CHECK(std::string(cpu::attention_path_name(kBFloat16, 128, 257, 64)) == "batched");
  CHECK(std::string(cpu::attention_path_name(kBFloat16, 64, 64, 257)) == "batched");
  {
    const PathFor batched(cpu::AttentionPath::Batched);
    CHECK(cpu::get_attention_path() == cpu::AttentionPath::Batched);
    CHECK(std::string(cpu::attention_path_name(kBFloat16, 64, 64, 32)) == "batched");
  }
  CHECK(cpu::get_attention_path() == cpu::AttentionPath::Auto);

  // The larger CPU GPT's heads, both paths, against each other: the heads' S is not rounded to
  // bfloat16 before the softmax, so the two differ by about the rounding of P and dS.
  const kernel::AttentionKernels& kernels = cpu::attention_kernels;
  const Tensor q = random_tensor({2, 64, 4, 32}, 71, kBFloat16, -1, 1).transpose(1, 2);
  const Tensor k = random_tensor({2, 64, 4, 32}, 72, kBFloat16, -1, 1).transpose(1, 2);
  const Tensor v = random_tensor({2, 64, 4, 32}, 73, kBFloat16, -1, 1).transpose(1, 2);
  const Tensor dout = random_tensor({2, 4, 64, 32}, 74, kBFloat16);
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    std::vector<std::vector<double>> runs;
    for (cpu::AttentionPath path : {cpu::AttentionPath::Auto, cpu::AttentionPath::Batched}) {
      const PathFor path_for(path);
      const kernel::FlashForward fwd = kernels.forward(q, k, v, causal, 0.18, true);
      REQUIRE(fwd.probs.defined());  // 64 x 64 against 192 x 32
      const kernel::FlashBackward bwd =
          kernels.backward(dout, q, k, v, fwd.out, fwd.lse, fwd.probs, causal, 0.18);
      std::vector<double> all;
      for (const Tensor& t : {fwd.out, fwd.lse, bwd.dq, bwd.dk, bwd.dv}) {
        const std::vector<double> x = values(t);
        all.insert(all.end(), x.begin(), x.end());
      }
      runs.push_back(all);
    }
    expect_close(runs[0], runs[1], {2e-2, 2e-2}, "heads against batched");
  }
}

TEST_CASE("CPU attention through autograd: the node and the loops' gradients", "[attention]") {
  for (DType dtype : {kFloat32, kBFloat16}) {
    CAPTURE(dtype);
    const Tensor q = head_view({2, 2, 6, 4}, 21, dtype).requires_grad_();
    const Tensor k = head_view({2, 2, 6, 4}, 22, dtype).requires_grad_();
    const Tensor v = head_view({2, 2, 6, 4}, 23, dtype).requires_grad_();
    const Tensor dout = random_tensor({2, 2, 6, 4}, 24, dtype);
    const Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
    REQUIRE(out.grad_fn());
    CHECK(out.grad_fn()->name() == "ScaledDotProductFlashAttentionBackward");
    out.backward(dout);
    const Head want = reference(q, k, v, dout, true, 0.5);
    const Tolerance tol = attention_tolerance(dtype);
    expect_close(values(out), want.out, tol, "out");
    expect_close(values(q.grad()), want.dq, tol, "q.grad");
    expect_close(values(k.grad()), want.dk, tol, "k.grad");
    expect_close(values(v.grad()), want.dv, tol, "v.grad");
  }
}

TEST_CASE("CPU attention: a NaN key reaches only the rows that see it", "[attention]") {
  const int64_t L = 4, E = 3;
  const Tensor q = random_tensor({L, E}, 31, kFloat32), v = random_tensor({L, E}, 32, kFloat32);
  const Tensor k = random_tensor({L, E}, 33, kFloat32);
  k.select(0, 2).select(0, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  const kernel::FlashForward fwd = cpu::attention_kernels.forward(q, k, v, true, 0.5, false);
  for (int64_t i = 0; i < L; ++i) {
    CAPTURE(i);
    for (double x : values(fwd.out.select(0, i))) CHECK(std::isnan(x) == (i >= 2));
  }
}

TEST_CASE("CPU attention keeps P only where it holds no more values than q, k and v",
          "[attention]") {
  // L S <= (L + 2 S) E: 16 x 16 = 256 against 48 E (NOTE [CPU attention keeps P]).
  for (int64_t E : {2, 5, 6, 8}) {
    CAPTURE(E);
    const Tensor q = random_tensor({2, 16, E}, 51, kBFloat16),
                 k = random_tensor({2, 16, E}, 52, kBFloat16),
                 v = random_tensor({2, 16, E}, 53, kBFloat16);
    const kernel::FlashForward fwd = cpu::attention_kernels.forward(q, k, v, true, 0.5, true);
    CHECK(fwd.probs.defined() == (E >= 6));
    if (fwd.probs.defined()) {
      // The weights out was computed from: rows summing to 1, the future 0.
      CHECK(fwd.probs.sizes() == Shape{2, 16, 16});
      const std::vector<double> p = values(fwd.probs);
      for (int64_t r = 0; r < 32; ++r) {
        double total = 0;
        for (int64_t j = 0; j < 16; ++j) {
          const double x = p[size_t(r * 16 + j)];
          if (j > r % 16) CHECK(x == 0.0);
          total += x;
        }
        CHECK(total == Approx(1.0).margin(0.02));
      }
    }
  }
  // Through autograd, a sequence too long to keep P for (16 x 16 against 48 x 2) and one kept
  // (E 8) give the loops' gradients.
  for (int64_t E : {2, 8}) {
    CAPTURE(E);
    const Tensor q = head_view({2, 2, 16, E}, 54, kBFloat16).requires_grad_();
    const Tensor k = head_view({2, 2, 16, E}, 55, kBFloat16).requires_grad_();
    const Tensor v = head_view({2, 2, 16, E}, 56, kBFloat16).requires_grad_();
    const Tensor dout = random_tensor({2, 2, 16, E}, 57, kBFloat16);
    scaled_dot_product_attention(q, k, v, {}, 0.0, true).backward(dout);
    const Head want = reference(q, k, v, dout, true, 1.0 / std::sqrt(double(E)));
    const Tolerance tol = attention_tolerance(kBFloat16);
    expect_close(values(q.grad()), want.dq, tol, "q.grad");
    expect_close(values(k.grad()), want.dk, tol, "k.grad");
    expect_close(values(v.grad()), want.dv, tol, "v.grad");
  }
}

TEST_CASE("CPU attention gives the same bits on one thread and two", "[attention]") {
  // The products' paths are fixed: measured, a class at one thread and the same class at two
  // are two classes, which can keep different paths (NOTE [GEMM path by measurement]), and the
  // attention's own passes are what must not depend on the threads. The small kernel sums in
  // one fixed order on any thread count; on a CPU without 16-bit arithmetic the bfloat16
  // operands are widened to float32 first (NOTE [CPU attention]).
  struct SmallPaths {
    SmallPaths() {
      for (DType dtype : {kFloat32, kBFloat16}) cpu::set_gemm_path(dtype, cpu::GemmPath::Small);
    }
    ~SmallPaths() {
      for (DType dtype : {kFloat32, kBFloat16}) cpu::set_gemm_path(dtype, cpu::GemmPath::Auto);
    }
  } small_paths;
  // E 8: P is computed again in the backward; E 16: the forward keeps it (33 x 33 against
  // 99 E values, NOTE [CPU attention keeps P]).
  for (int64_t E : {8, 16}) {
    CAPTURE(E);
    const Tensor q = head_view({4, 4, 33, E}, 41, kBFloat16),
                 k = head_view({4, 4, 33, E}, 42, kBFloat16),
                 v = head_view({4, 4, 33, E}, 43, kBFloat16);
    const Tensor dout = random_tensor({4, 4, 33, E}, 44, kBFloat16);
    const int threads = omp_get_max_threads();
    std::vector<std::vector<double>> runs;
    for (int n : {1, 2}) {
      omp_set_num_threads(n);
      const kernel::FlashForward fwd = cpu::attention_kernels.forward(q, k, v, true, 0.3, true);
      CHECK(fwd.probs.defined() == (E == 16));
      const kernel::FlashBackward bwd =
          cpu::attention_kernels.backward(dout, q, k, v, fwd.out, fwd.lse, fwd.probs, true, 0.3);
      std::vector<double> all;
      for (const Tensor& t : {fwd.out, fwd.lse, bwd.dq, bwd.dk, bwd.dv}) {
        const std::vector<double> x = values(t);
        all.insert(all.end(), x.begin(), x.end());
      }
      runs.push_back(all);
    }
    omp_set_num_threads(threads);
    CHECK(runs[0] == runs[1]);
  }
}

TEST_CASE("CPU attention rejects what it cannot take, naming it", "[attention][errors]") {
  const kernel::AttentionKernels& kernels = cpu::attention_kernels;
  const Tensor q = randn({2, 3, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 4});
  CHECK_FALSE(kernels.fits(q, k, randn({2, 5, 3})));
  CHECK_FALSE(kernels.fits(q, k, v.to(kFloat16)));
  CHECK_FALSE(kernels.fits(q, randn({3, 5, 4}), randn({3, 5, 4})));
  CHECK_FALSE(kernels.fits(randn({2, 0, 4}), k, v));
  CHECK_THROWS_WITH(kernels.forward(q, k, randn({2, 5, 3}), false, 1.0, false),
                    Contains("the CPU kernels do not take"));
  const kernel::FlashForward fwd = kernels.forward(q, k, v, false, 0.5, true);
  CHECK_THROWS_WITH(
      kernels.backward(randn({2, 3, 4}), q, k, v, fwd.out, randn({2, 4}), fwd.probs, false, 0.5).dq,
      Contains("expected the forward's lse, float32 of shape [2, 3]"));
  CHECK_THROWS_WITH(
      kernels.backward(randn({2, 4, 4}), q, k, v, fwd.out, fwd.lse, fwd.probs, false, 0.5).dq,
      Contains("expected grad_output and out of q's shape [2, 3, 4]"));
  CHECK_THROWS_WITH(
      kernels.backward(randn({2, 3, 4}), q, k, v, fwd.out, fwd.lse, randn({2, 5, 3}), false, 0.5)
          .dq,
      Contains("expected the forward's kept weights, contiguous float32 of shape [2, 3, 5] on "
               "the CPU, or none, got float32 [2, 5, 3]"));
}
