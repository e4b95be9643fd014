// scaled_mm, the delayed-scaling recipe (NOTE [Delayed scaling]) and the fp8 forms of linear
// and linear_gelu (NOTE [Fp8 ops]).
#include "halfgrad/ops/fp8.h"

#include <cmath>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/view.h"
#include "halfgrad/ops/backward_helpers.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/nn_helpers.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

// t as scaled_gemm reads it: row-major on CUDA (cuBLASLt's fp8 layout), a copy when t is a
// transposed view; as it is on the CPU, whose emulation widens any strides into its float32
// copy, so backward's transposed operands cost no float8 copy there.
Tensor gemm_operand(const Tensor& t) {
  return t.is_contiguous() || t.device().type == kCPU ? t : t.contiguous();
}

// ---- scaled_mm ----------------------------------------------------------------------------------

struct ScaledMm {
  static constexpr OpId id = OpId::scaled_mm;
  DType out_dtype = kFloat32;

  Tensor forward(OpContext&, const Tensor& a, const Tensor& b, const Tensor& scale_a,
                 const Tensor& scale_b, const Tensor& bias) {
    HG_CHECK(a.dim() == 2 && b.dim() == 2,
             "scaled_mm: expected 2-D a [M, K] and b [K, N], got shapes {} and {}", a.sizes(),
             b.sizes());
    HG_CHECK(a.size(1) == b.size(0),
             "scaled_mm: the shapes {} and {} cannot be multiplied ({} columns against {} rows)",
             a.sizes(), b.sizes(), a.size(1), b.size(0));
    // The kernel reads b as [N, K] rows: free when b is the transpose of a contiguous tensor.
    const Tensor b_rows = gemm_operand(core::transpose(b, 0, 1));
    Tensor out = empty({a.size(0), b.size(1)}, {.dtype = out_dtype, .device = a.device()});
    kernel_for::linalg(a).scaled_gemm(gemm_operand(a), b_rows, scale_a, scale_b, bias, out);
    return out;
  }
  Grads backward(OpContext&, const Grads&) {
    HG_ERROR(
        "scaled_mm is not differentiable (a scale or the bias required grad); fp8 training "
        "runs linear layers under amp::Fp8Autocast, which have their own backward");
  }
};

// ---- quantization -----------------------------------------------------------------------------

struct Quantized {
  Tensor values;     // float8
  Tensor scale_inv;  // float32 [1]: values * scale_inv stand for the input
};

// x (any shape; float32, float16 or bfloat16) in `dtype` with the layer's current scale of
// `slot`, recording max|x| into the history's row 0 (NOTE [Delayed scaling]). Runs below
// autocast with grad mode off (inside an op's kernel).
Quantized quantize(const Tensor& x, ops::Fp8LayerState& state, ops::Fp8Slot slot, DType dtype) {
  const Tensor scale = state.scale.narrow(0, slot, 1);
  const Tensor source = x.is_contiguous() ? x : x.contiguous();
  Tensor values = empty(x.sizes(), {.dtype = dtype, .device = x.device()});
  kernel_for::linalg(x).quantize_fp8(source, scale,
                                     state.amax_history.select(0, 0).narrow(0, slot, 1), values);
  state.ran = true;
  return {values, state.scale_inv.narrow(0, slot, 1)};
}

// ---- fp8 linear ---------------------------------------------------------------------------------

using ops::leading_rows;

bool fp8_input_dtype(DType dtype) {
  return dtype == kFloat32 || dtype == kFloat16 || dtype == kBFloat16;
}

// linear and linear_gelu in fp8 (NOTE [Fp8 ops]); Id names which, for the trace and the node.
template <OpId Id>
struct Fp8Linear {
  static constexpr OpId id = Id;
  static constexpr bool kFp8 = true;
  ops::DelayedScaling* recipe = nullptr;
  bool gelu = false;
  bool tanh_approximation = true;
  std::shared_ptr<ops::Fp8LayerState> state{};
  DType grad_dtype = kFloat8_e5m2;
  Shape x_sizes{};
  DType x_dtype = kFloat32, weight_dtype = kFloat32, bias_dtype = kFloat32;

