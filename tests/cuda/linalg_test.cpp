// The GEMM family on CUDA (cuBLASLt, cuda/linalg.cpp): mm, addmm, bmm, baddbmm, matmul and
// linear, forward and backward, against the CPU ops in float64 on the same (already rounded)
// inputs; transposed, offset, strided and broadcast operands; odd sizes; TF32 mode; K == 0;
// and the kernels' own errors.
//
// Dims: B batch, M rows of a, K the reduced dim, N columns of b.
#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

constexpr DType kGpuDTypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};

// Sets the float32 matmul precision while alive, and restores the previous one.
struct MatmulPrecision {
  std::string previous = get_float32_matmul_precision();
  explicit MatmulPrecision(std::string_view precision) { set_float32_matmul_precision(precision); }
  ~MatmulPrecision() { set_float32_matmul_precision(previous); }
};

}  // namespace

TEST_CASE("CUDA mm addmm matmul and linear match float64 at odd sizes", "[cuda][gemm]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(101);
  const std::array<int64_t, 3> shapes[] = {{1, 1, 1},    {1, 257, 3},    {3, 17, 1},
                                           {17, 3, 257}, {257, 17, 17},  {3, 257, 257},
                                           {257, 1, 3},  {257, 257, 257}};
  for (DType dtype : kGpuDTypes) {
    for (const auto& [m, k, n] : shapes) {
      CAPTURE(dtype, m, k, n);
      const Tensor a = gpu_randn({m, k}, dtype), b = gpu_randn({k, n}, dtype);
      const Tensor weight = gpu_randn({n, k}, dtype), bias = gpu_randn({n}, dtype);
      const Tensor input = gpu_randn({m, n}, dtype);
      const Tensor a64 = f64(a), b64 = f64(b), weight64 = f64(weight), bias64 = f64(bias),
                   input64 = f64(input);
      const Tolerance tol = sum_tolerance(dtype, k);
      check_close(mm(a, b), mm(a64, b64), dtype, tol, "mm");
      check_close(matmul(a, b), matmul(a64, b64), dtype, tol, "matmul");
      check_close(addmm(bias, a, b), addmm(bias64, a64, b64), dtype, tol, "addmm, bias row");
      check_close(addmm(input, a, b, 0.5, 2.0), addmm(input64, a64, b64, 0.5, 2.0), dtype,
                  sum_tolerance(dtype, k, 2.0), "addmm, beta 0.5 alpha 2");
      check_close(linear(a, weight, bias), linear(a64, weight64, bias64), dtype, tol,
                  "linear with bias");
      check_close(linear(a, weight), linear(a64, weight64), dtype, tol, "linear");
      // gelu's slope is at most about 1.13: the GEMM's error passes through it about as is.
      check_close(linear_gelu(a, weight, bias), gelu(linear(a64, weight64, bias64), "tanh"), dtype,
                  tol, "linear_gelu (the GELU epilogue)");
      check_close(linear_gelu(a, weight, Tensor(), "none"), gelu(linear(a64, weight64)), dtype, tol,
                  "linear_gelu, exact GELU");
    }
  }
}

TEST_CASE("CUDA GEMMs read transposed offset and strided operands", "[cuda][gemm]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(102);
  const int64_t m = 17, k = 65, n = 23;
  for (DType dtype : kGpuDTypes) {
    CAPTURE(dtype);
    // Column-major views (transposes), rows with a longer stride starting one element in (an
    // address aligned to one element only), and columns two elements apart (a layout the
    // GEMM cannot read, copied first).
    const Tensor a_t = gpu_randn({k, m}, dtype).t();
    const Tensor b_t = gpu_randn({n, k}, dtype).t();
    const Tensor a_offset = gpu_randn({m, k + 3}, dtype).narrow(1, 1, k);
    const Tensor b_offset = gpu_randn({k, n + 5}, dtype).narrow(1, 3, n);
    const Tensor a_step = gpu_randn({m, 2 * k}, dtype).slice(1, 0, std::nullopt, 2);
    const Tensor b_step = gpu_randn({k, 2 * n}, dtype).slice(1, 1, std::nullopt, 2);
    const Tensor bias = gpu_randn({n}, dtype);
    const Tolerance tol = sum_tolerance(dtype, k);
    const Tensor operands_a[] = {a_t, a_offset, a_step};
    const Tensor operands_b[] = {b_t, b_offset, b_step};
    for (const Tensor& a : operands_a) {
      for (const Tensor& b : operands_b) {
        CAPTURE(a.strides(), b.strides());
        check_close(mm(a, b), mm(f64(a), f64(b)), dtype, tol, "mm");
        check_close(addmm(bias, a, b), addmm(f64(bias), f64(a), f64(b)), dtype, tol, "addmm");
        // linear reads its weight transposed: b^T is [N, K].
        check_close(linear(a, b.t(), bias), linear(f64(a), f64(b).t(), f64(bias)), dtype, tol,
                    "linear");
      }
    }
  }
}

