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

TEST_CASE("multi_dot and chain_matmul multiply in the cheapest order, against float64",
          "[linalg]") {
  manual_seed(13);
  // A [10, 30], B [30, 5], C [5, 60], D [60, 10]: (AB)(CD) takes 5000 products, the fewest.
  const Tensor a = randn({10, 30}), b = randn({30, 5}), c = randn({5, 60}), d = randn({60, 10});
  const Tensor abcd = multi_dot({a, b, c, d});
  const std::vector<double> ab =
      reference_mm(a.to_vector<double>(), b.to_vector<double>(), 10, 30, 5);
  const std::vector<double> abc = reference_mm(ab, c.to_vector<double>(), 10, 5, 60);
  const std::vector<double> want = reference_mm(abc, d.to_vector<double>(), 10, 60, 10);
  check_close(abcd.to_vector<double>(), want, kFloat32, 40.0);
  // The order decides the roundings: in bfloat16 the result is (AB)(CD)'s, bit for bit.
  const Tensor a16 = a.to(kBFloat16), b16 = b.to(kBFloat16), c16 = c.to(kBFloat16),
               d16 = d.to(kBFloat16);
  CHECK(multi_dot({a16, b16, c16, d16}).to_vector<double>() ==
        mm(mm(a16, b16), mm(c16, d16)).to_vector<double>());
  CHECK(chain_matmul({a16, b16, c16, d16}).to_vector<double>() ==
        mm(mm(a16, b16), mm(c16, d16)).to_vector<double>());
  // Three: (AB)C where it is no dearer, else A(BC).
  const Tensor p = randn({50, 5}, kBFloat16), q = randn({5, 100}, kBFloat16),
               r = randn({100, 10}, kBFloat16);
  CHECK(multi_dot({p, q, r}).to_vector<double>() == mm(p, mm(q, r)).to_vector<double>());
  const Tensor s = randn({10, 100}, kBFloat16), t = randn({100, 5}, kBFloat16),
               u = randn({5, 50}, kBFloat16);
  CHECK(multi_dot({s, t, u}).to_vector<double>() == mm(mm(s, t), u).to_vector<double>());
  // A vector first and last: a 0-d result; one end only: a vector.
  const Tensor row = randn({10}), column = randn({10});
  const Tensor scalar = multi_dot({row, a, b, c, d, column});
  CHECK(scalar.dim() == 0);
  double expected = 0;
  const std::vector<double> rv = row.to_vector<double>(), cv = column.to_vector<double>();
  for (int64_t i = 0; i < 10; ++i) {
    for (int64_t j = 0; j < 10; ++j) expected += rv[i] * want[i * 10 + j] * cv[j];
  }
  CHECK(scalar.item<double>() == Approx(expected).epsilon(1e-4).margin(1e-2));
  CHECK(multi_dot({row, a, b}).sizes() == Shape{5});
  CHECK(multi_dot({a, b, c, d, column}).sizes() == Shape{10});
  // chain_matmul of one matrix is a copy.
  const Tensor alone = chain_matmul({a});
  CHECK(alone.to_vector<double>() == a.to_vector<double>());
  CHECK(alone.data_ptr() != a.data_ptr());
  CHECK_THROWS_WITH(multi_dot({a}), Contains("multi_dot: expected at least 2 tensors, got 1"));
  CHECK_THROWS_WITH(multi_dot({a, row, b}),
                    Contains("multi_dot: expected tensor 1 to be 2-D (only the first and last may "
                             "be 1-D), got shape [10]"));
  CHECK_THROWS_WITH(multi_dot({a, c}),
                    Contains("multi_dot: tensors 0 and 1 of shapes [10, 30] and [5, 60] cannot be "
                             "multiplied"));
  CHECK_THROWS_WITH(multi_dot({a, b.to(kFloat64)}),
                    Contains("multi_dot: expected floating tensors of one dtype, got float32 "
                             "(tensor 0) and float64 (tensor 1)"));
  CHECK_THROWS_WITH(chain_matmul({a, row}),
                    Contains("chain_matmul: expected 2-D matrices, got shape [10] (matrix 1)"));
  {
    amp::Autocast autocast(kCPU);  // unlisted on the CPU, lower precision on CUDA
    CHECK(multi_dot({a, b, c}).dtype() == kFloat32);
  }
}

