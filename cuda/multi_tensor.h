// Multi-tensor CUDA kernels over Tensors (NOTE [Multi-tensor apply] in multi_tensor_launch.h):
// what GradScaler, the optimizers and clip_grad_norm_ run when their tensors are on a CUDA
// device. Each function enqueues its launches on the current stream of the tensors' device and
// returns without waiting; none reads device memory on the host.
//
//   Tensor found_inf = cuda::new_flag(device);
//   cuda::unscale_and_check_(grads, cuda::reciprocal_scale(scale), found_inf);
//   cuda::fused_adam_(tensors, args, /*grad_scale=*/Tensor(), found_inf);  // skips on the device
//
// NOTE [No host sync in the step] A training step on CUDA (forward, backward, unscale_, clip,
// step, update) enqueues work and never waits for it: the loss scale, its reciprocal, the
// found_inf flags, the total norm, the clip coefficient and the optimizers' step counts live in
// device memory, and the kernels that need them read them there. A skipped step is a kernel
// that returns at once because found_inf is set. What the host wants to know (whether a step
// was skipped, the scale, a step count) is an explicit read by the caller, documented where it
// happens (GradScaler::get_scale, last_step_skipped, ...). tests/cuda/graph_capture_test.cpp
// proves it: a step captured into a CUDA graph would fail to capture on any host wait.
#pragma once

#include <span>
#include <vector>

#include "halfgrad/core/tensor.h"
#include "halfgrad/cuda/multi_tensor_launch.h"

namespace hg::cuda {

// ---- GradScaler ------------------------------------------------------------------------------

// A new found_inf flag: a one-element float32 zero on `device` (a CUDA device).
Tensor new_flag(Device device);

// A one-element float32 tensor on scale's device holding float(1.0 / double(scale[0])): the
// reciprocal in float64 rounded to float32 (PyTorch's scale.double().reciprocal().float()).
// scale: a one-element float32 CUDA tensor.
Tensor reciprocal_scale(const Tensor& scale);

// PyTorch's _amp_foreach_non_finite_check_and_unscale_: every element of every tensor in
// `tensors` (floating CUDA tensors of one device, any mix of float32/float16/bfloat16/float64,
// any strides) is multiplied in place by inv_scale[0] (in float; double for float64; rounded
// once), and found_inf[0] becomes 1 when a value read or stored is not finite (NOTE [Unscale
// checks input and result] in multi_tensor.cu); found_inf is never cleared here. inv_scale and
// found_inf: one-element float32 tensors on the same device. One launch per dtype per table.
void unscale_and_check_(std::span<const Tensor> tensors, const Tensor& inv_scale,
                        const Tensor& found_inf);

// A one-element float32 tensor on the flags' device: the sum of the flags (one-element float32
// tensors on one CUDA device), added in order.
Tensor sum_flags(std::span<const Tensor> flags);

// GradScaler's update on the device (NOTE [Scale update on the device] in grad_scaler.cpp):
// scale ([1] float32), growth_tracker ([1] int32) and counters (detail::kScalerCounters int32)
// are updated in place from found_inf ([1] float32; undefined: no inf check, only with
// args.set_scale). monitor: a device pointer into a ScalerMonitorSlot, or null.
void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& counters,
                   const Tensor& found_inf, const detail::ScaleUpdateArgs& args,
                   detail::ScalerMonitor* monitor);

// A ScalerMonitor in mapped host memory: the update kernel writes it, the host reads it
// without waiting for the device.
class ScalerMonitorSlot {
 public:
  explicit ScalerMonitorSlot(int device);
  // Waits for the device first: a kernel still queued may write into the slot.
  ~ScalerMonitorSlot();
  ScalerMonitorSlot(const ScalerMonitorSlot&) = delete;
  ScalerMonitorSlot& operator=(const ScalerMonitorSlot&) = delete;

  // What the device has written so far (possibly some updates behind): the alarm count, read
  // first, then the fields of the last alarm.
  detail::ScalerMonitor read() const;
  detail::ScalerMonitor* device_pointer() const { return device_; }

 private:
  int device_index_;
  detail::ScalerMonitor* host_ = nullptr;
  detail::ScalerMonitor* device_ = nullptr;
};

// ---- fused optimizers ------------------------------------------------------------------------

