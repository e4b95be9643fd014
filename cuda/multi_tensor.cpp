// The CUDA backend's multi_tensor table (kernel/multi_tensor.h) and GradScaler's update on the
// device (scaler_state.h): checks, grouping by dtype, the pointer lists the launchers
// (multi_tensor_launch.h, NOTE [Multi-tensor apply]) pack into kernel arguments, and the
// launches on the current stream. Nothing here waits for the device.
//
// NOTE [No host sync in the step] A training step on CUDA (forward, backward, unscale_, clip,
// step, update) enqueues work and never waits for it: the loss scale, its reciprocal, the
// found_inf flags, the total norm, the clip coefficient and the optimizers' step counts live in
// device memory, and the kernels that need them read them there. A skipped step is a kernel
// that returns at once because found_inf is set. What the host wants to know (whether a step
// was skipped, the scale, a step count) is an explicit read by the caller, documented where it
// happens (GradScaler::get_scale, last_step_skipped, ...). tests/cuda/graph_capture_test.cpp
// proves it: a step captured into a CUDA graph would fail to capture on any host wait.
#include "halfgrad/cuda/scaler_state.h"

#include <atomic>
#include <cmath>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/view.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/multi_tensor_launch.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/multi_tensor_checks.h"

namespace hg::cuda {

namespace {

using detail::MultiTensorArgs;

// The floating dtypes in the order their groups launch (so the order of the norm partials).
constexpr DType kFloatingDTypes[] = {kFloat32, kFloat16, kBFloat16, kFloat64};

using kernel::check_scalar;
using kernel::describe_tensor;

// Every tensor a defined floating tensor, all on one CUDA device; returns that device.
Device common_device(std::span<const Tensor> tensors, const char* op, const char* what) {
  return kernel::common_device(tensors, kCUDA, op, what);
}

template <class T>
T* data_of(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}
// The pointer of an optional one-element float32 tensor (null when undefined).
const float* optional_scalar(const Tensor& t, Device device, const char* op, const char* what) {
  if (!t.defined()) return nullptr;
  check_scalar(t, device, op, what);
  return data_of<float>(t);
}

// What a launcher reads: pointer lists that live until it returns.
struct PointerLists {
  std::vector<void*> data[MultiTensorArgs::kMaxLists];
  std::vector<int64_t> numel;
  std::vector<float*> steps;
  std::vector<uint64_t> first_blocks;  // bf16_params only

  MultiTensorArgs args(int lists) const {
    MultiTensorArgs a;
    a.lists = lists;
    a.count = int64_t(numel.size());
    for (int l = 0; l < lists; ++l) a.data[l] = data[l].data();
    a.numel = numel.data();
    a.steps = steps.empty() ? nullptr : steps.data();
    a.first_blocks = first_blocks.empty() ? nullptr : first_blocks.data();
    return a;
  }
};

// Calls launch(dtype, args) for each floating dtype among `tensors` (contiguous), in the order
// of kFloatingDTypes, with the one-list args of that dtype's tensors in list order.
template <class Launch>
void for_each_dtype(const std::vector<Tensor>& tensors, Launch&& launch) {
  for (DType dtype : kFloatingDTypes) {
    PointerLists lists;
    for (const Tensor& t : tensors) {
      if (t.dtype() != dtype) continue;
      lists.data[0].push_back(t.data_ptr());
      lists.numel.push_back(t.numel());
    }
    if (!lists.numel.empty()) launch(dtype, lists.args(1));
  }
}

// The kernels work on contiguous memory: a strided tensor goes through a dense copy, written
// back by write_back when the work was in place. (core's copies: no autograd history.)
std::vector<Tensor> dense_of(std::span<const Tensor> tensors) {
  std::vector<Tensor> dense;
  dense.reserve(tensors.size());
  for (const Tensor& t : tensors) dense.push_back(t.is_contiguous() ? t : core::clone(t));
  return dense;
}
void write_back(std::span<const Tensor> tensors, const std::vector<Tensor>& dense) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (dense[i].is_same(tensors[i])) {
      tensors[i].bump_version();
    } else {
      Tensor target = tensors[i];
      target.copy_(dense[i]);
    }
  }
}

