// The CPU GEMM behind mm, bmm, addmm, baddbmm, matmul, linear and their backward passes.
//
//   Tensor a = hg::randn({8, 64, 32}, kBFloat16);      // [B, M, K]
//   Tensor b = hg::randn({32, 16}, kBFloat16);         // [K, N], shared by every batch
//   Tensor out = hg::empty({8, 64, 16}, kBFloat16);    // [B, M, N]
//   hg::cpu::gemm(a, b.unsqueeze(0).expand({8, 32, 16}), out);   // out = a @ b, batch by batch
//
// B is the batch, M the rows of a and out, K the reduced dim, N the columns of b and out.
// Which library runs each dtype is NOTE [CPU GEMM paths] in gemm.cpp; gemm_backend says it.
#pragma once

#include <cstdint>
#include <string>

#include "halfgrad/core/tensor.h"

namespace hg::cpu {

// out[i] = alpha * (a[i] @ b[i]) + beta * out[i] for every batch i.
//   a: [B, M, K], b: [B, K, N], out: [B, M, N]; all three the same floating dtype (float32,
//   float64, float16, bfloat16), all on the CPU. The batch dim of a or b may have size 1 or
//   stride 0 (broadcast). a and b may be any strided views whose last two dims are row-major
//   or column-major (a transposed view costs no copy); other layouts are copied to contiguous
//   first. out must be contiguous and must not overlap a or b. beta == 0 means out's old
//   contents are ignored (even NaN). float16 and bfloat16 accumulate in float32 over the
//   whole K and round once, at the output. Does not bump out's version (the op layer does).
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha = 1.0,
          double beta = 0.0);

// out[i] = a[i] @ b[i] + bias, the bias [N] added to every row (linear's forward): a, b and
// out as for gemm, bias contiguous, of their dtype. On oneDNN the bias is an argument of the
// matmul, so out is written once (NOTE [GEMM with bias] in gemm.cpp).
void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

// out = op(a) @ op(b), plus the bias [N] on every row when bias is defined, for 2-D a, b and
// out: op(t) is t, or t^T when transpose_a / transpose_b say so (read in place, as a
// transposed view would be). The same paths, checks and bits as gemm and gemm_bias on the
// 3-D views of these operands, without making the views: mm and linear call it.
//   a: [M, K] ([K, M] when transposed), b: [K, N] ([N, K] when transposed), out: [M, N]
//   contiguous, bias: [N] contiguous; all of one floating dtype.
void gemm_2d(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
             const Tensor& out, const Tensor& bias = {});
// gelu(op(a) op(b) + bias, approximate="tanh") as a new [M, N] tensor, with the pre-activation
// op(a) op(b) + bias written to `pre` (gemm_2d's `out`): linear_gelu's forward. On the CPU the
// GEMM and the GELU kernel run one after the other (the CUDA backend fuses them).
Tensor gemm_2d_gelu(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                    const Tensor& bias, const Tensor& pre);

// Which implementation gemm uses for a floating dtype: "onednn", "eigen",
// "onednn(fp16 via fp32 tiles)", ... (for hg-info and the benchmarks). Tiny products (under
// 2^15 multiply-adds in all) run on halfgrad's own small kernel whatever the dtype (float64 on
// Eigen): oneDNN's fixed cost per call is larger than their whole work.
std::string gemm_backend(DType dtype);

// The kernel oneDNN picks for a row-major 1024 x 1024 x 1024 GEMM of `dtype`, as its
// implementation name (e.g. "brg:avx512_core_amx" on a CPU with AMX), or "eigen" where gemm
// does not use oneDNN for that dtype.
std::string gemm_kernel_name(DType dtype);

// ---- for tests and benchmarks ---------------------------------------------------------------

// The implementations gemm can run; Auto is gemm's own choice for the dtype. float16 (and
// bfloat16 under Eigen or Small) goes through float32 tiles on the chosen float32
// implementation. Small is halfgrad's own kernel for tiny products (no float64).
enum class GemmImpl { Auto, OneDNN, Eigen, Small };

// gemm on a given implementation. Throws hg::Error when that implementation cannot run the
// dtype (OneDNN for float64, or OneDNN in a build without oneDNN).
void gemm_with(GemmImpl impl, const Tensor& a, const Tensor& b, const Tensor& out,
               double alpha = 1.0, double beta = 0.0);

namespace detail {
// The float32 tile budget of the float16 path, in elements per tile buffer (default 2^22).
// Returns the previous budget; tests lower it to exercise the tile edges on small shapes.
int64_t set_reduced_gemm_tile_budget(int64_t elements);
// The copies of the small kernel (NOTE [Small GEMM kernel]) this CPU runs: levels 0
// (baseline) to small_gemm_levels() - 1 (1 AVX2+FMA, 2 AVX-512). set_small_gemm_level caps
// the level used (0 to 2; the CPU's own level caps it too) and returns the previous cap;
// tests run every copy with it.
int small_gemm_levels();
int set_small_gemm_level(int level);
// Primitives in the oneDNN matmul cache (0 without oneDNN).
int64_t onednn_matmul_cache_size();
}  // namespace detail

}  // namespace hg::cpu
