// The CPU reductions' own entry point besides the table (cpu::reduce_kernels, kernel/reduce.h):
// the float sum of a plain buffer, in the order the reduction kernel sums a tensor.
#pragma once

#include <cstdint>

namespace hg::cpu {

// The float sum reduce(Sum) gives for a contiguous float32 tensor of these n values, bit for
// bit (its order of accumulation, pieces included), computed on the calling thread: for
// callers that hold the values in a buffer of their own (a loss's per-element terms).
float sum_floats(const float* x, int64_t n);

}  // namespace hg::cpu
