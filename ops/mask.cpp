// Selection by masks (ops/mask.h). The flat positions of a mask's true elements come from the
// stable argsort of the mask, descending: the trues first, in their order. Coordinates come
// from those positions by floor division and remainder; values by index_select, whose
// gradient is index_add.
#include "halfgrad/ops/mask.h"

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/sort.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;

// The row-major positions of the true elements of a bool tensor flattened (int64, 1-d).
Tensor true_positions(const Tensor& flat_mask) {
  const int64_t count = sum(flat_mask, {}, false, kInt64).item<int64_t>();
  return argsort(flat_mask, 0, /*descending=*/true).narrow(0, 0, count);
}

struct Nonzero {
  static constexpr OpId id = OpId::nonzero;
  Tensor forward(OpContext&, const Tensor& x) {
    HG_CHECK(x.defined(), "nonzero: expected a defined tensor, got an undefined one");
    const Tensor positions = true_positions(ne(x.reshape({-1}), 0));
    std::vector<Tensor> coordinates;
    int64_t stride = 1;
    for (int64_t d = x.dim() - 1; d >= 0; --d) {
      coordinates.insert(coordinates.begin(),
                         remainder(floor_divide(positions, stride), x.size(d)));
      stride *= x.size(d);
    }
    if (coordinates.empty()) {
      return empty({positions.size(0), 0}, {.dtype = kInt64, .device = x.device()});
    }
    return stack(coordinates, 1);
  }
  autograd::GradList backward(OpContext&, const autograd::GradList&) {
    return autograd::GradList(1);
  }
};

struct MaskedSelect {
  static constexpr OpId id = OpId::masked_select;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, const Tensor& x, const Tensor& mask) {
    HG_CHECK(x.defined() && mask.defined(),
             "masked_select: expected an input and a mask, got an undefined tensor");
    HG_CHECK(mask.dtype() == kBool, "masked_select: expected a bool mask, got {}", mask.dtype());
    const Shape shape = broadcast_shapes(x.sizes(), mask.sizes());
    const Tensor positions = true_positions(mask.expand(shape).reshape({-1}));
    return index_select(x.expand(shape).reshape({-1}), 0, positions);
  }
};

}  // namespace

Tensor nonzero(const Tensor& x) { return dispatch(Nonzero{}, x); }
std::vector<Tensor> nonzero_as_tuple(const Tensor& x) {
  const Tensor at = nonzero(x);
  std::vector<Tensor> out;
  for (int64_t d = 0; d < at.size(1); ++d) out.push_back(at.select(1, d).contiguous());
  if (x.dim() == 0) out.push_back(zeros({at.size(0)}, {.dtype = kInt64, .device = x.device()}));
  return out;
}
std::vector<Tensor> where(const Tensor& condition) { return nonzero_as_tuple(condition); }
Tensor masked_select(const Tensor& x, const Tensor& mask) {
  return dispatch(MaskedSelect{}, x, mask);
}

}  // namespace hg