  // float64 operands (the precision audit's shadow, or a user's float64 layer) run the exact
  // product: float64 is never lowered, under fp8 as under autocast. Both must be float64.
  Tensor reference(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    HG_CHECK(x.dtype() == kFloat64 && weight.dtype() == kFloat64 &&
                 (!bias.defined() || bias.dtype() == kFloat64),
             "{}: expected float64 input, weight and bias together, got {}, {} and {}", op_name(Id),
             x.dtype(), weight.dtype(), bias.defined() ? bias.dtype() : kFloat64);
    HG_CHECK(!ctx.recording(),
             "{} under amp::Fp8Autocast: float64 operands run outside fp8 only without autograd "
             "(call it outside the region to differentiate it)",
             op_name(Id));
    const int64_t M = leading_rows(x.sizes()), K = weight.size(1), N = weight.size(0);
    Tensor out = empty({M, N}, x.options());
    kernel_for::linalg(x).gemm_2d(core::reshape(x, {M, K}), false, weight, true, out,
                                  bias.defined() ? bias.contiguous() : bias);
    if (gelu) {
      out = kernel_for::elementwise(out).unary(
          tanh_approximation ? kernel::Unary::GeluTanh : kernel::Unary::Gelu, out);
    }
    Shape out_sizes = x.sizes();
    out_sizes.back() = N;
    return x.dim() == 2 ? out : core::view(out, out_sizes);
  }

  // The casts autocast would apply are the quantization's business.
  bool autocast_eligible() const { return false; }

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    const char* name = op_name(Id).data();
    ops::check_linear_shapes(name, x, weight, bias);
    if (x.dtype() == kFloat64 || weight.dtype() == kFloat64) return reference(ctx, x, weight, bias);
    HG_CHECK(fp8_input_dtype(x.dtype()) && fp8_input_dtype(weight.dtype()),
             "{} in fp8: expected an input and a weight of float32, float16 or bfloat16, got {} "
             "and {}",
             name, x.dtype(), weight.dtype());
    const DeviceType device_type = x.device().type;
    const DType out_dtype =
        is_autocast_enabled(device_type) ? get_autocast_dtype(device_type) : x.dtype();
    const int64_t M = leading_rows(x.sizes()), K = weight.size(1), N = weight.size(0);
    const DType forward_dtype = recipe->fp8_dtype(ops::kFp8Input);
    grad_dtype = recipe->fp8_dtype(ops::kFp8GradOutput);
    x_sizes = x.sizes();
    x_dtype = x.dtype();
    weight_dtype = weight.dtype();
    bias_dtype = bias.defined() ? bias.dtype() : out_dtype;

    const Quantized x8 = quantize(core::reshape(x, {M, K}), *state, ops::kFp8Input, forward_dtype);
    // The weight cast of this step, as NOTE [Fp8 weight cache] in ops/fp8.h says.
    if (!state->weight_fp8.defined() || state->weight_step != recipe->step() ||
        state->weight_version != weight.version()) {
      const Quantized cast = quantize(weight, *state, ops::kFp8Weight, forward_dtype);
      state->weight_fp8 = cast.values;
      state->weight_scale_inv = cast.scale_inv;
      state->weight_step = recipe->step();
      state->weight_version = weight.version();
      recipe->count_weight_cast();
    }
    const Quantized w8{state->weight_fp8, state->weight_scale_inv};

