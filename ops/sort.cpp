// Sorting and selection (ops/sort.h): argsort runs the index kernels' stable argsort (NOTE [Sort
// keys] in kernel/formulas.h); sort, topk, kthvalue and median are composites that gather the
// values at the positions it returns, so their gradients are gather's (to the chosen
// elements).
#include "halfgrad/ops/sort.h"

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

void check_defined(const Tensor& x, OpId id) {
  HG_CHECK(x.defined(), "{}: expected a defined tensor, got an undefined one", op_name(id));
}

struct Argsort {
  static constexpr OpId id = OpId::argsort;
  int64_t dim = -1;
  bool descending = false;
  Tensor forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    return kernel_for::index(x).argsort(x, dim, descending);
  }
  Grads backward(OpContext&, const Grads&) { return Grads(1); }
};

Tensor sort_positions(const Tensor& x, int64_t dim, bool descending) {
  return dispatch(Argsort{.dim = dim, .descending = descending}, x);
}

// x's values at `positions` along dim (a 0-d x is its own value).
Tensor values_at(const Tensor& x, int64_t dim, const Tensor& positions) {
  return x.dim() == 0 ? x.clone() : gather(x, dim, positions);
}

struct Sort {
  static constexpr OpId id = OpId::sort;
  static constexpr bool kComposite = true;
  int64_t dim = -1;
  bool descending = false;
  std::tuple<Tensor, Tensor> forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    const Tensor positions = sort_positions(x, dim, descending);
    return {values_at(x, dim, positions), positions};
  }
};

// The sorted positions in [first, first + count) along dim: topk's and kthvalue's selection.
struct Selection {
  int64_t dim;
  Tensor positions;
};
Selection select_sorted(const Tensor& x, int64_t dim, bool descending, int64_t first,
                        int64_t count) {
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "sort");
  const Tensor positions = sort_positions(x, d, descending);
  return {d, x.dim() == 0 ? positions : positions.narrow(d, first, count)};
}

struct Topk {
  static constexpr OpId id = OpId::topk;
  static constexpr bool kComposite = true;
  int64_t k = 1, dim = -1;
  bool largest = true;
  std::tuple<Tensor, Tensor> forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    const int64_t n = x.dim() == 0 ? 1 : x.size(wrap_dim(dim, x.dim(), "topk"));
    HG_CHECK(k >= 0 && k <= n, "topk: expected k in [0, {}] (the size of dim {}), got {}", n, dim,
             k);
    const Selection s = select_sorted(x, dim, largest, 0, k);
    return {values_at(x, s.dim, s.positions), s.positions};
  }
};

struct Kthvalue {
  static constexpr OpId id = OpId::kthvalue;
  static constexpr bool kComposite = true;
  int64_t k = 1, dim = -1;
  bool keepdim = false;
  std::tuple<Tensor, Tensor> forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    const int64_t n = x.dim() == 0 ? 1 : x.size(wrap_dim(dim, x.dim(), "kthvalue"));
    HG_CHECK(k >= 1 && k <= n, "kthvalue: expected k in [1, {}] (the size of dim {}), got {}", n,
             dim, k);
    const Selection s = select_sorted(x, dim, false, k - 1, 1);
    Tensor values = values_at(x, s.dim, s.positions), positions = s.positions;
    if (!keepdim && x.dim() > 0) {
      values = values.squeeze(s.dim);
      positions = positions.squeeze(s.dim);
    }
    return {values, positions};
  }
};

// The lower median along dim; where a row holds NaN, its first NaN (the sorted order puts NaN
// last, in their order).
struct Median {
  static constexpr OpId id = OpId::median;
  static constexpr bool kComposite = true;
  int64_t dim = 0;
  bool keepdim = false;
  std::tuple<Tensor, Tensor> forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = kInt64, .device = x.device()})};
    const int64_t d = wrap_dim(dim, x.dim(), "median");
    const int64_t n = x.size(d);
    HG_CHECK(n > 0, "median: expected a non-empty dim {}, got size 0 (shape {})", d, x.sizes());
    const Tensor sorted_positions = sort_positions(x, d, false);
    Tensor pick =
        full(x.narrow(d, 0, 1).sizes(), (n - 1) / 2, {.dtype = kInt64, .device = x.device()});
    if (x.is_floating_point()) {
      const Tensor nan_count = sum(isnan(x), {d}, /*keepdim=*/true, kInt64);
      pick = where(gt(nan_count, 0), sub(full_like(nan_count, n), nan_count), pick);
    }
    Tensor positions = gather(sorted_positions, d, pick);
    Tensor values = gather(x, d, positions);
    if (!keepdim) {
      values = values.squeeze(d);
      positions = positions.squeeze(d);
    }
    return {values, positions};
  }
};

}  // namespace

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool) {
  return sort_positions(x, dim, descending);
}
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool) {
  return dispatch(Sort{.dim = dim, .descending = descending}, x);
}
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool) {
  return dispatch(Topk{.k = k, .dim = dim, .largest = largest}, x);
}
std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  return dispatch(Kthvalue{.k = k, .dim = dim, .keepdim = keepdim}, x);
}
Tensor median(const Tensor& x) {
  check_defined(x, OpId::median);
  HG_CHECK(x.numel() > 0, "median: expected a non-empty tensor, got shape {}", x.sizes());
  return std::get<0>(dispatch(Median{.dim = 0}, x.reshape({-1})));
}
std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim) {
  return dispatch(Median{.dim = dim, .keepdim = keepdim}, x);
}

}  // namespace hg
