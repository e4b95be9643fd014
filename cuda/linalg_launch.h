// Launchers of the two small kernels around the cuBLASLt GEMMs (linalg.cu): what gemm writes
// itself when K == 0 (no product to run), and the bias rows when cuBLASLt has no bias
// epilogue for a problem. Free of fmt (NOTE [CUDA headers without fmt] in probe.h).
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

}  // namespace hg::cuda::detail