    const Tensor bias_out = !bias.defined() ? bias : core::to_dtype(bias, out_dtype).contiguous();
    Tensor out = empty({M, N}, {.dtype = out_dtype, .device = x.device()});
    kernel_for::linalg(x).scaled_gemm(x8.values, w8.values, x8.scale_inv, w8.scale_inv, bias_out,
                                      out);
    // What backward reads: the float8 operands with their scales, and linear_gelu's
    // pre-activation (saved, so a second backward without retain_graph is refused).
    ctx.save({x8.values, x8.scale_inv, w8.values, w8.scale_inv});
    if (gelu) {
      const Tensor pre = out;
      out = kernel_for::elementwise(pre).unary(
          tanh_approximation ? kernel::Unary::GeluTanh : kernel::Unary::Gelu, pre);
      ctx.save({pre});
    }
    Shape out_sizes = x.sizes();
    out_sizes.back() = N;
    return x.dim() == 2 ? out : core::view(out, out_sizes);
  }

  Grads backward(OpContext& ctx, const Grads& grads) {
    HG_CHECK(!autograd::is_grad_enabled(),
             "{} in fp8 has no second derivative: its backward runs in float8 and records "
             "nothing, so create_graph is not supported through it",
             op_name(Id));
    const Quantized x8{ctx.saved_data(0), ctx.saved_data(1)};
    const Quantized w8{ctx.saved_data(2), ctx.saved_data(3)};
    const int64_t N = w8.values.size(0), K = w8.values.size(1), M = leading_rows(x_sizes);
    Tensor g = grads[0].dim() == 2 ? grads[0] : grads[0].reshape({M, N});
    if (gelu) g = mul(g, ops::gelu_derivative(ctx.saved_data(4), tanh_approximation));
    const Quantized g8 = quantize(g, *state, ops::kFp8GradOutput, grad_dtype);
    Grads out(3);
    if (ctx.needs_input_grad(0)) {  // g @ weight = g8 [M, N] @ (weight^T [K, N])^T
      Tensor dx = empty({M, K}, {.dtype = x_dtype, .device = g.device()});
      kernel_for::linalg(g).scaled_gemm(g8.values, gemm_operand(core::transpose(w8.values, 0, 1)),
                                        g8.scale_inv, w8.scale_inv, Tensor(), dx);
      out[0] = x_sizes.size() == 2 ? dx : dx.reshape(x_sizes);
    }
    if (ctx.needs_input_grad(1)) {  // g^T @ x = (g^T [N, M]) @ (x^T [K, M])^T, weight's layout
      Tensor dw = empty({N, K}, {.dtype = weight_dtype, .device = g.device()});
      kernel_for::linalg(g).scaled_gemm(gemm_operand(core::transpose(g8.values, 0, 1)),
                                        gemm_operand(core::transpose(x8.values, 0, 1)),
                                        g8.scale_inv, x8.scale_inv, Tensor(), dw);
      out[1] = dw;
    }
    if (ctx.needs_input_grad(2)) {  // the bias's gradient from the unquantized g
      const Tensor db = sum(g.dtype() == kFloat32 ? g : g.to(kFloat32), {0});
      out[2] = db.dtype() == bias_dtype ? db : db.to(bias_dtype);
    }
    return out;
  }
};

template <OpId Id>
Tensor run_fp8_linear(ops::DelayedScaling& recipe, const Tensor& x, const Tensor& weight,
                      const Tensor& bias, bool gelu, bool tanh_approximation) {
  HG_CHECK(weight.defined() && x.defined(), "{}: expected a defined input and weight", op_name(Id));
  return dispatch(Fp8Linear<Id>{.recipe = &recipe,
                                .gelu = gelu,
                                .tanh_approximation = tanh_approximation,
                                .state = recipe.state_for(weight)},
                  x, weight, bias);
}

}  // namespace

Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 DType out_dtype, const Tensor& bias) {
  return dispatch(ScaledMm{.out_dtype = out_dtype}, a, b, scale_a, scale_b, bias);
}

