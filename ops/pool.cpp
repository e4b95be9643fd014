// The pool family's ops: max_pool2d and avg_pool2d, forward (the kernels of kernel/pool.h)
// and backward, and the recorded backward avg_pool2d_backward (NOTE [Differentiable nn
// backwards] in ops/norm.cpp); max_pool1d, avg_pool1d (the 2-d kernels over a height of 1) and
// adaptive_avg_pool2d, composites.
//
// Dims: N batch, C channels, H/W height/width.
#include <array>
#include <cmath>
#include <optional>
#include <string_view>
#include <vector>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/nn_helpers.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

// ---- max_pool2d: x [N, C, H, W] or [C, H, W] ---------------------------------------------------

struct MaxPool2d {
  static constexpr OpId id = OpId::max_pool2d;
  kernel::Pool2dParams params{};
  Shape input_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& x) {
    kernel::MaxPoolForward r = kernel_for::pool(x).max_pool2d(x, params);
    input_sizes = x.sizes();
    ctx.save({r.indices});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor indices = ctx.saved(0);
    const Tensor& dy = grads[0];
    if (!autograd::is_grad_enabled()) {
      return {kernel_for::pool(dy).max_pool2d_backward(dy, indices, input_sizes)};
    }
    // Row plane * H * W + index of the flattened input takes each dy value.
    const size_t dims = input_sizes.size();
    const int64_t plane_size = input_sizes[dims - 2] * input_sizes[dims - 1];
    const int64_t per_plane = dy.size(-2) * dy.size(-1);
    std::vector<int64_t> rows = indices.to_vector<int64_t>();
    for (size_t i = 0; i < rows.size(); ++i) rows[i] += int64_t(i) / per_plane * plane_size;
    const int64_t input_numel = shape_numel(input_sizes);
    const Tensor dx = ops::embedding_backward(
        dy.reshape({dy.numel(), 1}), tensor(rows, kInt64).to(dy.device()), input_numel, -1);
    return {dx.reshape(input_sizes)};
  }
};

// ---- avg_pool2d: x [N, C, H, W] or [C, H, W] ---------------------------------------------------

struct AvgPool2d {
  static constexpr OpId id = OpId::avg_pool2d;
  kernel::Pool2dParams params{};
  Shape input_sizes{};

  Tensor forward(OpContext&, const Tensor& x) {
    input_sizes = x.sizes();
    return kernel_for::pool(x).avg_pool2d(x, params);
  }
  Grads backward(OpContext& ctx, const Grads& grads);
};

// Each dy value shared out over its window: the adjoint of avg_pool2d (same windows and
// divisors), whose backward is therefore avg_pool2d.
struct AvgPool2dBackward {
  static constexpr OpId id = OpId::avg_pool2d_backward;
  kernel::Pool2dParams params{};
  Shape input_sizes{};

  Tensor forward(OpContext&, const Tensor& dy) {
    return kernel_for::pool(dy).avg_pool2d_backward(dy, input_sizes, params);
  }
  Grads backward(OpContext&, const Grads& grads) {
    return {dispatch(AvgPool2d{.params = params}, grads[0])};
  }
};

Grads AvgPool2d::backward(OpContext&, const Grads& grads) {
  return {dispatch(AvgPool2dBackward{params, input_sizes}, grads[0])};
}

// ---- max_pool1d / avg_pool1d: x [N, C, L] or [C, L], as a 2-d pool of height 1 -------------

void check_pool1d_input(const Tensor& x, OpId id) {
  HG_CHECK(x.defined() && (x.dim() == 2 || x.dim() == 3),
           "{}: expected an input of 2 or 3 dims ([C, L] or [N, C, L]), got {}", op_name(id),
           x.defined() ? fmt::format("{}", x.sizes()) : std::string("an undefined tensor"));
}

template <OpId Id>
struct Pool1d {
  static constexpr OpId id = Id;
  static constexpr bool kComposite = true;
  int64_t kernel_size = 1, stride = 0, padding = 0, dilation = 1;
  bool ceil_mode = false, count_include_pad = true;
  Tensor forward(OpContext&, const Tensor& x) {
    check_pool1d_input(x, Id);
    const Tensor rows = x.unsqueeze(-2);
    const int64_t step = stride == 0 ? kernel_size : stride;
    const Tensor out =
        Id == OpId::max_pool1d
            ? max_pool2d(rows, {1, kernel_size}, {1, step}, {0, padding}, {1, dilation}, ceil_mode)
            : avg_pool2d(rows, {1, kernel_size}, {1, step}, {0, padding}, ceil_mode,
                         count_include_pad);
    return out.squeeze(-2);
  }
};

