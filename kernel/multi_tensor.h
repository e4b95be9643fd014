// The multi_tensor family: the training step's kernels over lists of tensors (GradScaler's
// unscale and inf check, the fused optimizer steps, clip_grad_norm_'s norm and scaling, the
// checks of anomaly mode, OverflowWatch and apex's loss scaler), as a table of kernels every
// backend fills (cpu/multi_tensor.cpp, cuda/multi_tensor.cpp). amp, optim, nn and autograd
// reach it through ops/kernel_lookup.h:
//
//   const kernel::MultiTensorKernels& k = kernel_for::multi_tensor(device);
//   Tensor found_inf = k.new_flag(device);
//   k.unscale_and_check_(grads, k.reciprocal_scale(scale), found_inf);
//   k.fused_adam_(tensors, args, /*grad_scale=*/Tensor(), found_inf);  // skips when found_inf
//
// Conventions: every list holds tensors of one device, the table's backend's; a scalar argument
// (inv_scale, found_inf, grad_scale, a flag, a norm) is a one-element float32 tensor on that
// device. The CUDA kernels enqueue on the current stream and never wait (NOTE [No host sync in
// the step] in cuda/multi_tensor.cpp): what they decide from a scalar (skip on found_inf, the clip
// coefficient) is decided on the device. The CPU kernels read those scalars where they run.
// Bad arguments throw hg::Error naming the function, what was expected and what was given,
// before anything is written.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/multi_tensor_args.h"

namespace hg::kernel {

// ---- fused optimizer steps -------------------------------------------------------------------

// One optimizer step over parameters of one device. Parallel lists: param i has gradient
// grads[i] (same dtype and shape), state buffers of one state dtype (the param's, or float32
// for a float16/bfloat16 param), and a step count steps[i]: a one-element tensor on the device
// holding the steps taken before this one, float32 (torch's fused "step"; the only kind the CUDA
// kernels take) or int64 (taken by the CPU kernels, whose optimizers keep exact counts).
// Parameters, gradients and buffers must be contiguous. A step count advances by one in place
// unless found_inf skips the step.
struct AdamTensors {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<Tensor> max_exp_avg_sqs;  // amsgrad only
  std::vector<Tensor> steps;
  // args.bf16_params only: each parameter's first Philox block (NOTE [bf16_params] in
  // optim/fused.h); the parameters bfloat16, the state float32.
  std::vector<uint64_t> first_blocks;
};

struct SGDTensors {
  std::vector<Tensor> params, grads;
  // momentum != 0 only: the buffers, and step counts (0: the buffer is not initialized yet,
  // torch's first step, which sets it to the gradient).
  std::vector<Tensor> momentum_buffers, steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the buffers float32)
};

struct RMSpropTensors {
  std::vector<Tensor> params, grads, square_avgs;
  std::vector<Tensor> grad_avgs;         // centered only
  std::vector<Tensor> momentum_buffers;  // momentum > 0 only
  std::vector<Tensor> steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the buffers float32)
};

struct AdagradTensors {
  std::vector<Tensor> params, grads, sums, steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the sums float32)
};

struct AdamaxTensors {
  std::vector<Tensor> params, grads, exp_avgs, exp_infs, steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the state float32)
};

struct AdadeltaTensors {
  std::vector<Tensor> params, grads, square_avgs, acc_deltas, steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the state float32)
};

struct RAdamTensors {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the state float32)
};

// mu_products: NAdam's product of the momentum coefficients so far (torch's "mu_product"), a
// one-element float32 tensor per parameter on its device, updated in place with the step count.
struct NAdamTensors {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, mu_products, steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the state float32)
};

struct MultiTensorKernels {
  // ---- GradScaler ----------------------------------------------------------------------------

  // A new found_inf flag: a one-element float32 zero on `device` (the table's backend's).
  Tensor (*new_flag)(Device device);
  // A one-element float32 tensor on scale's device holding float(1.0 / double(scale[0])): the
  // reciprocal in float64 rounded to float32 (torch's scale.double().reciprocal().float()).
  Tensor (*reciprocal_scale)(const Tensor& scale);
  // torch's _amp_foreach_non_finite_check_and_unscale_: every element of every tensor (floating,
  // any mix of float32/float16/bfloat16/float64, any strides) is multiplied in place by
  // inv_scale[0] (in float; double for float64; rounded once), and found_inf[0] becomes 1 when
  // a value read is not finite (the CUDA kernels check the stored value too: NOTE [Unscale
  // checks input and result] in cuda/multi_tensor.cu); found_inf is never cleared here.
  void (*unscale_and_check_)(std::span<const Tensor> tensors, const Tensor& inv_scale,
                             const Tensor& found_inf);
  // A one-element float32 tensor: the sum of the flags (one-element float32 tensors), added in
  // order.
  Tensor (*sum_flags)(std::span<const Tensor> flags);

  // ---- fused optimizer steps -----------------------------------------------------------------

