// Tests for halfgrad/cuda/reduce.{cpp,cu}: every reduction through the public ops (sum, mean,
// prod, amax/amin, max/min, argmax, var, norm, logsumexp, cumsum) on CUDA against the CPU op in
// float64 on the same (already rounded) inputs, for float32, float16 and bfloat16, forward and
// backward; integer inputs exactly; odd sizes (1, 31, 1000, 50257 columns), dim sets and keepdim,
// non-contiguous inputs, the column path and pieces (few outputs, many elements), NaN and inf,
// empty reductions, bad arguments, and determinism.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

constexpr DType kDTypes[] = {kFloat32, kFloat16, kBFloat16};

// A CPU tensor of dtype holding `values` (NaN and inf included), rounded once.
Tensor from_values(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return tensor(values, shape, kFloat64).to(dtype);
}

struct DimsCase {
  Shape shape;
  Shape dims;
};

// Odd sizes, every dim set of a 3-D tensor, the row path (short, warp and block rows, 16-byte
// vectors and not), the column path and pieces in both.
const std::vector<DimsCase>& dims_cases() {
  static const std::vector<DimsCase> cases = {
      {{1}, {}},           {{31}, {}},          {{1000}, {0}},       {{3, 50257}, {-1}},
      {{3, 5, 7}, {}},     {{3, 5, 7}, {0}},    {{3, 5, 7}, {1}},    {{3, 5, 7}, {2}},
      {{3, 5, 7}, {0, 2}}, {{3, 5, 7}, {1, 2}}, {{3, 5, 7}, {0, 1}}, {{2, 1, 5}, {1}},
      {{64, 33}, {0}},     {{2048, 768}, {0}},  {{5, 1001}, {1}},    {{1, 40000}, {1}},
      {{40000, 3}, {0}},   {{2, 3}, {0, 1}},
  };
  return cases;
}

// x's gradient through op on CUDA and through op on a float64 CPU copy, for one upstream
// gradient (seeded N(0, 1) values of x's dtype).
struct Grads {
  Tensor got, want, upstream;
};
using UnaryOp = std::function<Tensor(const Tensor&)>;
Grads input_grads(const UnaryOp& op, const Tensor& x, uint64_t upstream_seed) {
  Tensor xc = to_cuda(x).requires_grad_();
  const Tensor y = op(xc);
  const Tensor g = random_input(y.sizes(), x.dtype(), upstream_seed);
  y.backward(to_cuda(g));
  Tensor xr = x.to(kFloat64).requires_grad_();
  op(xr).backward(g.to(kFloat64));
  return {xc.grad(), xr.grad(), g};
}

// The gradients of input_grads within the backward tolerance of x's dtype.
void check_backward(const UnaryOp& op, const Tensor& x, uint64_t upstream_seed) {
  const Grads grads = input_grads(op, x, upstream_seed);
  REQUIRE(grads.got.defined());
  CHECK(grads.got.is_cuda());
  CHECK(mismatch(grads.got, grads.want, backward_tolerance(x.dtype())) == "");
}

std::string describe(const DimsCase& c, DType dtype, bool keepdim) {
  return fmt::format("shape {} dims {} dtype {} keepdim {}", c.shape, c.dims, dtype, keepdim);
}

}  // namespace

// ---- sum, mean, prod ------------------------------------------------------------------------

TEST_CASE("CUDA sum and mean match float64 over dims, keepdim and dtypes", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 100;
  for (DType dtype : kDTypes) {
    for (bool keepdim : {false, true}) {
      for (const DimsCase& c : dims_cases()) {
        INFO(describe(c, dtype, keepdim));
        const Tensor x = random_input(c.shape, dtype, seed++);
        const Tensor x64 = x.to(kFloat64), abs64 = abs(x64);
        const Tensor s = sum(to_cuda(x), c.dims, keepdim);
        CHECK(s.is_cuda());
        CHECK(s.dtype() == dtype);
        CHECK(mismatch_scaled(s, sum(x64, c.dims, keepdim), sum(abs64, c.dims, keepdim),
                              tolerance_for(dtype)) == "");
        const Tensor m = mean(to_cuda(x), c.dims, keepdim);
        CHECK(m.dtype() == dtype);
        CHECK(mismatch_scaled(m, mean(x64, c.dims, keepdim), mean(abs64, c.dims, keepdim),
                              tolerance_for(dtype)) == "");
      }
    }
  }
}

