// The CPU GEMM against a float64 reference computed here by a triple loop over the inputs as
// stored (already rounded to their dtype), on every implementation each dtype can run.
//
// Dims: B batch, M rows of a and out, K the reduced dim, N columns of b and out.
#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;
using cpu::GemmImpl;
using cpu::GemmPath;

namespace {

constexpr std::array<DType, 4> kFloating = {kFloat32, kFloat64, kFloat16, kBFloat16};

// Error allowed per output element, relative to alpha * sum_k |a b| + |beta out|: float32
// accumulation, plus for 16-bit outputs the one rounding at the output (half an ulp is
// 2^-11 for float16, 2^-8 for bfloat16).
double relative_tolerance(DType dtype) {
  switch (dtype) {
    case kFloat64:
      return 1e-12;
    case kFloat32:
      return 1e-5;
    case kFloat16:
      return 1e-3;
    default:
      return 8e-3;
  }
}

// The implementations worth checking for a dtype: gemm's own choice and each one forced.
std::vector<GemmImpl> impls_for(DType dtype) {
  std::vector<GemmImpl> impls = {GemmImpl::Auto};
  if (dtype == kFloat64) return impls;
  if (HALFGRAD_HAS_ONEDNN) impls.push_back(GemmImpl::OneDNN);
  impls.push_back(GemmImpl::Eigen);
  impls.push_back(GemmImpl::Small);
  return impls;
}

const char* impl_name(GemmImpl impl) {
  switch (impl) {
    case GemmImpl::Auto:
      return "auto";
    case GemmImpl::OneDNN:
      return "onednn";
    case GemmImpl::Small:
      return "small";
    default:
      return "eigen";
  }
}

struct Expected {
  std::vector<double> value;
  std::vector<double> magnitude;  // the scale the error is measured against
};

// alpha * a[i] @ b[i] + beta * out_before[i] in float64; a [B or 1, M, K], b [B or 1, K, N].
Expected reference_gemm(const Tensor& a, const Tensor& b, const Tensor& out_before, double alpha,
                        double beta) {
  const int64_t batch = out_before.size(0), m = out_before.size(1), n = out_before.size(2);
  const int64_t k = a.size(2);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const std::vector<double> old = out_before.to_vector<double>();
  Expected e{std::vector<double>(old.size()), std::vector<double>(old.size())};
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t ia = a.size(0) == 1 ? 0 : i, ib = b.size(0) == 1 ? 0 : i;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double sum = 0, magnitude = 0;
        for (int64_t j = 0; j < k; ++j) {
          const double product = av[(ia * m + r) * k + j] * bv[(ib * k + j) * n + c];
          sum += product;
          magnitude += std::fabs(product);
        }
        const int64_t index = (i * m + r) * n + c;
        const double kept = beta == 0 ? 0.0 : beta * old[index];
        e.value[index] = alpha * sum + kept;
        e.magnitude[index] = std::fabs(alpha) * magnitude + std::fabs(kept);
      }
    }
  }
  return e;
}

// Every element of out within the dtype's tolerance of the reference.
void check_against(const Tensor& out, const Expected& expected) {
  const DType dtype = out.dtype();
  const std::vector<double> got = out.to_vector<double>();
  const double tolerance = relative_tolerance(dtype);
  const double floor = finfo(dtype).smallest_subnormal;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double allowed = tolerance * expected.magnitude[i] + floor;
    if (!(std::fabs(got[i] - expected.value[i]) <= allowed)) {
      if (bad++ < 5) {
        UNSCOPED_INFO("element " << i << ": got " << got[i] << ", expected " << expected.value[i]
                                 << " (allowed error " << allowed << ")");
      }
    }
  }
  CHECK(bad == 0);
}

// Runs gemm_with(impl), or gemm_on(path), on copies of out and checks every element against
// the reference.
template <class Way>
void check_gemm(Way way, const Tensor& a, const Tensor& b, const Tensor& out_before,
                double alpha = 1.0, double beta = 0.0) {
  const DType dtype = out_before.dtype();
  if constexpr (std::is_same_v<Way, GemmPath>) {
    INFO("path " << cpu::gemm_path_name(way));
  } else {
    INFO("impl " << impl_name(way));
  }
  INFO("dtype " << dtype << ", a " << a.sizes() << " strides " << a.strides() << ", b "
                << b.sizes() << " strides " << b.strides() << ", alpha " << alpha << ", beta "
                << beta);
  const Expected expected = reference_gemm(a, b, out_before, alpha, beta);
  const Tensor out = out_before.clone();
  if constexpr (std::is_same_v<Way, GemmPath>) {
    cpu::gemm_on(way, a, b, out, alpha, beta);
  } else {
    cpu::gemm_with(way, a, b, out, alpha, beta);
  }
  check_against(out, expected);
}

// Caps the small kernel's copy for a scope (cpu::detail::set_small_gemm_level).
struct SmallGemmLevel {
  explicit SmallGemmLevel(int level) : previous(cpu::detail::set_small_gemm_level(level)) {}
  ~SmallGemmLevel() { cpu::detail::set_small_gemm_level(previous); }
  int previous;
};

// Every implementation gemm_with can force, and every path gemm can choose (NOTE [GEMM path by
// measurement]).
void check_all_impls(const Tensor& a, const Tensor& b, const Tensor& out_before, double alpha = 1.0,
                     double beta = 0.0) {
  for (GemmPath path : cpu::gemm_paths(out_before.dtype())) {
    check_gemm(path, a, b, out_before, alpha, beta);
  }
  for (GemmImpl impl : impls_for(out_before.dtype())) {
    if (impl != GemmImpl::Small) {
      check_gemm(impl, a, b, out_before, alpha, beta);
      continue;
    }
    for (int level = 0; level < cpu::detail::small_gemm_levels(); ++level) {  // every copy
      INFO("small kernel level " << level);
      const SmallGemmLevel capped(level);
      check_gemm(impl, a, b, out_before, alpha, beta);
    }
  }
}

// Sets a dtype's GEMM path for a scope (cpu::set_gemm_path), the previous one again after.
struct PathSet {
  PathSet(DType dtype, GemmPath path) : dtype(dtype), previous(cpu::get_gemm_path(dtype)) {
    cpu::set_gemm_path(dtype, path);
  }
  ~PathSet() { cpu::set_gemm_path(dtype, previous); }
  DType dtype;
  GemmPath previous;
};

