// Shape and stride rules (shape.h): contiguity, broadcasting, dim wrapping, which reshapes
// can be views, and the pieces of split and chunk.
#include "halfgrad/core/shape.h"

#include <algorithm>
#include <vector>

#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"

namespace hg {

int64_t shape_numel(const Shape& sizes) {
  int64_t numel = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    HG_CHECK(sizes[d] >= 0, "expected sizes >= 0, got {} at dim {} of shape {}", sizes[d], d,
             sizes);
    HG_CHECK(!__builtin_mul_overflow(numel, sizes[d], &numel),
             "shape {} has more elements than int64 can count", sizes);
  }
  return numel;
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size(), 1);
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

bool is_contiguous_layout(const Shape& sizes, const Shape& strides) {
  for (int64_t size : sizes) {
    if (size == 0) return true;  // an empty tensor is contiguous whatever its strides
  }
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

void detail::throw_dim_out_of_range(int64_t dim, int64_t ndim, const char* op) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  HG_ERROR("{}: dim out of range (expected in [{}, {}] for a {}-D tensor, got {})", op, -n, n - 1,
           ndim, dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t ndim = std::max(a.size(), b.size());
  Shape out(ndim, 1);
  for (size_t i = 0; i < ndim; ++i) {  // i counts from the last dim
    const int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    HG_CHECK(sa == sb || sa == 1 || sb == 1,
             "shapes {} and {} cannot be broadcast: at dim {} (counting from the end) sizes {} "
             "and {} differ and neither is 1",
             a, b, -int64_t(i) - 1, sa, sb);
    out[ndim - 1 - i] = sa == 1 ? sb : sa;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != to[lead + d] && from[d] != 1) return false;
  }
  return true;
}

Shape infer_size(const Shape& sizes, int64_t numel, const char* op) {
  Shape out = sizes;
  int64_t known = 1;
  std::optional<size_t> infer;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == -1) {
      HG_CHECK(!infer, "{}: only one dim can be -1, got shape {}", op, sizes);
      infer = d;
    } else {
      HG_CHECK(sizes[d] >= 0, "{}: invalid size {} at dim {} of shape {}", op, sizes[d], d, sizes);
      known *= sizes[d];
    }
  }
  if (infer) {
    HG_CHECK(known != 0,
             "{}: shape {} is ambiguous for a tensor of {} elements: with another "
             "size 0, the -1 could be any size",
             op, sizes, numel);
    HG_CHECK(numel % known == 0, "{}: shape {} is invalid for a tensor of {} elements", op, sizes,
             numel);
    out[*infer] = numel / known;
  } else {
    HG_CHECK(known == numel, "{}: shape {} is invalid for a tensor of {} elements", op, sizes,
             numel);
  }
  return out;
}

// NOTE [Views of reshapes] Walk the old dims from the last, grouping runs of dims that are
// contiguous with each other ("chunks": each dim's stride is the next one's size * stride).
// A reshape is a view exactly when every new dim falls inside one chunk: then the new dims
// of a chunk get row-major strides based on the chunk's innermost stride.
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides,
                                  const Shape& new_sizes) {
  if (old_sizes.empty()) return view_strides(Shape{1}, Shape{1}, new_sizes);
  Shape new_strides(new_sizes.size(), 1);
  if (shape_numel(old_sizes) == 0) {
    return old_sizes == new_sizes ? old_strides : contiguous_strides(new_sizes);
  }
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = int64_t(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_sizes[tensor_d];
    const bool chunk_ends =
        tensor_d == 0 || (old_sizes[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

std::vector<int64_t> split_sizes(int64_t size, int64_t split_size) {
  HG_CHECK(size >= 0, "split: expected a dim size >= 0, got {}", size);
  HG_CHECK(split_size >= 0, "split: expected split_size >= 0, got {}", split_size);
  if (split_size == 0) {
    HG_CHECK(size == 0, "split: split_size can be 0 only for a dim of size 0, got a dim of size {}",
             size);
    return {0};
  }
  const int64_t pieces = std::max<int64_t>((size + split_size - 1) / split_size, 1);
  std::vector<int64_t> sizes(size_t(pieces), split_size);
  sizes.back() = size - split_size * (pieces - 1);
  return sizes;
}

std::vector<int64_t> chunk_sizes(int64_t size, int64_t chunks) {
  HG_CHECK(size >= 0, "chunk: expected a dim size >= 0, got {}", size);
  HG_CHECK(chunks > 0, "chunk: expected chunks > 0, got {}", chunks);
  if (size == 0) return std::vector<int64_t>(size_t(chunks), 0);
  return split_sizes(size, (size + chunks - 1) / chunks);
}

}  // namespace hg