TEST_CASE("CUDA sum with an output dtype accumulates in float and rounds once", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : kDTypes) {
    const Tensor x = random_input({7, 1000}, dtype, 7);
    const Tensor x64 = x.to(kFloat64);
    for (DType out : {kFloat32, kFloat64, kFloat16}) {
      INFO(fmt::format("{} -> {}", dtype, out));
      const Tensor s = sum(to_cuda(x), {1}, false, out);
      CHECK(s.dtype() == out);
      CHECK(mismatch_scaled(s, sum(x64, {1}), sum(abs(x64), {1}),
                            tolerance_for(out == kFloat64 ? kFloat32 : out)) == "");
    }
    const Tensor m = mean(to_cuda(x), {0}, true, kFloat32);
    CHECK(m.dtype() == kFloat32);
    CHECK(mismatch_scaled(m, mean(x64, {0}, true), mean(abs(x64), {0}, true),
                          tolerance_for(kFloat32)) == "");
  }
}

TEST_CASE("CUDA sum and mean backward match float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 300;
  for (DType dtype : kDTypes) {
    for (const DimsCase& c :
         {DimsCase{{3, 5, 7}, {0, 2}}, DimsCase{{4, 1000}, {-1}}, DimsCase{{31}, {}}}) {
      for (bool keepdim : {false, true}) {
        INFO(describe(c, dtype, keepdim));
        const Tensor x = random_input(c.shape, dtype, seed++);
        for (bool is_mean : {false, true}) {
          check_backward(
              [&](const Tensor& t) {
                return is_mean ? mean(t, c.dims, keepdim) : sum(t, c.dims, keepdim);
              },
              x, seed++);
        }
      }
    }
  }
}

TEST_CASE("CUDA prod matches float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 400;
  for (DType dtype : kDTypes) {
    for (const DimsCase& c : {DimsCase{{3, 5, 7}, {1}}, DimsCase{{6, 31}, {-1}},
                              DimsCase{{40, 3}, {0}}, DimsCase{{2, 3, 4}, {}}}) {
      INFO(describe(c, dtype, false));
      // Values near 1 (1 + 0.05 N(0, 1)), so that products neither overflow nor vanish.
      const Tensor x = add(mul(random_input(c.shape, kFloat64, seed++), 0.05), 1.0).to(dtype);
      const Tensor p = prod(to_cuda(x), c.dims);
      CHECK(p.dtype() == dtype);
      CHECK(mismatch(p, prod(x.to(kFloat64), c.dims), tolerance_for(dtype)) == "");
    }
  }
}

TEST_CASE("CUDA integer and bool reductions accumulate exactly in int64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const Tensor normal = random_input({37, 1001}, kFloat32, 11);
  const Tensor x64 = mul(normal, 1000.0).to(kInt64);
  const Tensor x32 = mul(normal, 1000.0).to(kInt32);
  const Tensor flags = gt(normal, 0.0);
  const Tolerance exact{0.0, 0.0};
  for (const Tensor& x : {x64, x32, flags}) {
    INFO(fmt::format("dtype {}", x.dtype()));
    for (const Shape& dims : {Shape{}, Shape{0}, Shape{1}}) {
      INFO(fmt::format("dims {}", dims));
      const Tensor s = sum(to_cuda(x), dims);
      CHECK(s.dtype() == kInt64);
      CHECK(mismatch(s, sum(x, dims), exact) == "");
      CHECK(mismatch(amax(to_cuda(x), dims), amax(x, dims), exact) == "");
      // Products of many integers wrap around int64 exactly as on the CPU.
      CHECK(mismatch(prod(to_cuda(x), dims), prod(x, dims), exact) == "");
    }
    CHECK(mismatch(hg::max(to_cuda(x)), hg::max(x), exact) == "");
    CHECK(mismatch(hg::min(to_cuda(x)), hg::min(x), exact) == "");
    CHECK(mismatch(cumsum(to_cuda(x), 1), cumsum(x, 1), exact) == "");
    CHECK(mismatch(argmax(to_cuda(x), 1), argmax(x, 1), exact) == "");
  }
  // An explicit dtype: an int32 sum into float32.
  const Tensor f = sum(to_cuda(x32), {1}, false, kFloat32);
  CHECK(f.dtype() == kFloat32);
  CHECK(mismatch(f, sum(x32, {1}).to(kFloat64), tolerance_for(kFloat32)) == "");
}