TEST_CASE("CUDA bmm baddbmm and matmul handle batches and broadcast batches", "[cuda][gemm]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(103);
  const int64_t batch = 5, m = 17, k = 33, n = 3;
  for (DType dtype : kGpuDTypes) {
    CAPTURE(dtype);
    const Tensor a = gpu_randn({batch, m, k}, dtype), b = gpu_randn({batch, k, n}, dtype);
    const Tensor a_t = gpu_randn({batch, k, m}, dtype).transpose(1, 2);  // column-major matrices
    const Tensor one_a = gpu_randn({1, m, k}, dtype).expand({batch, m, k});  // batch stride 0
    const Tensor shared_b = gpu_randn({k, n}, dtype);
    const Tensor row = gpu_randn({n}, dtype), input = gpu_randn({batch, m, n}, dtype);
    const Tolerance tol = sum_tolerance(dtype, k);
    check_close(bmm(a, b), bmm(f64(a), f64(b)), dtype, tol, "bmm");
    check_close(bmm(a_t, b), bmm(f64(a_t), f64(b)), dtype, tol, "bmm, transposed a");
    check_close(bmm(one_a, b), bmm(f64(one_a), f64(b)), dtype, tol, "bmm, broadcast a");
    check_close(baddbmm(row, a, b), baddbmm(f64(row), f64(a), f64(b)), dtype, tol,
                "baddbmm, bias row");
    check_close(baddbmm(input, a, b, 0.5, 1.5), baddbmm(f64(input), f64(a), f64(b), 0.5, 1.5),
                dtype, sum_tolerance(dtype, k, 1.5), "baddbmm, beta 0.5 alpha 1.5");
    // One b for every batch: a batch stride of 0 (and a's batches fold into one GEMM).
    check_close(matmul(a, shared_b), matmul(f64(a), f64(shared_b)), dtype, tol,
                "matmul [B, M, K] @ [K, N]");
    check_close(matmul(a_t, shared_b), matmul(f64(a_t), f64(shared_b)), dtype, tol,
                "matmul, transposed a @ [K, N]");
    const Tensor a4 = gpu_randn({2, 1, m, k}, dtype), b3 = gpu_randn({3, k, n}, dtype);
    check_close(matmul(a4, b3), matmul(f64(a4), f64(b3)), dtype, tol,
                "matmul [2, 1, M, K] @ [3, K, N]");
    const Tensor v = gpu_randn({k}, dtype);
    check_close(matmul(v, b), matmul(f64(v), f64(b)), dtype, tol, "matmul [K] @ [B, K, N]");
    check_close(matmul(a, v), matmul(f64(a), f64(v)), dtype, tol, "matmul [B, M, K] @ [K]");
  }
}

