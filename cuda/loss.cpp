// The CUDA loss kernels (kernel/loss.h) over Tensors: layouts and buffers here, the work in
// loss.cu. Nothing here waits for the GPU.
//
// Dims: N batch, C classes, S positions per sample, R = N S rows of a class loss.
//
// NOTE [Losses on CUDA] For CUDA inputs each forward, and each first-order backward, runs these
// kernels instead of the CPU's host loops (cpu/loss.cpp): nothing reads tensor memory on the
// host and nothing waits for the GPU. "mean" divides on the device; the mean of nll_loss and
// cross_entropy over class indices divides by the total weight of the targets not ignored,
// summed on the device and kept there (ClassLossForward::divisor) for the backward. Class
// indices are checked on the device: a bad one is reported through the device-error slot (NOTE
// [Index checks on the device] in cuda/index.h), an hg::Error at the next synchronize naming the
// op, and its row counts as ignored. A backward that is itself recorded (create_graph), or that
// needs a weight's gradient, takes the op formulas of ops/loss.cpp, which run on any device.
// binary_cross_entropy's input must lie in [0, 1]: the CPU checks before computing (the error
// gives the range found); the CUDA kernel checks each element as it reads it and the error
// (with the first value found outside) comes at the next synchronize, as for class indices.
#include <iterator>
#include <optional>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/loss_launch.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/loss.h"

