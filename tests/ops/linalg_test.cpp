// The GEMM family's forward against float64 loops, in every floating dtype, and its
// behaviour under autocast.
#include <catch2/catch.hpp>

#include <cmath>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

// C = A @ B in float64 from the (already rounded) inputs; A [M, K], B [K, N] row-major.
std::vector<double> reference_mm(const std::vector<double>& a, const std::vector<double>& b,
                                 int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}

double tolerance(DType dtype) {
  return dtype == kFloat16 ? 2e-3 : dtype == kBFloat16 ? 1e-2 : 1e-5;  // output rounding
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, DType dtype,
                 double scale) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i, got[i], want[i]);
    REQUIRE(std::isfinite(got[i]));
    REQUIRE(std::abs(got[i] - want[i]) <= tolerance(dtype) * (std::abs(want[i]) + scale));
  }
}

}  // namespace

TEST_CASE("mm addmm and linear match float64 loops in every floating dtype", "[linalg]") {
  manual_seed(11);
  const int64_t m = 17, k = 33, n = 9;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype);
    const Tensor a = randn({m, k}, dtype), b = randn({k, n}, dtype), bias = randn({n}, dtype);
    const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(),
                              biasv = bias.to_vector<double>();
    std::vector<double> want = reference_mm(av, bv, m, k, n);
    const double scale = std::sqrt(double(k));  // typical size of a sum of k products
    check_close(mm(a, b).to_vector<double>(), want, dtype, scale);
    check_close(matmul(a, b).to_vector<double>(), want, dtype, scale);
    std::vector<double> with_bias = want;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) with_bias[i * n + j] += biasv[j];
    check_close(addmm(bias, a, b).to_vector<double>(), with_bias, dtype, scale);
    check_close(linear(a, b.t(), bias).to_vector<double>(), with_bias, dtype, scale);
    CHECK(mm(a, b).dtype() == dtype);
  }
}

TEST_CASE("addmv addr and addbmm match float64 loops in every floating dtype", "[linalg]") {
  manual_seed(12);
  const int64_t B = 3, n = 7, m = 11, p = 5;
  const double beta = 0.5, alpha = -1.5;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype);
    const Tensor mat = randn({n, m}, dtype), vec = randn({m}, dtype), bias_n = randn({n}, dtype);
    const Tensor v1 = randn({n}, dtype), v2 = randn({p}, dtype), bias_np = randn({n, p}, dtype);
    const Tensor b1 = randn({B, n, m}, dtype), b2 = randn({B, m, p}, dtype);
    const Tensor row = randn({p}, dtype);  // broadcast over the rows
    const std::vector<double> matv = mat.to_vector<double>(), vecv = vec.to_vector<double>(),
                              bnv = bias_n.to_vector<double>(), v1v = v1.to_vector<double>(),
                              v2v = v2.to_vector<double>(), bnpv = bias_np.to_vector<double>(),
                              b1v = b1.to_vector<double>(), b2v = b2.to_vector<double>(),
                              rowv = row.to_vector<double>();
    std::vector<double> mv = std::vector<double>(size_t(n));
    std::vector<double> outer = std::vector<double>(size_t(n * p)), batched = outer;
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0;
      for (int64_t k = 0; k < m; ++k) sum += matv[i * m + k] * vecv[k];
      mv[i] = beta * bnv[i] + alpha * sum;
      for (int64_t j = 0; j < p; ++j) {
        outer[i * p + j] = beta * bnpv[i * p + j] + alpha * v1v[i] * v2v[j];
        double total = 0;
        for (int64_t b = 0; b < B; ++b) {
          for (int64_t k = 0; k < m; ++k)
            total += b1v[(b * n + i) * m + k] * b2v[(b * m + k) * p + j];
        }
        batched[i * p + j] = beta * rowv[j] + alpha * total;
      }
    }
    const Tensor got_mv = addmv(bias_n, mat, vec, beta, alpha);
    const Tensor got_outer = addr(bias_np, v1, v2, beta, alpha);
    const Tensor got_batched = addbmm(row, b1, b2, beta, alpha);
    CHECK(got_mv.sizes() == Shape{n});
    CHECK(got_batched.sizes() == Shape{n, p});
    CHECK(got_batched.dtype() == dtype);
    check_close(got_mv.to_vector<double>(), mv, dtype, std::sqrt(double(m)));
    check_close(got_outer.to_vector<double>(), outer, dtype, 1.0);
    check_close(got_batched.to_vector<double>(), batched, dtype, std::sqrt(double(B * m)));
  }
  // beta = 0 ignores the input, NaN included, as torch.
  const Tensor nan_input = full({3}, std::nan(""));
  const std::vector<double> ignored =
      addmv(nan_input, ones({3, 2}), ones({2}), 0.0).to_vector<double>();
  CHECK(ignored == std::vector<double>{2.0, 2.0, 2.0});
}