// A new one-element-or-more tensor of zero bytes (0.0 in every floating dtype, 0 in the
// integers), zeroed on the stream.
Tensor zeroed(const Shape& sizes, DType dtype, Device device, cudaStream_t stream, const char* op) {
  Tensor t = empty(sizes, {.dtype = dtype, .device = device});
  HG_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), stream), op);
  return t;
}

detail::NormKind norm_kind(double norm_type) {
  if (std::isinf(norm_type)) return detail::NormKind::Infinity;
  if (norm_type == 1.0) return detail::NormKind::One;
  if (norm_type == 2.0) return detail::NormKind::Two;
  return detail::NormKind::P;
}

// ---- GradScaler ------------------------------------------------------------------------------

Tensor new_flag(Device device) {
  HG_CHECK(device.is_cuda(), "new_flag: expected a CUDA device, got {}", device);
  DeviceGuard guard(device.index);
  return zeroed({1}, kFloat32, device, current_stream(device.index), "new_flag");
}

Tensor reciprocal_scale(const Tensor& scale) {
  HG_CHECK(scale.defined() && scale.is_cuda(), "reciprocal_scale: expected a CUDA scale, got {}",
           describe_tensor(scale));
  check_scalar(scale, scale.device(), "reciprocal_scale", "the scale");
  DeviceGuard guard(scale.device().index);
  Tensor inv_scale = empty({1}, {.dtype = kFloat32, .device = scale.device()});
  HG_CUDA_CHECK(detail::launch_reciprocal_scale(data_of<float>(scale), data_of<float>(inv_scale),
                                                current_stream(scale.device().index)),
                "reciprocal_scale");
  return inv_scale;
}

void unscale_and_check_(std::span<const Tensor> tensors, const Tensor& inv_scale,
                        const Tensor& found_inf) {
  constexpr const char* kOp = "unscale_and_check_";
  if (tensors.empty()) return;
  const Device device = common_device(tensors, kOp, "tensors");
  check_scalar(inv_scale, device, kOp, "inv_scale");
  check_scalar(found_inf, device, kOp, "found_inf");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  const std::vector<Tensor> dense = dense_of(tensors);
  for_each_dtype(dense, [&](DType dtype, const MultiTensorArgs& args) {
    HG_CUDA_CHECK(detail::launch_unscale_and_check(args, dtype, data_of<float>(inv_scale),
                                                   data_of<float>(found_inf), stream),
                  kOp);
  });
  write_back(tensors, dense);
}

Tensor sum_flags(std::span<const Tensor> flags) {
  constexpr const char* kOp = "sum_flags";
  HG_CHECK(!flags.empty(), "{}: expected at least one flag, got none", kOp);
  const Device device = common_device(flags, kOp, "flags");
  std::vector<const float*> pointers;
  pointers.reserve(flags.size());
  for (const Tensor& flag : flags) {
    check_scalar(flag, device, kOp, "every flag");
    pointers.push_back(data_of<float>(flag));
  }
  DeviceGuard guard(device.index);
  Tensor out = empty({1}, {.dtype = kFloat32, .device = device});
  HG_CUDA_CHECK(detail::launch_sum_flags(pointers.data(), int64_t(pointers.size()),
                                         data_of<float>(out), current_stream(device.index)),
                kOp);
  return out;
}

// ---- fused optimizers ------------------------------------------------------------------------

