// The fused attention kernels (cuda/attention.cu) against the float64 composite on the CPU:
// forward and every gradient, float16 and bfloat16, causal or not, lengths that are not
// multiples of the 64-row tiles, head widths padded inside the kernel, strided operands.
#include <catch2/catch.hpp>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cuda/attention_launch.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

namespace {

struct Case {
  Shape q, kv;  // [N..., L, E] and [N..., S, E]
  bool causal;
};

// Sets the kernels' query row tiles (NOTE [Two row tiles per warp] in cuda/attention.cu) for
// the scope, and the default back at its end.
struct RowTiles {
  explicit RowTiles(int row_tiles) { cuda::detail::set_flash_query_row_tiles(row_tiles); }
  ~RowTiles() { cuda::detail::set_flash_query_row_tiles(0); }
  RowTiles(const RowTiles&) = delete;
  RowTiles& operator=(const RowTiles&) = delete;
};

// sdpa on CUDA (which takes the fused op) and in float64 on the CPU, for the same rounded
// inputs and one random upstream gradient; `layout` may view the inputs differently (same
// values) before the call.
void check_attention(const Case& c, DType dtype,
                     const std::function<Tensor(const Tensor&)>& layout = {}) {
  CAPTURE(c.q, c.kv, c.causal, dtype);
  const std::vector<Tensor> inputs = {normal(c.q, dtype), normal(c.kv, dtype), normal(c.kv, dtype)};
  std::vector<Tensor> gpu, reference;
  for (const Tensor& t : inputs) {
    gpu.push_back(to_cuda(t).requires_grad_());
    reference.push_back(t.to(kFloat64).requires_grad_());
  }
  auto view = [&](const Tensor& t) { return layout ? layout(t) : t; };
  const PoisonCudaAllocations poison;
  const Tensor y =
      scaled_dot_product_attention(view(gpu[0]), view(gpu[1]), view(gpu[2]), {}, 0.0, c.causal);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "ScaledDotProductFlashAttentionBackward");
  const Tensor want = scaled_dot_product_attention(view(reference[0]), view(reference[1]),
                                                   view(reference[2]), {}, 0.0, c.causal);
  const int64_t S = c.kv[c.kv.size() - 2];
  // An output row is a convex combination of v's rows: each weight rounds once (to the dtype,
  // before the product with v) and the sum runs over S terms.
  check_close(y, want, dtype, sum_tolerance(dtype, S), "out");

  const Tensor upstream = normal(y.sizes(), dtype);
  y.backward(to_cuda(upstream));
  want.backward(upstream.to(kFloat64));
  const char* names[] = {"dq", "dk", "dv"};
  for (size_t i = 0; i < 3; ++i) {
    const Tolerance tol = backward_tolerance(dtype);
    const Tolerance summed{tol.rtol,
                           tol.atol + tol.rtol * std::sqrt(double(S + c.q[c.q.size() - 2]))};
    check_close(gpu[i].grad(), reference[i].grad(), dtype, summed, names[i]);
  }
}

}  // namespace

TEST_CASE("fused attention matches float64, causal or not, ragged tiles", "[cuda][attention]") {
  HG_REQUIRE_CUDA();
  manual_seed(31);
  const std::vector<Case> cases = {
      {{2, 3, 77, 64}, {2, 3, 130, 64}, false},  // L and S past whole tiles, L != S
      {{2, 3, 77, 64}, {2, 3, 130, 64}, true},   // causal, top-left aligned
      {{1, 2, 130, 64}, {1, 2, 77, 64}, true},   // causal with L > S
      {{1, 2, 128, 128}, {1, 2, 128, 128}, true},
      {{2, 1, 65, 40}, {2, 1, 65, 40}, false},        // E = 40, padded to 64 inside
      {{3, 1, 8}, {3, 9, 8}, false},                  // one query row, E = 8 (padded to 32)
      {{5, 64, 32}, {5, 64, 32}, true},               // 3-D: [heads, L, E]
      {{2, 2, 2, 33, 16}, {2, 2, 2, 17, 16}, false},  // 5-D
  };
  for (const int row_tiles : {1, 2}) {
    CAPTURE(row_tiles);
    const RowTiles setting(row_tiles);
    for (DType dtype : {kFloat16, kBFloat16}) {
      for (const Case& c : cases) check_attention(c, dtype);
    }
  }
}

TEST_CASE("fused attention gives the same bits with one or two row tiles per warp",
          "[cuda][attention]") {
  HG_REQUIRE_CUDA();
  manual_seed(36);
  // Each row's arithmetic, and its order over the keys, is the same either way.
  for (const bool causal : {false, true}) {
    for (const int64_t E : {32, 64}) {
      CAPTURE(causal, E);
      const Tensor q = gpu_randn({2, 3, 150, E}, kBFloat16),
                   k = gpu_randn({2, 3, 140, E}, kBFloat16),
                   v = gpu_randn({2, 3, 140, E}, kBFloat16),
                   dy = gpu_randn({2, 3, 150, E}, kBFloat16);
      std::vector<std::vector<Tensor>> runs;
      for (const int row_tiles : {1, 2}) {
        const RowTiles setting(row_tiles);
        std::vector<Tensor> leaves = {q.clone().requires_grad_(), k.clone().requires_grad_(),
                                      v.clone().requires_grad_()};
        const Tensor y =
            scaled_dot_product_flash_attention(leaves[0], leaves[1], leaves[2], causal);
        y.backward(dy);
        runs.push_back({y, leaves[0].grad(), leaves[1].grad(), leaves[2].grad()});
      }
      for (size_t i = 0; i < runs[0].size(); ++i) {
        CAPTURE(i);
        require_same_bits(runs[0][i], runs[1][i]);
      }
    }
  }
}

