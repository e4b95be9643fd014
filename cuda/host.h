// Host-side helpers of the CUDA backend: error checks that become hg::Error, and the plain
// kernel arguments a Tensor turns into. Host .cpp files only (it includes fmt); .cu files see
// kernel_args.h.
//
//   HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream), "copy_");
//   HG_CUDA_CHECK(detail::launch_softmax(args, stream), "softmax");  // a launcher's status
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>

#include "halfgrad/core/error.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/cuda/kernel_args.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/cuda/walk.h"

namespace hg::cuda::detail {

// "<op>: <call> failed: cudaErrorX (its description)", with what the error usually means.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* op, const char* call,
                                   const char* file, int line);

// The kernel view of t: data, dtype, sizes and strides in elements. Throws when t has more
// than kMaxDims dims (after dropping size-1 dims, which never move the offset) or is not on
// a CUDA device.
TensorArg tensor_arg(const Tensor& t, const char* op);

// The largest power of two, at most 256, dividing the address and the stride in bytes between
// the matrices of a batch (0: one matrix): the alignment every one of them has, for the plan
// caches of cuBLASLt and cuDNN.
uint32_t alignment_of(const void* data, int64_t batch_stride_bytes = 0);

// Throws unless t is defined and on a CUDA device; `what` names it ("the input", "weight").
void check_cuda_tensor(const Tensor& t, const char* op, const char* what);

// The walk (walk.h) over `sizes` with one stride list per operand, each of sizes' length.
// Throws when more than kMaxDims dims are left once size-1 dims are dropped and merged.
Walk make_walk(const char* op, const Shape& sizes, std::initializer_list<Shape> strides);

}  // namespace hg::cuda::detail

// Checks a cudaError_t-returning call: anything but cudaSuccess throws hg::Error naming the op
// and the call. Launchers return cudaGetLastError() after their launch, so checking the
// launcher checks the launch.
#define HG_CUDA_CHECK(call, op)                                                             \
  do {                                                                                      \
    const cudaError_t hg_cuda_status_ = (call);                                             \
    if (hg_cuda_status_ != cudaSuccess) [[unlikely]] {                                      \
      ::hg::cuda::detail::throw_cuda_error(hg_cuda_status_, op, #call, __FILE__, __LINE__); \
    }                                                                                       \
  } while (false)
