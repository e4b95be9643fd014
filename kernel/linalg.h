// The linear-algebra family's kernel table: the GEMMs behind mm, bmm, addmm, baddbmm, matmul,
// linear and their backward passes, on the CPU (cpu/linalg.cpp) or on CUDA (cuda/linalg.cpp).
//
//   Tensor a = hg::randn({8, 64, 32}, kBFloat16);      // [B, M, K]
//   Tensor b = hg::randn({32, 16}, kBFloat16);         // [K, N], shared by every batch
//   Tensor out = hg::empty({8, 64, 16}, kBFloat16);    // [B, M, N]
//   // out = a @ b, batch by batch
//   hg::cpu::linalg_kernels.gemm(a, b.unsqueeze(0).expand({8, 32, 16}), out, 1.0, 0.0);
//
// B is the batch, M the rows of a and out, K the reduced dim, N the columns of b and out.
// Which library runs each dtype is NOTE [CPU GEMM paths] in cpu/linalg.cpp on the CPU, and
// cuBLASLt on CUDA (cuda/linalg.cpp); `backend` says it.
#pragma once

#include <string>

#include "halfgrad/core/tensor.h"

namespace hg::kernel {

// The GEMM kernels. Every backend runs them on tensors of its own device (the CPU, or one
// CUDA device), with the same semantics and the same errors.
struct LinalgKernels {
  // out[i] = alpha * (a[i] @ b[i]) + beta * out[i] for every batch i.
  //   a: [B, M, K], b: [B, K, N], out: [B, M, N]; all three the same floating dtype (float32,
  //   float64, float16, bfloat16), all on the backend's device. The batch dim of a or b may
  //   have size 1 or stride 0 (broadcast). a and b may be any strided views whose last two dims
  //   are row-major or column-major (a transposed view costs no copy); other layouts are copied
  //   to contiguous first. out must be contiguous and must not overlap a or b. beta == 0 means
  //   out's old contents are ignored (even NaN). float16 and bfloat16 accumulate in float32
  //   over the whole K and round once, at the output. Does not bump out's version (the op
  //   layer does).
  void (*gemm)(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta);

  // out[i] = a[i] @ b[i] + bias, the bias [N] added to every row (linear's forward): a, b and
  // out as for gemm, bias contiguous, of their dtype. On oneDNN the bias is an argument of the
  // matmul, so out is written once (NOTE [GEMM with bias] in cpu/linalg.cpp); on CUDA it is
  // cuBLASLt's bias epilogue where there is one for the problem.
  void (*gemm_bias)(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);

  // out = op(a) @ op(b), plus the bias [N] on every row when bias is defined (pass an undefined
  // Tensor for none), for 2-D a, b and out: op(t) is t, or t^T when transpose_a / transpose_b
  // say so (read in place, as a transposed view would be). The same paths, checks and bits as
  // gemm and gemm_bias on the 3-D views of these operands, without making the views: mm and
  // linear call it.
  //   a: [M, K] ([K, M] when transposed), b: [K, N] ([N, K] when transposed), out: [M, N]
  //   contiguous, bias: [N] contiguous; all of one floating dtype.
  void (*gemm_2d)(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                  const Tensor& out, const Tensor& bias);

  // gelu(op(a) op(b) + bias, approximate="tanh") as a new [M, N] tensor, with the
  // pre-activation op(a) op(b) + bias written to `pre` (gemm_2d's `out`: contiguous [M, N], a's
  // dtype): linear_gelu's forward. On the CPU the GEMM and the GELU kernel run one after the
  // other; on CUDA the GELU runs in the GEMM's epilogue where cuBLASLt has one for the problem
  // (NOTE [GELU epilogue] in cuda/linalg.cpp).
  Tensor (*gemm_2d_gelu)(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                         const Tensor& bias, const Tensor& pre);