// ---- amax, amin, max, min, argmax -----------------------------------------------------------

TEST_CASE("CUDA amax, amin, max and min are exact and propagate NaN", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 500;
  const Tolerance exact{0.0, 0.0};
  for (DType dtype : kDTypes) {
    for (bool keepdim : {false, true}) {
      for (const DimsCase& c : dims_cases()) {
        INFO(describe(c, dtype, keepdim));
        const Tensor x = random_input(c.shape, dtype, seed++);
        CHECK(mismatch(amax(to_cuda(x), c.dims, keepdim), amax(x, c.dims, keepdim), exact) == "");
        // amin has no op of its own but min(x): the kernel directly.
        CHECK(mismatch(cuda::reduce_kernels.reduce(kernel::Reduction::Amin, to_cuda(x), c.dims,
                                                   keepdim, dtype, 2.0),
                       cpu::reduce_kernels.reduce(kernel::Reduction::Amin, x, c.dims, keepdim,
                                                  dtype, 2.0),
                       exact) == "");
      }
    }
    const Tensor x = random_input({4, 1000}, dtype, seed++);
    CHECK(mismatch(hg::max(to_cuda(x)), hg::max(x), exact) == "");
    CHECK(mismatch(hg::min(to_cuda(x)), hg::min(x), exact) == "");
    // NaN wins wherever it is.
    std::vector<double> v = values_of(x);
    v[5] = kNaN;               // row 0, early
    v[2 * 1000 + 999] = kNaN;  // row 2, last
    const Tensor with_nan = from_values(v, {4, 1000}, dtype);
    CHECK(mismatch_nan(amax(to_cuda(with_nan), {1}), amax(with_nan, {1}), exact) == "");
    CHECK(mismatch_nan(hg::min(to_cuda(with_nan)), hg::min(with_nan), exact) == "");
    CHECK(std::isnan(hg::max(to_cuda(with_nan)).item<double>()));
  }
}

TEST_CASE("CUDA amax backward splits the gradient among ties", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : kDTypes) {
    // Halves (truncated to integers, then halved): many ties.
    const Tensor x =
        div(mul(random_input({6, 31}, kFloat32, 21), 2.0).to(kInt64).to(kFloat32), 2.0).to(dtype);
    check_backward([](const Tensor& t) { return amax(t, {1}); }, x, 22);
  }
}

