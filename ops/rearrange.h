// Ops that rearrange a tensor's elements (ops/rearrange.cpp): triu, tril, diag, repeat, tile,
// repeat_interleave, flip, roll, pad, meshgrid, unbind.
//
//   Tensor m = hg::randn({4, 4});
//   Tensor upper = hg::triu(m, 1);                           // above the diagonal, 0 elsewhere
//   Tensor rows = hg::repeat(m, {2, 1});                     // [8, 4]
//   Tensor image = hg::pad(m.view({1, 1, 4, 4}), {1, 1, 2, 2}, "reflect");  // [1, 1, 8, 6]
//
// Names, argument order and defaults are torch's. Each is made of the index and view ops, on
// either device, so gradients need no formula of their own.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "halfgrad/core/scalar.h"
#include "halfgrad/core/tensor.h"

namespace hg {

// x [*, H, W] with the elements below (triu) / above (tril) the diagonal-th diagonal set to 0;
// diagonal 0 is the main diagonal, positive ones lie above it.
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
// A 1-d x gives the square matrix with x on its diagonal-th diagonal; a 2-d x gives that
// diagonal as a 1-d tensor.
Tensor diag(const Tensor& x, int64_t diagonal = 0);

// x repeated repeats[d] times along each dim d (repeats has at least x.dim() entries; extra
// leading ones add dims), as Tensor.repeat.
Tensor repeat(const Tensor& x, const Shape& repeats);
// As repeat, but fewer entries than x.dim() are padded with leading 1s, as torch.tile.
Tensor tile(const Tensor& x, const Shape& reps);
// Each element (each slice along dim) repeated repeats times in place: [a, b] -> [a, a, b, b].
// Without a dim, over x flattened. The tensor form gives each slice its own count (int64,
// one per slice, or one for all).
Tensor repeat_interleave(const Tensor& x, int64_t repeats,
                         std::optional<int64_t> dim = std::nullopt);
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats,
                         std::optional<int64_t> dim = std::nullopt);

// x reversed along each of dims.
Tensor flip(const Tensor& x, const Shape& dims);
// x shifted by shifts[i] along dims[i], elements leaving one end entering at the other. With
// no dims, one shift of x flattened (then restored to its shape).
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims = {});

// torch.nn.functional.pad: pad = {left, right} of the last dim, then of the dim before it, and
// so on. mode "constant" (value; negative pads crop), "reflect" (mirrored without repeating the
// edge; each pad < the dim's size), "replicate" (the edge repeated) or "circular" (wrapped;
// each pad <= the dim's size).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, std::string_view mode = "constant",
           double value = 0.0);

// 1-d tensors (or 0-d) x_1..x_n -> n tensors of shape [len(x_1), ..., len(x_n)], the i-th
// varying along dim i ("ij") or with the first two dims swapped ("xy"); views (expand).
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, std::string_view indexing = "ij");
// The slices of x along dim, as views.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);

}  // namespace hg
