// scaled_mm: the float8 product against float64 sums of the decoded operands, its layouts, its
// errors, the fused cast that feeds it (quantize_fp8), and (where a GPU with fp8 tensor cores
// is) CUDA against the CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/config.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Matchers::Contains;

namespace {

// A [rows, cols] float8 tensor of normal values times `spread`, rounded to `dtype`.
Tensor random_fp8(int64_t rows, int64_t cols, DType dtype, double spread) {
  return (randn({rows, cols}) * spread).to(dtype, CastOptions{.saturate = true});
}

// The float64 reference: sum_k a[i, k] b[k, j] of the decoded values, times the scales, plus
// the bias; and the sum of |terms| per element, which bounds float32's summation error.
struct Reference {
  std::vector<double> value, magnitude;
};

Reference reference(const Tensor& a, const Tensor& b, double scale_a, double scale_b,
                    const Tensor& bias) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const std::vector<double> av = a.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> bv = b.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> biasv =
      bias.defined() ? bias.to(kFloat64).to_vector<double>() : std::vector<double>(size_t(N));
  Reference r{std::vector<double>(size_t(M * N)), std::vector<double>(size_t(M * N))};
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double term = av[size_t(i * K + k)] * bv[size_t(k * N + j)];
        sum += term;
        magnitude += std::abs(term);
      }
      r.value[size_t(i * N + j)] = sum * scale_a * scale_b + biasv[size_t(j)];
      r.magnitude[size_t(i * N + j)] = magnitude * scale_a * scale_b + std::abs(biasv[size_t(j)]);
    }
  }
  return r;
}

// out against the reference: float32 sums (a relative 2^-24 per term, K terms) and one rounding
// into out's dtype (half its ulp: relative 2^-24, 2^-11, 2^-8).
void check_against(const Tensor& out, const Reference& r, int64_t K) {
  REQUIRE(out.dtype() != kFloat64);
  const double unit = out.dtype() == kFloat32   ? 0x1p-24
                      : out.dtype() == kFloat16 ? 0x1p-11
                                                : 0x1p-8;
  const std::vector<double> got = out.to(kFloat64).to_vector<double>();
  REQUIRE(got.size() == r.value.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", float64 " << r.value[i]);
    REQUIRE(std::isfinite(got[i]));
    const double bound = unit * std::abs(r.value[i]) + double(K + 2) * 0x1p-24 * r.magnitude[i];
    CHECK(std::abs(got[i] - r.value[i]) <= bound);
  }
}

}  // namespace

TEST_CASE("scaled_mm multiplies float8 matrices as float64 sums of their values") {
  manual_seed(11);
  for (DType out_dtype : {kFloat32, kBFloat16, kFloat16}) {
    for (const auto& [a_dtype, b_dtype] :
         {std::pair{kFloat8_e4m3fn, kFloat8_e4m3fn}, std::pair{kFloat8_e4m3fn, kFloat8_e5m2},
          std::pair{kFloat8_e5m2, kFloat8_e4m3fn}}) {
      INFO(out_dtype << " from " << a_dtype << " x " << b_dtype);
      const Tensor a = random_fp8(7, 48, a_dtype, 30.0);
      const Tensor b = random_fp8(48, 5, b_dtype, 4.0);
      const Tensor scale_a = full({1}, 0.03125, kFloat32), scale_b = full({1}, 0.75, kFloat32);
      const Tensor bias = randn({5}).to(out_dtype);
      const Tensor out = scaled_mm(a, b, scale_a, scale_b, out_dtype, bias);
      CHECK(out.dtype() == out_dtype);
      CHECK(out.sizes() == Shape{7, 5});
      check_against(out, reference(a, b, 0.03125, 0.75, bias), 48);
      // Without a bias, the same product.
      check_against(scaled_mm(a, b, scale_a, scale_b, out_dtype),
                    reference(a, b, 0.03125, 0.75, Tensor()), 48);
    }
  }
}