TEST_CASE("CUDA max and min along a dim give the first extreme, NaN first", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const Tolerance exact{0.0, 0.0};
  uint64_t seed = 600;
  for (DType dtype : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (const Shape& shape : {Shape{5, 7}, Shape{3, 1000}, Shape{2, 3, 50257}, Shape{40000, 2}}) {
      for (int64_t dim = 0; dim < int64_t(shape.size()); ++dim) {
        for (bool keepdim : {false, true}) {
          INFO(fmt::format("shape {} dim {} dtype {} keepdim {}", shape, dim, dtype, keepdim));
          // Small integers (truncated): ties everywhere.
          const Tensor x = mul(random_input(shape, kFloat32, seed++), 1.5).to(kInt64).to(dtype);
          const auto [values, indices] = hg::max(to_cuda(x), dim, keepdim);
          const auto [want_values, want_indices] = hg::max(x, dim, keepdim);
          CHECK(values.dtype() == dtype);
          CHECK(indices.dtype() == kInt64);
          CHECK(mismatch(values, want_values, exact) == "");
          CHECK(mismatch(indices, want_indices, exact) == "");
          const auto [min_values, min_indices] = hg::min(to_cuda(x), dim, keepdim);
          const auto [want_min_values, want_min_indices] = hg::min(x, dim, keepdim);
          CHECK(mismatch(min_values, want_min_values, exact) == "");
          CHECK(mismatch(min_indices, want_min_indices, exact) == "");
          CHECK(mismatch(argmax(to_cuda(x), dim, keepdim), want_indices, exact) == "");
        }
      }
    }
    // NaN: the first NaN of each row wins, for max and min alike.
    std::vector<double> v = values_of(random_input({3, 100}, dtype, seed++));
    v[10] = kNaN;
    v[20] = kNaN;
    v[100 + 99] = kNaN;
    const Tensor x = from_values(v, {3, 100}, dtype);
    const auto [values, indices] = hg::max(to_cuda(x), 1);
    const auto [want_values, want_indices] = hg::max(x, 1);
    CHECK(mismatch_nan(values, want_values, exact) == "");
    CHECK(mismatch(indices, want_indices, exact) == "");
    CHECK(indices.to(Device(kCPU)).to_vector<int64_t>()[0] == 10);
    const auto [min_values, min_indices] = hg::min(to_cuda(x), 1);
    CHECK(mismatch(min_indices, std::get<1>(hg::min(x, 1)), exact) == "");
    CHECK(argmax(to_cuda(x)).item<int64_t>() == 10);
  }
}

TEST_CASE("CUDA max along a dim backward sends the gradient to the index", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : kDTypes) {
    const Tensor x = random_input({5, 33}, dtype, 31);
    check_backward([](const Tensor& t) { return std::get<0>(hg::max(t, 1)); }, x, 32);
  }
}

TEST_CASE("CUDA argmax without a dim indexes x flattened in row-major order", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const Tolerance exact{0.0, 0.0};
  for (DType dtype : kDTypes) {
    const Tensor x = random_input({37, 1001}, dtype, 41);
    CHECK(mismatch(argmax(to_cuda(x)), argmax(x), exact) == "");
    const Tensor keep = argmax(to_cuda(x), std::nullopt, true);
    CHECK(keep.sizes() == Shape{1, 1});
    CHECK(mismatch(keep, argmax(x, std::nullopt, true), exact) == "");
    // A transposed input: the index counts in the transposed (logical) order.
    const Tensor t = to_cuda(x).transpose(0, 1);
    CHECK(mismatch(argmax(t), argmax(x.transpose(0, 1)), exact) == "");
    // A 0-d input.
    CHECK(argmax(to_cuda(scalar_tensor(2.5, dtype))).item<int64_t>() == 0);
  }
}

// ---- var, norm, logsumexp -------------------------------------------------------------------

TEST_CASE("CUDA var matches float64 for every correction", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 700;
  for (DType dtype : kDTypes) {
    for (const DimsCase& c : dims_cases()) {
      for (int64_t correction : {0, 1, 2}) {
        for (bool keepdim : {false, true}) {
          INFO(describe(c, dtype, keepdim) << " correction " << correction);
          const Tensor x = random_input(c.shape, dtype, seed++);
          const Tensor v = var(to_cuda(x), c.dims, correction, keepdim);
          CHECK(v.dtype() == dtype);
          // n <= correction gives NaN on both.
          CHECK(mismatch_nan(v, var(x.to(kFloat64), c.dims, correction, keepdim),
                             tolerance_for(dtype)) == "");
        }
      }
    }
    // Backward.
    const Tensor x = random_input({6, 1000}, dtype, seed++);
    check_backward([](const Tensor& t) { return var(t, {1}); }, x, seed++);
  }
}

