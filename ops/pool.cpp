// The pool family's ops: max_pool2d and avg_pool2d, forward (the kernels of kernel/pool.h)
// and backward, and the recorded backward avg_pool2d_backward (NOTE [Differentiable nn
// backwards] in ops/norm.cpp).
//
// Dims: N batch, C channels, H/W height/width.
#include <array>
#include <vector>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
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

}  // namespace hg