TEST_CASE("addmv addr and addbmm autocast to the lower precision, and reject bad shapes",
          "[linalg]") {
  const Tensor mat = randn({4, 3}), vec = randn({3}), input = randn({4});
  {
    amp::Autocast autocast(kCPU);                       // bfloat16
    CHECK(addmv(input, mat, vec).dtype() == kFloat32);  // unlisted on the CPU, as torch's
    CHECK(addbmm(randn({4, 2}), randn({2, 4, 3}), randn({2, 3, 2})).dtype() == kBFloat16);
  }
  CHECK_THROWS_WITH(
      addmv(input, mat, randn({4})),
      Contains("addmv: expected a matrix [n, m] and a vector [m], got shapes [4, 3] and [4]"));
  CHECK_THROWS_WITH(
      addmv(randn({5}), mat, vec),
      Contains("addmv: the input of shape [5] does not broadcast to the product's shape [4]"));
  CHECK_THROWS_WITH(
      addmv(input, mat, vec.to(kFloat64)),
      Contains("addmv: expected two floating tensors of one dtype, got float32 and float64"));
  CHECK_THROWS_WITH(addr(randn({4, 3}), randn({4, 1}), vec),
                    Contains("addr: expected two vectors, got shapes [4, 1] and [3]"));
  CHECK_THROWS_WITH(
      addbmm(randn({4, 2}), randn({2, 4, 3}), randn({3, 3, 2})),
      Contains(
          "addbmm: expected batches [B, n, m] and [B, m, p], got shapes [2, 4, 3] and [3, 3, 2]"));
}

TEST_CASE("matmul covers vectors and broadcast batches", "[linalg]") {
  manual_seed(3);
  const Tensor v = randn({4}, kFloat64), w = randn({4}, kFloat64);
  double expected = 0;
  for (int i = 0; i < 4; ++i) expected += v.to_vector<double>()[i] * w.to_vector<double>()[i];
  CHECK(matmul(v, w).dim() == 0);
  CHECK(matmul(v, w).item<double>() == Approx(expected));
  const Tensor m = randn({3, 4}, kFloat64);
  CHECK(matmul(m, v).sizes() == Shape{3});
  CHECK(matmul(v, m.t()).sizes() == Shape{3});
  const Tensor batched = matmul(randn({2, 1, 3, 4}), randn({5, 4, 6}));
  CHECK(batched.sizes() == Shape{2, 5, 3, 6});
  // Each batch entry equals the 2-D product of its operands.
  const Tensor a = randn({2, 3, 4}, kFloat64), b = randn({4, 2}, kFloat64);
  const Tensor c = matmul(a, b);
  for (int64_t i = 0; i < 2; ++i) {
    const std::vector<double> got = c.select(0, i).to_vector<double>();
    const std::vector<double> want = mm(a.select(0, i), b).to_vector<double>();
    for (size_t j = 0; j < got.size(); ++j) CHECK(got[j] == Approx(want[j]));
  }
}

TEST_CASE("linear autocasts once and sends float32 gradients to float32 weights",
          "[linalg][autocast]") {
  manual_seed(5);
  Tensor weight = randn({4, 3}).requires_grad_();
  Tensor bias = randn({4}).requires_grad_();
  const Tensor x = randn({2, 3});
  Tensor y;
  amp::AutocastTrace trace;
  {
    amp::Autocast autocast(kCPU);  // bfloat16
    y = linear(x, weight, bias);
  }
  CHECK(y.dtype() == kBFloat16);
  REQUIRE(trace.entries().size() == 1);  // linear only: its addmm ran below autocast
  CHECK(trace.entries()[0].op == OpId::linear);
  CHECK(trace.entries()[0].policy == CastPolicy::LowerPrecision);
  sum(y.to(kFloat32)).backward();
  CHECK(weight.grad().dtype() == kFloat32);
  CHECK(bias.grad().dtype() == kFloat32);
  // d sum(x W^T + b) / dW[o][i] = sum over the batch of x[., i] (in bfloat16).
  const std::vector<float> xs = x.to(kBFloat16).to_vector<float>();
  const std::vector<float> g = weight.grad().to_vector<float>();
  for (int64_t o = 0; o < 4; ++o)
    for (int64_t i = 0; i < 3; ++i) CHECK(g[o * 3 + i] == Approx(xs[i] + xs[3 + i]).epsilon(1e-2));
}