  // linear_gelu's backward through the GELU: returns g_pre = g * gelu'(pre) ([M, N], g's
  // dtype; the derivative of the tanh form when tanh_approximation, of the erf form else) and,
  // when bias_grad is defined, writes the sums of g_pre's columns to it. g, pre: contiguous
  // [M, N] of one floating dtype; bias_grad: contiguous [N] of that dtype, or undefined. On the
  // CPU one pass (NOTE [GELU backward with the bias sum] in cpu/linalg.cpp): the product is
  // computed in float32 (float64 for float64) and rounded once, as torch's gelu_backward; the
  // bias sums add the rounded g_pre in float32, in an order fixed by M and N, and round once.
  // On CUDA the unary derivative kernel (rounded to the dtype), the product and the column sum
  // run one after the other (a 16-bit g_pre is rounded twice there).
  Tensor (*gelu_backward)(const Tensor& g, const Tensor& pre, bool tanh_approximation,
                          const Tensor& bias_grad);

  // out = (a @ b^T) * scale_a * scale_b, plus the bias [N] on every row when bias is defined:
  // the scaled float8 product behind scaled_mm and fp8 linear (NOTE [Scaled fp8 GEMM]).
  //   a: [M, K] and b: [N, K], both float8 (float8_e4m3fn or float8_e5m2, not both e5m2),
  //   on CUDA contiguous: each row holds its K elements side by side, the layout fp8 tensor
  //   cores read; on the CPU of any strides (its emulation widens them into a float32 copy).
  //   scale_a, scale_b: float32 tensors of one element on the backend's device, the factors
  //   that turn a's and b's stored values into the values they stand for (dequantization).
  //   out: [M, N] contiguous float32, float16 or bfloat16; bias: [N] contiguous of out's dtype.
  // The products of two float8 values are exact in float32, the sums run in float32 over the
  // whole K, the scales and the bias apply to the float32 sum, and out is rounded once. Checks
  // are kernel::check_scaled_gemm's.
  void (*scaled_gemm)(const Tensor& a, const Tensor& b, const Tensor& scale_a,
                      const Tensor& scale_b, const Tensor& bias, const Tensor& out);

  // The cast of scaled_gemm's operands under delayed scaling (NOTE [Delayed scaling] in
  // ops/fp8.h), in one pass: out = x * scale rounded to out's float8 dtype, saturating (the bits
  // of (x.to(float32) * scale).to(dtype, {.saturate = true})), and amax = max(amax, max |x|),
  // NaN when an element of x is NaN. x: contiguous float32, float16 or bfloat16; scale and
  // amax: float32 tensors of one element on x's device (amax, a row of the amax history, is
  // read and written); out: contiguous float8 of x's numel.
  void (*quantize_fp8)(const Tensor& x, const Tensor& scale, const Tensor& amax,
                       const Tensor& out);

  // Which implementation gemm uses for a floating dtype, for hg-info, the benchmarks and
  // reports: on the CPU the path set for the dtype ("onednn", "eigen", "onednn(fp16 via fp32
  // tiles)", ...) or, where the path is measured per shape class (NOTE [GEMM path by
  // measurement] in cpu/gemm_path.cpp), "measured: " and the candidates ("measured: onednn |
  // small"); on CUDA "cuBLASLt (tensor cores, fp32 accumulate)" and the like. Throws
  // hg::Error for a dtype that is not floating.
  std::string (*backend)(DType dtype);
};

// A backend's table, from its functions of these names (cpu/linalg.cpp and cuda/linalg.cpp):
//   const kernel::LinalgKernels linalg_kernels = HG_LINALG_KERNELS;
#define HG_LINALG_KERNELS                                                                     \
  {                                                                                           \
    .gemm = gemm, .gemm_bias = gemm_bias, .gemm_2d = gemm_2d, .gemm_2d_gelu = gemm_2d_gelu,   \
    .gelu_backward = gelu_backward, .scaled_gemm = scaled_gemm, .quantize_fp8 = quantize_fp8, \
    .backend = gemm_backend                                                                   \
  }

}  // namespace hg::kernel