TEST_CASE("tensordot, bilinear, cross and trace match float64 loops", "[linalg]") {
  manual_seed(14);
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    CAPTURE(dtype);
    // tensordot: a [2, 3, 4] with b [4, 3, 5] over (a 1, b 1) and (a 2, b 0) -> [2, 5].
    const Tensor a = randn({2, 3, 4}, dtype), b = randn({4, 3, 5}, dtype);
    const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
    std::vector<double> want(10, 0.0);
    for (int i = 0; i < 2; ++i)
      for (int l = 0; l < 5; ++l)
        for (int j = 0; j < 3; ++j)
          for (int k = 0; k < 4; ++k)
            want[i * 5 + l] += av[(i * 3 + j) * 4 + k] * bv[(k * 3 + j) * 5 + l];
    const Tensor contracted = tensordot(a, b, Shape{1, 2}, Shape{1, 0});
    CHECK(contracted.sizes() == Shape{2, 5});
    CHECK(contracted.dtype() == dtype);
    check_close(contracted.to_vector<double>(), want, dtype, std::sqrt(12.0));
    // dims = 1: a's last against b's first -> [2, 3, 3, 5]; dims = 0: the outer product.
    const Tensor once = tensordot(a, b, 1);
    CHECK(once.sizes() == Shape{2, 3, 3, 5});
    std::vector<double> once_want;
    for (int i = 0; i < 6; ++i)
      for (int m = 0; m < 15; ++m) {
        double total = 0;
        for (int k = 0; k < 4; ++k) total += av[i * 4 + k] * bv[k * 15 + m];
        once_want.push_back(total);
      }
    check_close(once.to_vector<double>(), once_want, dtype, 2.0);
    CHECK(tensordot(a, b, 0).sizes() == Shape{2, 3, 4, 4, 3, 5});

    // bilinear: x1 [2, 3, 4], x2 [2, 3, 5], weight [6, 4, 5], bias [6] -> [2, 3, 6].
    const Tensor x1 = a, x2 = randn({2, 3, 5}, dtype), w = randn({6, 4, 5}, dtype),
                 bias = randn({6}, dtype);
    const std::vector<double> x2v = x2.to_vector<double>(), wv = w.to_vector<double>(),
                              biasv = bias.to_vector<double>();
    std::vector<double> bilinear_want;
    for (int n = 0; n < 6; ++n)
      for (int o = 0; o < 6; ++o) {
        double total = biasv[o];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 5; ++j)
            total += av[n * 4 + i] * wv[(o * 4 + i) * 5 + j] * x2v[n * 5 + j];
        bilinear_want.push_back(total);
      }
    const Tensor y = bilinear(x1, x2, w, bias);
    CHECK(y.sizes() == Shape{2, 3, 6});
    CHECK(y.dtype() == dtype);
    // Two roundings on the way (x1 A, then the sum with x2).
    check_close(y.to_vector<double>(), bilinear_want, dtype, 2.0 * std::sqrt(20.0));

    // cross along dim 1 of [4, 3] with a [1, 3] broadcast, and torch.cross's default dim.
    const Tensor u = randn({4, 3}, dtype), v = randn({1, 3}, dtype);
    const std::vector<double> uv = u.to_vector<double>(), vv = v.to_vector<double>();
    std::vector<double> cross_want;
    for (int n = 0; n < 4; ++n) {
      const double* p = &uv[size_t(n * 3)];
      cross_want.push_back(p[1] * vv[2] - p[2] * vv[1]);
      cross_want.push_back(p[2] * vv[0] - p[0] * vv[2]);
      cross_want.push_back(p[0] * vv[1] - p[1] * vv[0]);
    }
    check_close(cross(u, v).to_vector<double>(), cross_want, dtype, 2.0);
    check_close(linalg_cross(u, v).to_vector<double>(), cross_want, dtype, 2.0);
    const Tensor columns = cross(u.t(), v.t(), 0);  // [3, 4]: the same products by columns
    check_close(columns.t().contiguous().to_vector<double>(), cross_want, dtype, 2.0);

    // trace: the main diagonal of a [3, 4].
    const Tensor m = randn({3, 4}, dtype);
    const std::vector<double> mv = m.to_vector<double>();
    check_close({trace(m).item<double>()}, {mv[0] + mv[5] + mv[10]}, dtype, 2.0);
  }
  const Tensor integers = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}, kInt64);
  CHECK(trace(integers).item<int64_t>() == 15);
  CHECK(trace(integers.to(kInt32)).dtype() == kInt64);
  const Tensor e1 = tensor({1.0, 0.0, 0.0}), e2 = tensor({0.0, 1.0, 0.0});
  CHECK(cross(e1, e2).to_vector<double>() == std::vector<double>{0.0, 0.0, 1.0});
  CHECK(cross(tensor(std::vector<int64_t>{1, 0, 0}), tensor(std::vector<int64_t>{0, 1, 0}))
            .to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1});
  CHECK_THROWS_WITH(tensordot(randn({2, 3}), randn({4, 2}), 1),
                    Contains("tensordot: contracted dims of different sizes: a's dim 1 (3) and b's "
                             "dim 0 (4)"));
  CHECK_THROWS_WITH(
      tensordot(randn({2, 3}), randn({3, 2}), 3),
      Contains("tensordot: expected dims in [0, 2] for shapes [2, 3] and [3, 2], got 3"));
  CHECK_THROWS_WITH(tensordot(randn({2, 3}), randn({3, 2}), Shape{1}, Shape{0, 1}),
                    Contains("tensordot: expected as many dims of b as of a to contract"));
  CHECK_THROWS_WITH(bilinear(randn({2, 4}), randn({2, 5}), randn({6, 5, 4})),
                    Contains("bilinear: expected weight of shape [out, 4, 5], got [6, 5, 4]"));
  CHECK_THROWS_WITH(
      bilinear(randn({2, 4}), randn({3, 5}), randn({6, 4, 5})),
      Contains("bilinear: expected inputs of one batch shape, got shapes [2, 4] and [3, 5]"));
  CHECK_THROWS_WITH(cross(randn({4, 2}), randn({4, 2})),
                    Contains("cross: expected a dim of size 3 in input of shape [4, 2]"));
  CHECK_THROWS_WITH(cross(randn({3, 4}), randn({3, 4}), 1),
                    Contains("cross: expected inputs of size 3 at dim 1, got 4 and 4"));
  CHECK_THROWS_WITH(trace(randn({3})), Contains("trace: expected a matrix, got shape [3]"));
  {
    amp::Autocast autocast(kCPU);  // trace float32 on the CPU; the rest unlisted there
    CHECK(trace(randn({3, 3}, kBFloat16)).dtype() == kFloat32);
    CHECK(tensordot(randn({2, 3}, kBFloat16), randn({3, 2}, kBFloat16), 1).dtype() == kBFloat16);
  }
}