TEST_CASE("CUDA norm matches float64 for p = 0, 1, 2, 3.5 and inf", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 800;
  for (DType dtype : kDTypes) {
    for (double p : {0.0, 1.0, 2.0, 3.5, kInf}) {
      for (const DimsCase& c : dims_cases()) {
        INFO(describe(c, dtype, false) << " p " << p);
        const Tensor x = random_input(c.shape, dtype, seed++);
        const Tensor n = norm(to_cuda(x), p, c.dims);
        CHECK(n.dtype() == dtype);
        CHECK(mismatch(n, norm(x.to(kFloat64), p, c.dims), tolerance_for(dtype)) == "");
      }
      // Backward (p = 0 has a zero gradient).
      INFO("backward, dtype " << dtype << " p " << p);
      const Tensor x = random_input({5, 301}, dtype, seed++);
      check_backward([&](const Tensor& t) { return norm(t, p, {1}, true); }, x, seed++);
    }
    // A NaN propagates through every p but 0 (where it counts as nonzero).
    std::vector<double> v = values_of(random_input({2, 50}, dtype, seed++));
    v[7] = kNaN;
    const Tensor with_nan = from_values(v, {2, 50}, dtype);
    for (double p : {0.0, 1.0, 2.0, 3.5, kInf}) {
      INFO("NaN, p " << p);
      CHECK(mismatch_nan(norm(to_cuda(with_nan), p, {1}), norm(with_nan.to(kFloat64), p, {1}),
                         tolerance_for(dtype)) == "");
    }
  }
}

TEST_CASE("CUDA logsumexp matches float64 and follows the inf and NaN rules", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 900;
  for (DType dtype : kDTypes) {
    for (const DimsCase& c : dims_cases()) {
      for (bool keepdim : {false, true}) {
        INFO(describe(c, dtype, keepdim));
        const Tensor x = random_input(c.shape, dtype, seed++);
        const Tensor l = logsumexp(to_cuda(x), c.dims, keepdim);
        CHECK(l.dtype() == dtype);
        CHECK(mismatch(l, logsumexp(x.to(kFloat64), c.dims, keepdim), tolerance_for(dtype)) == "");
      }
    }
    // Rows: all -inf -> -inf; any +inf -> +inf; NaN -> NaN (also beside +inf); -inf among
    // finite values counts as zero; large values do not overflow.
    const std::vector<double> rows = {
        -kInf, -kInf, -kInf, -kInf,  //
        1.0,   kInf,  2.0,   -kInf,  //
        1.0,   kNaN,  2.0,   3.0,    //
        kNaN,  kInf,  0.0,   1.0,    //
        -kInf, 0.5,   1.0,   -2.0,   //
        80.0,  81.0,  79.0,  82.0,   //
    };
    const Tensor x = from_values(rows, {6, 4}, dtype);
    CHECK(mismatch_nan(logsumexp(to_cuda(x), {1}), logsumexp(x.to(kFloat64), {1}),
                       tolerance_for(dtype)) == "");
    // Backward.
    const Tensor r = random_input({7, 1000}, dtype, seed++);
    check_backward([](const Tensor& t) { return logsumexp(t, {1}); }, r, seed++);
  }
}

// ---- cumsum ---------------------------------------------------------------------------------

TEST_CASE("CUDA cumsum matches float64 along every dim", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 1000;
  for (DType dtype : kDTypes) {
    // Short and long lines (a block per line past 64 values; several chunks of 2048), many
    // lines, lines along a strided dim.
    for (const Shape& shape : {Shape{1}, Shape{31}, Shape{5000}, Shape{3, 5, 7}, Shape{4, 4100},
                               Shape{300, 200}, Shape{2, 50257}}) {
      for (int64_t dim = 0; dim < int64_t(shape.size()); ++dim) {
        INFO(fmt::format("shape {} dim {} dtype {}", shape, dim, dtype));
        const Tensor x = random_input(shape, dtype, seed++);
        const Tensor x64 = x.to(kFloat64);
        const Tensor c = cumsum(to_cuda(x), dim);
        CHECK(c.dtype() == dtype);
        CHECK(c.is_contiguous());
        CHECK(mismatch_scaled(c, cumsum(x64, dim), cumsum(abs(x64), dim), tolerance_for(dtype)) ==
              "");
        // Transposed input.
        if (shape.size() >= 2) {
          const Tensor t = to_cuda(x).transpose(0, 1);
          CHECK(mismatch_scaled(cumsum(t, dim), cumsum(x64.transpose(0, 1), dim),
                                cumsum(abs(x64).transpose(0, 1), dim), tolerance_for(dtype)) == "");
        }
      }
    }
    // An output dtype: accumulate in float, round once to float32.
    const Tensor x = random_input({3, 700}, dtype, seed++);
    const Tensor c = cumsum(to_cuda(x), 1, kFloat32);
    CHECK(c.dtype() == kFloat32);
    CHECK(mismatch_scaled(c, cumsum(x.to(kFloat64), 1), cumsum(abs(x.to(kFloat64)), 1),
                          tolerance_for(kFloat32)) == "");
    // Backward.
    const Grads grads = input_grads([](const Tensor& t) { return cumsum(t, 1); }, x, seed++);
    const Tensor g64 = grads.upstream.to(kFloat64);
    CHECK(mismatch_scaled(grads.got, grads.want, sum(abs(g64), {1}, true).expand(g64.sizes()),
                          backward_tolerance(dtype)) == "");
  }
  // A 0-d input.
  const Tensor s = cumsum(to_cuda(scalar_tensor(1.5)), 0);
  CHECK(s.dim() == 0);
  CHECK(s.item<double>() == 1.5);
}

