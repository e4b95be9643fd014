// The pooling ops max_pool2d, avg_pool2d, their 1-d forms and adaptive_avg_pool2d, and
// interpolate (ops/pool.cpp), grid_sample (ops/grid_sample.cpp); torch.nn.functional's
// conventions (ops/norm.h).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "halfgrad/core/expanding_array.h"
#include "halfgrad/core/tensor.h"

namespace hg {

// x: [N, C, H, W] or [C, H, W]. stride {0, 0} (the default) means stride = kernel_size;
// dilation spaces the window's taps; ceil_mode rounds the output size up (kernel/pool.h). One
// number stands for both dims (NOTE [Expanding sizes]): max_pool2d(x, 2).
Tensor max_pool2d(const Tensor& x, ExpandingArray<2> kernel_size,
                  ExpandingArray<2> stride = {}, ExpandingArray<2> padding = {0, 0},
                  ExpandingArray<2> dilation = {1, 1}, bool ceil_mode = false);
// As max_pool2d, in torch's argument order; count_include_pad: padded positions count in each
// window's divisor; divisor_override: divide every window by it instead.
Tensor avg_pool2d(const Tensor& x, ExpandingArray<2> kernel_size,
                  ExpandingArray<2> stride = {}, ExpandingArray<2> padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
// x: [N, C, L] or [C, L]; stride 0 (the default) means stride = kernel_size.
Tensor max_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                  int64_t dilation = 1, bool ceil_mode = false);
Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
// x: [N, C, H, W] or [C, H, W] -> [..., output_size[0], output_size[1]], each output the mean of
// its window [floor(i H / out), ceil((i + 1) H / out)) (likewise along W).
Tensor adaptive_avg_pool2d(const Tensor& x, ExpandingArray<2> output_size);
// Resamples x [N, C, L] or [N, C, H, W] to `size` (or its sizes times scale_factor, rounded
// down), as torch.nn.functional.interpolate: mode "nearest" (source floor(j * in / out)),
// "linear" (3-d) or "bilinear" (4-d), with align_corners (default false) for the linear modes.
// One size or factor stands for every spatial dim.
Tensor interpolate(const Tensor& x, std::optional<std::vector<int64_t>> size,
                   std::optional<std::vector<double>> scale_factor = std::nullopt,
                   std::string_view mode = "nearest",
                   std::optional<bool> align_corners = std::nullopt);

// Samples input [N, C, H, W] at grid [N, Ho, Wo, 2]'s points (x, y in [-1, 1] across the input)
// into [N, C, Ho, Wo], as torch.nn.functional.grid_sample (NOTE [grid_sample as gathers] in
// ops/grid_sample.cpp): mode "bilinear", "nearest" or "bicubic"; padding_mode "zeros",
// "border" or "reflection"; align_corners puts -1 and 1 at the corner pixels' centres.
Tensor grid_sample(const Tensor& input, const Tensor& grid, std::string_view mode = "bilinear",
                   std::string_view padding_mode = "zeros", bool align_corners = false);

}  // namespace hg