TEST_CASE("CUDA GEMM gradients match float64", "[cuda][gemm]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(104);
  const int64_t batch = 3, m = 17, k = 31, n = 9;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dtype);
    // Gradients sum over M, N, K or the batch: the largest of those bounds the terms.
    const Tolerance tol = sum_tolerance(dtype, batch * m);
    // Runs f on leaves made from `values` (on their device and dtype), back-propagates
    // sum(f(...) * g), and returns the leaves' gradients.
    auto grads = [](const std::vector<Tensor>& values, const Tensor& g, const auto& f) {
      std::vector<Tensor> leaves;
      for (const Tensor& v : values) leaves.push_back(v.detach().requires_grad_());
      sum(mul(f(leaves), g)).backward();
      std::vector<Tensor> result;
      for (const Tensor& leaf : leaves) result.push_back(leaf.grad());
      return result;
    };
    auto compare = [&](const std::vector<Tensor>& values, const Tensor& g, const auto& f,
                       std::string_view what) {
      std::vector<Tensor> values64;
      for (const Tensor& v : values) values64.push_back(f64(v));
      const std::vector<Tensor> got = grads(values, g, f), want = grads(values64, f64(g), f);
      for (size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        REQUIRE(got[i].defined());
        check_close(got[i], want[i], dtype, tol, what);
      }
    };
    const Tensor a = gpu_randn({m, k}, dtype), b = gpu_randn({k, n}, dtype);
    compare(
        {a, b}, gpu_randn({m, n}, dtype),
        [](const std::vector<Tensor>& t) { return mm(t[0], t[1]); }, "mm");
    compare(
        {gpu_randn({k, m}, dtype).t(), gpu_randn({n, k}, dtype).t()}, gpu_randn({m, n}, dtype),
        [](const std::vector<Tensor>& t) { return mm(t[0], t[1]); }, "mm, transposed");
    compare(
        {gpu_randn({m, n}, dtype), a, b}, gpu_randn({m, n}, dtype),
        [](const std::vector<Tensor>& t) { return addmm(t[0], t[1], t[2], 0.5, 2.0); }, "addmm");
    compare(
        {gpu_randn({2, m, k}, dtype), gpu_randn({n, k}, dtype), gpu_randn({n}, dtype)},
        gpu_randn({2, m, n}, dtype),
        [](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); }, "linear, 3-D input");
    // N = 16 and N = 9: a leading dim the GELU epilogue takes, and one it does not (a multiple
    // of 8 is needed: the GEMM and the GELU kernel run apart); the gradient goes through the
    // saved pre-activation.
    for (int64_t width : {int64_t(16), n}) {
      compare(
          {gpu_randn({2, m, k}, dtype), gpu_randn({width, k}, dtype), gpu_randn({width}, dtype)},
          gpu_randn({2, m, width}, dtype),
          [](const std::vector<Tensor>& t) { return linear_gelu(t[0], t[1], t[2]); },
          "linear_gelu, 3-D input");
    }
    const Tensor ab = gpu_randn({batch, m, k}, dtype), bb = gpu_randn({batch, k, n}, dtype);
    compare(
        {ab, bb}, gpu_randn({batch, m, n}, dtype),
        [](const std::vector<Tensor>& t) { return bmm(t[0], t[1]); }, "bmm");
    compare(
        {gpu_randn({n}, dtype), ab, bb}, gpu_randn({batch, m, n}, dtype),
        [](const std::vector<Tensor>& t) { return baddbmm(t[0], t[1], t[2], 1.0, 0.5); },
        "baddbmm, broadcast input");
    compare(
        {ab, gpu_randn({k, n}, dtype)}, gpu_randn({batch, m, n}, dtype),
        [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); }, "matmul, broadcast b");
  }
}

TEST_CASE("CUDA float32 GEMMs use TF32 only when allowed", "[cuda][gemm]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(105);
  const int64_t m = 257, k = 257, n = 129;
  const Tensor a = gpu_randn({m, k}, kFloat32), b = gpu_randn({k, n}, kFloat32);
  const Tensor want = mm(f64(a), f64(b));
  REQUIRE(get_float32_matmul_precision() == "highest");
  CHECK(cuda::linalg_kernels.backend(kFloat32) == "cuBLASLt (fp32)");
  check_close(mm(a, b), want, kFloat32, sum_tolerance(kFloat32, k), "highest: exact float32");
  for (const char* precision : {"high", "medium"}) {
    CAPTURE(precision);
    MatmulPrecision tf32(precision);
    CHECK(cuda::linalg_kernels.backend(kFloat32) ==
          "cuBLASLt (TF32 tensor cores, fp32 accumulate)");
    // TF32 keeps 10 of float32's 23 mantissa bits of each input: about 1e-3 per product.
    const Tolerance tol{1e-2, 1e-2 * std::sqrt(double(k))};
    check_close(mm(a, b), want, kFloat32, tol, "TF32 mm");
    check_close(linear(a, b.t(), zeros({n}, kFloat32).to(kGpu)), want, kFloat32, tol,
                "TF32 linear with a bias");
    // 16-bit and float64 products do not change with the setting.
    CHECK(cuda::linalg_kernels.backend(kFloat16) == "cuBLASLt (tensor cores, fp32 accumulate)");
    CHECK(cuda::linalg_kernels.backend(kFloat64) == "cuBLASLt (fp64)");
  }
  CHECK(get_float32_matmul_precision() == "highest");
  check_close(mm(a, b), want, kFloat32, sum_tolerance(kFloat32, k), "highest again");
}