namespace ops {

// ---- the recipe ---------------------------------------------------------------------------------

DelayedScaling::DelayedScaling(DelayedScalingOptions options) : options_(options) {
  HG_CHECK(options.amax_history_len >= 1, "DelayedScaling: expected amax_history_len >= 1, got {}",
           options.amax_history_len);
  HG_CHECK(options.margin >= 0, "DelayedScaling: expected margin >= 0, got {}", options.margin);
}

DType DelayedScaling::fp8_dtype(Fp8Slot slot) const {
  return slot == kFp8GradOutput && options_.fp8_format == Fp8Format::Hybrid ? kFloat8_e5m2
                                                                            : kFloat8_e4m3fn;
}

std::shared_ptr<Fp8LayerState> DelayedScaling::find(const Tensor& weight) const {
  std::lock_guard lock(mutex_);
  auto it = layers_.find(weight.impl());
  if (it == layers_.end() || it->second.weight.lock().get() != weight.impl()) return nullptr;
  return it->second.state;
}

std::shared_ptr<Fp8LayerState> DelayedScaling::state_for(const Tensor& weight) {
  if (auto state = find(weight)) return state;
  std::lock_guard lock(mutex_);
  const TensorOptions on_device{.dtype = kFloat32, .device = weight.device()};
  auto state = std::make_shared<Fp8LayerState>();
  state->amax_history = zeros({options_.amax_history_len, 3}, on_device);
  state->scale = ones({3}, on_device);
  state->scale_inv = ones({3}, on_device);
  const Tensor maxima = empty({3}, {.dtype = kFloat32});
  auto* m = static_cast<float*>(maxima.data_ptr());
  for (Fp8Slot slot : {kFp8Input, kFp8Weight, kFp8GradOutput}) {
    m[slot] = fp8_dtype(slot) == kFloat8_e5m2 ? 57344.0f : 448.0f;
  }
  state->fp8_max = maxima.to(weight.device());
  // Entries of weights that died go now, so a long run of short-lived layers does not grow.
  std::erase_if(layers_, [](const auto& entry) { return entry.second.weight.expired(); });
  layers_[weight.impl()] = Entry{weight.impl_ptr(), state};
  return state;
}

size_t DelayedScaling::num_layers() const {
  std::lock_guard lock(mutex_);
  return layers_.size();
}

void DelayedScaling::begin_step() {
  std::lock_guard lock(mutex_);
  ++step_;
  NoGradGuard no_grad;
  BelowAutocastGuard below;
  const double divisor = std::ldexp(1.0, options_.margin);
  for (auto& [key, entry] : layers_) {
    Fp8LayerState& s = *entry.state;
    if (!s.ran) continue;
    s.ran = false;
    const Tensor amax_now = options_.amax_compute_algo == AmaxCompute::Max
                                ? amax(s.amax_history, {0})
                                : s.amax_history.select(0, 0);
    const Tensor proposed = div(div(s.fp8_max, amax_now), divisor);
    // amax 0 makes the quotient inf, amax inf makes it 0 with amax not finite, NaN both.
    s.scale.copy_(where(isfinite(amax_now), where(isfinite(proposed), proposed, s.scale), s.scale));
    s.scale_inv = reciprocal(s.scale);
    const int64_t len = s.amax_history.size(0);
    if (len > 1) {
      s.amax_history.narrow(0, 1, len - 1).copy_(s.amax_history.narrow(0, 0, len - 1).clone());
    }
    s.amax_history.select(0, 0).zero_();
  }
}

Tensor fp8_linear(DelayedScaling& recipe, const Tensor& x, const Tensor& weight,
                  const Tensor& bias) {
  return run_fp8_linear<OpId::linear>(recipe, x, weight, bias, false, false);
}

Tensor fp8_linear_gelu(DelayedScaling& recipe, const Tensor& x, const Tensor& weight,
                       const Tensor& bias, bool tanh_approximation) {
  return run_fp8_linear<OpId::linear_gelu>(recipe, x, weight, bias, true, tanh_approximation);
}

}  // namespace ops

}  // namespace hg