TEST_CASE("mm gradients of transposed operands come out in their layout", "[linalg]") {
  // C = A @ B with A = P^T and B = Q^T (column-major views); loss = sum(C * G). Then
  // dA = G @ B^T and dB = A^T @ G, and dP = dA^T, dQ = dB^T must come back contiguous.
  manual_seed(17);
  const int64_t m = 6, k = 5, n = 7;
  for (DType dtype : {kFloat32, kBFloat16, kFloat64}) {
    CAPTURE(dtype);
    Tensor p = randn({k, m}, dtype).requires_grad_();
    Tensor q = randn({n, k}, dtype).requires_grad_();
    const Tensor g = randn({m, n}, dtype);
    for (bool with_bias : {false, true}) {
      p.mutable_grad() = Tensor();
      q.mutable_grad() = Tensor();
      const Tensor a = p.t(), b = q.t();
      const Tensor c = with_bias ? addmm(zeros({n}, dtype), a, b) : mm(a, b);
      // The gradients reaching the views are column-major like them (their transposes are
      // dense), so the ones reaching p and q need no copy.
      const std::vector<Tensor> view_grads = autograd::grad({sum(mul(c, g))}, {a, b},
                                                            /*grad_outputs=*/{},
                                                            /*retain_graph=*/true);
      CHECK(view_grads[0].t().is_contiguous());
      CHECK(view_grads[1].t().is_contiguous());
      sum(mul(c, g)).backward();
      const std::vector<double> pv = p.to_vector<double>(), qv = q.to_vector<double>(),
                                gv = g.to_vector<double>();
      std::vector<double> want_p(size_t(k * m), 0.0), want_q(size_t(n * k), 0.0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t r = 0; r < k; ++r) {
            want_p[r * m + i] += gv[i * n + j] * qv[j * k + r];  // dA[i][r] = sum_j G[i][j] B[r][j]
            want_q[j * k + r] += pv[r * m + i] * gv[i * n + j];  // dB[r][j] = sum_i A[i][r] G[i][j]
          }
      const double scale = std::sqrt(double(std::max(k, n)));
      check_close(p.grad().to_vector<double>(), want_p, dtype, scale);
      check_close(q.grad().to_vector<double>(), want_q, dtype, scale);
    }
  }
}

TEST_CASE("bad operands to the GEMM family", "[linalg][errors]") {
  const Tensor a = ones({2, 3}), b = ones({4, 5});
  CHECK_THROWS_WITH(mm(a, b), Contains("mm: the shapes [2, 3] and [4, 5] cannot be multiplied"));
  CHECK_THROWS_WITH(
      mm(a, ones({3, 2}, kFloat16)),
      Contains("expected two floating tensors of one dtype, got float32 and float16"));
  CHECK_THROWS_WITH(mm(ones({2}), ones({2, 2})), Contains("mm: expected two 2-D tensors"));
  CHECK_THROWS_WITH(bmm(ones({2, 2, 3}), ones({3, 3, 2})),
                    Contains("bmm: batch sizes differ: 2 and 3"));
  CHECK_THROWS_WITH(linear(ones({2, 3}), ones({4, 2})),
                    Contains("linear: the input's last dim (3) must equal in_features (2)"));
  CHECK_THROWS_WITH(linear(ones({2, 3}), ones({4, 3}), ones({3})),
                    Contains("expected a bias of shape [4]"));
  CHECK_THROWS_WITH(addmm(ones({3}), ones({2, 2}), ones({2, 2})), Contains("does not broadcast"));
  CHECK_THROWS_WITH(dot(ones({2}), ones({3})),
                    Contains("dot: expected two 1-D tensors of one length"));
  CHECK_THROWS_WITH(mm(full({2, 2}, 1, kInt64), full({2, 2}, 1, kInt64)), Contains("floating"));
  CHECK_THROWS_WITH(matmul(scalar_tensor(1.0), ones({2})), Contains("at least 1 dim"));
}

TEST_CASE("linear_gelu is gelu of linear, forward and backward, in both GELU forms", "[linalg]") {
  manual_seed(6);
  const Tensor x = randn({2, 5, 6}, kFloat64), weight = randn({7, 6}, kFloat64),
               bias = randn({7}, kFloat64), upstream = randn({2, 5, 7}, kFloat64);
  for (const char* approximate : {"tanh", "none"}) {
    for (bool with_bias : {true, false}) {
      CAPTURE(approximate, with_bias);
      std::vector<Tensor> fused_in, plain_in;
      for (const Tensor& t : {x, weight, bias}) {
        fused_in.push_back(t.clone().requires_grad_());
        plain_in.push_back(t.clone().requires_grad_());
      }
      const Tensor b_fused = with_bias ? fused_in[2] : Tensor();
      const Tensor b_plain = with_bias ? plain_in[2] : Tensor();
      const Tensor fused = linear_gelu(fused_in[0], fused_in[1], b_fused, approximate);
      const Tensor plain = gelu(linear(plain_in[0], plain_in[1], b_plain), approximate);
      CHECK(fused.grad_fn()->name() == "LinearGeluBackward");
      REQUIRE(fused.sizes() == plain.sizes());
      const std::vector<double> got = fused.to_vector<double>(), want = plain.to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-12));
      fused.backward(upstream);
      plain.backward(upstream);
      for (size_t i = 0; i < (with_bias ? 3u : 2u); ++i) {
        CAPTURE(i);
        const std::vector<double> g = fused_in[i].grad().to_vector<double>();
        const std::vector<double> w = plain_in[i].grad().to_vector<double>();
        for (size_t j = 0; j < g.size(); ++j) CHECK(g[j] == Approx(w[j]).epsilon(1e-10));
      }
    }
  }
  CHECK_THROWS_WITH(linear_gelu(x, weight, bias, "erf"),
                    Contains("linear_gelu: expected approximate to be \"none\" or \"tanh\""));
  CHECK_THROWS_WITH(linear_gelu(x, ones({7, 5}, kFloat64)),
                    Contains("linear_gelu: the input's last dim (6) must equal in_features (5)"));
}