TEST_CASE("fused attention reads strided heads as a GPT makes them", "[cuda][attention]") {
  HG_REQUIRE_CUDA();
  manual_seed(32);
  // [B, T, H, E] transposed to [B, H, T, E] (what MultiheadAttention passes: no copy).
  const auto heads = [](const Tensor& t) { return t.transpose(1, 2); };
  for (DType dtype : {kFloat16, kBFloat16}) {
    check_attention({{2, 100, 4, 64}, {2, 100, 4, 64}, true}, dtype, heads);
    check_attention({{1, 70, 2, 48}, {1, 70, 2, 48}, false}, dtype, heads);
  }
  // A narrowed last dim (row stride not a multiple of 8): the kernel reads a packed copy.
  const auto narrowed = [](const Tensor& t) { return t.narrow(-1, 1, t.size(-1) - 1); };
  check_attention({{1, 2, 40, 17}, {1, 2, 50, 17}, false}, kFloat16, narrowed);
}

TEST_CASE("fused attention copies operands that start off a 16-byte boundary",
          "[cuda][attention]") {
  HG_REQUIRE_CUDA();
  manual_seed(35);
  // Contiguous views 4 elements (8 bytes) into a buffer: the vector loads need a packed copy.
  const int64_t L = 70, E = 64;
  const auto offset_view = [](const Tensor& t) {
    Tensor buffer = empty({t.numel() + 4}, t.options());
    NoGradGuard no_grad;
    buffer.narrow(0, 4, t.numel()).copy_(t.reshape({t.numel()}));
    return buffer.narrow(0, 4, t.numel()).view(t.sizes());
  };
  const Tensor q = gpu_randn({2, L, E}, kFloat16), k = gpu_randn({2, L, E}, kFloat16),
               v = gpu_randn({2, L, E}, kFloat16);
  const Tensor y =
      scaled_dot_product_flash_attention(offset_view(q), offset_view(k), offset_view(v), true);
  const Tensor want = scaled_dot_product_attention(f64(q), f64(k), f64(v), {}, 0.0, true);
  check_close(y, want, kFloat16, sum_tolerance(kFloat16, L), "offset operands");
}

TEST_CASE("fused attention of an empty batch gives empty results", "[cuda][attention]") {
  HG_REQUIRE_CUDA();
  Tensor q = gpu_randn({0, 4, 16, 64}, kBFloat16);
  q.requires_grad_();
  const Tensor y = scaled_dot_product_attention(q, q, q, {}, 0.0, true);
  CHECK(y.sizes() == Shape{0, 4, 16, 64});
  sum(y).backward();
  CHECK(q.grad().sizes() == q.sizes());
}

TEST_CASE("fused attention gives the same bits every run", "[cuda][attention]") {
  HG_REQUIRE_CUDA();
  manual_seed(33);
  const Tensor q = gpu_randn({2, 4, 200, 64}, kBFloat16), k = gpu_randn({2, 4, 200, 64}, kBFloat16),
               v = gpu_randn({2, 4, 200, 64}, kBFloat16),
               dy = gpu_randn({2, 4, 200, 64}, kBFloat16);
  std::vector<std::vector<Tensor>> runs;
  for (int run = 0; run < 2; ++run) {
    std::vector<Tensor> leaves = {q.clone().requires_grad_(), k.clone().requires_grad_(),
                                  v.clone().requires_grad_()};
    const Tensor y = scaled_dot_product_flash_attention(leaves[0], leaves[1], leaves[2], true);
    y.backward(dy);
    runs.push_back({y, leaves[0].grad(), leaves[1].grad(), leaves[2].grad()});
  }
  for (size_t i = 0; i < runs[0].size(); ++i) {
    CAPTURE(i);
    require_same_bits(runs[0][i], runs[1][i]);
  }
}

TEST_CASE("attention the fused kernels do not take still runs on CUDA", "[cuda][attention]") {
  HG_REQUIRE_CUDA();
  manual_seed(34);
  const Tensor q = gpu_randn({2, 9, 12}, kFloat16), k = gpu_randn({2, 11, 12}, kFloat16),
               v = gpu_randn({2, 11, 12}, kFloat16);
  CHECK_FALSE(cuda::attention_kernels.fits(q, k, v));  // E = 12 is not a multiple of 8
  const Tensor y = scaled_dot_product_flash_attention(q, k, v, true);
  const Tensor want = scaled_dot_product_attention(f64(q), f64(k), f64(v), {}, 0.0, true);
  check_close(y, want, kFloat16, sum_tolerance(kFloat16, 11), "math path");
  // float32 and a mask stay on the composite
  Tensor q32 = gpu_randn({2, 9, 16}, kFloat32);
  q32.requires_grad_();
  const Tensor y32 = scaled_dot_product_attention(q32, q32, q32);
  CHECK(y32.grad_fn()->name() != "ScaledDotProductFlashAttentionBackward");
}
