// Launchers of the multi-tensor kernels (multi_tensor.cu): plain arguments, no fmt, no Tensor
// (NOTE [CUDA headers without fmt] in probe.h). Host code calls them through multi_tensor.h.
//
// NOTE [Multi-tensor apply] A multi-tensor kernel works on many tensors in one launch. The
// launcher packs the tensors' addresses and sizes into a table passed as a kernel argument (by
// value, so it needs no device memory, no host buffer that must outlive an async copy, and is
// captured into a CUDA graph with the launch); a table holds as many tensors as fit in about
// 3 KiB of the 4 KiB kernel-argument space, and a longer list takes one launch per table. Each
// tensor is cut into chunks of kChunkSize elements; the blocks of a launch walk the table's
// chunks (grid-stride), each block finding its tensor by searching the table's prefix of chunk
// counts. Every tensor is contiguous (host code makes a strided one dense first).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "halfgrad/core/dtype.h"
#include "halfgrad/kernel/multi_tensor_args.h"

namespace hg::cuda::detail {

// Elements per chunk. A multiple of every 16-byte pack (8 16-bit values), so a chunk of a
// 16-byte aligned tensor starts aligned.
inline constexpr int64_t kChunkSize = 65536;
inline int64_t chunks_of(int64_t numel) { return (numel + kChunkSize - 1) / kChunkSize; }

// `count` tensors, given as host arrays the launcher reads before it returns: tensor i of list
// l starts at data[l][i] (device memory) and holds numel[i] contiguous elements. Lists are
// parallel (a parameter, its gradient, its state buffers). `steps`, for the optimizers: a host
// array of `count` device pointers to each tensor's float32 step count, or null.
struct MultiTensorArgs {
  static constexpr int kMaxLists = 5;
  int lists = 0;
  int64_t count = 0;
  void* const* data[kMaxLists] = {};
  const int64_t* numel = nullptr;
  float* const* steps = nullptr;
  // bf16_params only: a host array of `count` Philox counter blocks, tensor i's first (NOTE
  // [bf16_params] in optim/fused.h), or null.
  const uint64_t* first_blocks = nullptr;
};

// ---- GradScaler ------------------------------------------------------------------------------

// Every element x of every tensor (all of `dtype`) becomes x * inv_scale[0], computed in
// float (double for float64) and rounded once; found_inf[0] is set to 1 when an element read,
// or the value stored, is not finite (it is never cleared here). One list.
cudaError_t launch_unscale_and_check(const MultiTensorArgs& tensors, DType dtype,
                                     const float* inv_scale, float* found_inf, cudaStream_t stream);
// inv_scale[0] = float(1.0 / double(scale[0])).
cudaError_t launch_reciprocal_scale(const float* scale, float* inv_scale, cudaStream_t stream);
// out[0] = the sum, in order, of flags[i][0] for the `count` flags (a host array of device
// pointers, read before the launcher returns).
cudaError_t launch_sum_flags(const float* const* flags, int64_t count, float* out,
                             cudaStream_t stream);

// The GradScaler state the update kernel keeps on the device besides the scale and the growth
// tracker: an int32 tensor of kScalerCounters elements indexed by these.
enum ScalerCounter : int {
  kOverflowTracker = 0,   // overflowing updates in a row (hysteresis)
  kConsecutiveSkips = 1,  // updates in a row whose iteration skipped a step
  kBelowFloor = 2,        // 1 once the floor alarm was raised, until the scale is back above it
  kAlarms = 3,            // collapse alarms raised so far
  kScalerCounters = 4,
};

// What the update kernel publishes for the host to read without waiting (mapped host memory):
// the last collapse alarm it raised. The kernel writes the fields, then `alarms` (the count so
// far), each store made visible to the host in that order.
struct ScalerMonitor {
  int32_t alarms;             // alarms raised so far; the host compares it with what it reported
  int32_t kind;               // 1: consecutive skips; 2: the scale fell below the floor
  int32_t consecutive_skips;  // at that alarm
  float scale;                // the scale after that update
};

// The options of GradScaler::update (NOTE [Scale update on the device] in grad_scaler.cpp).
struct ScaleUpdateArgs {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool has_min_scale = false, has_max_scale = false;
  double min_scale = 0, max_scale = 0;
  int64_t hysteresis = 0;
  int64_t alarm_after_consecutive_skips = 0;  // 0: never
  bool has_alarm_floor = false;
  double alarm_floor = 0;
  bool set_scale = false;  // update(new_scale): the scale becomes new_scale, trackers unchanged
  double new_scale = 0;
};

// One update of the scale from found_inf[0] (null: no inf check this iteration, only with
// set_scale). counters: kScalerCounters int32 values; monitor: a device pointer to mapped host
// memory, or null.
cudaError_t launch_update_scale(float* scale, int32_t* growth_tracker, int32_t* counters,
                                const float* found_inf, const ScaleUpdateArgs& args,
                                ScalerMonitor* monitor, cudaStream_t stream);

// ---- fused optimizers ------------------------------------------------------------------------

// The options: kernel/multi_tensor_args.h (first_blocks are MultiTensorArgs::first_blocks).
using kernel::AdadeltaArgs;
using kernel::AdagradArgs;
using kernel::AdamArgs;
using kernel::AdamaxArgs;
using kernel::NAdamArgs;
using kernel::RAdamArgs;
using kernel::RMSpropArgs;
using kernel::SGDArgs;

// Lists: param, grad (both param_dtype), exp_avg, exp_avg_sq (state_dtype), and
// max_exp_avg_sq when amsgrad; `steps` set. grad_scale (null: none) divides the gradients;
// found_inf (null: none) nonzero makes the kernel return before touching anything. Each
// tensor's step count is read (the update uses step + 1); launch_advance_steps adds the 1.
cudaError_t launch_fused_adam(const MultiTensorArgs& tensors, DType param_dtype, DType state_dtype,
                              const AdamArgs& args, const float* grad_scale, const float* found_inf,
                              cudaStream_t stream);

// Lists: param, grad, and momentum_buffer when momentum != 0 (then `steps` set: a step count
// of 0 means the buffer is not initialized yet, torch's first step). All of `dtype`, but for
// bf16_params' float32 buffer.
cudaError_t launch_fused_sgd(const MultiTensorArgs& tensors, DType dtype, const SGDArgs& args,
                             const float* grad_scale, const float* found_inf, cudaStream_t stream);

// Lists: param, grad, square_avg, then grad_avg when centered, then momentum_buffer when
// momentum > 0; all of `dtype`, but for bf16_params' float32 buffers. `steps` may be null (the
// update does not read them).
cudaError_t launch_fused_rmsprop(const MultiTensorArgs& tensors, DType dtype,
                                 const RMSpropArgs& args, const float* grad_scale,
                                 const float* found_inf, cudaStream_t stream);

// Lists: param, grad, sum, all of `dtype` (but for bf16_params' float32 sum); `steps` set.
// Each tensor's step count is read (the update is step + 1, which sets the decayed lr);
// launch_advance_steps adds the 1.
cudaError_t launch_fused_adagrad(const MultiTensorArgs& tensors, DType dtype,
                                 const AdagradArgs& args, const float* grad_scale,
                                 const float* found_inf, cudaStream_t stream);

// Adamax, Adadelta and RAdam: lists param, grad and the rule's two buffers (exp_avg and exp_inf;
// square_avg and acc_delta; exp_avg and exp_avg_sq), all of `dtype` but for bf16_params' float32
// buffers; `steps` set (Adadelta's kernel does not read them). Each step count is read as
// Adagrad's; launch_advance_steps adds the 1.
cudaError_t launch_fused_adamax(const MultiTensorArgs& tensors, DType dtype, const AdamaxArgs& args,
                                const float* grad_scale, const float* found_inf,
                                cudaStream_t stream);
cudaError_t launch_fused_adadelta(const MultiTensorArgs& tensors, DType dtype,
                                  const AdadeltaArgs& args, const float* grad_scale,
                                  const float* found_inf, cudaStream_t stream);
cudaError_t launch_fused_radam(const MultiTensorArgs& tensors, DType dtype, const RAdamArgs& args,
                               const float* grad_scale, const float* found_inf,
                               cudaStream_t stream);

// NAdam: lists param, grad, exp_avg, exp_avg_sq (as RAdam's) and each tensor's mu_product (a
// float32 one-element tensor, read); `steps` set and read as Adagrad's. launch_advance_nadam
// then multiplies each mu_product by its step's momentum coefficient and adds the 1 to the count
// (`count` of each: host arrays of device pointers), unless found_inf is nonzero.
cudaError_t launch_fused_nadam(const MultiTensorArgs& tensors, DType dtype, const NAdamArgs& args,
                               const float* grad_scale, const float* found_inf,
                               cudaStream_t stream);
cudaError_t launch_advance_nadam(float* const* steps, float* const* products, int64_t count,
                                 const NAdamArgs& args, const float* found_inf,
                                 cudaStream_t stream);

// *steps[i] += 1 for the `count` step counts (a host array of device pointers), unless
// found_inf (may be null) is nonzero.
cudaError_t launch_advance_steps(float* const* steps, int64_t count, const float* found_inf,
                                 cudaStream_t stream);

// ---- norms, clipping, checks -----------------------------------------------------------------

enum class NormKind : int32_t { One, Two, Infinity, P };

// partials[chunk_base + c] = the chunk's sum of |x|^p (One, Two, P) or max |x| (Infinity, NaN
// propagating), in float, for the c-th chunk of the tensors in order: chunks_of(numel) chunks
// per tensor (none for an empty one). One list.
cudaError_t launch_norm_partials(const MultiTensorArgs& tensors, DType dtype, NormKind kind,
                                 float p, float* partials, int64_t chunk_base, cudaStream_t stream);
// total[0] = the norm from `count` partials, combined in a fixed order (deterministic).
cudaError_t launch_norm_finish(const float* partials, int64_t count, NormKind kind, float p,
                               float* total, cudaStream_t stream);
// x *= min(1, max_norm / (total_norm[0] + 1e-6)) (a NaN coefficient stays NaN), in place.
cudaError_t launch_clip_scale(const MultiTensorArgs& tensors, DType dtype, const float* total_norm,
                              double max_norm, cudaStream_t stream);
// x *= factor (rounded to the compute type), in place.
cudaError_t launch_scale(const MultiTensorArgs& tensors, DType dtype, double factor,
                         cudaStream_t stream);
// x = clamp(x, low, high) in place (NaN stays NaN).
cudaError_t launch_clamp(const MultiTensorArgs& tensors, DType dtype, double low, double high,
                         cudaStream_t stream);
// flag[0] = 1 when any element is not finite (never cleared here).
cudaError_t launch_non_finite_check(const MultiTensorArgs& tensors, DType dtype, float* flag,
                                    cudaStream_t stream);
// out[0] = the bits of the largest finite |x| as a double (atomic max; start from 0),
// out[1] += the count of non-finite elements.
cudaError_t launch_value_range(const MultiTensorArgs& tensors, DType dtype, unsigned long long* out,
                               cudaStream_t stream);

}  // namespace hg::cuda::detail