TEST_CASE("scaled_mm reads b in any layout and gives the bits of the contiguous product") {
  manual_seed(12);
  const Tensor a = random_fp8(6, 32, kFloat8_e4m3fn, 8.0);
  const Tensor b_rows = random_fp8(16, 32, kFloat8_e4m3fn, 8.0);  // [N, K]
  const Tensor scale = ones({1});
  const Tensor column_major = b_rows.t();  // [K, N], no copy
  const Tensor row_major = column_major.contiguous();
  const Tensor from_view = scaled_mm(a, column_major, scale, scale);
  CHECK(bit_identical(from_view, scaled_mm(a, row_major, scale, scale)));
  // a as a transposed view too.
  const Tensor a_view = a.t().contiguous().t();
  CHECK(bit_identical(from_view, scaled_mm(a_view, column_major, scale, scale)));
  // An empty K sums to zero (plus the bias).
  const Tensor empty_k = scaled_mm(empty({3, 0}, kFloat8_e4m3fn), empty({0, 4}, kFloat8_e4m3fn),
                                   scale, scale, kFloat32, full({4}, 2.5, kFloat32));
  CHECK(bit_identical(empty_k, full({3, 4}, 2.5, kFloat32)));
}

TEST_CASE("scaled_mm saturated operands and large scales stay exact in float32 sums") {
  // 448 * 448 * 64 = 12845056 is exact in float32; the scales bring it back to 1.
  const Tensor a = full({2, 64}, 448.0, kFloat32).to(kFloat8_e4m3fn);
  const Tensor b = full({64, 16}, 448.0, kFloat32).to(kFloat8_e4m3fn);
  const Tensor scale = full({1}, 1.0 / (448.0 * 8.0), kFloat32);
  const Tensor out = scaled_mm(a, b, scale, scale);
  const double expected =
      448.0 * 448.0 * 64.0 * double(scale.item<float>()) * double(scale.item<float>());
  for (double v : out.to(kFloat64).to_vector<double>()) CHECK(v == Approx(expected).epsilon(1e-6));
}

TEST_CASE("scaled_mm rejects what it cannot multiply and names it") {
  const Tensor a = zeros({4, 16}).to(kFloat8_e4m3fn);
  const Tensor b = zeros({16, 8}).to(kFloat8_e4m3fn);
  const Tensor one = ones({1});
  CHECK_THROWS_WITH(scaled_mm(zeros({4, 16}), b, one, one),
                    Contains("expected a to be float8_e4m3fn or float8_e5m2, got float32"));
  CHECK_THROWS_WITH(
      scaled_mm(a.to(kFloat32).to(kFloat8_e5m2), b.to(kFloat32).to(kFloat8_e5m2), one, one),
      Contains("at most one float8_e5m2 operand"));
  CHECK_THROWS_WITH(scaled_mm(a, zeros({8, 8}).to(kFloat8_e4m3fn), one, one),
                    Contains("cannot be multiplied"));
  CHECK_THROWS_WITH(scaled_mm(a, b, ones({2}), one),
                    Contains("expected scale_a to be a float32 tensor of one element"));
  CHECK_THROWS_WITH(
      scaled_mm(a, b, one, ones({1}, kFloat64)),
      Contains("expected scale_b to be a float32 tensor of one element, got float64"));
  CHECK_THROWS_WITH(scaled_mm(a, b, one, one, kFloat64),
                    Contains("expected out to be float32, float16 or bfloat16, got float64"));
  CHECK_THROWS_WITH(scaled_mm(a, b, one, one, kFloat32, ones({7})),
                    Contains("expected a contiguous bias of shape [8] and dtype float32"));
  CHECK_THROWS_WITH(scaled_mm(a.reshape({64}), b, one, one), Contains("expected 2-D a [M, K]"));
  // Not differentiable: a scale that requires grad gets a node whose backward says so.
  const Tensor scale = ones({1}).requires_grad_();
  const Tensor out = scaled_mm(a, b, scale, one);
  CHECK_THROWS_WITH(hg::sum(out).backward(), Contains("scaled_mm is not differentiable"));
}

