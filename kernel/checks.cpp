// Shared kernel checks: the contract is in checks.h. The messages are the CPU kernels'
// (cpu/reduce.cpp, cpu/norm.cpp, cpu/conv.cpp, ...), with the device wording of the backend.
#include "halfgrad/kernel/checks.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "halfgrad/core/format.h"
#include "halfgrad/kernel/formulas.h"

namespace hg::kernel {

namespace {

// [first byte, last byte] of the memory t's elements occupy (numel > 0).
std::array<uintptr_t, 2> byte_span(const Tensor& t) {
  int64_t last = t.numel() - 1;  // the element farthest from the first
  if (!t.is_contiguous()) {
    last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  }
  const auto first = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {first, first + uintptr_t((last + 1) * int64_t(t.element_size())) - 1};
}

// t on x's device. (The norms' wording; conv2d, pooling and embedding use check_same_device.)
void check_on_input_device(const char* op, const char* what, const Tensor& t, const Tensor& x) {
  HG_CHECK(t.device() == x.device(), "{}: expected {} on {} (the input's device), got one on {}",
           op, what, x.device(), t.device());
}

}  // namespace

bool spans_overlap(const Tensor& x, const Tensor& y) {
  if (x.numel() == 0 || y.numel() == 0) return false;
  const auto xs = byte_span(x), ys = byte_span(y);
  return xs[0] <= ys[1] && ys[0] <= xs[1];
}

// ---- tensor checks --------------------------------------------------------------------------

void check_defined(const char* op, const char* what, const Tensor& t) {
  HG_CHECK(t.defined(), "{}: expected a tensor for {}, got an undefined tensor", op, what);
}

void check_device_type(const char* op, const char* what, const Tensor& t, DeviceType device) {
  HG_CHECK(t.device().type == device, "{}: expected {} {}, got a tensor on {}", op, what,
           device == kCUDA ? "on a CUDA device" : "on the CPU", t.device());
}

void check_floating(const char* op, const char* what, const Tensor& t) {
  HG_CHECK(t.is_floating_point(),
           "{}: expected {} of a floating dtype (float32, float16, bfloat16 or float64), got {}",
           op, what, t.dtype());
}

void check_input(const char* op, const char* what, const Tensor& t, DeviceType device) {
  check_defined(op, what, t);
  check_device_type(op, what, t, device);
  check_floating(op, what, t);
}

void check_shape(const char* op, const char* what, const Tensor& t, const Shape& expected) {
  HG_CHECK(t.sizes() == expected, "{}: expected {} of shape {}, got shape {}", op, what, expected,
           t.sizes());
}

void check_same_dtype(const char* op, const char* what, const Tensor& t, DType expected) {
  HG_CHECK(t.dtype() == expected, "{}: expected {} of dtype {} (the input's), got {}", op, what,
           expected, t.dtype());
}

void check_same_device(const char* op, const char* what, const Tensor& t, Device device,
                       const char* whose) {
  HG_CHECK(t.device() == device, "{}: expected {} on {} ({} device), got a tensor on {}", op, what,
           device, whose, t.device());
}

void check_gelu_backward(const char* op, const Tensor& g, const Tensor& pre,
                         const Tensor& bias_grad, DeviceType device) {
  check_input(op, "the gradient", g, device);
  HG_CHECK(g.dim() == 2 && g.is_contiguous(),
           "{}: expected a contiguous 2-D gradient [M, N], got shape {} with strides {}", op,
           g.sizes(), g.strides());
  check_defined(op, "the pre-activation", pre);
  check_same_device(op, "the pre-activation", pre, g.device(), "the gradient's");
  check_same_dtype(op, "the pre-activation", pre, g.dtype());
  check_shape(op, "the pre-activation", pre, g.sizes());
  HG_CHECK(pre.is_contiguous(), "{}: expected a contiguous pre-activation, got strides {}", op,
           pre.strides());
  if (!bias_grad.defined()) return;
  check_same_device(op, "the bias gradient", bias_grad, g.device(), "the gradient's");
  check_same_dtype(op, "the bias gradient", bias_grad, g.dtype());
  check_shape(op, "the bias gradient", bias_grad, {g.size(1)});
  HG_CHECK(bias_grad.is_contiguous(), "{}: expected a contiguous bias gradient, got strides {}", op,
           bias_grad.strides());
}

// ---- the scaled float8 GEMM ---------------------------------------------------------------------

std::array<int64_t, 3> check_scaled_gemm(const char* op, const Tensor& a, const Tensor& b,
                                         const Tensor& scale_a, const Tensor& scale_b,
                                         const Tensor& bias, const Tensor& out,
                                         DeviceType device) {
  check_defined(op, "a", a);
  check_defined(op, "b", b);
  check_defined(op, "out", out);
  for (const auto& [what, t] : {std::pair{"a", &a}, std::pair{"b", &b}}) {
    check_device_type(op, what, *t, device);
    HG_CHECK(is_float8(t->dtype()),
             "{}: expected {} to be float8_e4m3fn or float8_e5m2, got {}", op, what, t->dtype());
    // cuBLASLt reads row-major operands; the CPU's emulation reads any strides.
    HG_CHECK(t->dim() == 2 && (device == kCPU || t->is_contiguous()),
             "{}: expected {} to be a {}2-D tensor, got shape {} with strides {}", op, what,
             device == kCPU ? "" : "contiguous ", t->sizes(), t->strides());
  }
  HG_CHECK(!(a.dtype() == kFloat8_e5m2 && b.dtype() == kFloat8_e5m2),
           "{}: expected at most one float8_e5m2 operand (e5m2 x e5m2 has no fp8 tensor-core "
           "product), got two",
           op);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  HG_CHECK(b.size(1) == k, "{}: a [M, K] = {} and b [N, K] = {} differ in K", op, a.sizes(),
           b.sizes());
  for (const auto& [what, t] : {std::pair{"scale_a", &scale_a}, std::pair{"scale_b", &scale_b}}) {
    check_defined(op, what, *t);
    HG_CHECK(t->dtype() == kFloat32 && t->numel() == 1,
             "{}: expected {} to be a float32 tensor of one element, got {} of shape {}", op, what,
             t->dtype(), t->sizes());
    check_same_device(op, what, *t, a.device(), "a's");
  }
  check_same_device(op, "b", b, a.device(), "a's");
  check_same_device(op, "out", out, a.device(), "a's");
  HG_CHECK(out.dtype() == kFloat32 || out.dtype() == kFloat16 || out.dtype() == kBFloat16,
           "{}: expected out to be float32, float16 or bfloat16, got {}", op, out.dtype());
  HG_CHECK(out.dim() == 2 && out.size(0) == m && out.size(1) == n && out.is_contiguous(),
           "{}: expected a contiguous out of shape [{}, {}], got shape {} with strides {}", op, m,
           n, out.sizes(), out.strides());
  if (bias.defined()) {
    HG_CHECK(bias.dim() == 1 && bias.size(0) == n && bias.dtype() == out.dtype() &&
                 bias.is_contiguous(),
             "{}: expected a contiguous bias of shape [{}] and dtype {}, got {} {}", op, n,
             out.dtype(), bias.dtype(), bias.sizes());
    check_same_device(op, "bias", bias, a.device(), "a's");
  }
  HG_CHECK(!spans_overlap(out, a) && !spans_overlap(out, b),
           "{}: out (shape {}) overlaps a or b in memory", op, out.sizes());
  return {m, n, k};
}

int64_t check_quantize_fp8(const char* op, const Tensor& x, const Tensor& scale,
                           const Tensor& amax, const Tensor& out, DeviceType device) {
  check_defined(op, "x", x);
  check_defined(op, "out", out);
  check_device_type(op, "x", x, device);
  HG_CHECK(x.dtype() == kFloat32 || x.dtype() == kFloat16 || x.dtype() == kBFloat16,
           "{}: expected x to be float32, float16 or bfloat16, got {}", op, x.dtype());
  HG_CHECK(is_float8(out.dtype()), "{}: expected out to be float8_e4m3fn or float8_e5m2, got {}",
           op, out.dtype());
  HG_CHECK(x.is_contiguous() && out.is_contiguous() && out.numel() == x.numel(),
           "{}: expected a contiguous x and a contiguous out of its {} elements, got x {} and out "
           "{} of shape {}",
           op, x.numel(), x.is_contiguous() ? "contiguous" : "strided", out.numel(), out.sizes());
  check_same_device(op, "out", out, x.device(), "x's");
  for (const auto& [what, t] : {std::pair{"scale", &scale}, std::pair{"amax", &amax}}) {
    check_defined(op, what, *t);
    HG_CHECK(t->dtype() == kFloat32 && t->numel() == 1,
             "{}: expected {} to be a float32 tensor of one element, got {} of shape {}", op, what,
             t->dtype(), t->sizes());
    check_same_device(op, what, *t, x.device(), "x's");
  }
  return x.numel();
}

// ---- reductions -----------------------------------------------------------------------------

const char* reduction_name(Reduction op) {
  switch (op) {
    case Reduction::Sum:
      return "sum";
    case Reduction::Prod:
      return "prod";
    case Reduction::Mean:
      return "mean";
    case Reduction::Amax:
      return "amax";
    case Reduction::Amin:
      return "amin";
    case Reduction::LogSumExp:
      return "logsumexp";
    case Reduction::Norm:
      return "norm";
  }
  return "reduce";
}

void check_floating_input(const Tensor& x, const char* op) {
  HG_CHECK(x.is_floating_point(),
           "{}: expected a floating input (float32, float16, bfloat16 or float64), got {}", op,
           x.dtype());
}

void check_out_dtype(const Tensor& x, DType out_dtype, const char* op) {
  HG_CHECK(!x.is_floating_point() || is_floating_point(out_dtype),
           "{}: expected a floating out_dtype for {} input, got {}", op, x.dtype(), out_dtype);
}

int64_t check_scan(Scan kind, const Tensor& x, int64_t dim, DType out_dtype) {
  const char* name = scan_name(kind);
  const int64_t d = wrap_dim(dim, x.dim(), name);
  check_out_dtype(x, out_dtype, name);
  HG_CHECK(kind != Scan::LogSumExp || x.is_floating_point(),
           "{}: expected a floating tensor, got {}", name, x.dtype());
  return d;
}

std::vector<bool> reduced_dims(const Tensor& x, const Shape& dims, const char* op) {
  const int64_t ndim = x.dim();
  std::vector<bool> reduced(size_t(ndim), dims.empty());
  std::vector<bool> seen(size_t(std::max<int64_t>(ndim, 1)), false);
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, ndim, op);
    HG_CHECK(!seen[d], "{}: expected distinct dims, got dim {} more than once in {}", op, d, dims);
    seen[d] = true;
    if (ndim > 0) reduced[d] = true;
  }
  return reduced;
}