void fused_adam_(const kernel::AdamTensors& t, const detail::AdamArgs& args,
                 const Tensor& grad_scale, const Tensor& found_inf) {
  constexpr const char* kOp = "fused_adam_";
  const size_t n = t.params.size();
  const Device device =
      kernel::check_adam_tensors(t, args, grad_scale, found_inf, kCUDA, /*int64_steps=*/false);
  if (n == 0) return;
  // Grouped by (parameter dtype, state dtype): one kernel instantiation per group.
  std::map<std::pair<int, int>, PointerLists> groups;
  std::vector<float*> steps(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    const DType state_dtype = t.exp_avgs[i].defined() ? t.exp_avgs[i].dtype() : param.dtype();
    steps[i] = data_of<float>(t.steps[i]);
    PointerLists& lists = groups[{int(param.dtype()), int(state_dtype)}];
    lists.data[0].push_back(param.data_ptr());
    lists.data[1].push_back(t.grads[i].data_ptr());
    lists.data[2].push_back(t.exp_avgs[i].data_ptr());
    lists.data[3].push_back(t.exp_avg_sqs[i].data_ptr());
    if (args.amsgrad) lists.data[4].push_back(t.max_exp_avg_sqs[i].data_ptr());
    lists.numel.push_back(param.numel());
    lists.steps.push_back(steps[i]);
    if (args.bf16_params) lists.first_blocks.push_back(t.first_blocks[i]);
  }
  const float* scale = optional_scalar(grad_scale, device, kOp, "grad_scale");
  const float* found = optional_scalar(found_inf, device, kOp, "found_inf");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  for (const auto& [dtypes, lists] : groups) {
    HG_CUDA_CHECK(detail::launch_fused_adam(lists.args(args.amsgrad ? 5 : 4), DType(dtypes.first),
                                            DType(dtypes.second), args, scale, found, stream),
                  kOp);
  }
  // After every group's update read them: the counts advance unless found_inf is set.
  HG_CUDA_CHECK(detail::launch_advance_steps(steps.data(), int64_t(n), found, stream), kOp);
  for (size_t i = 0; i < n; ++i) {
    t.params[i].bump_version();
    t.exp_avgs[i].bump_version();
    t.exp_avg_sqs[i].bump_version();
    if (args.amsgrad) t.max_exp_avg_sqs[i].bump_version();
    t.steps[i].bump_version();
  }
}

void fused_sgd_(const kernel::SGDTensors& t, const detail::SGDArgs& args, const Tensor& grad_scale,
                const Tensor& found_inf) {
  constexpr const char* kOp = "fused_sgd_";
  const size_t n = t.params.size();
  const bool with_buffer = args.momentum != 0;
  const size_t buffers = with_buffer ? n : 0;
  const Device device =
      kernel::check_sgd_tensors(t, args, grad_scale, found_inf, kCUDA, /*int64_steps=*/false);
  if (n == 0) return;
  std::map<int, PointerLists> groups;
  std::vector<float*> steps(buffers);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    PointerLists& lists = groups[int(param.dtype())];
    lists.data[0].push_back(param.data_ptr());
    lists.data[1].push_back(t.grads[i].data_ptr());
    lists.numel.push_back(param.numel());
    if (args.bf16_params) lists.first_blocks.push_back(t.first_blocks[i]);
    if (with_buffer) {
      steps[i] = data_of<float>(t.steps[i]);
      lists.data[2].push_back(t.momentum_buffers[i].data_ptr());
      lists.steps.push_back(steps[i]);
    }
  }
  const float* scale = optional_scalar(grad_scale, device, kOp, "grad_scale");
  const float* found = optional_scalar(found_inf, device, kOp, "found_inf");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  for (const auto& [dtype, lists] : groups) {
    HG_CUDA_CHECK(detail::launch_fused_sgd(lists.args(with_buffer ? 3 : 2), DType(dtype), args,
                                           scale, found, stream),
                  kOp);
  }
  if (with_buffer) {
    HG_CUDA_CHECK(detail::launch_advance_steps(steps.data(), int64_t(n), found, stream), kOp);
  }
  for (size_t i = 0; i < n; ++i) {
    t.params[i].bump_version();
    if (with_buffer) {
      t.momentum_buffers[i].bump_version();
      t.steps[i].bump_version();
    }
  }
}