// Restores the float16 tile budget when a test ends.
struct TileBudget {
  explicit TileBudget(int64_t elements)
      : previous(cpu::detail::set_reduced_gemm_tile_budget(elements)) {}
  ~TileBudget() { cpu::detail::set_reduced_gemm_tile_budget(previous); }
  int64_t previous;
};

}  // namespace

TEST_CASE("gemm matches a float64 reference across shapes", "[gemm]") {
  struct Case {
    int64_t batch, m, k, n;
  };
  const std::vector<Case> cases = {{1, 1, 1, 1},    {1, 1, 5, 7},     {1, 6, 1, 4},
                                   {1, 5, 9, 1},    {1, 17, 33, 65},  {3, 17, 33, 65},
                                   {2, 64, 48, 80}, {1, 130, 70, 90}, {4, 8, 300, 12}};
  uint64_t seed = 1;
  for (DType dtype : kFloating) {
    for (const Case& c : cases) {
      manual_seed(seed++);
      const Tensor a = randn({c.batch, c.m, c.k}, dtype);
      const Tensor b = randn({c.batch, c.k, c.n}, dtype);
      check_all_impls(a, b, empty({c.batch, c.m, c.n}, dtype));
    }
  }
}

TEST_CASE("gemm with K = 0 leaves beta times out", "[gemm]") {
  for (DType dtype : kFloating) {
    manual_seed(7);
    const Tensor a = empty({2, 3, 0}, dtype), b = empty({2, 0, 4}, dtype);
    const Tensor old = randn({2, 3, 4}, dtype);
    check_all_impls(a, b, old, 1.0, 0.5);
    const Tensor nan_out = full({2, 3, 4}, NAN, dtype);
    for (GemmImpl impl : impls_for(dtype)) {
      const Tensor out = nan_out.clone();
      cpu::gemm_with(impl, a, b, out, 2.0, 0.0);
      for (double v : out.to_vector<double>()) CHECK(v == 0.0);
    }
  }
}

TEST_CASE("gemm broadcasts a batch of size 1 or stride 0", "[gemm]") {
  for (DType dtype : kFloating) {
    manual_seed(11);
    const int64_t batch = 3, m = 9, k = 21, n = 14;
    const Tensor a = randn({batch, m, k}, dtype), b = randn({batch, k, n}, dtype);
    const Tensor a_one = randn({1, m, k}, dtype), b_one = randn({1, k, n}, dtype);
    const Tensor out = randn({batch, m, n}, dtype);
    SECTION("b of stride 0") { check_all_impls(a, b_one.expand({batch, k, n}), out, 1.0, 0.25); }
    SECTION("a of stride 0") { check_all_impls(a_one.expand({batch, m, k}), b, out); }
    SECTION("batch size 1") { check_all_impls(a, b_one, out); }
    SECTION("both broadcast") {
      check_all_impls(a_one.expand({batch, m, k}), b_one.expand({batch, k, n}), out, 0.5, 2.0);
    }
  }
}

TEST_CASE("gemm reads transposed views of a and b", "[gemm]") {
  for (DType dtype : kFloating) {
    manual_seed(13);
    const int64_t batch = 2, m = 19, k = 37, n = 23;
    const Tensor a_t = randn({batch, k, m}, dtype).transpose(1, 2);  // column-major [B, M, K]
    const Tensor b_t = randn({batch, n, k}, dtype).transpose(1, 2);  // column-major [B, K, N]
    const Tensor a = randn({batch, m, k}, dtype), b = randn({batch, k, n}, dtype);
    const Tensor out = empty({batch, m, n}, dtype);
    check_all_impls(a_t, b, out);
    check_all_impls(a, b_t, out);
    check_all_impls(a_t, b_t, out);
    // Transposed and broadcast: the weight of a linear layer read as w.t().
    const Tensor w = randn({n, k}, dtype);
    check_all_impls(a, w.t().unsqueeze(0).expand({batch, k, n}), out);
    // Narrower than a vector: the small kernel's dot products along K (37: two 16-lane
    // vectors and a tail), for 3 columns and for 1.
    for (int64_t narrow : {3, 1}) {
      const Tensor w_narrow = randn({narrow, k}, dtype);
      check_all_impls(a, w_narrow.t().unsqueeze(0), empty({batch, m, narrow}, dtype));
    }
  }
}

TEST_CASE("gemm handles strided layouts and copies the ones it cannot read", "[gemm]") {
  for (DType dtype : kFloating) {
    manual_seed(17);
    const int64_t batch = 3, m = 10, k = 12, n = 7;
    const Tensor a = randn({batch, m, k}, dtype), b = randn({batch, k, n}, dtype);
    const Tensor out = randn({batch, m, n}, dtype);
    SECTION("padded rows (a leading dim larger than the row)") {
      check_all_impls(randn({batch, m, k + 5}, dtype).narrow(2, 2, k),
                      randn({batch, k, n + 3}, dtype).narrow(2, 0, n), out);
    }
    SECTION("every second column of a and every second row of b") {
      check_all_impls(randn({batch, m, 2 * k}, dtype).slice(2, 0, std::nullopt, 2),
                      randn({batch, 2 * k, n}, dtype).slice(1, 1, std::nullopt, 2), out, 1.0, -1.0);
    }
    SECTION("the batch dim innermost") {
      check_all_impls(randn({m, k, batch}, dtype).permute({2, 0, 1}),
                      randn({k, n, batch}, dtype).permute({2, 0, 1}), out);
    }
    SECTION("rows of different batches interleaved") {
      check_all_impls(randn({m, batch, k}, dtype).permute({1, 0, 2}),
                      randn({k, batch, n}, dtype).permute({1, 0, 2}), out);
    }
    SECTION("every second batch") {
      check_all_impls(randn({2 * batch, m, k}, dtype).slice(0, 0, std::nullopt, 2), b, out);
    }
  }
}

TEST_CASE("gemm applies alpha and beta", "[gemm]") {
  for (DType dtype : kFloating) {
    manual_seed(19);
    const Tensor a = randn({2, 17, 33}, dtype), b = randn({2, 33, 65}, dtype);
    const Tensor old = randn({2, 17, 65}, dtype);
    check_all_impls(a, b, old, 0.5, -1.5);
    check_all_impls(a, b, old, -2.0, 1.0);
    check_all_impls(a, b, old, 1.0, 1.0);
    check_all_impls(a, b, old, 0.0, 3.0);
    // beta == 0: out's old contents are never read, so NaN in them does not propagate.
    const Tensor nan_out = full({2, 17, 65}, NAN, dtype);
    for (GemmImpl impl : impls_for(dtype)) {
      const Tensor out = nan_out.clone();
      cpu::gemm_with(impl, a, b, out, 0.75, 0.0);
      for (double v : out.to_vector<double>()) REQUIRE(std::isfinite(v));
    }
    check_all_impls(a, b, randn({2, 17, 65}, dtype), 0.75, 0.0);
  }
}