Shape reduced_shape(const Tensor& x, const std::vector<bool>& reduced, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!reduced[d]) {
      out.push_back(x.sizes()[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

void check_nonempty(const Tensor& x, const std::vector<bool>& reduced, const char* op) {
  for (int64_t d = 0; d < x.dim(); ++d) {
    HG_CHECK(!reduced[d] || x.sizes()[d] > 0,
             "{}: expected non-empty reduced dims (the reduction has no identity), got dim {} "
             "of size 0 in an input of shape {}",
             op, d, x.sizes());
  }
}

std::vector<bool> check_reduce(Reduction op, const Tensor& x, const Shape& dims, DType out_dtype,
                               double p) {
  const char* name = reduction_name(op);
  std::vector<bool> reduced = reduced_dims(x, dims, name);
  if (op == Reduction::Mean || op == Reduction::LogSumExp || op == Reduction::Norm) {
    check_floating_input(x, name);
  }
  check_out_dtype(x, out_dtype, name);
  if (op == Reduction::Norm) {
    HG_CHECK(p >= 0.0, "norm: expected p > 0, p = 0 or p = inf, got p = {}", p);
  }
  if (op == Reduction::Amax || op == Reduction::Amin || (op == Reduction::Norm && std::isinf(p))) {
    check_nonempty(x, reduced, op == Reduction::Norm ? "norm (p = inf)" : name);
  }
  return reduced;
}

std::vector<bool> check_var(const Tensor& x, const Shape& dims, int64_t correction,
                            DType out_dtype) {
  std::vector<bool> reduced = reduced_dims(x, dims, "var");
  check_floating_input(x, "var");
  check_out_dtype(x, out_dtype, "var");
  HG_CHECK(correction >= 0, "var: expected correction >= 0, got {}", correction);
  return reduced;
}

Shape sum_to_dims(const Tensor& x, const Shape& target) {
  HG_CHECK(broadcasts_to(target, x.sizes()),
           "sum_to: expected a target shape that broadcasts to the input's shape {}, got {}",
           x.sizes(), target);
  const int64_t leading = x.dim() - int64_t(target.size());
  Shape dims;
  for (int64_t d = 0; d < leading; ++d) dims.push_back(d);
  for (int64_t i = 0; i < int64_t(target.size()); ++i) {
    if (target[i] == 1 && x.sizes()[leading + i] != 1) dims.push_back(leading + i);
  }
  return dims;
}

// ---- softmax and the norms ------------------------------------------------------------------

DimSplit split_at(const Tensor& x, int64_t dim, const char* op) {
  const int64_t d = wrap_dim(dim, x.dim(), op);
  if (x.dim() == 0) return {1, 1, 1};
  const Shape& s = x.sizes();
  return {product(s, 0, size_t(d)), s[size_t(d)], product(s, size_t(d) + 1, s.size())};
}

void check_softmax_backward(const char* op, const Tensor& dy, const Tensor& y, DeviceType device) {
  check_input(op, "grad_output", dy, device);
  check_input(op, "output", y, device);
  check_on_input_device(op, "grad_output", dy, y);
  check_shape(op, "grad_output (the output's shape)", dy, y.sizes());
  HG_CHECK(dy.dtype() == y.dtype(),
           "{}: expected grad_output of the output's dtype {}, got grad_output of dtype {}", op,
           y.dtype(), dy.dtype());
}

void check_optional_param(const char* op, const char* what, const Tensor& t, const Shape& shape,
                          const Tensor& x) {
  if (!t.defined()) return;
  check_input(op, what, t, x.device().type);
  check_on_input_device(op, what, t, x);
  check_shape(op, what, t, shape);
}

void check_saved_stat(const char* op, const char* what, const Tensor& t, const Shape& shape,
                      const Tensor& x) {
  check_input(op, what, t, x.device().type);
  check_on_input_device(op, what, t, x);
  HG_CHECK(t.numel() == shape_numel(shape),
           "{}: expected {} with {} elements (shape {}), got shape {}", op, what,
           shape_numel(shape), shape, t.sizes());
}

void check_grad_output(const char* op, const Tensor& dy, const Tensor& x) {
  check_input(op, "grad_output", dy, x.device().type);
  check_on_input_device(op, "grad_output", dy, x);
  check_shape(op, "grad_output (the input's shape)", dy, x.sizes());
  check_same_dtype(op, "grad_output", dy, x.dtype());
}

LayerNormGeometry layer_norm_geometry(const char* op, const Tensor& x,
                                      const Shape& normalized_shape, DeviceType device) {
  check_input(op, "input", x, device);
  const size_t k = normalized_shape.size();
  HG_CHECK(k > 0, "{}: expected a non-empty normalized_shape, got []", op);
  bool trailing_match = size_t(x.dim()) >= k;
  for (size_t i = 0; trailing_match && i < k; ++i) {
    trailing_match = x.sizes()[size_t(x.dim()) - k + i] == normalized_shape[i];
  }
  HG_CHECK(trailing_match,
           "{}: expected an input whose trailing dims are normalized_shape {}, got input shape {}",
           op, normalized_shape, x.sizes());
  const size_t leading = size_t(x.dim()) - k;
  return {product(x.sizes(), 0, leading), product(x.sizes(), leading, size_t(x.dim()))};
}

namespace {

// x [N, C, *] on the backend.
void check_channels_input(const char* op, const Tensor& x, DeviceType device) {
  check_input(op, "input", x, device);
  HG_CHECK(x.dim() >= 2, "{}: expected an input [N, C, *] of at least 2 dims, got {}-D (shape {})",
           op, x.dim(), x.sizes());
}

}  // namespace

GroupNormGeometry group_norm_geometry(const char* op, const Tensor& x, int64_t num_groups,
                                      DeviceType device) {
  check_channels_input(op, x, device);
  const int64_t C = x.size(1);
  HG_CHECK(num_groups > 0 && C % num_groups == 0,
           "{}: expected num_groups to divide the channels C={}, got num_groups={}", op, C,
           num_groups);
  return {x.size(0), C, product(x.sizes(), 2, size_t(x.dim())), num_groups, C / num_groups};
}

BatchNormGeometry batch_norm_geometry(const char* op, const Tensor& x, DeviceType device) {
  check_channels_input(op, x, device);
  return {x.size(0), x.size(1), product(x.sizes(), 2, size_t(x.dim()))};
}

void check_batch_norm(const char* op, const Tensor& x, const BatchNormGeometry& bn,
                      const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                      const Tensor& bias, bool training) {
  check_optional_param(op, "weight ([C])", weight, {bn.C}, x);
  check_optional_param(op, "bias ([C])", bias, {bn.C}, x);
  check_optional_param(op, "running_mean ([C])", running_mean, {bn.C}, x);
  check_optional_param(op, "running_var ([C])", running_var, {bn.C}, x);
  HG_CHECK(running_mean.defined() == running_var.defined(),
           "{}: expected running_mean and running_var both given or both absent, got {} and {}", op,
           running_mean.defined() ? "running_mean" : "no running_mean",
           running_var.defined() ? "running_var" : "no running_var");
  if (training) {
    HG_CHECK(bn.N * bn.S > 1,
             "{}: expected more than 1 value per channel when training, got input shape {}", op,
             x.sizes());
  } else {
    HG_CHECK(running_mean.defined(),
             "{}: expected running_mean and running_var in eval mode (training=false), got "
             "neither",
             op);
  }
}

// ---- conv2d ---------------------------------------------------------------------------------

ConvGeometry conv_geometry(const char* op, const Tensor& x, const Tensor& weight,
                           const Conv2dParams& p) {
  HG_CHECK(x.dim() == 4, "{}: expected a 4-D input [N, C, H, W], got {}-D (shape {})", op, x.dim(),
           x.sizes());
  HG_CHECK(weight.dim() == 4,
           "{}: expected a 4-D weight [O, C/groups, kH, kW], got {}-D (shape {})", op, weight.dim(),
           weight.sizes());
  check_same_dtype(op, "weight", weight, x.dtype());
  HG_CHECK(p.stride[0] > 0 && p.stride[1] > 0, "{}: expected strides > 0, got stride ({}, {})", op,
           p.stride[0], p.stride[1]);
  HG_CHECK(p.dilation[0] > 0 && p.dilation[1] > 0,
           "{}: expected dilations > 0, got dilation ({}, {})", op, p.dilation[0], p.dilation[1]);
  HG_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0,
           "{}: expected paddings >= 0, got padding ({}, {})", op, p.padding[0], p.padding[1]);
  HG_CHECK(p.groups > 0, "{}: expected groups > 0, got groups={}", op, p.groups);
  ConvGeometry g{};
  g.N = x.size(0), g.C = x.size(1), g.H = x.size(2), g.W = x.size(3);
  g.O = weight.size(0), g.kH = weight.size(2), g.kW = weight.size(3);
  g.sH = p.stride[0], g.sW = p.stride[1], g.pH = p.padding[0], g.pW = p.padding[1];
  g.dH = p.dilation[0], g.dW = p.dilation[1], g.groups = p.groups;
  HG_CHECK(g.C % g.groups == 0,
           "{}: expected groups to divide the input channels C={}, got groups={}", op, g.C,
           g.groups);
  HG_CHECK(g.O % g.groups == 0,
           "{}: expected groups to divide the output channels O={} (weight shape {}), got "
           "groups={}",
           op, g.O, weight.sizes(), g.groups);
  g.Cg = g.C / g.groups, g.Og = g.O / g.groups;
  HG_CHECK(weight.size(1) == g.Cg,
           "{}: expected weight [O, C/groups={}, kH, kW] for an input of C={} channels and "
           "groups={}, got weight shape {}",
           op, g.Cg, g.C, g.groups, weight.sizes());
  const int64_t span_h = g.dH * (g.kH - 1) + 1, span_w = g.dW * (g.kW - 1) + 1;
  const int64_t padded_h = g.H + 2 * g.pH, padded_w = g.W + 2 * g.pW;
  HG_CHECK(g.kH > 0 && g.kW > 0 && span_h <= padded_h && span_w <= padded_w,
           "{}: expected a kernel no larger than the padded input {}x{}, got a kernel spanning "
           "{}x{} (kernel {}x{}, dilation {}x{})",
           op, padded_h, padded_w, span_h, span_w, g.kH, g.kW, g.dH, g.dW);
  g.Hout = (padded_h - span_h) / g.sH + 1;
  g.Wout = (padded_w - span_w) / g.sW + 1;
  return g;
}

void check_conv_bias(const char* op, const Tensor& bias, const ConvGeometry& g, DType dtype) {
  check_shape(op, "bias ([O])", bias, {g.O});
  check_same_dtype(op, "bias", bias, dtype);
}

void check_conv_grad_output(const char* op, const Tensor& dy, const ConvGeometry& g, DType dtype) {
  check_shape(op, "grad_output [N, O, Hout, Wout]", dy, {g.N, g.O, g.Hout, g.Wout});
  check_same_dtype(op, "grad_output", dy, dtype);
}

// ---- pooling --------------------------------------------------------------------------------

PoolGeometry pool_geometry(const char* op, const Shape& input_shape, const Pool2dParams& p) {
  const int64_t dims = int64_t(input_shape.size());
  HG_CHECK(dims == 3 || dims == 4,
           "{}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got {}-D (shape {})", op, dims,
           input_shape);
  HG_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0, "{}: expected a kernel > 0, got kernel {}x{}", op,
           p.kernel[0], p.kernel[1]);
  HG_CHECK(p.stride[0] >= 0 && p.stride[1] >= 0,
           "{}: expected a stride > 0 (or 0 for stride = kernel), got stride {}x{}", op,
           p.stride[0], p.stride[1]);
  HG_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0 && 2 * p.padding[0] <= p.kernel[0] &&
               2 * p.padding[1] <= p.kernel[1],
           "{}: expected a padding between 0 and half the kernel {}x{}, got padding {}x{}", op,
           p.kernel[0], p.kernel[1], p.padding[0], p.padding[1]);
  PoolGeometry g;
  g.N = dims == 4 ? input_shape[0] : 1;
  g.C = input_shape[size_t(dims - 3)];
  g.planes = product(input_shape, 0, size_t(dims - 2));
  g.H = input_shape[size_t(dims - 2)], g.W = input_shape[size_t(dims - 1)];
  g.kH = p.kernel[0], g.kW = p.kernel[1];
  g.sH = p.stride[0] == 0 ? g.kH : p.stride[0];
  g.sW = p.stride[1] == 0 ? g.kW : p.stride[1];
  g.pH = p.padding[0], g.pW = p.padding[1];
  HG_CHECK(p.dilation[0] > 0 && p.dilation[1] > 0, "{}: expected a dilation > 0, got {}x{}", op,
           p.dilation[0], p.dilation[1]);
  HG_CHECK(p.divisor_override >= 0, "{}: expected a divisor_override > 0, got {}", op,
           p.divisor_override);
  g.dH = p.dilation[0], g.dW = p.dilation[1];
  g.divisor_override = p.divisor_override;
  const int64_t padded_h = g.H + 2 * g.pH, padded_w = g.W + 2 * g.pW;
  const int64_t span_h = g.dH * (g.kH - 1) + 1, span_w = g.dW * (g.kW - 1) + 1;
  HG_CHECK(
      span_h <= padded_h && span_w <= padded_w,
      "{}: expected a kernel no larger than the padded input {}x{}, got kernel {}x{}{}", op,
      padded_h, padded_w, g.kH, g.kW,
      g.dH == 1 && g.dW == 1 ? std::string() : fmt::format(" dilated to {}x{}", span_h, span_w));
  const auto out_size = [&](int64_t padded, int64_t span, int64_t stride, int64_t size,
                            int64_t pad) {
    int64_t out = (padded - span + (p.ceil_mode ? stride - 1 : 0)) / stride + 1;
    if (p.ceil_mode && (out - 1) * stride >= size + pad) --out;
    return out;
  };
  g.Hout = out_size(padded_h, span_h, g.sH, g.H, g.pH);
  g.Wout = out_size(padded_w, span_w, g.sW, g.W, g.pW);
  g.out_shape = input_shape;
  g.out_shape[size_t(dims - 2)] = g.Hout;
  g.out_shape[size_t(dims - 1)] = g.Wout;
  return g;
}