void fused_rmsprop_(const kernel::RMSpropTensors& t, const detail::RMSpropArgs& args,
                    const Tensor& grad_scale, const Tensor& found_inf) {
  constexpr const char* kOp = "fused_rmsprop_";
  const size_t n = t.params.size();
  const bool momentum = args.momentum > 0;
  const Device device =
      kernel::check_rmsprop_tensors(t, args, grad_scale, found_inf, kCUDA, /*int64_steps=*/false);
  if (n == 0) return;
  std::map<int, PointerLists> groups;
  std::vector<float*> steps(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    steps[i] = data_of<float>(t.steps[i]);
    PointerLists& lists = groups[int(param.dtype())];
    int list = 0;
    lists.data[list++].push_back(param.data_ptr());
    lists.data[list++].push_back(t.grads[i].data_ptr());
    lists.data[list++].push_back(t.square_avgs[i].data_ptr());
    if (args.centered) lists.data[list++].push_back(t.grad_avgs[i].data_ptr());
    if (momentum) lists.data[list++].push_back(t.momentum_buffers[i].data_ptr());
    lists.numel.push_back(param.numel());
    if (args.bf16_params) lists.first_blocks.push_back(t.first_blocks[i]);
  }
  const int lists_count = 3 + (args.centered ? 1 : 0) + (momentum ? 1 : 0);
  const float* scale = optional_scalar(grad_scale, device, kOp, "grad_scale");
  const float* found = optional_scalar(found_inf, device, kOp, "found_inf");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  for (const auto& [dtype, lists] : groups) {
    HG_CUDA_CHECK(detail::launch_fused_rmsprop(lists.args(lists_count), DType(dtype), args, scale,
                                               found, stream),
                  kOp);
  }
  HG_CUDA_CHECK(detail::launch_advance_steps(steps.data(), int64_t(n), found, stream), kOp);
  for (size_t i = 0; i < n; ++i) {
    t.params[i].bump_version();
    t.square_avgs[i].bump_version();
    if (args.centered) t.grad_avgs[i].bump_version();
    if (momentum) t.momentum_buffers[i].bump_version();
    t.steps[i].bump_version();
  }
}

void fused_adagrad_(const kernel::AdagradTensors& t, const detail::AdagradArgs& args,
                    const Tensor& grad_scale, const Tensor& found_inf) {
  constexpr const char* kOp = "fused_adagrad_";
  const size_t n = t.params.size();
  const Device device =
      kernel::check_adagrad_tensors(t, args, grad_scale, found_inf, kCUDA, /*int64_steps=*/false);
  if (n == 0) return;
  std::map<int, PointerLists> groups;
  std::vector<float*> steps(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& param = t.params[i];
    steps[i] = data_of<float>(t.steps[i]);
    PointerLists& lists = groups[int(param.dtype())];
    lists.data[0].push_back(param.data_ptr());
    lists.data[1].push_back(t.grads[i].data_ptr());
    lists.data[2].push_back(t.sums[i].data_ptr());
    lists.numel.push_back(param.numel());
    lists.steps.push_back(steps[i]);
    if (args.bf16_params) lists.first_blocks.push_back(t.first_blocks[i]);
  }
  const float* scale = optional_scalar(grad_scale, device, kOp, "grad_scale");
  const float* found = optional_scalar(found_inf, device, kOp, "found_inf");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  for (const auto& [dtype, lists] : groups) {
    HG_CUDA_CHECK(
        detail::launch_fused_adagrad(lists.args(3), DType(dtype), args, scale, found, stream),
        kOp);
  }
  // After every group's update read them: the counts advance unless found_inf is set.
  HG_CUDA_CHECK(detail::launch_advance_steps(steps.data(), int64_t(n), found, stream), kOp);
  for (size_t i = 0; i < n; ++i) {
    t.params[i].bump_version();
    t.sums[i].bump_version();
    t.steps[i].bump_version();
  }
}