// One optimizer step over parameters of one CUDA device. Parallel lists: param i has gradient
// grads[i] (same dtype and shape), state buffers of one state dtype (the param's, or float32
// for a float16/bfloat16 param), and a step count steps[i] (a one-element float32 tensor on
// the device). Parameters, gradients and buffers must be contiguous.
struct AdamTensors {
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<Tensor> max_exp_avg_sqs;  // amsgrad only
  std::vector<Tensor> steps;
  // args.bf16_params only: each parameter's first Philox block (NOTE [bf16_params] in
  // optim/fused.h); the parameters bfloat16, the state float32.
  std::vector<uint64_t> first_blocks;
};
// torch.optim.Adam/AdamW (fused) with optim/adam.cpp's arithmetic: grad_scale (undefined:
// none) divides every gradient; a nonzero found_inf (undefined: none) leaves everything, step
// counts included, untouched. Otherwise each step count advances by one. grad_scale and
// found_inf: one-element float32 tensors on the parameters' device.
void fused_adam_(const AdamTensors& tensors, const detail::AdamArgs& args, const Tensor& grad_scale,
                 const Tensor& found_inf);

struct SGDTensors {
  std::vector<Tensor> params, grads;
  // momentum != 0 only: the buffers, and step counts (0: the buffer is not initialized yet).
  std::vector<Tensor> momentum_buffers, steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the buffers float32)
};
// torch.optim.SGD (fused) with optim/sgd.cpp's arithmetic; grad_scale and found_inf as above.
void fused_sgd_(const SGDTensors& tensors, const detail::SGDArgs& args, const Tensor& grad_scale,
                const Tensor& found_inf);

struct RMSpropTensors {
  std::vector<Tensor> params, grads, square_avgs;
  std::vector<Tensor> grad_avgs;         // centered only
  std::vector<Tensor> momentum_buffers;  // momentum > 0 only
  std::vector<Tensor> steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the buffers float32)
};
// torch.optim.RMSprop with optim/rmsprop.cpp's arithmetic; buffers of the parameter's dtype
// (float32 with bf16_params);
// grad_scale and found_inf as above (each step count advances unless found_inf is set).
void fused_rmsprop_(const RMSpropTensors& tensors, const detail::RMSpropArgs& args,
                    const Tensor& grad_scale, const Tensor& found_inf);

struct AdagradTensors {
  std::vector<Tensor> params, grads, sums, steps;
  std::vector<uint64_t> first_blocks;  // as AdamTensors' (the sums float32)
};
// torch.optim.Adagrad with optim/adagrad.cpp's arithmetic, the decayed lr from each step count;
// "sum" of the parameter's dtype (float32 with bf16_params); grad_scale and found_inf as above.
void fused_adagrad_(const AdagradTensors& tensors, const detail::AdagradArgs& args,
                    const Tensor& grad_scale, const Tensor& found_inf);

// ---- norms, clipping, checks -----------------------------------------------------------------

// The norm of order norm_type (> 0, or infinity) of all the tensors together, as a 0-d float32
// tensor on their device: each value rounded to float32, |x|^p summed in float per chunk, the
// chunks combined in a fixed order (NOTE [Deterministic total norm] in multi_tensor.cu).
// Floating CUDA tensors of one device, any strides.
Tensor total_norm(std::span<const Tensor> tensors, double norm_type);
// clip_grad_norm_'s scaling: every tensor *= min(1, max_norm / (total_norm + 1e-6)) in place,
// the coefficient computed on the device from total_norm (a one-element float32 tensor on the
// tensors' device); a coefficient of 1 writes nothing.
void clip_by_total_norm_(std::span<const Tensor> tensors, const Tensor& total_norm,
                         double max_norm);
// Every tensor *= factor, in place (factor rounded to the compute type).
void scale_(std::span<const Tensor> tensors, double factor);
// Every tensor = clamp(tensor, low, high), in place (the CPU clamp's semantics).
void clamp_(std::span<const Tensor> tensors, double low, double high);
// A one-element float32 tensor on the tensors' device: 1 when any element is inf or NaN.
Tensor non_finite_flag(std::span<const Tensor> tensors);
// The largest finite |x| of t (a floating CUDA tensor) and its count of infs and NaNs, as a
// two-element int64 tensor on t's device: [0] holds the bits of the largest |x| as a double
// (0 when none is finite), [1] the count.
Tensor value_range(const Tensor& t);

}  // namespace hg::cuda