void check_max_pool2d_backward(const char* op, const Tensor& dy, const Tensor& indices,
                               const Shape& input_shape) {
  const int64_t dims = int64_t(input_shape.size());
  HG_CHECK(dims == 3 || dims == 4,
           "{}: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input_shape, got {}-D ({})", op, dims,
           input_shape);
  HG_CHECK(dy.dim() == dims, "{}: expected a {}-D grad_output for input_shape {}, got shape {}", op,
           dims, input_shape, dy.sizes());
  for (int64_t d = 0; d + 2 < dims; ++d) {
    HG_CHECK(dy.size(d) == input_shape[size_t(d)],
             "{}: expected grad_output's leading dims to match input_shape {}, got shape {}", op,
             input_shape, dy.sizes());
  }
  HG_CHECK(indices.defined() && indices.dtype() == kInt64,
           "{}: expected int64 indices (from max_pool2d), got {}", op,
           indices.defined() ? std::string(dtype_name(indices.dtype())) : "an undefined tensor");
  check_shape(op, "indices (grad_output's shape)", indices, dy.sizes());
}

// ---- embedding and dropout ------------------------------------------------------------------

void check_embedding_indices(const char* op, const Tensor& indices) {
  HG_CHECK(indices.defined() && (indices.dtype() == kInt64 || indices.dtype() == kInt32),
           "{}: expected int64 or int32 indices, got {}", op,
           indices.defined() ? std::string(dtype_name(indices.dtype())) : "an undefined tensor");
}

void check_embedding_sizes(const char* op, const Tensor& dy, const Tensor& indices,
                           int64_t num_embeddings, int64_t padding_idx) {
  HG_CHECK(num_embeddings >= 0, "{}: expected num_embeddings >= 0, got {}", op, num_embeddings);
  HG_CHECK(padding_idx >= -1 && padding_idx < num_embeddings,
           "{}: expected padding_idx in [-1, {}) (-1 for none), got {}", op, num_embeddings,
           padding_idx);
  bool shapes_match = dy.dim() == indices.dim() + 1;
  for (int64_t d = 0; shapes_match && d < indices.dim(); ++d) {
    shapes_match = dy.size(d) == indices.size(d);
  }
  HG_CHECK(shapes_match,
           "{}: expected grad_output of shape [*indices' shape, D] for indices of shape {}, got "
           "shape {}",
           op, indices.sizes(), dy.sizes());
}

void check_dropout(const char* op, const Tensor& x, double p, DeviceType device) {
  check_input(op, "input", x, device);
  HG_CHECK(p >= 0.0 && p <= 1.0, "{}: expected a probability p in [0, 1], got p={}", op, p);
}

}  // namespace hg::kernel
