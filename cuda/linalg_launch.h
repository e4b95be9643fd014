// Launchers of the small kernels around the cuBLASLt GEMMs (linalg.cu): what gemm writes
// itself when K == 0 (no product to run), the bias rows when cuBLASLt has no bias epilogue
// for a problem, and the float8 cast of the scaled GEMM's operands. Free of fmt (NOTE [CUDA headers without fmt] in probe.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "halfgrad/core/dtype.h"

namespace hg::cuda::detail {

// out[i] = beta * out[i] for the numel elements of a contiguous floating out; beta == 0 writes
// zeros whatever out held (NaN included), as a GEMM with beta == 0 does.
cudaError_t launch_gemm_scale(void* out, DType dtype, int64_t numel, double beta,
                              cudaStream_t stream);

// out [rows, N] (contiguous) = the bias row [N] on every row; out and bias of one floating dtype.
cudaError_t launch_gemm_fill_rows(void* out, const void* bias, DType dtype, int64_t rows, int64_t n,
                                  cudaStream_t stream);

// The delayed-scaling cast of n contiguous elements (LinalgKernels::quantize_fp8): out[i] =
// x[i] * scale[0] rounded to out_dtype (float8), saturating; amax[0] = max(amax[0], max |x|),
// NaN when an x is NaN (the float bits with the sign cleared, reduced with atomicMax).
// x_dtype: float32, float16 or bfloat16.
cudaError_t launch_quantize_fp8(const void* x, DType x_dtype, const float* scale, float* amax,
                                void* out, DType out_dtype, int64_t n, cudaStream_t stream);

}  // namespace hg::cuda::detail
