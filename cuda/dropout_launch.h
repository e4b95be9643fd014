// Launcher of the dropout kernel (dropout.cu). Free of fmt (NOTE [CUDA headers without fmt] in
// probe.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "halfgrad/cuda/walk.h"

namespace hg::cuda::detail {

enum class DropoutMode : int32_t {
  KeepAll,  // p == 0: out = x, mask = 1; draws nothing
  DropAll,  // p == 1: out = 0, mask = 0; draws nothing
  Draw,     // element i is kept when its float32 uniform is below keep
};

// x (floating `dtype`, read at walk operand 0 offsets over its n elements) -> out and mask,
// contiguous, of dtype. Element i's uniform is word i % 4 of Philox block first_block + i / 4
// of seed, as random::fill_uniform(kFloat32, ...) draws it on the CPU (NOTE [Philox stream
// layout] in core/random.h). mask = 1 / keep rounded to dtype where kept (inv_keep is 1 / keep
// in double), 0 elsewhere; out = x * mask in the compute type, rounded once.
cudaError_t launch_dropout(const Walk& walk, DType dtype, const void* x, void* out, void* mask,
                           DropoutMode mode, double keep, double inv_keep, uint64_t seed,
                           uint64_t first_block, cudaStream_t stream);

}  // namespace hg::cuda::detail