// ---- adaptive_avg_pool2d: x [N, C, H, W] or [C, H, W] -> [..., out_h, out_w] -----------------
//
// torch's windows: output i of n along a dim of size s averages [floor(i s / n), ceil((i + 1)
// s / n)). Sizes that divide evenly are one avg_pool2d; otherwise one mean per output row, then
// per output column, so a value reaches only the windows that hold it (a NaN stays local).
struct AdaptiveAvgPool2d {
  static constexpr OpId id = OpId::adaptive_avg_pool2d;
  static constexpr bool kComposite = true;
  std::array<int64_t, 2> output_size{};
  Tensor forward(OpContext&, const Tensor& x) {
    HG_CHECK(x.defined() && (x.dim() == 3 || x.dim() == 4),
             "adaptive_avg_pool2d: expected an input of 3 or 4 dims ([C, H, W] or [N, C, H, W]), "
             "got {}",
             x.defined() ? fmt::format("{}", x.sizes()) : std::string("an undefined tensor"));
    HG_CHECK(x.is_floating_point(), "adaptive_avg_pool2d: expected a floating input, got {}",
             x.dtype());
    const int64_t h = x.size(-2), w = x.size(-1);
    const auto [out_h, out_w] = output_size;
    HG_CHECK(out_h > 0 && out_w > 0 && h > 0 && w > 0,
             "adaptive_avg_pool2d: expected positive output and input sizes, got output {}x{} "
             "for input {}",
             out_h, out_w, x.sizes());
    if (h % out_h == 0 && w % out_w == 0) {
      return avg_pool2d(x, {h / out_h, w / out_w});
    }
    return pool_dim(pool_dim(x, -2, out_h), -1, out_w);
  }
  static Tensor pool_dim(const Tensor& x, int64_t dim, int64_t n) {
    const int64_t s = x.size(dim);
    if (s == n) return x;
    std::vector<Tensor> parts;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t start = i * s / n, end = ((i + 1) * s + n - 1) / n;
      parts.push_back(mean(x.narrow(dim, start, end - start), {dim}, /*keepdim=*/true));
    }
    return cat(parts, dim);
  }
};

// ---- interpolate: nearest and (bi)linear resampling of the trailing spatial dims -------------
//
// Separable: along each spatial dim the output reads the input at positions computed on the
// host (torch's source-index formulas), by index_select; (bi)linear blends the two neighbours
// with per-position weights. Gradients are index_select's (index_add).
enum class InterpolateMode { Nearest, Linear };

struct Interpolate {
  static constexpr OpId id = OpId::interpolate;
  static constexpr bool kComposite = true;
  std::vector<int64_t> sizes{};
  std::vector<double> scales{};  // 1 / scale_factor when given (torch's scale), else in / out
  InterpolateMode mode = InterpolateMode::Nearest;
  bool align_corners = false;

  Tensor forward(OpContext&, const Tensor& x) {
    Tensor out = x;
    const int64_t spatial = int64_t(sizes.size());
    for (int64_t i = 0; i < spatial; ++i) {
      out = resample(out, x.dim() - spatial + i, sizes[size_t(i)], scales[size_t(i)]);
    }
    return out;
  }

  Tensor resample(const Tensor& x, int64_t dim, int64_t out_size, double scale) const {
    const int64_t in_size = x.size(dim);
    std::vector<int64_t> low(static_cast<size_t>(out_size)), high(static_cast<size_t>(out_size));
    std::vector<double> weight(static_cast<size_t>(out_size));
    for (int64_t j = 0; j < out_size; ++j) {
      if (mode == InterpolateMode::Nearest) {
        low[size_t(j)] = std::min(int64_t(std::floor(double(j) * scale)), in_size - 1);
        continue;
      }
      double source;
      if (align_corners) {
        source = out_size > 1 ? double(j) * double(in_size - 1) / double(out_size - 1) : 0.0;
      } else {
        source = std::max((double(j) + 0.5) * scale - 0.5, 0.0);
      }
      const int64_t i0 = std::min(int64_t(std::floor(source)), in_size - 1);
      low[size_t(j)] = i0;
      high[size_t(j)] = std::min(i0 + 1, in_size - 1);
      weight[size_t(j)] = source - double(i0);
    }
    const auto at = [&](const std::vector<int64_t>& positions) {
      return index_select(x, dim, ops::positions_on(positions, x.device()));
    };
    if (mode == InterpolateMode::Nearest) return at(low);
    Shape weight_shape(size_t(x.dim()), 1);
    weight_shape[size_t(dim)] = out_size;
    Tensor w = tensor(weight, weight_shape, kFloat64).to(x.dtype());
    if (!x.is_cpu()) w = w.to(x.device());
    return add(at(low), mul(sub(at(high), at(low)), w));
  }
};

}  // namespace

// ---- the public functions -------------------------------------------------------------------

