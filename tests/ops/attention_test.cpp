// Scaled dot-product attention against a float64 reference written with loops.
#include <catch2/catch.hpp>

#include <cmath>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

// One head: q [L, E], k [S, E], v [S, V], with an optional causal mask.
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, int64_t L, int64_t S, int64_t E,
                              int64_t V, bool causal) {
  std::vector<double> out(size_t(L * V), 0.0);
  for (int64_t i = 0; i < L; ++i) {
    std::vector<double> w(size_t(S), 0.0);
    double top = -INFINITY;
    for (int64_t j = 0; j < S; ++j) {
      if (causal && j > i) {
        w[j] = -INFINITY;
        continue;
      }
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += q[i * E + e] * k[j * E + e];
      w[j] = dot / std::sqrt(double(E));
      top = std::max(top, w[j]);
    }
    double total = 0;
    for (double& x : w) total += (x = std::exp(x - top));
    for (int64_t j = 0; j < S; ++j)
      for (int64_t c = 0; c < V; ++c) out[i * V + c] += w[j] / total * v[j * V + c];
  }
  return out;
}

}  // namespace

TEST_CASE("attention matches float64 loops with and without a causal mask", "[attention]") {
  manual_seed(21);
  const int64_t B = 2, L = 5, S = 5, E = 8, V = 3;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    for (bool causal : {false, true}) {
      CAPTURE(dtype, causal);
      const Tensor q = randn({B, L, E}, dtype), k = randn({B, S, E}, dtype),
                   v = randn({B, S, V}, dtype);
      const Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
      REQUIRE(out.sizes() == Shape{B, L, V});
      REQUIRE(out.dtype() == dtype);
      const double tol = dtype == kFloat32 ? 1e-5 : dtype == kFloat16 ? 4e-3 : 3e-2;
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<double> want =
            reference(q.select(0, b).to_vector<double>(), k.select(0, b).to_vector<double>(),
                      v.select(0, b).to_vector<double>(), L, S, E, V, causal);
        const std::vector<double> got = out.select(0, b).to_vector<double>();
        for (size_t i = 0; i < got.size(); ++i)
          REQUIRE(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
      }
    }
  }
}

TEST_CASE("a boolean mask equal to the causal one gives the same result", "[attention]") {
  manual_seed(4);
  const Tensor q = randn({4, 6}, kFloat64), k = randn({4, 6}, kFloat64),
               v = randn({4, 2}, kFloat64);
  const Tensor allowed = le(arange(4).unsqueeze(0), arange(4).unsqueeze(1));  // j <= i
  const std::vector<double> a =
      scaled_dot_product_attention(q, k, v, {}, 0.0, true).to_vector<double>();
  const std::vector<double> b = scaled_dot_product_attention(q, k, v, allowed).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-12));
}

TEST_CASE("attention autocasts once and rejects bad shapes", "[attention][errors]") {
  const Tensor q = randn({2, 3, 4}), k = randn({2, 3, 4}), v = randn({2, 3, 4});
  {
    amp::AutocastTrace trace;
    amp::Autocast autocast(kCPU);
    CHECK(scaled_dot_product_attention(q, k, v).dtype() == kBFloat16);
    REQUIRE(trace.entries().size() == 1);
    CHECK(trace.entries()[0].op == OpId::scaled_dot_product_attention);
  }
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, randn({2, 3, 5}), v),
                    Contains("scaled_dot_product_attention: q and k must have the same last dim"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, ones({3, 3}, kBool), 0.0, true),
                    Contains("is_causal and attn_mask are exclusive"));
  CHECK_THROWS_WITH(scaled_dot_product_attention(q, k, v, ones({5, 5}, kBool)),
                    Contains("does not broadcast"));
}

TEST_CASE("the fused attention op matches float64 loops, causal with L != S", "[attention]") {
  manual_seed(8);
  const int64_t B = 2, L = 4, S = 6, E = 8;
  const Tensor q = randn({B, L, E}, kFloat64), k = randn({B, S, E}, kFloat64),
               v = randn({B, S, E}, kFloat64);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Tensor out = scaled_dot_product_flash_attention(q, k, v, causal);
    REQUIRE(out.sizes() == Shape{B, L, E});
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<double> want =
          reference(q.select(0, b).to_vector<double>(), k.select(0, b).to_vector<double>(),
                    v.select(0, b).to_vector<double>(), L, S, E, E, causal);
      const std::vector<double> got = out.select(0, b).to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
    }
  }
}

TEST_CASE("the fused attention op's gradients are those of its math as ops", "[attention]") {
  manual_seed(9);
  const Tensor upstream = randn({3, 5, 8}, kFloat64);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    std::vector<Tensor> a, b;
    for (int64_t length : {5, 7, 7}) {
      const Tensor t = randn({3, length, 8}, kFloat64);
      a.push_back(t.clone().requires_grad_());
      b.push_back(t.clone().requires_grad_());
    }
    const Tensor fused = scaled_dot_product_flash_attention(a[0], a[1], a[2], causal, 0.7);
    CHECK(fused.grad_fn()->name() == "ScaledDotProductFlashAttentionBackward");
    // The math as ops (scaled_dot_product_attention itself takes the fused kernels on the CPU).
    Tensor scores = mul(matmul(b[0], b[1].transpose(-2, -1)), 0.7);
    if (causal) scores = masked_fill(scores, gt(arange(7).unsqueeze(0), arange(5).unsqueeze(1)), -INFINITY);
    const Tensor composite = matmul(softmax(scores, -1), b[2]);
    fused.backward(upstream);
    composite.backward(upstream);
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      const std::vector<double> got = a[i].grad().to_vector<double>();
      const std::vector<double> want = b[i].grad().to_vector<double>();
      REQUIRE(got.size() == want.size());
      // Gradients that cancel to 0 (the first query's, which sees one key) come out as
      // rounding residue of either order of summation: an absolute margin for those.
      for (size_t j = 0; j < got.size(); ++j) {
        CHECK(got[j] == Approx(want[j]).epsilon(1e-10).margin(1e-14));
      }
    }
  }
}

TEST_CASE("the fused attention op autocasts as attention and rejects what it cannot take",
          "[attention][errors]") {
  const Tensor q = randn({2, 3, 8}), k = randn({2, 4, 8}), v = randn({2, 4, 8});
  {
    amp::Autocast autocast(kCPU);
    CHECK(scaled_dot_product_flash_attention(q, k, v).dtype() == kBFloat16);
  }
  CHECK_THROWS_WITH(scaled_dot_product_flash_attention(q, k, randn({2, 4, 6})),
                    Contains("one batch shape, one head width E"));
  CHECK_THROWS_WITH(scaled_dot_product_flash_attention(q, randn({1, 4, 8}), randn({1, 4, 8})),
                    Contains("one batch shape"));
  CHECK_THROWS_WITH(scaled_dot_product_flash_attention(q, k.to(kFloat16), v),
                    Contains("expected floating q, k and v of one dtype"));
}
