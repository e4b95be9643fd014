// The pool family's ops: max_pool2d and avg_pool2d, forward (the kernels of kernel/pool.h)
// and backward, and the recorded backward avg_pool2d_backward (NOTE [Differentiable nn
// backwards] in ops/norm.cpp); max_pool1d, avg_pool1d (the 2-d kernels over a height of 1) and
// adaptive_avg_pool2d, composites.
//
// Dims: N batch, C channels, H/W height/width.
#include <array>
#include <vector>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernels.h"
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
    kernel::MaxPoolForward r = kernels::pool(x).max_pool2d(x, params);
    input_sizes = x.sizes();
    ctx.save({r.indices});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor indices = ctx.saved(0);
    const Tensor& dy = grads[0];
    if (!autograd::is_grad_enabled()) {
      return {kernels::pool(dy).max_pool2d_backward(dy, indices, input_sizes)};
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
    return kernels::pool(x).avg_pool2d(x, params);
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
    return kernels::pool(dy).avg_pool2d_backward(dy, input_sizes, params);
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
  int64_t kernel_size = 1, stride = 0, padding = 0;
  bool count_include_pad = true;
  Tensor forward(OpContext&, const Tensor& x) {
    check_pool1d_input(x, Id);
    const Tensor rows = x.unsqueeze(-2);
    const Tensor out =
        Id == OpId::max_pool1d
            ? max_pool2d(rows, {1, kernel_size}, {1, stride == 0 ? kernel_size : stride},
                         {0, padding})
            : avg_pool2d(rows, {1, kernel_size}, {1, stride == 0 ? kernel_size : stride},
                         {0, padding}, count_include_pad);
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

}  // namespace

// ---- the public functions -------------------------------------------------------------------

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride, std::array<int64_t, 2> padding) {
  return dispatch(MaxPool2d{.params = {kernel_size, stride, padding}}, x);
}
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                  bool count_include_pad) {
  return dispatch(AvgPool2d{.params = {kernel_size, stride, padding, count_include_pad}}, x);
}
Tensor max_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding) {
  return dispatch(
      Pool1d<OpId::max_pool1d>{.kernel_size = kernel_size, .stride = stride, .padding = padding},
      x);
}
Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride, int64_t padding,
                  bool count_include_pad) {
  return dispatch(Pool1d<OpId::avg_pool1d>{.kernel_size = kernel_size,
                                           .stride = stride,
                                           .padding = padding,
                                           .count_include_pad = count_include_pad},
                  x);
}
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  return dispatch(AdaptiveAvgPool2d{.output_size = output_size}, x);
}

}  // namespace hg
