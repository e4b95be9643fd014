// Tensor::index and Tensor::index_put_ (core/tensor_index.h), PyTorch's indexing:
//   - integers, slices, None, the ellipsis and bools are basic indexing: views (select, slice,
//     unsqueeze), applied left to right;
//   - tensors are advanced indexing. A bool mask stands for the positions of its true elements
//     (nonzero) over as many dims as it has. All index tensors broadcast to one shape B; with
//     a tensor among the indices, integers count as 0-d index tensors too, as in PyTorch. The
//     result holds B in place of the indexed dims when those are neighbours, else B first;
//   - the indexed dims are gathered as one: moved to the front, flattened, and read by one
//     index_select at the flat positions (whose gradient is index_add).
// index_put_ finds the flat positions the same indices address (indexing a tensor of positions)
// and writes through index_put.
#include <numeric>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/tensor_index.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/mask.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using Kind = TensorIndex::Kind;

struct Advanced {
  int64_t dim;  // in the view after basic indexing
  Tensor positions;
};

// The positions of an advanced index along a dim of `size`: int64 on `device`, negatives
// wrapped, every one checked to lie in [-size, size).
Tensor checked_positions(const Tensor& index, int64_t size, Device device) {
  Tensor p = index.to(device, kInt64);
  const Tensor inside = where(ge(p, -size), lt(p, size), false);
  HG_CHECK(p.numel() == 0 || all(inside).item<bool>(),
           "index: expected indices in [-{}, {}) for a dim of size {}, got one outside", size, size,
           size);
  return where(lt(p, 0), add(p, size), p);
}

Tensor gather_advanced(const Tensor& view, const std::vector<Advanced>& advanced) {
  Shape batch{};
  for (const Advanced& a : advanced) batch = broadcast_shapes(batch, a.positions.sizes());
  bool adjacent = true;
  for (size_t k = 1; k < advanced.size(); ++k) {
    adjacent = adjacent && advanced[k].dim == advanced[k - 1].dim + 1;
  }
  // The indexed dims first, then the others in order.
  Shape order{}, rest_sizes{};
  std::vector<bool> indexed(size_t(view.dim()), false);
  for (const Advanced& a : advanced) {
    order.push_back(a.dim);
    indexed[size_t(a.dim)] = true;
  }
  for (int64_t d = 0; d < view.dim(); ++d) {
    if (!indexed[size_t(d)]) {
      order.push_back(d);
      rest_sizes.push_back(view.size(d));
    }
  }
  // Flat positions within the indexed dims, row-major.
  Tensor flat;
  int64_t stride = 1, extent = 1;
  for (size_t k = advanced.size(); k-- > 0;) {
    const int64_t size = view.size(advanced[k].dim);
    const Tensor p = checked_positions(advanced[k].positions, size, view.device()).expand(batch);
    flat = flat.defined() ? add(flat, mul(p, stride)) : mul(p, stride);
    stride *= size;
    extent *= size;
  }
  Shape moved_sizes{extent};
  for (int64_t s : rest_sizes) moved_sizes.push_back(s);
  const Tensor moved = view.permute(order).reshape(moved_sizes);
  Shape out_sizes = batch;
  for (int64_t s : rest_sizes) out_sizes.push_back(s);
  Tensor out = index_select(moved, 0, flat.reshape({-1})).reshape(out_sizes);
  const int64_t first = advanced.front().dim;
  if (adjacent && first > 0) {
    // B back where the indexed dims were: after the first `first` of the other dims.
    const int64_t b = int64_t(batch.size());
    Shape perm{};
    for (int64_t d = 0; d < first; ++d) perm.push_back(b + d);
    for (int64_t d = 0; d < b; ++d) perm.push_back(d);
    for (int64_t d = b + first; d < out.dim(); ++d) perm.push_back(d);
    out = out.permute(perm);
  }
  return out;
}