TEST_CASE("gemm_bias adds the bias row on every path", "[gemm]") {
  // oneDNN's bias argument (float32 and bfloat16 above the tiny size), the small kernel's
  // (tiny float32 products: a partial last vector, whole vectors, a batch of 2 sharing b) and
  // the beta = 1 form (float64, float16 tiles, tiny 16-bit products), with a transposed b and
  // a broadcast batch. out starts as NaN: its old contents must not be read.
  for (DType dtype : kFloating) {
    manual_seed(23);
    for (const auto& [batch, m, k, n] :
         {std::array<int64_t, 4>{1, 3, 4, 5}, std::array<int64_t, 4>{2, 5, 16, 20},
          std::array<int64_t, 4>{1, 7, 9, 64}, std::array<int64_t, 4>{2, 33, 65, 47},
          std::array<int64_t, 4>{1, 64, 96, 128}}) {
      INFO("dtype " << dtype << ", batch " << batch << ", m " << m << ", k " << k << ", n " << n);
      const Tensor a = randn({batch, m, k}, dtype);
      const Tensor b = randn({1, n, k}, dtype).transpose(1, 2);  // column-major, broadcast
      const Tensor bias = randn({n}, dtype);
      const Expected expected =
          reference_gemm(a, b, bias.expand({batch, m, n}).contiguous(), 1.0, 1.0);
      for (GemmPath path : cpu::gemm_paths(dtype)) {
        INFO("path " << cpu::gemm_path_name(path));
        const PathSet set(dtype, path);
        const Tensor out = full({batch, m, n}, NAN, dtype);
        cpu::linalg_kernels.gemm_bias(a, b, bias, out);
        check_against(out, expected);
      }
      const Tensor out = full({batch, m, n}, NAN, dtype);
      cpu::linalg_kernels.gemm_bias(a, b, bias, out);  // on the measured path
      check_against(out, expected);
    }
  }
  const Tensor a = randn({1, 4, 8}), b = randn({1, 8, 6}), out = empty({1, 4, 6});
  CHECK_THROWS_WITH(cpu::linalg_kernels.gemm_bias(a, b, randn({5}), out),
                    Contains("expected a contiguous CPU bias of shape [6] and dtype float32"));
}

TEST_CASE("gemm accumulates 16-bit inputs in float32 over the whole K", "[gemm]") {
  // a is all ones and b's column is (big, 1, 1, ..., 1): summed in float32 the ones count
  // (big + K - 1); summed in the 16-bit type each 1 is below half an ulp of big and vanishes.
  struct Case {
    DType dtype;
    double big;
    int64_t k;
    double expected;  // big + k - 1 rounded once to dtype
  };
  for (const Case& c : {Case{kFloat16, 2048, 4096, 6144}, Case{kBFloat16, 256, 512, 768}}) {
    std::vector<double> column(size_t(c.k), 1.0);
    column[0] = c.big;
    const Tensor a = ones({1, 2, c.k}, c.dtype);
    const Tensor b = tensor(column, {1, c.k, 1}, c.dtype);
    for (int64_t tile_budget : {int64_t(1) << 22, int64_t(64)}) {
      INFO("dtype " << c.dtype << ", tile budget " << tile_budget);
      const TileBudget budget(tile_budget);
      for (GemmImpl impl : impls_for(c.dtype)) {
        INFO("impl " << impl_name(impl));
        const Tensor out = empty({1, 2, 1}, c.dtype);
        cpu::gemm_with(impl, a, b, out);
        CHECK(out.to_vector<double>() == std::vector<double>{c.expected, c.expected});
      }
      for (GemmPath path : cpu::gemm_paths(c.dtype)) {
        INFO("path " << cpu::gemm_path_name(path));
        const Tensor out = empty({1, 2, 1}, c.dtype);
        cpu::gemm_on(path, a, b, out);
        CHECK(out.to_vector<double>() == std::vector<double>{c.expected, c.expected});
      }
    }
  }
}

TEST_CASE("gemm float16 tiles cover every block edge", "[gemm]") {
  // A tiny budget makes blocks of 16 rows and columns, so these shapes have partial blocks.
  const TileBudget budget(256);
  for (DType dtype : {kFloat16, kBFloat16}) {
    manual_seed(23);
    const int64_t batch = 2, m = 50, k = 33, n = 37;
    const Tensor a = randn({batch, m, k}, dtype), b = randn({batch, k, n}, dtype);
    const Tensor old = randn({batch, m, n}, dtype);
    check_all_impls(a, b, old, 1.0, 0.0);
    check_all_impls(a, b, old, -0.5, 2.0);
    check_all_impls(randn({batch, k, m}, dtype).transpose(1, 2),
                    randn({1, n, k}, dtype).transpose(1, 2).expand({batch, k, n}), old, 1.0, 1.0);
  }
}

TEST_CASE("gemm 16-bit blocks of whole matrices cover every batch edge", "[gemm]") {
  // Each matrix needs at most 30 floats, so a budget of 64 holds 2 of the 7 matrices per
  // block: three full blocks and a last one of a single matrix.
  const TileBudget budget(64);
  for (DType dtype : {kFloat16, kBFloat16}) {
    manual_seed(29);
    const int64_t batch = 7, m = 5, k = 6, n = 4;
    const Tensor a = randn({batch, m, k}, dtype), b = randn({batch, k, n}, dtype);
    const Tensor old = randn({batch, m, n}, dtype);
    check_all_impls(a, b, old);
    check_all_impls(a, b, old, -0.5, 2.0);
    check_all_impls(randn({batch, k, m}, dtype).transpose(1, 2),
                    randn({1, n, k}, dtype).transpose(1, 2).expand({batch, k, n}), old, 1.0, 1.0);
    check_all_impls(randn({1, m, k}, dtype).expand({batch, m, k}), b, old, 2.0, 0.5);
  }
}

