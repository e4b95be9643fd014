// grid_sample: torch.nn.functional.grid_sample on 4-d inputs, as a composite of gathers.
//
//   N batch, C channels, H, W the input's height and width, Ho, Wo the grid's.
//
// NOTE [grid_sample as gathers] torch's grid_sampler_2d reads, for each output point, the input
// at the point's grid coordinates (x, y in [-1, 1] across the input, -1 and 1 the corner pixels'
// centres with align_corners, their outer edges without) through taps: one (nearest, the
// coordinate rounded half to even), 2 x 2 (bilinear) or 4 x 4 (bicubic, the cubic convolution
// with A = -0.75). halfgrad computes the same taps with ops: each tap's weight and integer
// coordinate as [N, Ho, Wo] tensors, the input's values gathered from [N, C, H W] and summed. A
// tap outside the input adds nothing. padding_mode moves the coordinate first (border: clipped
// into the input; reflection: reflected at the borders, then clipped), for bicubic each tap's.
// The gradient reaches the input through gather and the grid through the tap weights (the
// fractional parts), as torch's backward computes them; nearest gives the grid none. A 16-bit
// call computes in float32 and rounds its result once.
#include <string>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/pool.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;

enum class SampleMode : uint8_t { Bilinear, Nearest, Bicubic };
enum class SamplePadding : uint8_t { Zeros, Border, Reflection };

SampleMode parse_mode(std::string_view mode) {
  if (mode == "bilinear") return SampleMode::Bilinear;
  if (mode == "nearest") return SampleMode::Nearest;
  if (mode == "bicubic") return SampleMode::Bicubic;
  HG_ERROR("grid_sample: expected mode \"bilinear\", \"nearest\" or \"bicubic\", got \"{}\"", mode);
}

SamplePadding parse_padding(std::string_view padding) {
  if (padding == "zeros") return SamplePadding::Zeros;
  if (padding == "border") return SamplePadding::Border;
  if (padding == "reflection") return SamplePadding::Reflection;
  HG_ERROR("grid_sample: expected padding_mode \"zeros\", \"border\" or \"reflection\", got \"{}\"",
           padding);
}

struct GridSample {
  static constexpr OpId id = OpId::grid_sample;
  static constexpr bool kComposite = true;
  SampleMode mode = SampleMode::Bilinear;
  SamplePadding padding = SamplePadding::Zeros;
  bool align_corners = false;

  // A grid coordinate in [-1, 1] as a position in pixels along a dim of `size`.
  Tensor unnormalize(const Tensor& coordinate, int64_t size) const {
    const double n = double(size);
    return align_corners ? mul(add(coordinate, 1.0), (n - 1) / 2)
                         : div(sub(mul(add(coordinate, 1.0), n), 1.0), 2.0);
  }

  // x reflected into [twice_low / 2, twice_high / 2] (torch's reflect_coordinates).
  static Tensor reflect(const Tensor& x, double twice_low, double twice_high) {
    if (twice_low == twice_high) return zeros_like(x);
    const double low = twice_low / 2, span = (twice_high - twice_low) / 2;
    const Tensor distance = abs(sub(x, low));
    const Tensor extra = fmod(distance, span);
    const Tensor even = eq(remainder(floor(div(distance, span)), 2.0), 0.0);
    return where(even, add(extra, low), add(neg(extra), span + low));
  }

  // The position padding_mode reads for x along a dim of `size` (torch's compute_coordinates).
  Tensor pad(const Tensor& x, int64_t size) const {
    const double last = double(size - 1);
    switch (padding) {
      case SamplePadding::Border:
        return clamp(x, Scalar(0.0), Scalar(last));
      case SamplePadding::Reflection: {
        const Tensor reflected =
            align_corners ? reflect(x, 0.0, 2 * last) : reflect(x, -1.0, 2.0 * double(size) - 1);
        return clamp(reflected, Scalar(0.0), Scalar(last));
      }
      default:
        return x;
    }
  }

  // The four cubic convolution weights of the taps at offsets -1, 0, 1, 2 from floor(x), for the
  // fraction t (torch's get_cubic_upsample_coefficients, A = -0.75).
  static std::vector<Tensor> cubic_weights(const Tensor& t) {
    constexpr double A = -0.75;
    const auto near = [](const Tensor& d) {  // |d| <= 1: ((A + 2) d - (A + 3)) d^2 + 1
      return add(mul(mul(sub(mul(d, A + 2), A + 3), d), d), 1.0);
    };
    const auto far = [](const Tensor& d) {  // 1 < |d| < 2: ((A d - 5 A) d + 8 A) d - 4 A
      return sub(mul(add(mul(sub(mul(d, A), 5 * A), d), 8 * A), d), 4 * A);
    };
    const Tensor one_minus = add(neg(t), 1.0);
    return {far(add(t, 1.0)), near(t), near(one_minus), far(add(one_minus, 1.0))};
  }

