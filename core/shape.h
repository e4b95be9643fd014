// Shapes and strides: sizes and strides of a tensor, in elements, and the rules that
// relate them (contiguity, broadcasting, which reshapes can be views, the pieces of a split).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "halfgrad/core/small_vector.h"

namespace hg {

// Sizes or strides of a tensor; up to 6 dims are stored inline.
using Shape = SmallVector<int64_t, 6>;

// The number of elements of a shape (1 for a 0-d shape). Throws on a negative size or on
// overflow of int64.
int64_t shape_numel(const Shape& sizes);

// Row-major (C-contiguous) strides for sizes.
Shape contiguous_strides(const Shape& sizes);

// True when sizes/strides describe a row-major layout with no gaps (size-1 dims may have
// any stride, as in PyTorch).
bool is_contiguous_layout(const Shape& sizes, const Shape& strides);

namespace detail {
[[noreturn]] void throw_dim_out_of_range(int64_t dim, int64_t ndim, const char* op);
}

// Maps dim in [-ndim, ndim) to [0, ndim); otherwise throws an hg::Error naming `op`, the
// valid range and the dim given. ndim 0 is treated as 1 (a scalar has dims 0 and -1).
inline int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t n = ndim > 1 ? ndim : 1;
  if (dim < -n || dim >= n) [[unlikely]]
    detail::throw_dim_out_of_range(dim, ndim, op);
  return dim < 0 ? dim + n : dim;
}

// The broadcast shape of a and b (PyTorch / NumPy rules: align trailing dims; each pair
// must be equal or contain a 1). Throws naming both shapes and the offending dim.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// True when a tensor of shape `from` can be broadcast to exactly `to` (one direction: `to`
// is not changed), as copy_ and expand need.
bool broadcasts_to(const Shape& from, const Shape& to);

// Replaces a single -1 in `sizes` with the size that makes the element count `numel`;
// throws if there are several -1, a size below -1, or the count cannot match.
Shape infer_size(const Shape& sizes, int64_t numel, const char* op);

// Strides that let a tensor with (old_sizes, old_strides) be viewed as new_sizes without
// copying, or nullopt when no such strides exist (then reshape must copy).
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides,
                                  const Shape& new_sizes);

// The sizes of the pieces of a dim of `size` cut every split_size elements (torch.split):
// all split_size except a shorter last one; one piece of size 0 when size is 0.
std::vector<int64_t> split_sizes(int64_t size, int64_t split_size);

// The sizes of torch.chunk: pieces of ceil(size / chunks), so possibly fewer than chunks
// pieces (size 5 in 4 chunks gives [2, 2, 1]); `chunks` pieces of size 0 when size is 0.
std::vector<int64_t> chunk_sizes(int64_t size, int64_t chunks);

}  // namespace hg