TEST_CASE("gemm rejects bad shapes and dtypes with a message naming them", "[gemm]") {
  const Tensor a = randn({2, 3, 4}), b = randn({2, 4, 5}), out = empty({2, 3, 5});
  CHECK_THROWS_WITH(cpu::linalg_kernels.gemm(randn({3, 4}), b, out, 1.0, 0.0),
                    Contains("[3, 4]") && Contains("[2, 4, 5]") && Contains("3-D"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.gemm(a, randn({2, 5, 6}), empty({2, 3, 6}), 1.0, 0.0),
                    Contains("[2, 3, 4]") && Contains("[2, 5, 6]") && Contains("K = 4"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.gemm(a, b, empty({2, 3, 6}), 1.0, 0.0),
                    Contains("[2, 3, 6]") && Contains("[2, 3, 4]") && Contains("[2, 4, 5]"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.gemm(randn({3, 3, 4}), b, empty({3, 3, 5}), 1.0, 0.0),
                    Contains("[3, 3, 4]") && Contains("[2, 4, 5]") && Contains("[3, 3, 5]"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.gemm(a, randn({2, 4, 5}, kFloat16), out, 1.0, 0.0),
                    Contains("float32") && Contains("float16") && Contains("[2, 4, 5]"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.gemm(ones({2, 3, 4}, kInt64), ones({2, 4, 5}, kInt64),
                                             empty({2, 3, 5}, kInt64), 1.0, 0.0),
                    Contains("int64") && Contains("floating"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.gemm(a, b, empty({2, 5, 3}).transpose(1, 2), 1.0, 0.0),
                    Contains("contiguous") && Contains("[2, 3, 5]"));
  const Tensor square = randn({2, 4, 4});
  CHECK_THROWS_WITH(cpu::linalg_kernels.gemm(square, square, square, 1.0, 0.0),
                    Contains("overlaps"));
  CHECK_THROWS_WITH(cpu::gemm_with(GemmImpl::OneDNN, randn({2, 3, 4}, kFloat64),
                                   randn({2, 4, 5}, kFloat64), empty({2, 3, 5}, kFloat64)),
                    Contains("float64"));
  CHECK_THROWS_WITH(cpu::gemm_with(GemmImpl::Small, randn({2, 3, 4}, kFloat64),
                                   randn({2, 4, 5}, kFloat64), empty({2, 3, 5}, kFloat64)),
                    Contains("float64") && Contains("small kernel"));
  CHECK_THROWS_AS(cpu::linalg_kernels.gemm(a, b, Tensor(), 1.0, 0.0), Error);
}

TEST_CASE("gemm gives identical bits on repeated calls", "[gemm]") {
  for (DType dtype : kFloating) {
    manual_seed(29);
    const Tensor a = randn({2, 33, 65}, dtype), b = randn({1, 65, 17}, dtype);
    const Tensor first = empty({2, 33, 17}, dtype), again = empty({2, 33, 17}, dtype);
    cpu::linalg_kernels.gemm(a, b, first, 0.5, 0.0);
    const int64_t cached = cpu::detail::onednn_matmul_cache_size();
    for (int rep = 0; rep < 3; ++rep) {
      cpu::linalg_kernels.gemm(a, b, again, 0.5, 0.0);
      CHECK(std::memcmp(first.data_ptr(), again.data_ptr(), first.nbytes()) == 0);
    }
    // The repeats found their primitive in the cache instead of creating another.
    CHECK(cpu::detail::onednn_matmul_cache_size() == cached);
  }
}

TEST_CASE("gemm follows omp_set_num_threads", "[gemm]") {
  const int threads = omp_get_max_threads();
  for (DType dtype : kFloating) {
    manual_seed(37);
    const Tensor a = randn({2, 40, 70}, dtype), b = randn({2, 70, 30}, dtype);
    const Tensor out = empty({2, 40, 30}, dtype);
    for (int t : {1, 2, 3}) {
      omp_set_num_threads(t);
      INFO("threads " << t);
      check_all_impls(a, b, out);
    }
  }
  omp_set_num_threads(threads);
}

TEST_CASE("gemm runs from several threads at once", "[gemm]") {
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) {
    manual_seed(31);
    const Tensor a = randn({2, 48, 96}, dtype), b = randn({2, 96, 40}, dtype);
    const Tensor expected = empty({2, 48, 40}, dtype);
    cpu::linalg_kernels.gemm(a, b, expected, 1.0, 0.0);
    std::vector<Tensor> outs;
    for (int t = 0; t < 4; ++t) outs.push_back(empty({2, 48, 40}, dtype));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int rep = 0; rep < 20; ++rep)
          cpu::linalg_kernels.gemm(a, b, outs[size_t(t)], 1.0, 0.0);
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const Tensor& out : outs) {
      CHECK(std::memcmp(out.data_ptr(), expected.data_ptr(), out.nbytes()) == 0);
    }
  }
}

TEST_CASE("cpu::is_bf16_supported and is_fp16_supported say which GEMMs run natively", "[gemm]") {
  // Natively: not through float32 tiles, which gemm_kernel_name names.
  const bool bf16_tiles = cpu::gemm_kernel_name(kBFloat16).find("fp32 tiles") != std::string::npos;
  CHECK(cpu::is_bf16_supported() == !bf16_tiles);
  CHECK(cpu::is_bf16_supported() == cpu::gemm_runs_natively(kBFloat16));
  // halfgrad has no float16 CPU kernel yet: float16 always runs as float32 tiles.
  CHECK(cpu::gemm_kernel_name(kFloat16).find("fp32 tiles") != std::string::npos);
  CHECK_FALSE(cpu::is_fp16_supported());
  CHECK(cpu::gemm_runs_natively(kFloat32));
}

TEST_CASE("gemm_backend names the path of each dtype", "[gemm]") {
  CHECK(cpu::linalg_kernels.backend(kFloat64) == "eigen");
  if (HALFGRAD_HAS_ONEDNN) {
    CHECK(cpu::linalg_kernels.backend(kFloat32) == "measured: onednn | small");
    CHECK_THAT(cpu::linalg_kernels.backend(kFloat16),
               Contains("measured: ") && Contains("onednn(fp16 via fp32 tiles) | "
                                                  "small(fp16 via fp32 tiles)"));
  } else {
    CHECK(cpu::linalg_kernels.backend(kFloat32) == "measured: eigen | small");
    CHECK(cpu::linalg_kernels.backend(kBFloat16) ==
          "measured: eigen(bf16 via fp32 tiles) | small(bf16 via fp32 tiles)");
  }
  {
    const PathSet set(kFloat16, GemmPath::Tiles);  // a set path is named alone
    CHECK(cpu::linalg_kernels.backend(kFloat16) ==
          (HALFGRAD_HAS_ONEDNN ? "onednn(fp16 via fp32 tiles)" : "eigen(fp16 via fp32 tiles)"));
  }
  for (DType dtype : kFloating) {
    UNSCOPED_INFO(dtype << ": " << cpu::linalg_kernels.backend(dtype) << ", kernel "
                        << cpu::gemm_kernel_name(dtype));
    CHECK_FALSE(cpu::gemm_kernel_name(dtype).empty());
  }
  CHECK_THROWS_WITH(cpu::linalg_kernels.backend(kInt32), Contains("int32"));
}

// ---- the path chosen by measurement (NOTE [GEMM path by measurement]) -----------------------

TEST_CASE("gemm measures the paths of a shape class once and keeps the fastest", "[gemm]") {
  cpu::detail::clear_gemm_choices();
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) {
    INFO("dtype " << dtype);
    manual_seed(41);
    const Tensor a = randn({1, 48, 40}, dtype), b = randn({1, 40, 56}, dtype);
    const Tensor first = empty({1, 48, 56}, dtype), again = empty({1, 48, 56}, dtype);
    cpu::linalg_kernels.gemm(a, b, first, 1.0, 0.0);  // measures, then runs the kept path
    const std::vector<cpu::GemmChoice> choices = cpu::gemm_choices();
    REQUIRE(!choices.empty());
    const cpu::GemmChoice choice = choices.back();
    CHECK(choice.dtype == dtype);
    CHECK(choice.shape_class == "B 1, M <= 64, N <= 64, K <= 64");
    CHECK(choice.threads == omp_get_max_threads());
    CHECK(choice.calls == 1);
    // Every candidate was timed (the small kernel too: 48 x 40 x 56 is small).
    REQUIRE(choice.measured);
    CHECK(choice.microseconds.size() == cpu::gemm_paths(dtype).size());
    double fastest = 1e30, kept = -1;
    for (const auto& [path, us] : choice.microseconds) {
      CHECK(us > 0);
      fastest = std::min(fastest, us);
      if (path == choice.path) kept = us;
    }
    // The kept path is the fastest, or the default within 10 % of it.
    CHECK(kept >= fastest);
    CHECK(kept <= fastest * 1.1 + 1e-9);
    // The measuring call and every later one give the bits of the kept path.
    const Tensor on_path = empty({1, 48, 56}, dtype);
    cpu::gemm_on(choice.path, a, b, on_path);
    CHECK(std::memcmp(first.data_ptr(), on_path.data_ptr(), first.nbytes()) == 0);
    for (int rep = 0; rep < 3; ++rep) {
      cpu::linalg_kernels.gemm(a, b, again, 1.0, 0.0);
      CHECK(std::memcmp(first.data_ptr(), again.data_ptr(), first.nbytes()) == 0);
    }
    // A product of another size in the same class measured nothing more.
    cpu::linalg_kernels.gemm(randn({1, 40, 33}, dtype), randn({1, 33, 64}, dtype),
                             empty({1, 40, 64}, dtype), 1.0, 0.0);
    CHECK(cpu::gemm_choices().size() == choices.size());
    CHECK(cpu::gemm_choices().back().calls == 5);
    CHECK_THAT(cpu::describe(cpu::gemm_choices().back()),
               Contains("B 1, M <= 64, N <= 64, K <= 64; ") && Contains("measured: ") &&
                   Contains(std::string(cpu::gemm_path_name(choice.path))) &&
                   Contains("5 calls"));
  }
  // float64 has one path and records no choice.
  const int64_t before = int64_t(cpu::gemm_choices().size());
  cpu::linalg_kernels.gemm(randn({1, 8, 8}, kFloat64), randn({1, 8, 8}, kFloat64),
                           empty({1, 8, 8}, kFloat64), 1.0, 0.0);
  CHECK(int64_t(cpu::gemm_choices().size()) == before);
  CHECK(cpu::detail::clear_gemm_choices() == before);
  CHECK(cpu::gemm_choices().empty());
}

TEST_CASE("gemm tells shape classes apart by size, layout, bias and threads", "[gemm]") {
  cpu::detail::clear_gemm_choices();
  const int threads = omp_get_max_threads();
  const Tensor a = randn({1, 20, 30}), b = randn({1, 30, 10});
  auto run = [](const Tensor& x, const Tensor& y) {
    cpu::linalg_kernels.gemm(x, y, empty({x.size(0), x.size(1), y.size(2)}), 1.0, 0.0);
  };
  run(a, b);
  run(randn({1, 30, 20}).transpose(1, 2), b);  // a transposed
  run(a, randn({1, 10, 30}).transpose(1, 2));  // b transposed
  run(randn({1, 40, 30}), b);                  // M in the next power of two
  run(randn({3, 20, 30}), randn({3, 30, 10}));  // a batch
  cpu::linalg_kernels.gemm_bias(a, b, randn({10}), empty({1, 20, 10}));
  omp_set_num_threads(threads + 1);
  run(a, b);
  omp_set_num_threads(threads);
  const std::vector<cpu::GemmChoice> choices = cpu::gemm_choices();
  REQUIRE(choices.size() == 7);
  CHECK(choices[0].shape_class == "B 1, M <= 32, N <= 16, K <= 32");
  CHECK(choices[1].shape_class == "B 1, M <= 32, N <= 16, K <= 32, a transposed");
  CHECK(choices[2].shape_class == "B 1, M <= 32, N <= 16, K <= 32, b transposed");
  CHECK(choices[3].shape_class == "B 1, M <= 64, N <= 16, K <= 32");
  CHECK(choices[4].shape_class == "B 4, M <= 32, N <= 16, K <= 32");
  CHECK(choices[5].shape_class == "B 1, M <= 32, N <= 16, K <= 32, bias");
  CHECK(choices[6].shape_class == "B 1, M <= 32, N <= 16, K <= 32");
  CHECK(choices[6].threads == threads + 1);
  for (const cpu::GemmChoice& choice : choices) CHECK(choice.calls == 1);
}

TEST_CASE("gemm's path choice holds when several threads meet a new class at once", "[gemm]") {
  cpu::detail::clear_gemm_choices();
  manual_seed(43);
  const Tensor a = randn({1, 70, 50}, kBFloat16), b = randn({1, 50, 60}, kBFloat16);
  std::vector<Tensor> outs;
  for (int t = 0; t < 4; ++t) outs.push_back(empty({1, 70, 60}, kBFloat16));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { cpu::linalg_kernels.gemm(a, b, outs[size_t(t)], 1.0, 0.0); });
  }
  for (std::thread& thread : threads) thread.join();
  // One choice was kept, and every thread ran it.
  const std::vector<cpu::GemmChoice> choices = cpu::gemm_choices();
  int64_t calls = 0;
  for (const cpu::GemmChoice& choice : choices) calls += choice.calls;
  CHECK(calls == 4);
  for (const Tensor& out : outs) {
    CHECK(std::memcmp(out.data_ptr(), outs[0].data_ptr(), out.nbytes()) == 0);
  }
}

