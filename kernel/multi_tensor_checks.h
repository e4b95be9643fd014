// The argument checks of the multi_tensor family (kernel/multi_tensor.h), shared by both
// backends (cpu/multi_tensor.cpp, cuda/multi_tensor.cpp): one copy of each, so the CPU and the
// CUDA kernels refuse the same bad lists with the same hg::Error, before anything is written.
// `backend` is the table's device type (kCPU or kCUDA); messages name it ("on the CPU", "on a
// CUDA device"). Host code only.
#pragma once

#include <span>
#include <string>

#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/multi_tensor.h"

namespace hg::kernel {

// "N element(s) of <dtype> on <device>", or "an undefined tensor".
std::string describe_tensor(const Tensor& t);

// Every tensor defined, floating, on a device of `backend`'s type, all on one device; returns
// that device (the backend's first device for an empty list). `what` names the list.
Device common_device(std::span<const Tensor> tensors, DeviceType backend, const char* op,
                     const char* what);
// t is a one-element tensor of `dtype` on `device`.
void check_scalar(const Tensor& t, Device device, const char* op, const char* what,
                  DType dtype = kFloat32);

// The fused steps' lists (the counts the options ask for, one device, contiguous parameters
// with gradients of their dtype and shape, state buffers of the state dtype, step counts:
// float32 one-element tensors, or int64 ones where int64_steps, the CPU's), and their scalars
// (grad_scale, found_inf: undefined or as check_scalar). Return the parameters' device (an
// empty list returns the backend's first device).
Device check_adam_tensors(const AdamTensors& t, const AdamArgs& args, const Tensor& grad_scale,
                          const Tensor& found_inf, DeviceType backend, bool int64_steps);
Device check_sgd_tensors(const SGDTensors& t, const SGDArgs& args, const Tensor& grad_scale,
                         const Tensor& found_inf, DeviceType backend, bool int64_steps);
Device check_rmsprop_tensors(const RMSpropTensors& t, const RMSpropArgs& args,
                             const Tensor& grad_scale, const Tensor& found_inf, DeviceType backend,
                             bool int64_steps);
Device check_adagrad_tensors(const AdagradTensors& t, const AdagradArgs& args,
                             const Tensor& grad_scale, const Tensor& found_inf, DeviceType backend,
                             bool int64_steps);

Device check_adamax_tensors(const AdamaxTensors& t, const AdamaxArgs& args,
                            const Tensor& grad_scale, const Tensor& found_inf, DeviceType backend,
                            bool int64_steps);
Device check_adadelta_tensors(const AdadeltaTensors& t, const AdadeltaArgs& args,
                              const Tensor& grad_scale, const Tensor& found_inf, DeviceType backend,
                              bool int64_steps);
Device check_radam_tensors(const RAdamTensors& t, const RAdamArgs& args, const Tensor& grad_scale,
                           const Tensor& found_inf, DeviceType backend, bool int64_steps);
// And NAdam's mu_products: one-element float32 tensors on the parameters' device.
Device check_nadam_tensors(const NAdamTensors& t, const NAdamArgs& args, const Tensor& grad_scale,
                           const Tensor& found_inf, DeviceType backend, bool int64_steps);

}  // namespace hg::kernel
