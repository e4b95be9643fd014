// Launcher of the stochastic-rounding cast (stochastic_rounding.cu). Free of fmt (NOTE [CUDA
// headers without fmt] in probe.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "halfgrad/core/dtype.h"

namespace hg::cuda::detail {

// dst[0, n) (contiguous, `to`: float16, bfloat16 or a float8 dtype) = src[0, n) (contiguous,
// floating `from`) rounded stochastically; element i reads word i % 4 of Philox block
// first_block + i / 4 of seed (NOTE [Stochastic rounding] in core/stochastic_rounding.h), the
// words the CPU cast reads, through the same function, so the bits are the CPU's. saturate: a
// float8 `to` saturates past its range. Other dtype pairs: cudaErrorInvalidValue.
cudaError_t launch_stochastic_round(DType to, DType from, void* dst, const void* src, int64_t n,
                                    uint64_t seed, uint64_t first_block, bool saturate,
                                    cudaStream_t stream);

}  // namespace hg::cuda::detail