TEST_CASE("scaled_mm on CUDA matches the CPU emulation", "[cuda]") {
  HG_REQUIRE_CUDA();
  manual_seed(13);
  const Tensor a = random_fp8(40, 64, kFloat8_e4m3fn, 20.0);
  const Tensor b = random_fp8(32, 64, kFloat8_e5m2, 3.0).t();  // [K, N] column-major
  const Tensor scale_a = full({1}, 0.125, kFloat32), scale_b = full({1}, 2.0, kFloat32);
  for (DType out_dtype : {kFloat32, kBFloat16, kFloat16}) {
    INFO(out_dtype);
    const Tensor bias = randn({32}).to(out_dtype);
    const Tensor gpu = scaled_mm(a.to(kCUDA), b.to(kCUDA), scale_a.to(kCUDA), scale_b.to(kCUDA),
                                 out_dtype, bias.to(kCUDA));
    CHECK(gpu.is_cuda());
    check_against(gpu.cpu(), reference(a, b, 0.125, 2.0, bias), 64);
  }
  CHECK_THROWS_WITH(scaled_mm(a.narrow(1, 0, 8).contiguous().to(kCUDA), b.narrow(0, 0, 8).to(kCUDA),
                              scale_a.to(kCUDA), scale_b.to(kCUDA)),
                    Contains("multiples of 16"));
}

TEST_CASE("quantize_fp8 casts with the scale and records the amax in one pass") {
  manual_seed(14);
  for (DType source : {kFloat32, kBFloat16, kFloat16}) {
    for (DType target : {kFloat8_e4m3fn, kFloat8_e5m2}) {
      INFO(fmt::format("{} to {}", dtype_name(source), dtype_name(target)));
      Tensor x = (randn({300}) * 50.0).to(source);
      x.narrow(0, 17, 1).fill_(-900.0);  // past 448 after scaling: saturates
      const Tensor scale = full({1}, 0.75, kFloat32);
      Tensor amax = full({1}, 2.0, kFloat32);
      const Tensor out = empty({300}, target);
      cpu::linalg_kernels.quantize_fp8(x, scale, amax, out);
      // The bits of the two-step cast, and the largest magnitude.
      CHECK(bit_identical(out, (x.to(kFloat32) * scale).to(target, CastOptions{.saturate = true})));
      CHECK(amax.item<float>() == 900.0f);
      // A smaller tensor leaves the larger amax as it was; a NaN makes it NaN.
      cpu::linalg_kernels.quantize_fp8(x.narrow(0, 0, 10).contiguous(), scale, amax,
                                       empty({10}, target));
      CHECK(amax.item<float>() == 900.0f);
      x.narrow(0, 3, 1).fill_(std::nan(""));
      cpu::linalg_kernels.quantize_fp8(x, scale, amax, out);
      CHECK(std::isnan(amax.item<float>()));
    }
  }
  const Tensor one = ones({1});
  CHECK_THROWS_WITH(cpu::linalg_kernels.quantize_fp8(ones({4}, kFloat64), one, ones({1}),
                                                     empty({4}, kFloat8_e4m3fn)),
                    Contains("expected x to be float32, float16 or bfloat16, got float64"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.quantize_fp8(ones({4}), one, ones({1}), empty({4})),
                    Contains("expected out to be float8_e4m3fn or float8_e5m2, got float32"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.quantize_fp8(ones({4}), one, ones({2}),
                                                     empty({4}, kFloat8_e4m3fn)),
                    Contains("expected amax to be a float32 tensor of one element"));
}

#if HALFGRAD_HAS_CUDA  // the kernel table is only there in a CUDA build
TEST_CASE("quantize_fp8 on CUDA gives the CPU's bits and amax", "[cuda]") {
  HG_REQUIRE_CUDA();
  manual_seed(15);
  const Tensor x = randn({100000}) * 300.0;
  const Tensor scale = full({1}, 1.5, kFloat32);
  for (DType target : {kFloat8_e4m3fn, kFloat8_e5m2}) {
    Tensor amax = zeros({1}), amax_gpu = zeros({1}).to(kCUDA);
    const Tensor out = empty({100000}, target);
    const Tensor out_gpu = empty({100000}, {.dtype = target, .device = Device(kCUDA)});
    cpu::linalg_kernels.quantize_fp8(x, scale, amax, out);
    cuda::linalg_kernels.quantize_fp8(x.to(kCUDA), scale.to(kCUDA), amax_gpu, out_gpu);
    CHECK(bit_identical(out_gpu.cpu(), out));
    CHECK(amax_gpu.item<float>() == amax.item<float>());
  }
}
#endif