  // torch.optim.Adam/AdamW (fused) with the arithmetic of NOTE [Fused optimizer pass] in
  // optim/fused.h: grad_scale (undefined: none) divides every gradient; a nonzero found_inf
  // (undefined: none) leaves everything, step counts included, untouched.
  void (*fused_adam_)(const AdamTensors& tensors, const AdamArgs& args, const Tensor& grad_scale,
                      const Tensor& found_inf);
  // torch.optim.SGD (fused); grad_scale and found_inf as above.
  void (*fused_sgd_)(const SGDTensors& tensors, const SGDArgs& args, const Tensor& grad_scale,
                     const Tensor& found_inf);
  // torch.optim.RMSprop; buffers of the parameter's dtype (float32 with bf16_params); grad_scale
  // and found_inf as above.
  void (*fused_rmsprop_)(const RMSpropTensors& tensors, const RMSpropArgs& args,
                         const Tensor& grad_scale, const Tensor& found_inf);
  // torch.optim.Adagrad, the decayed lr from each step count; "sum" of the parameter's dtype
  // (float32 with bf16_params); grad_scale and found_inf as above.
  void (*fused_adagrad_)(const AdagradTensors& tensors, const AdagradArgs& args,
                         const Tensor& grad_scale, const Tensor& found_inf);
  // torch.optim.Adamax: the bias correction from each step count; state of the parameter's
  // dtype (float32 with bf16_params); grad_scale and found_inf as above (so for the next two).
  void (*fused_adamax_)(const AdamaxTensors& tensors, const AdamaxArgs& args,
                        const Tensor& grad_scale, const Tensor& found_inf);
  // torch.optim.Adadelta; the step counts are advanced only (the rule does not read them).
  void (*fused_adadelta_)(const AdadeltaTensors& tensors, const AdadeltaArgs& args,
                          const Tensor& grad_scale, const Tensor& found_inf);
  // torch.optim.RAdam: the rectification from each step count.
  void (*fused_radam_)(const RAdamTensors& tensors, const RAdamArgs& args, const Tensor& grad_scale,
                       const Tensor& found_inf);
  // torch.optim.NAdam: the momentum schedule from each step count, mu_products advanced with the
  // step counts (both left alone by a set found_inf).
  void (*fused_nadam_)(const NAdamTensors& tensors, const NAdamArgs& args, const Tensor& grad_scale,
                       const Tensor& found_inf);

  // ---- norms, clipping, checks ---------------------------------------------------------------

  // The norm of order norm_type (> 0, or infinity) of all the tensors together (floating, any
  // strides), as a 0-d float32 tensor: each value rounded to float32, the norm accumulated in
  // float (the CUDA kernels per chunk, combined in a fixed order: NOTE [Deterministic total
  // norm] in cuda/multi_tensor.cu; the CPU kernels per tensor, then the norm of those norms).
  Tensor (*total_norm)(std::span<const Tensor> tensors, double norm_type);
  // clip_grad_norm_'s scaling: every tensor *= min(1, max_norm / (total_norm + 1e-6)) in place
  // (a NaN coefficient scales by NaN), the coefficient computed from total_norm[0] (a
  // one-element float32 tensor) where the kernel runs; a coefficient of 1 or more writes
  // nothing.
  void (*clip_by_total_norm_)(std::span<const Tensor> tensors, const Tensor& total_norm,
                              double max_norm);
  // Every tensor *= factor, in place (factor rounded to the compute type: float, double for
  // float64).
  void (*scale_)(std::span<const Tensor> tensors, double factor);
  // Every tensor = clamp(tensor, low, high), in place (NaN stays NaN).
  void (*clamp_)(std::span<const Tensor> tensors, double low, double high);
  // A one-element float32 tensor: 1 when any element is inf or NaN, else 0.
  Tensor (*non_finite_flag)(std::span<const Tensor> tensors);
  // The largest finite |x| of t (floating) and its count of infs and NaNs, as a two-element
  // int64 tensor on t's device: [0] holds the bits of the largest |x| as a double (0 when none
  // is finite; float64 values as they are, the other dtypes through float32), [1] the count.
  Tensor (*value_range)(const Tensor& t);
};

// A backend's table, from its functions of these names (cpu/multi_tensor.cpp and
// cuda/multi_tensor.cpp):
//   const kernel::MultiTensorKernels multi_tensor_kernels = HG_MULTI_TENSOR_KERNELS;
#define HG_MULTI_TENSOR_KERNELS                                                                   \
  {                                                                                               \
    .new_flag = new_flag, .reciprocal_scale = reciprocal_scale,                                   \
    .unscale_and_check_ = unscale_and_check_, .sum_flags = sum_flags, .fused_adam_ = fused_adam_, \
    .fused_sgd_ = fused_sgd_, .fused_rmsprop_ = fused_rmsprop_, .fused_adagrad_ = fused_adagrad_, \
    .fused_adamax_ = fused_adamax_, .fused_adadelta_ = fused_adadelta_,                           \
    .fused_radam_ = fused_radam_, .fused_nadam_ = fused_nadam_, .total_norm = total_norm,         \
    .clip_by_total_norm_ = clip_by_total_norm_, .scale_ = scale_, .clamp_ = clamp_,               \
    .non_finite_flag = non_finite_flag, .value_range = value_range                                \
  }

}  // namespace hg::kernel