namespace hg::cuda {

namespace {

using detail::ClassRows;
using detail::ClassWeight;
using detail::LossOperand;
using detail::make_walk;
using detail::Walk;
using kernel::ClassLossForward;
using kernel::LossGrads;
using kernel::LossReduction;
using kernel::PointwiseLoss;

DType acc_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// The op of a pointwise loss, for its errors.
const char* loss_name(PointwiseLoss kind) {
  static constexpr const char* kNames[] = {"mse_loss",
                                           "l1_loss",
                                           "smooth_l1_loss",
                                           "binary_cross_entropy",
                                           "binary_cross_entropy_with_logits",
                                           "kl_div",
                                           "kl_div"};
  static_assert(std::size(kNames) == size_t(PointwiseLoss::KlDivLogTarget) + 1);
  return kNames[size_t(kind)];
}

// Defined tensors must be on `device` (ops/dispatch checks this for the public ops; the
// kernels check again since they read every pointer on the device).
void check_on(const Tensor& t, Device device, const char* op, const char* what) {
  if (!t.defined()) return;
  HG_CHECK(t.is_cuda() && t.device() == device, "{}: expected {} on {}, got a tensor on {}", op,
           what, device, t.device());
}

LossOperand operand(const Tensor& t) {
  return t.defined() ? LossOperand{t.data_ptr(), t.dtype()} : LossOperand{};
}

ClassWeight class_weight(const Tensor& weight) {
  return weight.defined() ? ClassWeight{operand(weight), weight.stride(0)} : ClassWeight{};
}

// t's data, or null for an undefined t (an output or a buffer the launch does without).
void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

Tensor empty_on(const Shape& sizes, DType dtype, Device device) {
  return empty(sizes, {.dtype = dtype, .device = device});
}

// The strides of t broadcast to `sizes` (zeros for an absent t).
Shape strides_over(const Tensor& t, const Shape& sizes) {
  if (!t.defined()) return Shape(sizes.size(), 0);
  return t.sizes() == sizes ? t.strides() : t.expand(sizes).strides();
}

// The row layout of a class loss (loss_launch.h). input_strides may be all zeros when the
// kernel does not read input; grad is the per-row gradient (reduction none), else undefined.
ClassRows class_rows(const Shape& input_sizes, const Shape& input_strides, const Tensor& target,
                     bool probabilities, const Tensor& grad, const char* op) {
  ClassRows rows;
  const size_t D = input_sizes.size();
  Shape spatial_sizes, input_spatial, target_spatial, grad_spatial;
  if (D == 1) {  // [C]: one row; a class-index target and a per-row grad are 0-d
    rows.C = input_sizes[0];
    rows.input_c = input_strides[0];
    if (probabilities) rows.target_c = target.stride(0);
  } else {
    rows.N = input_sizes[0];
    rows.C = input_sizes[1];
    rows.input_n = input_strides[0];
    rows.input_c = input_strides[1];
    rows.target_n = target.stride(0);
    if (probabilities) rows.target_c = target.stride(1);
    if (grad.defined()) rows.grad_n = grad.stride(0);
    for (size_t d = 2; d < D; ++d) {
      spatial_sizes.push_back(input_sizes[d]);
      input_spatial.push_back(input_strides[d]);
      target_spatial.push_back(target.stride(int64_t(probabilities ? d : d - 1)));
      grad_spatial.push_back(grad.defined() ? grad.stride(int64_t(d - 1)) : 0);
    }
  }
  rows.spatial = make_walk(op, spatial_sizes, {input_spatial, target_spatial, grad_spatial});
  rows.S = rows.spatial.numel;
  return rows;
}

// Input's shape without the class dim: the shape of one loss per row.
Shape row_shape(const Shape& input_sizes) {
  Shape out;
  for (size_t d = 0; d < input_sizes.size(); ++d) {
    if (d != (input_sizes.size() == 1 ? 0 : 1)) out.push_back(input_sizes[d]);
  }
  return out;
}

const int64_t* index_data(const Tensor& t) { return static_cast<const int64_t*>(t.data_ptr()); }

// The targets of cross_entropy (loss_launch.h): class indices (int64) or probabilities
// (floating), as target's dtype says.
detail::ClassTargets class_targets(const Tensor& target, const Tensor& weight, int64_t ignore_index,
                                   double label_smoothing) {
  const bool probabilities = target.is_floating_point();
  return {.index = probabilities ? nullptr : index_data(target),
          .prob = probabilities ? operand(target) : LossOperand{},
          .weight = class_weight(weight),
          .ignore_index = ignore_index,
          .label_smoothing = label_smoothing};
}

// The tensors of a class loss's forward, on input's device (weight when defined).
void check_class_operands(const Tensor& input, const Tensor& target, const Tensor& weight,
                          const char* op) {
  check_on(input, input.device(), op, "input");
  check_on(target, input.device(), op, "target");
  check_on(weight, input.device(), op, "weight");
}

// The outputs of a class loss's forward over R rows on `device`: the loss in dtype (per row
// for None, else 0-d) and, for Sum and Mean, the divisor and `partials` of the reduction (acc).
ClassLossForward class_forward_outputs(const Shape& input_sizes, LossReduction reduction,
                                       DType dtype, DType acc, Device device, int64_t R,
                                       Tensor& partials) {
  ClassLossForward result;
  if (reduction == LossReduction::None) {
    result.loss = empty_on(row_shape(input_sizes), dtype, device);
  } else {
    result.loss = empty_on({}, dtype, device);
    result.divisor = empty_on({}, acc, device);
    partials = empty_on({2 * detail::loss_partial_blocks(R)}, acc, device);
  }
  return result;
}

// ---- pointwise losses ----------------------------------------------------------------------

Tensor pointwise_loss(PointwiseLoss kind, const Tensor& input, const Tensor& target,
                      const Tensor& weight, const Tensor& pos_weight, LossReduction reduction,
                      double divisor, DType dtype, double beta) {
  const char* op = loss_name(kind);
  check_on(input, input.device(), op, "input");
  check_on(target, input.device(), op, "target");
  check_on(weight, input.device(), op, "weight");
  check_on(pos_weight, input.device(), op, "pos_weight");
  HG_CHECK(target.sizes() == input.sizes(), "{}: expected target of input's shape {}, got {}", op,
           input.sizes(), target.sizes());
  const Device device = input.device();
  const DType acc = acc_dtype(dtype);
  DeviceGuard guard(device.index);
  const Shape& sizes = input.sizes();
  const Walk walk = make_walk(op, sizes,
                              {input.strides(), target.strides(), strides_over(weight, sizes),
                               strides_over(pos_weight, sizes)});
  Tensor out = empty_on(reduction == LossReduction::None ? sizes : Shape{}, dtype, device);
  Tensor partials;
  if (reduction != LossReduction::None) {
    partials = empty_on({2 * detail::loss_partial_blocks(walk.numel)}, acc, device);
  }
  HG_CUDA_CHECK(detail::launch_pointwise_loss(
                    kind, beta, walk, operand(input), operand(target), operand(weight),
                    operand(pos_weight), acc, reduction, divisor, out.data_ptr(), dtype,
                    data_or_null(partials), detail::device_error_slot(), current_stream()),
                op);
  return out;
}

std::optional<LossGrads> pointwise_loss_backward(PointwiseLoss kind, const Tensor& grad,
                                                 const Tensor& input, const Tensor& target,
                                                 const Tensor& weight, const Tensor& pos_weight,
                                                 LossReduction reduction, double divisor,
                                                 bool need_input, bool need_target, double beta) {
  const char* op = loss_name(kind);
  check_on(grad, input.device(), op, "the gradient");
  check_on(target, input.device(), op, "target");
  check_on(weight, input.device(), op, "weight");
  check_on(pos_weight, input.device(), op, "pos_weight");
  HG_CHECK(broadcasts_to(grad.sizes(), input.sizes()),
           "{}: expected a gradient of input's shape {} or 0-d, got {}", op, input.sizes(),
           grad.sizes());
  LossGrads out;
  if (!need_input && !need_target) return out;
  const Device device = input.device();
  // The dtype the forward computed in: that of the promoted input and target (as the result).
  const DType acc = input.dtype() == kFloat64 || target.dtype() == kFloat64 ? kFloat64 : kFloat32;
  DeviceGuard guard(device.index);
  const Shape& sizes = input.sizes();
  const Walk walk = make_walk(op, sizes,
                              {input.strides(), target.strides(), strides_over(grad, sizes),
                               strides_over(weight, sizes), strides_over(pos_weight, sizes)});
  if (need_input) out.input = empty(sizes, input.options());
  if (need_target) out.target = empty(target.sizes(), target.options());
  HG_CUDA_CHECK(detail::launch_pointwise_loss_backward(
                    kind, beta, walk, operand(input), operand(target), operand(grad),
                    operand(weight), operand(pos_weight), acc,
                    reduction == LossReduction::Mean ? divisor : 1.0, data_or_null(out.input),
                    data_or_null(out.target), current_stream()),
                op);
  return out;
}

// ---- nll_loss ------------------------------------------------------------------------------

ClassLossForward nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight,
                          int64_t ignore_index, LossReduction reduction) {
  const char* op = "nll_loss";
  check_class_operands(input, target, weight, op);
  const Device device = input.device();
  const DType dtype = input.dtype(), acc = acc_dtype(dtype);
  DeviceGuard guard(device.index);
  const ClassRows rows = class_rows(input.sizes(), input.strides(), target, false, {}, op);
  Tensor partials;
  ClassLossForward result = class_forward_outputs(input.sizes(), reduction, dtype, acc, device,
                                                  rows.N * rows.S, partials);
  HG_CUDA_CHECK(detail::launch_nll_loss(
                    rows, operand(input), index_data(target), class_weight(weight), ignore_index,
                    acc, reduction, result.loss.data_ptr(), dtype, data_or_null(partials),
                    data_or_null(result.divisor), detail::device_error_slot(), current_stream()),
                op);
  return result;
}

std::optional<Tensor> nll_loss_backward(const Tensor& grad, const Tensor& target,
                                        const Tensor& weight, const Shape& input_sizes,
                                        DType input_dtype, const ClassLossForward& forward,
                                        int64_t ignore_index, LossReduction reduction) {
  const char* op = "nll_loss";
  const Tensor& divisor = forward.divisor;
  const Device device = target.device();
  check_on(grad, device, op, "the gradient");
  check_on(weight, device, op, "weight");
  const bool mean = reduction == LossReduction::Mean;
  HG_CHECK(!mean || divisor.defined(), "{}: the backward of \"mean\" needs the forward's divisor",
           op);
  DeviceGuard guard(device.index);
  const bool per_row = reduction == LossReduction::None;
  const ClassRows rows = class_rows(input_sizes, Shape(input_sizes.size(), 0), target, false,
                                    per_row ? grad : Tensor(), op);
  Tensor dx = empty_on(input_sizes, input_dtype, device);
  const DType acc = mean ? divisor.dtype() : acc_dtype(input_dtype);
  HG_CUDA_CHECK(detail::launch_nll_loss_backward(rows, index_data(target), class_weight(weight),
                                                 operand(grad), per_row,
                                                 mean ? divisor.data_ptr() : nullptr, ignore_index,
                                                 acc, dx.data_ptr(), input_dtype, current_stream()),
                op);
  return dx;
}

// ---- cross_entropy -------------------------------------------------------------------------

ClassLossForward cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight,
                               int64_t ignore_index, LossReduction reduction,
                               double label_smoothing, DType dtype) {
  const char* op = "cross_entropy";
  check_class_operands(input, target, weight, op);
  const Device device = input.device();
  const bool probabilities = target.is_floating_point();
  const DType acc = acc_dtype(dtype);
  DeviceGuard guard(device.index);
  const ClassRows rows = class_rows(input.sizes(), input.strides(), target, probabilities, {}, op);
  const int64_t R = rows.N * rows.S;
  Tensor partials, row_buffer;
  ClassLossForward result =
      class_forward_outputs(input.sizes(), reduction, dtype, acc, device, R, partials);
  result.stats = empty_on({R, 3}, acc, device);
  if (reduction != LossReduction::None) row_buffer = empty_on({R, 2}, acc, device);
  HG_CUDA_CHECK(
      detail::launch_cross_entropy(
          rows, operand(input), class_targets(target, weight, ignore_index, label_smoothing), acc,
          reduction, double(R), result.loss.data_ptr(), dtype, result.stats.data_ptr(),
          data_or_null(row_buffer), data_or_null(partials), data_or_null(result.divisor),
          detail::device_error_slot(), current_stream()),
      op);
  return result;
}