TEST_CASE("set_gemm_path fixes the path and refuses one this CPU lacks", "[gemm]") {
  cpu::detail::clear_gemm_choices();
  manual_seed(47);
  const Tensor a = randn({2, 33, 65}, kFloat16), b = randn({1, 65, 17}, kFloat16);
  for (GemmPath path : cpu::gemm_paths(kFloat16)) {
    INFO("path " << cpu::gemm_path_name(path));
    const PathSet set(kFloat16, path);
    CHECK(cpu::get_gemm_path(kFloat16) == path);
    const Tensor out = empty({2, 33, 17}, kFloat16), on_path = empty({2, 33, 17}, kFloat16);
    cpu::linalg_kernels.gemm(a, b, out, 1.0, 0.0);
    cpu::gemm_on(path, a, b, on_path);
    CHECK(std::memcmp(out.data_ptr(), on_path.data_ptr(), out.nbytes()) == 0);
    const cpu::GemmChoice choice = cpu::gemm_choices().back();
    CHECK(choice.path == path);
    CHECK(choice.set);
    CHECK_FALSE(choice.measured);
    CHECK_THAT(cpu::describe(choice), Contains("(set)"));
  }
  CHECK(cpu::get_gemm_path(kFloat16) == GemmPath::Auto);
  CHECK_THROWS_WITH(cpu::set_gemm_path(kBFloat16, GemmPath::Split),
                    Contains("bfloat16") && Contains("not on split") && Contains("tiles"));
  CHECK_THROWS_WITH(cpu::set_gemm_path(kFloat64, GemmPath::Small),
                    Contains("float64") && Contains("native") && Contains("not on small"));
  CHECK_THROWS_WITH(cpu::set_gemm_path(kInt32, GemmPath::Native), Contains("int32"));
  CHECK_THROWS_WITH(cpu::gemm_on(GemmPath::Split, randn({1, 2, 3}), randn({1, 3, 4}),
                                 empty({1, 2, 4})),
                    Contains("split") && Contains("float32"));
  CHECK(cpu::gemm_paths(kFloat64) == std::vector<GemmPath>{GemmPath::Native});
}