// Adamax, Adadelta, RAdam and NAdam on one device (checked): lists param, grad, first, second
// (and NAdam's mu_products, when `products` is not null), grouped by dtype, `launch(args, dtype,
// grad_scale, found_inf, stream)` the rule's launcher; then the step counts (and mu_products)
// advance unless found_inf is set.
template <class Tensors, class Args, class Launch>
void two_buffer_step(const Tensors& t, const std::vector<Tensor>& first,
                     const std::vector<Tensor>& second, const std::vector<Tensor>* products,
                     const Args& args, const Tensor& grad_scale, const Tensor& found_inf,
                     Device device, const char* op, Launch&& launch) {
  const size_t n = t.params.size();
  if (n == 0) return;
  std::map<int, PointerLists> groups;
  std::vector<float*> steps(n), product_data(products != nullptr ? n : 0);
  for (size_t i = 0; i < n; ++i) {
    steps[i] = data_of<float>(t.steps[i]);
    PointerLists& lists = groups[int(t.params[i].dtype())];
    lists.data[0].push_back(t.params[i].data_ptr());
    lists.data[1].push_back(t.grads[i].data_ptr());
    lists.data[2].push_back(first[i].data_ptr());
    lists.data[3].push_back(second[i].data_ptr());
    if (products != nullptr) {
      product_data[i] = data_of<float>((*products)[i]);
      lists.data[4].push_back(product_data[i]);
    }
    lists.numel.push_back(t.params[i].numel());
    lists.steps.push_back(steps[i]);
    if (args.bf16_params) lists.first_blocks.push_back(t.first_blocks[i]);
  }
  const float* scale = optional_scalar(grad_scale, device, op, "grad_scale");
  const float* found = optional_scalar(found_inf, device, op, "found_inf");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  for (const auto& [dtype, lists] : groups) {
    HG_CUDA_CHECK(
        launch(lists.args(products != nullptr ? 5 : 4), DType(dtype), args, scale, found, stream),
        op);
  }
  if constexpr (std::is_same_v<Args, kernel::NAdamArgs>) {
    HG_CUDA_CHECK(detail::launch_advance_nadam(steps.data(), product_data.data(), int64_t(n), args,
                                               found, stream),
                  op);
  } else {
    HG_CUDA_CHECK(detail::launch_advance_steps(steps.data(), int64_t(n), found, stream), op);
  }
  for (size_t i = 0; i < n; ++i) {
    t.params[i].bump_version();
    first[i].bump_version();
    second[i].bump_version();
    t.steps[i].bump_version();
    if (products != nullptr) (*products)[i].bump_version();
  }
}

void fused_adamax_(const kernel::AdamaxTensors& t, const kernel::AdamaxArgs& args,
                   const Tensor& grad_scale, const Tensor& found_inf) {
  const Device device =
      kernel::check_adamax_tensors(t, args, grad_scale, found_inf, kCUDA, /*int64_steps=*/false);
  two_buffer_step(t, t.exp_avgs, t.exp_infs, nullptr, args, grad_scale, found_inf, device,
                  "fused_adamax_", detail::launch_fused_adamax);
}

void fused_adadelta_(const kernel::AdadeltaTensors& t, const kernel::AdadeltaArgs& args,
                     const Tensor& grad_scale, const Tensor& found_inf) {
  const Device device =
      kernel::check_adadelta_tensors(t, args, grad_scale, found_inf, kCUDA, /*int64_steps=*/false);
  two_buffer_step(t, t.square_avgs, t.acc_deltas, nullptr, args, grad_scale, found_inf, device,
                  "fused_adadelta_", detail::launch_fused_adadelta);
}

void fused_radam_(const kernel::RAdamTensors& t, const kernel::RAdamArgs& args,
                  const Tensor& grad_scale, const Tensor& found_inf) {
  const Device device =
      kernel::check_radam_tensors(t, args, grad_scale, found_inf, kCUDA, /*int64_steps=*/false);
  two_buffer_step(t, t.exp_avgs, t.exp_avg_sqs, nullptr, args, grad_scale, found_inf, device,
                  "fused_radam_", detail::launch_fused_radam);
}

void fused_nadam_(const kernel::NAdamTensors& t, const kernel::NAdamArgs& args,
                  const Tensor& grad_scale, const Tensor& found_inf) {
  const Device device =
      kernel::check_nadam_tensors(t, args, grad_scale, found_inf, kCUDA, /*int64_steps=*/false);
  two_buffer_step(t, t.exp_avgs, t.exp_avg_sqs, &t.mu_products, args, grad_scale, found_inf, device,
                  "fused_nadam_", detail::launch_fused_nadam);
}