LossGrads cross_entropy_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                                 const Tensor& weight, const ClassLossForward& forward,
                                 int64_t ignore_index, LossReduction reduction,
                                 double label_smoothing, bool need_input, bool need_target) {
  const char* op = "cross_entropy";
  const Tensor& stats = forward.stats;
  const Tensor& divisor = forward.divisor;
  const Device device = input.device();
  check_on(grad, device, op, "the gradient");
  check_on(target, device, op, "target");
  check_on(weight, device, op, "weight");
  check_on(stats, device, op, "the forward's statistics");
  const bool mean = reduction == LossReduction::Mean;
  HG_CHECK(stats.defined() && (!mean || divisor.defined()),
           "{}: the fused backward needs the forward's statistics and divisor", op);
  const bool probabilities = target.is_floating_point();
  need_target = need_target && probabilities;
  LossGrads out;
  if (!need_input && !need_target) return out;
  DeviceGuard guard(device.index);
  const bool per_row = reduction == LossReduction::None;
  const ClassRows rows = class_rows(input.sizes(), input.strides(), target, probabilities,
                                    per_row ? grad : Tensor(), op);
  // d_input is computed whenever d_target is: the same pass, and cheap.
  const Tensor dx = empty(input.sizes(), input.options());
  if (need_target) out.target = empty(target.sizes(), target.options());
  HG_CUDA_CHECK(
      detail::launch_cross_entropy_backward(
          rows, operand(input), class_targets(target, weight, ignore_index, label_smoothing),
          operand(grad), per_row, mean ? divisor.data_ptr() : nullptr, stats.data_ptr(),
          stats.dtype(), dx.data_ptr(), input.dtype(), data_or_null(out.target), target.dtype(),
          current_stream()),
      op);
  if (need_input) out.input = dx;
  return out;
}

Tensor class_coefficients(const Tensor& target, const Tensor& weight, const Shape& input_sizes,
                          int64_t ignore_index, double label_smoothing, DType dtype) {
  const char* op = "cross_entropy";
  const Device device = target.device();
  check_on(weight, device, op, "weight");
  DeviceGuard guard(device.index);
  const ClassRows rows =
      class_rows(input_sizes, Shape(input_sizes.size(), 0), target, false, Tensor(), op);
  Tensor out = empty_on(input_sizes, dtype, device);
  HG_CUDA_CHECK(detail::launch_class_coefficients(
                    rows, class_targets(target, weight, ignore_index, label_smoothing),
                    acc_dtype(dtype), out.data_ptr(), dtype, current_stream()),
                op);
  return out;
}

}  // namespace

const kernel::LossKernels loss_kernels = HG_LOSS_KERNELS;

}  // namespace hg::cuda