TEST_CASE("HALFGRAD_CPU_GEMM sets the paths of the process", "[gemm]") {
  // ctest runs this case three times: without the variable, with "fp16:tiles,bf16:small" and
  // with "fast" (tests/CMakeLists.txt).
  const char* raw = std::getenv("HALFGRAD_CPU_GEMM");
  const std::string setting = raw == nullptr ? "" : raw;
  const Tensor a = randn({1, 8, 8}, kFloat16), b = randn({1, 8, 8}, kFloat16);
  if (setting == "fast") {
    CHECK_THROWS_WITH(cpu::linalg_kernels.gemm(a, b, empty({1, 8, 8}, kFloat16), 1.0, 0.0),
                      Contains("HALFGRAD_CPU_GEMM=fast") && Contains("expected auto, native") &&
                          Contains("\"fast\""));
    CHECK_THROWS_WITH(cpu::get_gemm_path(kFloat32), Contains("HALFGRAD_CPU_GEMM=fast"));
    return;
  }
  if (setting == "fp16:tiles,bf16:small") {
    CHECK(cpu::get_gemm_path(kFloat16) == GemmPath::Tiles);
    CHECK(cpu::get_gemm_path(kBFloat16) == GemmPath::Small);
    CHECK(cpu::get_gemm_path(kFloat32) == GemmPath::Auto);
    cpu::linalg_kernels.gemm(a, b, empty({1, 8, 8}, kFloat16), 1.0, 0.0);
    CHECK(cpu::gemm_choices().back().path == GemmPath::Tiles);
    CHECK(cpu::gemm_choices().back().set);
    return;
  }
  REQUIRE(setting.empty());
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) CHECK(cpu::get_gemm_path(dtype) == GemmPath::Auto);
}

TEST_CASE("float16 as bfloat16 pairs gives every product exactly", "[gemm]") {
  // NOTE [float16 as bfloat16 pairs]: with K = 1 each output is one product of two float16
  // values, exact as the sum of its four bfloat16 parts' products, and rounded once: the
  // float16 nearest the float64 product, for every pair here.
  const std::vector<GemmPath> paths = cpu::gemm_paths(kFloat16);
  if (std::find(paths.begin(), paths.end(), GemmPath::Split) == paths.end()) {
    WARN("oneDNN runs no bfloat16 kernel on this CPU: no split path to check");
    return;
  }
  manual_seed(53);
  const int64_t m = 64, n = 48;
  const Tensor a = randn({1, m, 1}, kFloat16), b = randn({1, 1, n}, kFloat16) * 3.0;
  const Tensor out = empty({1, m, n}, kFloat16);
  cpu::gemm_on(GemmPath::Split, a, b, out);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const Tensor exact = empty({1, m, n}, kFloat64);
  auto* e = static_cast<double*>(exact.data_ptr());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) e[i * n + j] = av[size_t(i)] * bv[size_t(j)];
  }
  CHECK(out.to_vector<double>() == exact.to(kFloat16).to_vector<double>());
  // Over a long K the sums are float32's: the ones below half an ulp of 2048 in float16
  // still count, as in "gemm accumulates 16-bit inputs in float32 over the whole K".
  const Tensor x = randn({3, 40, 300}, kFloat16), y = randn({3, 300, 24}, kFloat16);
  check_gemm(GemmPath::Split, x, y, randn({3, 40, 24}, kFloat16), 0.5, 0.25);
}