TEST_CASE("CUDA cumprod and logcumsumexp match float64 in short and long lines", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 3000;
  for (DType dtype : kDTypes) {
    for (const Shape& shape : {Shape{31}, Shape{3, 5000}, Shape{300, 70}}) {
      for (int64_t dim = 0; dim < int64_t(shape.size()); ++dim) {
        INFO(fmt::format("shape {} dim {} dtype {}", shape, dim, dtype));
        const Tensor x = random_input(shape, dtype, seed++);
        const Tensor x64 = x.to(kFloat64);
        // logcumsumexp: against the float64 CPU kernel; its values stay O(log n) in size.
        const Tensor l = logcumsumexp(to_cuda(x), dim);
        CHECK(l.dtype() == dtype);
        CHECK(mismatch_nan(l, logcumsumexp(x64, dim), tolerance_for(dtype)) == "");
        // cumprod of values near 1 (1 + x / 64), so long products neither vanish nor overflow;
        // the error scales with the running product.
        const Tensor near_one = add(div(x, 64.0), 1.0).to(dtype);
        const Tensor p64 = cumprod(near_one.to(kFloat64), dim);
        const Tensor p = cumprod(to_cuda(near_one), dim);
        const double length = double(shape[size_t(dim)]);
        CHECK(mismatch_scaled(p, p64, mul(abs(p64), std::sqrt(length)), tolerance_for(dtype)) ==
              "");
      }
    }
  }
  // Integers: products wrap as int64, exactly the CPU's.
  const Tensor ints = tensor(std::vector<int64_t>{3, -2, 5, 7, 1, -4, 2, 9}, {2, 4}).to(kInt32);
  CHECK(cumprod(to_cuda(ints), 1).dtype() == kInt64);
  CHECK(cumprod(to_cuda(ints), 1).to(kCPU).to_vector<int64_t>() ==
        cumprod(ints, 1).to_vector<int64_t>());
}

// ---- layouts --------------------------------------------------------------------------------