  Tensor forward(OpContext&, const Tensor& input, const Tensor& grid) {
    HG_CHECK(input.dim() == 4 && input.is_floating_point(),
             "grid_sample: expected a floating input of shape [N, C, H, W], got {} of shape {}",
             input.dtype(), input.sizes());
    HG_CHECK(grid.dim() == 4 && grid.size(0) == input.size(0) && grid.size(3) == 2,
             "grid_sample: expected grid of shape [{}, Ho, Wo, 2] for input of shape {}, got {}",
             input.size(0), input.sizes(), grid.sizes());
    HG_CHECK(grid.dtype() == input.dtype(),
             "grid_sample: expected grid of input's dtype {}, got {}", input.dtype(), grid.dtype());
    if (input.dtype() == kFloat16 || input.dtype() == kBFloat16) {
      // Coordinates, weights and sums in float32, the result rounded once.
      return sample(input.to(kFloat32), grid.to(kFloat32)).to(input.dtype());
    }
    return sample(input, grid);
  }

  // The sampling itself, for float32 or float64 input and grid.
  Tensor sample(const Tensor& input, const Tensor& grid) const {
    const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
    const int64_t Ho = grid.size(1), Wo = grid.size(2);
    HG_CHECK(H > 0 && W > 0, "grid_sample: expected an input of non-empty H and W, got {}",
             input.sizes());
    const Tensor flat = input.reshape({N, C, H * W});
    Tensor ix = unnormalize(grid.select(3, 0), W), iy = unnormalize(grid.select(3, 1), H);
    if (mode != SampleMode::Bicubic) {
      ix = pad(ix, W);
      iy = pad(iy, H);
    }
    Tensor out;
    // Adds weight * input[y, x] for the integer-valued coordinates x, y ([N, Ho, Wo]); a tap
    // outside the input adds nothing.
    const auto tap = [&](const Tensor& x, const Tensor& y, const Tensor& weight) {
      const DType dtype = weight.dtype();
      const Tensor inside = mul(mul(ge(x, 0.0).to(dtype), le(x, double(W - 1)).to(dtype)),
                                mul(ge(y, 0.0).to(dtype), le(y, double(H - 1)).to(dtype)));
      const Tensor position = add(mul(clamp(y, Scalar(0.0), Scalar(double(H - 1))), double(W)),
                                  clamp(x, Scalar(0.0), Scalar(double(W - 1))))
                                  .to(kInt64)
                                  .reshape({N, 1, Ho * Wo})
                                  .expand({N, C, Ho * Wo});
      const Tensor kept = mul(weight, inside).reshape({N, 1, Ho * Wo});
      const Tensor term = mul(gather(flat, 2, position), kept);
      out = out.defined() ? add(out, term) : term;
    };
    if (mode == SampleMode::Nearest) {
      tap(round(ix), round(iy), ones_like(ix));
    } else if (mode == SampleMode::Bilinear) {
      const Tensor x0 = floor(ix), y0 = floor(iy);
      const Tensor tx = sub(ix, x0), ty = sub(iy, y0);
      const Tensor sx = add(neg(tx), 1.0), sy = add(neg(ty), 1.0);
      tap(x0, y0, mul(sx, sy));
      tap(add(x0, 1.0), y0, mul(tx, sy));
      tap(x0, add(y0, 1.0), mul(sx, ty));
      tap(add(x0, 1.0), add(y0, 1.0), mul(tx, ty));
    } else {
      const Tensor x0 = floor(ix), y0 = floor(iy);
      const std::vector<Tensor> wx = cubic_weights(sub(ix, x0)), wy = cubic_weights(sub(iy, y0));
      for (int j = 0; j < 4; ++j) {
        const Tensor y = pad(add(y0, double(j - 1)), H);
        for (int i = 0; i < 4; ++i) {
          tap(pad(add(x0, double(i - 1)), W), y, mul(wx[size_t(i)], wy[size_t(j)]));
        }
      }
    }
    return out.reshape({N, C, Ho, Wo});
  }
};

}  // namespace

Tensor grid_sample(const Tensor& input, const Tensor& grid, std::string_view mode,
                   std::string_view padding_mode, bool align_corners) {
  return dispatch(GridSample{.mode = parse_mode(mode),
                             .padding = parse_padding(padding_mode),
                             .align_corners = align_corners},
                  input, grid);
}

}  // namespace hg