TEST_CASE("float16 as bfloat16 pairs keeps infinite products infinite", "[gemm]") {
  // inf = hi + lo has no finite parts; the pairs would make inf * 0 = NaN from a zero lo part
  // of the other operand, so such products take the float32 tiles.
  const std::vector<GemmPath> paths = cpu::gemm_paths(kFloat16);
  if (std::find(paths.begin(), paths.end(), GemmPath::Split) == paths.end()) {
    WARN("oneDNN runs no bfloat16 kernel on this CPU: no split path to check");
    return;
  }
  const Tensor a = tensor({INFINITY, 1.0, -2.0, 0.5}, {1, 2, 2}, kFloat16);
  const Tensor b = tensor({1.0, 2.0, 0.25, -1.0}, {1, 2, 2}, kFloat16);  // lo parts all 0
  const Tensor out = empty({1, 2, 2}, kFloat16);
  cpu::gemm_on(GemmPath::Split, a, b, out);
  // [inf, 1; -2, 0.5] @ [1, 2; 0.25, -1] = [inf, inf; -1.875, -4.5]
  CHECK(out.to_vector<double>() == std::vector<double>{INFINITY, INFINITY, -1.875, -4.5});
  const Tensor nan_a = tensor({NAN, 1.0, -2.0, 0.5}, {1, 2, 2}, kFloat16);
  cpu::gemm_on(GemmPath::Split, nan_a, b, out);
  const std::vector<double> got = out.to_vector<double>();
  CHECK(std::isnan(got[0]));
  CHECK(std::isnan(got[1]));
  CHECK(got[2] == -1.875);
  CHECK(got[3] == -4.5);
}

TEST_CASE("float16 as bfloat16 pairs covers out tiles of several row blocks", "[gemm]") {
  // NOTE [float16 as bfloat16 pairs]: a pairs tile holds at most 2^17 float32 values of out, so
  // a 600 x 300 out is two blocks of rows (436 and 164), each split and multiplied on its own;
  // with beta the old out is read per block, with a broadcast b its parts are split once.
  const std::vector<GemmPath> paths = cpu::gemm_paths(kFloat16);
  if (std::find(paths.begin(), paths.end(), GemmPath::Split) == paths.end()) {
    WARN("oneDNN runs no bfloat16 kernel on this CPU: no split path to check");
    return;
  }
  manual_seed(61);
  const Tensor a = randn({2, 600, 40}, kFloat16), b = randn({2, 40, 300}, kFloat16);
  const Tensor old = randn({2, 600, 300}, kFloat16);
  check_gemm(GemmPath::Split, a, b, old);
  check_gemm(GemmPath::Split, a, b, old, -0.5, 2.0);
  check_gemm(GemmPath::Split, randn({2, 40, 600}, kFloat16).transpose(1, 2),
             randn({1, 300, 40}, kFloat16).transpose(1, 2).expand({2, 40, 300}), old, 1.0, 1.0);
  // An infinity late in a long row (past the first vector of lanes) sends the product to the
  // float32 tiles: its row of out is infinite, the others finite.
  const Tensor x = randn({1, 600, 40}, kFloat16).abs() + 0.5;
  const Tensor y = randn({1, 40, 300}, kFloat16).abs() + 0.5;
  x.select(1, 500).select(1, 37).fill_(INFINITY);
  const Tensor out = empty({1, 600, 300}, kFloat16);
  cpu::gemm_on(GemmPath::Split, x, y, out);
  const std::vector<double> got = out.to_vector<double>();
  for (int64_t i = 0; i < 600; ++i) {
    for (int64_t j = 0; j < 300; j += 37) {
      INFO("out[" << i << ", " << j << "]");
      const double value = got[size_t(i * 300 + j)];
      CHECK((i == 500 ? value == INFINITY : std::isfinite(value)));
    }
  }
}

TEST_CASE("gemm_into_float32 sums 16-bit products into float32 on every path", "[gemm]") {
  // The output is not rounded to 16 bits: the float32 tolerance (1e-5 of the magnitude) is far
  // below a bfloat16 or float16 rounding (2^-9, 2^-12).
  for (DType dtype : {kBFloat16, kFloat16}) {
    manual_seed(59);
    const Tensor a = randn({2, 37, 70}, dtype), b = randn({2, 70, 45}, dtype);
    const Tensor a_t = randn({2, 70, 37}, dtype).transpose(1, 2);
    const Tensor b_shared = randn({1, 45, 70}, dtype).transpose(1, 2);
    const Tensor old = randn({2, 37, 45});
    std::vector<GemmPath> paths = {GemmPath::Auto};
    for (GemmPath path : cpu::gemm_paths(dtype)) paths.push_back(path);
    for (GemmPath path : paths) {
      INFO("dtype " << dtype << ", path " << cpu::gemm_path_name(path));
      const PathSet set(dtype, path);
      for (const auto& [x, y] : {std::pair{a, b}, std::pair{a_t, b}, std::pair{a, b_shared}}) {
        for (double beta : {0.0, 1.0}) {
          INFO("a strides " << x.strides() << ", b strides " << y.strides() << ", beta " << beta);
          const Tensor out = old.clone();
          cpu::gemm_into_float32(x, y, out, beta);
          const Expected expected = reference_gemm(x, y, old, 1.0, beta);
          const std::vector<double> got = out.to_vector<double>();
          int64_t bad = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            if (!(std::fabs(got[i] - expected.value[i]) <= 1e-5 * expected.magnitude[i])) ++bad;
          }
          CHECK(bad == 0);
        }
      }
    }
  }
  const Tensor a = randn({1, 3, 4}, kBFloat16), b = randn({1, 4, 5}, kBFloat16);
  CHECK_THROWS_WITH(cpu::gemm_into_float32(a, b, empty({1, 3, 5}, kBFloat16), 0.0),
                    Contains("float32 out") && Contains("bfloat16"));
  CHECK_THROWS_WITH(cpu::gemm_into_float32(randn({1, 3, 4}), randn({1, 4, 5}), empty({1, 3, 5}),
                                           0.0),
                    Contains("16-bit") && Contains("float32"));
  CHECK_THROWS_WITH(cpu::gemm_into_float32(a, randn({1, 5, 5}, kBFloat16), empty({1, 3, 5}), 0.0),
                    Contains("[1, 3, 4]") && Contains("[1, 5, 5]"));
}

// linear_gelu's backward through the GELU (LinalgKernels::gelu_backward): g * gelu'(pre) in
// float32 (float64) rounded once, against the derivative written here in float64 from the
// formulas' definitions, and the bias sums against a float64 sum of the rounded product.
struct GeluGrad {
  double value;      // the derivative
  double magnitude;  // the sum of its terms' magnitudes (what a formula's rounding scales with)
};