Tensor apply_indices(const Tensor& self, std::span<const TensorIndex> indices) {
  HG_CHECK(self.defined(), "index: expected a defined tensor, got an undefined one");
  bool has_tensor = false, has_ellipsis = false;
  int64_t consumed = 0;
  for (const TensorIndex& i : indices) {
    switch (i.kind()) {
      case Kind::Integer:
      case Kind::Slice:
        ++consumed;
        break;
      case Kind::Tensor:
        HG_CHECK(i.tensor().defined(),
                 "index: expected a defined index tensor, got an undefined one");
        has_tensor = true;
        consumed += i.tensor().dtype() == kBool ? std::max<int64_t>(i.tensor().dim(), 0) : 1;
        break;
      case Kind::Ellipsis:
        HG_CHECK(!has_ellipsis, "index: expected at most one ellipsis, got two");
        has_ellipsis = true;
        break;
      default:
        break;
    }
  }
  HG_CHECK(consumed <= self.dim(), "index: too many indices for a tensor of {} dims: {} given",
           self.dim(), consumed);
  Tensor view = self;
  int64_t dim = 0;
  std::vector<Advanced> advanced;
  for (const TensorIndex& i : indices) {
    switch (i.kind()) {
      case Kind::Integer: {
        const int64_t size = view.size(dim);
        HG_CHECK(i.integer() >= -size && i.integer() < size,
                 "index: index {} is out of bounds for dim {} of size {}", i.integer(), dim, size);
        if (has_tensor) {  // a 0-d index tensor among the advanced ones
          advanced.push_back(
              {dim, full({}, i.integer(), {.dtype = kInt64, .device = self.device()})});
          ++dim;
        } else {
          view = view.select(dim, i.integer());
        }
        break;
      }
      case Kind::Slice: {
        const indexing::Slice& s = i.slice();
        HG_CHECK(s.step.value_or(1) > 0, "index: expected a slice step > 0, got {}", *s.step);
        view = view.slice(dim, s.start, s.stop, s.step.value_or(1));
        ++dim;
        break;
      }
      case Kind::None:
        view = view.unsqueeze(dim);
        ++dim;
        break;
      case Kind::Boolean:
        view = view.unsqueeze(dim);
        if (!i.boolean()) view = view.narrow(dim, 0, 0);
        ++dim;
        break;
      case Kind::Ellipsis:
        dim += self.dim() - consumed;
        break;
      case Kind::Tensor: {
        const Tensor& t = i.tensor();
        if (t.dtype() == kBool) {
          for (int64_t k = 0; k < t.dim(); ++k) {
            HG_CHECK(t.size(k) == view.size(dim + k),
                     "index: the mask's shape {} does not match the indexed dims' sizes at dim "
                     "{} ({} against {})",
                     t.sizes(), dim + k, t.size(k), view.size(dim + k));
          }
          if (t.dim() == 0) {  // x[true_tensor]: a new dim of size 1 or 0
            view = view.unsqueeze(dim);
            advanced.push_back(
                {dim, zeros({t.item<bool>() ? 1 : 0}, {.dtype = kInt64, .device = self.device()})});
            ++dim;
            break;
          }
          const std::vector<Tensor> parts = nonzero_as_tuple(t);
          for (int64_t k = 0; k < t.dim(); ++k) advanced.push_back({dim + k, parts[size_t(k)]});
          dim += t.dim();
        } else {
          HG_CHECK(!t.is_floating_point(),
                   "index: expected index tensors of an integer or bool dtype, got {}", t.dtype());
          advanced.push_back({dim, t});
          ++dim;
        }
        break;
      }
    }
  }
  return advanced.empty() ? view : gather_advanced(view, advanced);
}

Tensor& put_indices(Tensor& self, std::span<const TensorIndex> indices, const Tensor& values) {
  HG_CHECK(self.defined() && values.defined(),
           "index_put_: expected a defined tensor and defined values");
  const bool has_tensor = std::any_of(indices.begin(), indices.end(), [](const TensorIndex& i) {
    return i.kind() == Kind::Tensor;
  });
  const bool tracked =
      autograd::is_grad_enabled() && (self.requires_grad() || values.requires_grad());
  if (!has_tensor && !tracked) {  // a view of self: copy into it
    Tensor view = apply_indices(self, indices);
    view.copy_(values.expand(view.sizes()));
    return self;
  }
  // The flat positions the indices address, in the indexed shape.
  const Tensor positions =
      apply_indices(arange(self.numel(), kInt64).to(self.device()).view(self.sizes()), indices);
  const Tensor flat_positions = positions.reshape({-1});
  const Tensor flat_values = values.to(self.dtype()).expand(positions.sizes()).reshape({-1});
  if (!tracked) {
    const Tensor written = index_put(self.reshape({-1}), {flat_positions}, flat_values);
    self.copy_(written.view(self.sizes()));
    return self;
  }
  HG_CHECK(!(self.is_leaf() && self.requires_grad()),
           "index_put_: a leaf tensor that requires grad (shape {}) cannot be modified in place "
           "while grad mode is on; modify it under NoGradGuard, or work on a clone",
           self.sizes());
  HG_CHECK(!self.is_view(),
           "index_put_: in-place ops on a view are not recorded by autograd in halfgrad; clone() "
           "the view first (shape {})",
           self.sizes());
  const Tensor old = self.clone();
  const Tensor result =
      index_put(old.reshape({-1}), {flat_positions}, flat_values).view(self.sizes());
  self.copy_(result.detach());
  autograd::set_history(self, result.grad_fn(), result.output_nr());
  return self;
}

}  // namespace

Tensor Tensor::index(std::initializer_list<TensorIndex> indices) const {
  return apply_indices(*this, std::span<const TensorIndex>(indices.begin(), indices.size()));
}
Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  return apply_indices(*this, indices);
}
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, const Tensor& values) {
  return put_indices(*this, std::span<const TensorIndex>(indices.begin(), indices.size()), values);
}
Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& values) {
  return put_indices(*this, indices, values);
}
Tensor& Tensor::index_put_(std::initializer_list<TensorIndex> indices, Scalar value) {
  HG_CHECK(defined(), "index_put_: expected a defined tensor, got an undefined one");
  return index_put_(indices, full({}, value, {.dtype = dtype(), .device = device()}));
}

}  // namespace hg