TEST_CASE("CUDA reductions read non-contiguous inputs", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  uint64_t seed = 1100;
  for (DType dtype : kDTypes) {
    const Tensor base = random_input({6, 40, 33}, dtype, seed++);
    const Tensor base64 = base.to(kFloat64);
    const Tensor cuda_base = to_cuda(base);
    struct View {
      const char* name;
      Tensor cuda;
      Tensor reference;
    };
    const std::vector<View> views = {
        {"transpose", cuda_base.transpose(0, 2), base64.transpose(0, 2)},
        {"permute", cuda_base.permute({1, 2, 0}), base64.permute({1, 2, 0})},
        {"slice step 2", cuda_base.slice(1, 1, 40, 2), base64.slice(1, 1, 40, 2)},
        {"narrow (misaligned rows)", cuda_base.narrow(2, 1, 31), base64.narrow(2, 1, 31)},
        {"expand (stride 0)", cuda_base.narrow(0, 0, 1).expand({5, 40, 33}),
         base64.narrow(0, 0, 1).expand({5, 40, 33})},
        // Contiguous, starting 1 and 4 elements into the storage (16-byte vectors only where
        // the start is aligned).
        {"offset 1", cuda_base.reshape({-1}).narrow(0, 1, 6400).view({10, 20, 32}),
         base64.reshape({-1}).narrow(0, 1, 6400).view({10, 20, 32})},
        {"offset 4", cuda_base.reshape({-1}).narrow(0, 4, 6400).view({10, 20, 32}),
         base64.reshape({-1}).narrow(0, 4, 6400).view({10, 20, 32})},
    };
    for (const View& view : views) {
      for (const Shape& dims : {Shape{}, Shape{0}, Shape{1}, Shape{2}, Shape{0, 2}, Shape{1, 2}}) {
        INFO(fmt::format("{} dims {} dtype {}", view.name, dims, dtype));
        const Tensor abs64 = abs(view.reference);
        CHECK(mismatch_scaled(sum(view.cuda, dims), sum(view.reference, dims), sum(abs64, dims),
                              tolerance_for(dtype)) == "");
        CHECK(mismatch(amax(view.cuda, dims), amax(view.reference, dims), {0.0, 0.0}) == "");
        CHECK(mismatch(var(view.cuda, dims), var(view.reference, dims), tolerance_for(dtype)) ==
              "");
        CHECK(mismatch(norm(view.cuda, 2.0, dims), norm(view.reference, 2.0, dims),
                       tolerance_for(dtype)) == "");
      }
      for (int64_t dim = 0; dim < 3; ++dim) {
        INFO(fmt::format("{} argmax dim {} dtype {}", view.name, dim, dtype));
        CHECK(mismatch(argmax(view.cuda, dim), argmax(view.reference.to(dtype), dim), {0.0, 0.0}) ==
              "");
      }
    }
  }
}

TEST_CASE("CUDA reductions are deterministic", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  // Pieces on both paths: a full sum, a column sum over many rows, a long row.
  const Tensor x = to_cuda(random_input({4096, 1024}, kFloat32, 1201));
  for (const Shape& dims : {Shape{}, Shape{0}, Shape{1}}) {
    INFO(fmt::format("dims {}", dims));
    const std::vector<float> first = sum(x, dims).to(Device(kCPU)).to_vector<float>();
    const std::vector<float> second = sum(x, dims).to(Device(kCPU)).to_vector<float>();
    CHECK(first == second);
  }
  const Tensor x64 = x.to(Device(kCPU)).to(kFloat64);
  CHECK(mismatch_scaled(sum(x), sum(x64), sum(abs(x64)), tolerance_for(kFloat32)) == "");
  CHECK(mismatch(norm(x), norm(x64), tolerance_for(kFloat32)) == "");
}

// ---- empty reductions and errors ------------------------------------------------------------

TEST_CASE("CUDA reductions over zero elements", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const Tensor x = to_cuda(random_input({0, 3}, kFloat32, 1301));
  CHECK(mismatch(sum(x, {0}), zeros({3}), {0.0, 0.0}) == "");
  CHECK(mismatch(prod(x, {0}), ones({3}), {0.0, 0.0}) == "");
  CHECK(mismatch(norm(x, 2.0, {0}), zeros({3}), {0.0, 0.0}) == "");
  const std::vector<double> means = values_of(mean(x, {0}));
  CHECK(means.size() == 3);
  CHECK(std::isnan(means[0]));
  CHECK(values_of(logsumexp(x, {0}))[0] == -kInf);
  CHECK(sum(x, {1}).sizes() == Shape{0});
  CHECK(amax(x, {1}).sizes() == Shape{0});
  CHECK(cumsum(x, 0).sizes() == Shape{0, 3});
  CHECK_THROWS_WITH(amax(x, {0}), Contains("non-empty"));
  CHECK_THROWS_WITH(norm(x, kInf, {0}), Contains("non-empty"));
  CHECK_THROWS_WITH(hg::max(x, 0), Contains("non-empty"));
  CHECK_THROWS_WITH(argmax(x), Contains("non-empty"));
}