Tensor max_pool2d(const Tensor& x, ExpandingArray<2> kernel_size, ExpandingArray<2> stride,
                  ExpandingArray<2> padding, ExpandingArray<2> dilation, bool ceil_mode) {
  return dispatch(MaxPool2d{.params = {.kernel = kernel_size,
                                       .stride = stride,
                                       .padding = padding,
                                       .dilation = dilation,
                                       .ceil_mode = ceil_mode}},
                  x);
}
Tensor avg_pool2d(const Tensor& x, ExpandingArray<2> kernel_size, ExpandingArray<2> stride,
                  ExpandingArray<2> padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override) {
  HG_CHECK(!divisor_override || *divisor_override > 0,
           "avg_pool2d: expected a divisor_override > 0, got {}", divisor_override.value_or(0));
  return dispatch(AvgPool2d{.params = {.kernel = kernel_size,
                                       .stride = stride,
                                       .padding = padding,
                                       .count_include_pad = count_include_pad,
                                       .ceil_mode = ceil_mode,
                                       .divisor_override = divisor_override.value_or(0)}},
                  x);
}
Tensor max_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding,
                  int64_t dilation, bool ceil_mode) {
  return dispatch(Pool1d<OpId::max_pool1d>{.kernel_size = kernel_size,
                                           .stride = stride,
                                           .padding = padding,
                                           .dilation = dilation,
                                           .ceil_mode = ceil_mode},
                  x);
}
Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding,
                  bool ceil_mode, bool count_include_pad) {
  return dispatch(Pool1d<OpId::avg_pool1d>{.kernel_size = kernel_size,
                                           .stride = stride,
                                           .padding = padding,
                                           .ceil_mode = ceil_mode,
                                           .count_include_pad = count_include_pad},
                  x);
}
Tensor adaptive_avg_pool2d(const Tensor& x, ExpandingArray<2> output_size) {
  return dispatch(AdaptiveAvgPool2d{.output_size = output_size}, x);
}

Tensor interpolate(const Tensor& x, std::optional<std::vector<int64_t>> size,
                   std::optional<std::vector<double>> scale_factor, std::string_view mode,
                   std::optional<bool> align_corners) {
  HG_CHECK(x.defined() && x.dim() >= 3 && x.dim() <= 4,
           "interpolate: expected an input of 3 or 4 dims ([N, C, L] or [N, C, H, W]), got {}",
           x.defined() ? fmt::format("{}", x.sizes()) : std::string("an undefined tensor"));
  HG_CHECK(x.is_floating_point(), "interpolate: expected a floating input, got {}", x.dtype());
  const int64_t spatial = x.dim() - 2;
  InterpolateMode kind;
  if (mode == "nearest") {
    kind = InterpolateMode::Nearest;
    HG_CHECK(!align_corners.has_value(),
             "interpolate: align_corners applies to the linear modes, not to \"nearest\"");
  } else if ((mode == "linear" && spatial == 1) || (mode == "bilinear" && spatial == 2)) {
    kind = InterpolateMode::Linear;
  } else {
    HG_ERROR("interpolate: expected mode \"nearest\", or \"{}\" for a {}-d input, got \"{}\"",
             spatial == 1 ? "linear" : "bilinear", x.dim(), mode);
  }
  HG_CHECK(size.has_value() != scale_factor.has_value(),
           "interpolate: expected exactly one of size and scale_factor");
  std::vector<int64_t> sizes;
  std::vector<double> scales;
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t in_size = x.size(2 + i);
    if (size) {
      HG_CHECK(int64_t(size->size()) == spatial || size->size() == 1,
               "interpolate: expected {} sizes (or one for all), got {}", spatial, size->size());
      const int64_t out = (*size)[size->size() == 1 ? 0 : size_t(i)];
      HG_CHECK(out > 0, "interpolate: expected output sizes > 0, got {}", out);
      sizes.push_back(out);
      scales.push_back(double(in_size) / double(out));
    } else {
      HG_CHECK(int64_t(scale_factor->size()) == spatial || scale_factor->size() == 1,
               "interpolate: expected {} scale factors (or one for all), got {}", spatial,
               scale_factor->size());
      const double factor = (*scale_factor)[scale_factor->size() == 1 ? 0 : size_t(i)];
      HG_CHECK(factor > 0, "interpolate: expected scale factors > 0, got {}", factor);
      sizes.push_back(int64_t(std::floor(double(in_size) * factor)));
      HG_CHECK(sizes.back() > 0, "interpolate: scale factor {} leaves no output along dim {}",
               factor, 2 + i);
      scales.push_back(1.0 / factor);
    }
  }
  return dispatch(Interpolate{.sizes = sizes,
                              .scales = scales,
                              .mode = kind,
                              .align_corners = align_corners.value_or(false)},
                  x);
}

}  // namespace hg
