// CUDA kernel of the dropout family (kernel/dropout.h): dropout, with the checks (shared,
// kernel/checks.h) and the masks of cpu/dropout.cpp; the kernel is dropout.cu's.
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/dropout_launch.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cuda {

namespace {

using detail::make_walk;
using detail::Walk;

kernel::DropoutForward dropout(const Tensor& x, double p, Generator& gen) {
  const char* op = "dropout";
  kernel::check_dropout(op, x, p, kCUDA);
  kernel::DropoutForward result{empty(x.sizes(), x.options()), empty(x.sizes(), x.options())};
  const int64_t n = x.numel();
  const double keep = 1.0 - p;
  detail::DropoutMode mode = detail::DropoutMode::Draw;
  if (p == 0.0) mode = detail::DropoutMode::KeepAll;
  if (p == 1.0) mode = detail::DropoutMode::DropAll;
  // As the CPU kernel: one float32 uniform draw of n elements (ceil(n / 4) Philox blocks), none
  // for p == 0 or 1. The blocks are reserved here, on the host: no sync.
  Generator::State reserved{0, 0};
  if (mode == detail::DropoutMode::Draw) reserved = gen.reserve_with_seed(uint64_t((n + 3) / 4));
  if (n == 0) return result;
  DeviceGuard guard(x.device().index);
  const Walk walk = make_walk(op, x.sizes(), {x.strides()});
  HG_CUDA_CHECK(detail::launch_dropout(walk, x.dtype(), x.data_ptr(), result.out.data_ptr(),
                                       result.mask.data_ptr(), mode, keep,
                                       mode == detail::DropoutMode::Draw ? 1.0 / keep : 1.0,
                                       reserved.seed, reserved.offset, current_stream()),
                op);
  return result;
}

}  // namespace

const kernel::DropoutKernels dropout_kernels = HG_DROPOUT_KERNELS;

}  // namespace hg::cuda