// ---- norms, clipping, checks -----------------------------------------------------------------

Tensor total_norm(std::span<const Tensor> tensors, double norm_type) {
  constexpr const char* kOp = "total_norm";
  HG_CHECK(!tensors.empty(), "{}: expected at least one tensor, got none", kOp);
  HG_CHECK(norm_type > 0, "{}: expected norm_type > 0 (or infinity), got {}", kOp, norm_type);
  const Device device = common_device(tensors, kOp, "tensors");
  const detail::NormKind kind = norm_kind(norm_type);
  const float p = static_cast<float>(norm_type);
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  const std::vector<Tensor> dense = dense_of(tensors);
  int64_t chunks = 0;
  for (const Tensor& t : dense) chunks += detail::chunks_of(t.numel());
  Tensor partials = empty({std::max<int64_t>(chunks, 1)}, {.dtype = kFloat32, .device = device});
  int64_t chunk_base = 0;
  for_each_dtype(dense, [&](DType dtype, const MultiTensorArgs& args) {
    HG_CUDA_CHECK(detail::launch_norm_partials(args, dtype, kind, p, data_of<float>(partials),
                                               chunk_base, stream),
                  kOp);
    for (int64_t i = 0; i < args.count; ++i) chunk_base += detail::chunks_of(args.numel[i]);
  });
  Tensor total = empty({}, {.dtype = kFloat32, .device = device});
  HG_CUDA_CHECK(detail::launch_norm_finish(data_of<float>(partials), chunks, kind, p,
                                           data_of<float>(total), stream),
                kOp);
  return total;
}

void clip_by_total_norm_(std::span<const Tensor> tensors, const Tensor& total_norm,
                         double max_norm) {
  constexpr const char* kOp = "clip_by_total_norm_";
  if (tensors.empty()) return;
  const Device device = common_device(tensors, kOp, "tensors");
  check_scalar(total_norm, device, kOp, "the total norm");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  const std::vector<Tensor> dense = dense_of(tensors);
  for_each_dtype(dense, [&](DType dtype, const MultiTensorArgs& args) {
    HG_CUDA_CHECK(
        detail::launch_clip_scale(args, dtype, data_of<float>(total_norm), max_norm, stream), kOp);
  });
  write_back(tensors, dense);
}

void scale_(std::span<const Tensor> tensors, double factor) {
  constexpr const char* kOp = "scale_";
  if (tensors.empty()) return;
  const Device device = common_device(tensors, kOp, "tensors");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  const std::vector<Tensor> dense = dense_of(tensors);
  for_each_dtype(dense, [&](DType dtype, const MultiTensorArgs& args) {
    HG_CUDA_CHECK(detail::launch_scale(args, dtype, factor, stream), kOp);
  });
  write_back(tensors, dense);
}

void clamp_(std::span<const Tensor> tensors, double low, double high) {
  constexpr const char* kOp = "clamp_";
  if (tensors.empty()) return;
  const Device device = common_device(tensors, kOp, "tensors");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  const std::vector<Tensor> dense = dense_of(tensors);
  for_each_dtype(dense, [&](DType dtype, const MultiTensorArgs& args) {
    HG_CUDA_CHECK(detail::launch_clamp(args, dtype, low, high, stream), kOp);
  });
  write_back(tensors, dense);
}

Tensor non_finite_flag(std::span<const Tensor> tensors) {
  constexpr const char* kOp = "non_finite_flag";
  HG_CHECK(!tensors.empty(), "{}: expected at least one tensor, got none", kOp);
  const Device device = common_device(tensors, kOp, "tensors");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  Tensor flag = zeroed({1}, kFloat32, device, stream, kOp);
  const std::vector<Tensor> dense = dense_of(tensors);
  for_each_dtype(dense, [&](DType dtype, const MultiTensorArgs& args) {
    HG_CUDA_CHECK(detail::launch_non_finite_check(args, dtype, data_of<float>(flag), stream), kOp);
  });
  return flag;
}