TEST_CASE("CUDA GEMMs repeat bit for bit also over a long K", "[cuda][gemm]") {
  HG_REQUIRE_CUDA();
  manual_seed(106);
  // Few outputs over a long K: the shape split-K algorithms are made for.
  for (DType dtype : {kFloat16, kBFloat16, kFloat32}) {
    CAPTURE(dtype);
    const int64_t m = 16, k = 16384, n = 16;
    const Tensor a = gpu_randn({m, k}, dtype), b = gpu_randn({k, n}, dtype);
    const Tensor first = mm(a, b);
    check_close(first, mm(f64(a), f64(b)), dtype, sum_tolerance(dtype, k), "long K");
    for (int repeat = 0; repeat < 3; ++repeat) {
      CHECK(mm(a, b).to(Device(kCPU)).to(kFloat64).to_vector<double>() ==
            first.to(Device(kCPU)).to(kFloat64).to_vector<double>());
    }
  }
}

TEST_CASE("CUDA GEMMs with K = 0 or empty outputs", "[cuda][gemm]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;  // the zeros must be written, not found
  manual_seed(107);
  for (DType dtype : kGpuDTypes) {
    CAPTURE(dtype);
    const Tensor a = gpu_randn({3, 0}, dtype), b = gpu_randn({0, 4}, dtype);
    const Tensor bias = gpu_randn({4}, dtype), input = gpu_randn({2, 3, 4}, dtype);
    const Tolerance exact{0, 0};
    check_close(mm(a, b), zeros({3, 4}, kFloat64), dtype, exact, "mm, K = 0");
    check_close(addmm(bias, a, b), f64(bias).expand({3, 4}), dtype, exact, "addmm, K = 0");
    check_close(linear(a, b.t(), bias), f64(bias).expand({3, 4}), dtype, exact, "linear, K = 0");
    check_close(baddbmm(input, gpu_randn({2, 3, 0}, dtype), gpu_randn({2, 0, 4}, dtype), 0.5),
                mul(f64(input), 0.5), dtype, tolerance_for(dtype), "baddbmm, K = 0");
    CHECK(mm(gpu_randn({0, 5}, dtype), gpu_randn({5, 4}, dtype)).sizes() == Shape{0, 4});
    CHECK(bmm(gpu_randn({0, 2, 5}, dtype), gpu_randn({0, 5, 4}, dtype)).sizes() == Shape{0, 2, 4});
  }
}

TEST_CASE("CUDA GEMM kernels reject bad arguments naming them", "[cuda][gemm]") {
  HG_REQUIRE_CUDA();
  manual_seed(108);
  const Tensor a = gpu_randn({2, 3, 4}, kFloat32), b = gpu_randn({2, 4, 5}, kFloat32);
  const Tensor out = empty({2, 3, 5}, {.dtype = kFloat32, .device = kGpu});
  CHECK_THROWS_WITH(cuda::linalg_kernels.gemm(a, gpu_randn({2, 6, 5}, kFloat32), out, 1.0, 0.0),
                    Contains("cannot be multiplied"));
  CHECK_THROWS_WITH(cuda::linalg_kernels.gemm(a, b, empty({2, 3, 5}, kFloat32), 1.0, 0.0),
                    Contains("expected tensors on one CUDA device"));
  CHECK_THROWS_WITH(cuda::linalg_kernels.gemm(a, b.to(kFloat16), out, 1.0, 0.0),
                    Contains("one floating dtype"));
  CHECK_THROWS_WITH(
      cuda::linalg_kernels.gemm(
          a, b, empty({2, 5, 3}, {.dtype = kFloat32, .device = kGpu}).transpose(1, 2), 1.0, 0.0),
      Contains("must be contiguous"));
  CHECK_THROWS_WITH(cuda::linalg_kernels.gemm(
                        a, b, empty({3, 3, 5}, {.dtype = kFloat32, .device = kGpu}), 1.0, 0.0),
                    Contains("does not fit"));
  const Tensor square = gpu_randn({2, 4, 4}, kFloat32);
  CHECK_THROWS_WITH(cuda::linalg_kernels.gemm(square, square, square, 1.0, 0.0),
                    Contains("overlaps"));
  CHECK_THROWS_WITH(cuda::linalg_kernels.gemm_bias(a, b, gpu_randn({6}, kFloat32), out),
                    Contains("expected a contiguous bias of shape [5]"));
  CHECK_THROWS_WITH(cuda::linalg_kernels.gemm_2d(a[0], false, b[0], true, out[0], Tensor()),
                    Contains("does not fit"));
  CHECK_THROWS_WITH(cuda::linalg_kernels.backend(kInt64), Contains("expected a floating dtype"));
}
