// The strided walk the index, loss and embedding kernels share: a row-major walk over one
// shape with an element offset per operand. Free of fmt (NOTE [CUDA headers without fmt] in
// probe.h); host code makes one with detail::make_walk (host.h).
//
// Not ElementwiseArgs (elementwise_launch.h): that loop may reorder dims by the output's
// strides, so its linear index means nothing outside the loop, while position p of a walk is
// the row-major position p of the shape (the index kernels store it as a value, the losses
// write element p of a contiguous output).
#pragma once

#include <cstdint>

#include "halfgrad/cuda/kernel_args.h"

namespace hg::cuda::detail {

// Operands a walk carries at most (a loss backward reads five tensors).
inline constexpr int kMaxWalkOperands = 6;

// A row-major walk over one shape that yields, for every linear position, an element offset
// in each of several operands (each with its own strides over that shape, 0 where it is
// broadcast). Dims of size 1 are dropped and neighbouring dims that every operand walks as one
// are merged, so a contiguous walk has one dim.
struct Walk {
  int32_t dim = 0;
  int32_t operands = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxWalkOperands][kMaxDims] = {};  // in elements
};

// Fills `walk` for `sizes` (ndim dims) and the strides of `operands` operands (strides[k] has
// ndim entries). Returns false when more than kMaxDims dims are left after merging (the host
// caller turns that into hg::Error).
inline bool build_walk(Walk& walk, int ndim, const int64_t* sizes, int operands,
                       const int64_t* const* strides) {
  walk = Walk{};
  walk.operands = operands;
  walk.numel = 1;
  for (int d = 0; d < ndim; ++d) walk.numel *= sizes[d];
  if (walk.numel == 0) return true;
  int dims = 0;
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] == 1) continue;
    if (dims > 0) {  // merge into the previous kept dim when every operand steps evenly
      bool mergeable = true;
      for (int k = 0; k < operands; ++k) {
        mergeable = mergeable && walk.strides[k][dims - 1] == strides[k][d] * sizes[d];
      }
      if (mergeable) {
        walk.sizes[dims - 1] *= sizes[d];
        for (int k = 0; k < operands; ++k) walk.strides[k][dims - 1] = strides[k][d];
        continue;
      }
    }
    if (dims == kMaxDims) return false;
    walk.sizes[dims] = sizes[d];
    for (int k = 0; k < operands; ++k) walk.strides[k][dims] = strides[k][d];
    ++dims;
  }
  walk.dim = dims;
  return true;
}

#ifdef __CUDACC__
// The offsets of linear position `linear` in the first K operands of `walk`.
template <int K>
__device__ __forceinline__ void walk_offsets(const Walk& walk, int64_t linear,
                                             int64_t (&offsets)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) offsets[k] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < walk.dim) {
      const int64_t size = walk.sizes[d];
      const int64_t q = linear / size;
      const int64_t coordinate = linear - q * size;
#pragma unroll
      for (int k = 0; k < K; ++k) offsets[k] += coordinate * walk.strides[k][d];
      linear = q;
    }
  }
}
#endif

}  // namespace hg::cuda::detail