Tensor value_range(const Tensor& t) {
  constexpr const char* kOp = "value_range";
  const Device device = common_device(std::span<const Tensor>(&t, 1), kOp, "tensors");
  DeviceGuard guard(device.index);
  const cudaStream_t stream = current_stream(device.index);
  Tensor out = zeroed({2}, kInt64, device, stream, kOp);
  const std::vector<Tensor> dense = dense_of(std::span<const Tensor>(&t, 1));
  for_each_dtype(dense, [&](DType dtype, const MultiTensorArgs& args) {
    HG_CUDA_CHECK(detail::launch_value_range(
                      args, dtype, static_cast<unsigned long long*>(out.data_ptr()), stream),
                  kOp);
  });
  return out;
}

}  // namespace

const kernel::MultiTensorKernels multi_tensor_kernels = HG_MULTI_TENSOR_KERNELS;

// ---- GradScaler's state on the device (scaler_state.h) --------------------------------------

void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& counters,
                   const Tensor& found_inf, const detail::ScaleUpdateArgs& args,
                   detail::ScalerMonitor* monitor) {
  constexpr const char* kOp = "update_scale_";
  HG_CHECK(scale.defined() && scale.is_cuda(), "{}: expected a CUDA scale, got {}", kOp,
           describe_tensor(scale));
  const Device device = scale.device();
  check_scalar(scale, device, kOp, "the scale");
  check_scalar(growth_tracker, device, kOp, "the growth tracker", kInt32);
  HG_CHECK(counters.defined() && counters.device() == device && counters.dtype() == kInt32 &&
               counters.numel() == detail::kScalerCounters && counters.is_contiguous(),
           "{}: expected the counters to be {} contiguous int32 elements on {}, got {}", kOp,
           int(detail::kScalerCounters), device, describe_tensor(counters));
  const float* found = optional_scalar(found_inf, device, kOp, "found_inf");
  HG_CHECK(found != nullptr || args.set_scale,
           "{}: expected a found_inf flag (only a set scale goes without one), got none", kOp);
  DeviceGuard guard(device.index);
  HG_CUDA_CHECK(detail::launch_update_scale(data_of<float>(scale), data_of<int32_t>(growth_tracker),
                                            data_of<int32_t>(counters), found, args, monitor,
                                            current_stream(device.index)),
                kOp);
  scale.bump_version();
  growth_tracker.bump_version();
  counters.bump_version();
}

ScalerMonitorSlot::ScalerMonitorSlot(int device) : device_index_(device) {
  DeviceGuard guard(device);
  void* host = nullptr;
  HG_CUDA_CHECK(cudaHostAlloc(&host, sizeof(detail::ScalerMonitor), cudaHostAllocMapped),
                "GradScaler monitor");
  host_ = static_cast<detail::ScalerMonitor*>(host);
  *host_ = {};
  void* on_device = nullptr;
  const cudaError_t status = cudaHostGetDevicePointer(&on_device, host, 0);
  if (status != cudaSuccess) {
    cudaFreeHost(host);
    HG_CUDA_CHECK(status, "GradScaler monitor");
  }
  device_ = static_cast<detail::ScalerMonitor*>(on_device);
}

ScalerMonitorSlot::~ScalerMonitorSlot() {
  // A destructor must not throw: errors are dropped (the memory is freed regardless).
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device_index_);
  cudaDeviceSynchronize();
  cudaFreeHost(host_);
  cudaSetDevice(previous);
}

detail::ScalerMonitor ScalerMonitorSlot::read() const {
  const volatile detail::ScalerMonitor* slot = host_;
  detail::ScalerMonitor out;
  out.alarms = slot->alarms;
  std::atomic_thread_fence(std::memory_order_acquire);  // the fields were written before it
  out.kind = slot->kind;
  out.consecutive_skips = slot->consecutive_skips;
  out.scale = slot->scale;
  return out;
}

}  // namespace hg::cuda