GeluGrad gelu_grad_reference(double x, bool tanh_form) {
  if (tanh_form) {  // d/dx 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
    // In long double, with 0.5 (1 + tanh u) = 1 / (1 + e) and 0.5 (1 - tanh^2 u) =
    // 2 e / (1 + e)^2, e = exp(-2u): 1 + tanh u itself cancels to 0 for u below about -19.
    const long double k = std::sqrt(2.0L / std::acos(-1.0L)), lx = x;
    const long double u = k * (lx + 0.044715L * lx * lx * lx);
    const long double e = std::exp(-2 * u);
    const long double first = std::isinf(e) ? 0.0L : 1 / (1 + e);
    const long double half_sech2 = std::isinf(e) ? 0.0L : 2 * e / ((1 + e) * (1 + e));
    const long double second = lx * half_sech2 * k * (1 + 3 * 0.044715L * lx * lx);
    return {double(first + second), double(std::fabs(first) + std::fabs(second))};
  }
  const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));  // Phi + x phi
  const double second = x * std::exp(-0.5 * x * x) / std::sqrt(2 * std::acos(-1.0));
  return {cdf + second, std::fabs(cdf) + std::fabs(second)};
}

TEST_CASE("gelu_backward multiplies by the GELU's derivative and sums the bias once", "[gemm]") {
  const int threads = omp_get_max_threads();
  for (DType dtype : kFloating) {
    for (bool tanh_form : {true, false}) {
      INFO("dtype " << dtype << ", tanh " << tanh_form);
      manual_seed(11);
      // 37 rows: blocks of 16 and a partial one; 300 columns: a chunk of 256 and a tail.
      const Tensor pre = (randn({37, 300}, kFloat64) * 3.0).to(dtype);
      const Tensor g = randn({37, 300}, kFloat64).to(dtype);
      const Tensor bias = empty({300}, {.dtype = dtype});
      const Tensor out = cpu::linalg_kernels.gelu_backward(g, pre, tanh_form, bias);
      REQUIRE(out.dtype() == dtype);
      REQUIRE(out.sizes() == g.sizes());
      const std::vector<double> got = out.to_vector<double>(), gv = g.to_vector<double>(),
                                pv = pre.to_vector<double>(), bv = bias.to_vector<double>();
      // One rounding to the dtype (half an ulp) over float32's formula error.
      // The formula's error in float32 (float64), relative to its terms, then one rounding to
      // the dtype (half an ulp of the result).
      const double formula = dtype == kFloat64 ? 1e-13 : 1e-5;
      const double rel = dtype == kFloat16    ? 1.01 * std::ldexp(1.0, -11)
                         : dtype == kBFloat16 ? 1.01 * std::ldexp(1.0, -8)
                                              : 0.0;
      // Below that, absolute: half the spacing of float16's subnormals; float32's smallest
      // normal for float32 and bfloat16, whose subnormal derivatives the float32 vector pass
      // may give as 0 (pre = -10.4: -9.3e-42 in float64).
      const double tiny = dtype == kFloat16   ? std::ldexp(1.0, -25)
                          : dtype == kFloat64 ? 0.0
                                              : std::ldexp(1.0, -126);
      int64_t bad = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const GeluGrad d = gelu_grad_reference(pv[i], tanh_form);
        const double want = gv[i] * d.value;
        const double allowed = rel * std::fabs(want) + formula * std::fabs(gv[i]) * d.magnitude;
        if (!(std::fabs(got[i] - want) <= allowed + tiny) && bad++ == 0) {
          UNSCOPED_INFO("first off: pre " << pv[i] << ", g " << gv[i] << ", got " << got[i]
                                          << ", expected " << want);
        }
      }
      CHECK(bad == 0);
      bad = 0;
      for (int64_t col = 0; col < 300; ++col) {
        double sum = 0, magnitude = 0;
        for (int64_t row = 0; row < 37; ++row) {
          sum += got[size_t(row * 300 + col)];
          magnitude += std::fabs(got[size_t(row * 300 + col)]);
        }
        const double sum_rel = dtype == kFloat64 ? 1e-13 : rel;
        if (!(std::fabs(bv[size_t(col)] - sum) <= sum_rel * std::fabs(sum) + 1e-5 * magnitude)) {
          ++bad;
        }
      }
      CHECK(bad == 0);
      // The same bits on one thread and on two, and without a bias.
      omp_set_num_threads(threads == 1 ? 2 : 1);
      const Tensor bias_again = empty({300}, {.dtype = dtype});
      const Tensor again = cpu::linalg_kernels.gelu_backward(g, pre, tanh_form, bias_again);
      omp_set_num_threads(threads);
      CHECK(std::memcmp(out.data_ptr(), again.data_ptr(), out.nbytes()) == 0);
      CHECK(std::memcmp(bias.data_ptr(), bias_again.data_ptr(), bias.nbytes()) == 0);
      const Tensor no_bias = cpu::linalg_kernels.gelu_backward(g, pre, tanh_form, Tensor());
      CHECK(std::memcmp(out.data_ptr(), no_bias.data_ptr(), out.nbytes()) == 0);
    }
  }
  const Tensor bias = full({4}, 7.0);
  cpu::linalg_kernels.gelu_backward(empty({0, 4}), empty({0, 4}), true, bias);
  CHECK(bias.to_vector<double>() == std::vector<double>(4, 0.0));
  const Tensor g = randn({3, 4}), pre = randn({3, 4});
  CHECK_THROWS_WITH(cpu::linalg_kernels.gelu_backward(g.t(), randn({4, 3}), true, Tensor()),
                    Contains("contiguous 2-D gradient") && Contains("[4, 3]"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.gelu_backward(g, randn({3, 5}), true, Tensor()),
                    Contains("pre-activation of shape [3, 4]") && Contains("[3, 5]"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.gelu_backward(g, pre.to(kBFloat16), true, Tensor()),
                    Contains("pre-activation of dtype float32") && Contains("bfloat16"));
  CHECK_THROWS_WITH(cpu::linalg_kernels.gelu_backward(g, pre, true, empty({3})),
                    Contains("bias gradient of shape [4]") && Contains("[3]"));
  const std::vector<double> g_before = g.to_vector<double>();
  CHECK_THROWS(cpu::linalg_kernels.gelu_backward(g, pre, true, empty({4}, kFloat64)));
  CHECK(g.to_vector<double>() == g_before);
}