TEST_CASE("CUDA reductions reject bad arguments as the CPU kernels do", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor x = to_cuda(random_input({3, 4}, kFloat32, 1401));
  CHECK_THROWS_AS(sum(x, {2}), Error);
  CHECK_THROWS_AS(sum(x, {-3}), Error);
  CHECK_THROWS_AS(sum(x, {0, 0}), Error);
  CHECK_THROWS_AS(sum(x, {0, -2}), Error);
  CHECK_THROWS_AS(amax(x, {5}), Error);
  CHECK_THROWS_AS(var(x, {2}), Error);
  CHECK_THROWS_AS(hg::max(x, 2), Error);
  CHECK_THROWS_AS(argmax(x, -3), Error);
  CHECK_THROWS_AS(cumsum(x, 2), Error);
  CHECK_THROWS_AS(logsumexp(x, {3}), Error);
  CHECK_THROWS_AS(norm(x, -1.0), Error);
  CHECK_THROWS_AS(var(x, {1}, -1), Error);
  CHECK_THROWS_AS(mean(to_cuda(x.to(Device(kCPU)).to(kInt64))), Error);
  // The kernels' own checks and messages (what the op layer does not check first).
  CHECK_THROWS_WITH(
      cuda::reduce_kernels.reduce(kernel::Reduction::Sum, x, {0, -2}, false, kFloat32, 2.0),
      Contains("expected distinct dims"));
  CHECK_THROWS_WITH(
      cuda::reduce_kernels.reduce(kernel::Reduction::Mean, x.to(kInt64), {}, false, kFloat32, 2.0),
      Contains("expected a floating input"));
  CHECK_THROWS_WITH(cuda::reduce_kernels.reduce(kernel::Reduction::Sum, x, {}, false, kInt64, 2.0),
                    Contains("expected a floating out_dtype"));
  CHECK_THROWS_WITH(
      cuda::reduce_kernels.reduce(kernel::Reduction::Norm, x, {}, false, kFloat32, -2.0),
      Contains("expected p > 0"));
  CHECK_THROWS_WITH(cuda::reduce_kernels.var(x, {1}, -1, false, kFloat32),
                    Contains("correction >= 0"));
  CHECK_THROWS_WITH(cuda::reduce_kernels.scan(kernel::Scan::Sum, x, 0, kInt64),
                    Contains("expected a floating out_dtype"));
  CHECK_THROWS_WITH(cuda::reduce_kernels.sum_to(x, {5, 4}), Contains("broadcasts"));
  CHECK_THROWS_AS(cuda::reduce_kernels.reduce(kernel::Reduction::Sum, x.to(Device(kCPU)), {}, false,
                                              kFloat32, 2.0),
                  Error);
}

TEST_CASE("CUDA sum_to reduces a broadcast gradient back to its shape", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  for (DType dtype : kDTypes) {
    // A bias gradient [B*T, C] -> [C], and broadcasts in the middle and at the front.
    const Tensor x = random_input({4, 64, 768}, dtype, 1501);
    const Tensor x64 = x.to(kFloat64);
    for (const Shape& target :
         {Shape{768}, Shape{1, 768}, Shape{4, 1, 768}, Shape{64, 1}, Shape{4, 64, 768}}) {
      INFO(fmt::format("target {} dtype {}", target, dtype));
      const Tensor got = cuda::reduce_kernels.sum_to(to_cuda(x), target);
      CHECK(got.sizes() == target);
      CHECK(got.dtype() == dtype);
      CHECK(mismatch_scaled(got, sum_to_size(x64, target), sum_to_size(abs(x64), target),
                            tolerance_for(dtype)) == "");
    }
    const Tensor rows = random_input({8192, 768}, dtype, 1502);
    CHECK(mismatch_scaled(cuda::reduce_kernels.sum_to(to_cuda(rows), {768}),
                          sum(rows.to(kFloat64), {0}), sum(abs(rows.to(kFloat64)), {0}),
                          tolerance_for(dtype)) == "");
  }
}
