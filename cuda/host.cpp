// Host-side helpers of the CUDA backend (host.h).
#include "halfgrad/cuda/host.h"

#include <array>

#include "halfgrad/core/format.h"

namespace hg::cuda::detail {

void throw_cuda_error(cudaError_t status, const char* op, const char* call, const char* file,
                      int line) {
  cudaGetLastError();  // a launch error stays pending otherwise; the next check would see it
  std::string hint;
  if (status == cudaErrorNoKernelImageForDevice || status == cudaErrorInvalidDeviceFunction) {
    hint =
        " (this build of halfgrad has no kernels for this GPU's architecture: rebuild with "
        "CMAKE_CUDA_ARCHITECTURES set to it)";
  } else if (status == cudaErrorStreamCaptureUnsupported ||
             status == cudaErrorStreamCaptureInvalidated ||
             status == cudaErrorStreamCaptureImplicit) {
    hint =
        " (the work being captured into a CUDA graph needed the host: a copy to the CPU, "
        "item() or a synchronize)";
  } else if (status == cudaErrorIllegalAddress || status == cudaErrorLaunchFailure) {
    hint = " (a kernel failed; the CUDA context is unusable from here on)";
  }
  ::hg::detail::throw_error(
      file, line,
      fmt::format("{}: {} failed: {} ({}){}", op, call, cudaGetErrorName(status),
                  cudaGetErrorString(status), hint));
}

void check_cuda_tensor(const Tensor& t, const char* op, const char* what) {
  HG_CHECK(t.defined(), "{}: expected {} to be a defined tensor, got an undefined one", op, what);
  HG_CHECK(t.is_cuda(), "{}: expected {} on a CUDA device, got a tensor on {}", op, what,
           t.device());
}

uint32_t alignment_of(const void* data, int64_t batch_stride_bytes) {
  const uint64_t bits =
      uint64_t(reinterpret_cast<uintptr_t>(data)) | uint64_t(batch_stride_bytes) | 256u;
  return uint32_t(bits & (~bits + 1));
}

TensorArg tensor_arg(const Tensor& t, const char* op) {
  check_cuda_tensor(t, op, "the tensor");
  TensorArg arg;
  arg.data = t.data_ptr();
  arg.dtype = t.dtype();
  arg.numel = t.numel();
  arg.contiguous = t.is_contiguous();
  int real_dims = 0;
  for (int64_t d = 0; d < t.dim(); ++d) real_dims += t.size(d) != 1;
  HG_CHECK(real_dims <= kMaxDims,
           "{}: expected a tensor with at most {} dims of size other than 1 on CUDA, got shape {}",
           op, kMaxDims, t.sizes());
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1) continue;
    arg.sizes[arg.dim] = t.size(d);
    arg.strides[arg.dim] = t.stride(d);
    ++arg.dim;
  }
  return arg;
}

Walk make_walk(const char* op, const Shape& sizes, std::initializer_list<Shape> strides) {
  std::array<const int64_t*, kMaxWalkOperands> lists{};
  int operands = 0;
  for (const Shape& s : strides) lists[size_t(operands++)] = s.data();
  Walk walk;
  HG_CHECK(build_walk(walk, int(sizes.size()), sizes.data(), operands, lists.data()),
           "{}: expected at most {} dims on CUDA once dims of size 1 are dropped and dims every "
           "operand walks as one are merged, got shape {}",
           op, kMaxDims, sizes);
  return walk;
}

}  // namespace hg::cuda::detail
