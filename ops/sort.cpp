// Sorting and selection (ops/sort.h): argsort runs the index kernels' stable argsort (NOTE [Sort
// keys] in kernel/formulas.h); sort, topk, kthvalue and median are composites that gather the
// values at the positions it returns, so their gradients are gather's (to the chosen
// elements).
#include "halfgrad/ops/sort.h"

#include <algorithm>
#include <string>

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

// NOTE [Quantiles] torch.quantile and nanquantile, as torch computes them: the slice along dim
// (all elements without one) sorted; q (0-d or 1-D, input's dtype, in [0, 1]) times the last
// rank n - 1 (for nanquantile, the count of values that are not NaN, minus one) gives a
// fractional rank; "linear" lerps the values at its floor and ceiling, "lower", "higher" and
// "nearest" (halves to even) round the rank first, "midpoint" lerps by one half. A slice holding
// NaN has quantile NaN; nanquantile's all-NaN slice too. A 1-D q puts its dim first. Built of
// sort, gather and lerp, so the gradient reaches the elements at the two ranks.
enum class Interpolation : uint8_t { Linear, Lower, Higher, Nearest, Midpoint };

Interpolation parse_interpolation(std::string_view name, const char* op) {
  if (name == "linear") return Interpolation::Linear;
  if (name == "lower") return Interpolation::Lower;
  if (name == "higher") return Interpolation::Higher;
  if (name == "nearest") return Interpolation::Nearest;
  if (name == "midpoint") return Interpolation::Midpoint;
  HG_ERROR(
      "{}: expected interpolation \"linear\", \"lower\", \"higher\", \"nearest\" or "
      "\"midpoint\", got \"{}\"",
      op, name);
}

template <OpId Id>
struct Quantile {
  static constexpr OpId id = Id;
  static constexpr bool kComposite = true;
  std::optional<int64_t> dim;
  bool keepdim = false;
  Interpolation interpolation = Interpolation::Linear;

  Tensor forward(OpContext&, const Tensor& input, const Tensor& q) {
    const char* op = Id == OpId::quantile ? "quantile" : "nanquantile";
    check_defined(input, id);
    HG_CHECK(input.dtype() == kFloat32 || input.dtype() == kFloat64,
             "{}: expected a float32 or float64 input, got {}", op, input.dtype());
    HG_CHECK(input.numel() > 0, "{}: expected a non-empty input, got shape {}", op, input.sizes());
    HG_CHECK(q.defined() && q.dim() <= 1 && q.dtype() == input.dtype(),
             "{}: expected q as a number or a 0-d or 1-D tensor of input's dtype {}, got {}", op,
             input.dtype(),
             q.defined() ? fmt::format("{} of shape {}", q.dtype(), q.sizes())
                         : std::string("an undefined tensor"));
    if (q.numel() > 0) {
      const double low = amin(q).item<double>(), high = amax(q).item<double>();
      HG_CHECK(low >= 0.0 && high <= 1.0, "{}: expected q in [0, 1], got values from {} to {}", op,
               low, high);
    }
    const int64_t d = dim ? wrap_dim(*dim, std::max<int64_t>(input.dim(), 1), op) : 0;
    // The slices along the last dim: [..., n].
    Shape last_d;  // input's dims with d moved last
    for (int64_t i = 0; i < input.dim(); ++i) {
      if (i != d) last_d.push_back(i);
    }
    last_d.push_back(d);
    const Tensor x = !dim               ? input.reshape({-1})
                     : input.dim() == 0 ? input.reshape({1})
                                        : input.permute(last_d);
    const int64_t n = x.size(-1);
    const Tensor sorted = std::get<0>(sort(x, -1));
    const Tensor nan_count = sum(isnan(x), {-1}, /*keepdim=*/true, kInt64);  // [..., 1]
    // q along a leading dim of its own, against [..., 1].
    Shape q_shape{q.numel()};
    for (int64_t i = 0; i < x.dim(); ++i) q_shape.push_back(1);
    const Tensor qs = q.dim() == 1 ? q.reshape(q_shape) : q;
    Tensor ranks;
    if (Id == OpId::quantile) {
      ranks = where(gt(nan_count, 0), Scalar(double(n - 1)), mul(qs, double(n - 1)));
    } else {
      const Tensor last = sub(full_like(nan_count, n - 1), nan_count).to(input.dtype());
      ranks = clamp(mul(qs, last), Scalar(0.0), std::nullopt);
    }
    switch (interpolation) {
      case Interpolation::Lower:
        ranks = floor(ranks);
        break;
      case Interpolation::Higher:
        ranks = ceil(ranks);
        break;
      case Interpolation::Nearest:
        ranks = round(ranks);
        break;
      default:
        break;
    }
    const Tensor below = floor(ranks), above = ceil(ranks);
    Shape batch = ranks.sizes();  // [Q, ..., 1] or [..., 1]
    batch.back() = n;
    const Tensor slices = sorted.expand(batch);
    const Tensor at_below = gather(slices, -1, below.to(kInt64));
    Tensor out = at_below;
    if (interpolation == Interpolation::Linear) {
      out = lerp(at_below, gather(slices, -1, above.to(kInt64)), sub(ranks, below));
    } else if (interpolation == Interpolation::Midpoint) {
      out = lerp(at_below, gather(slices, -1, above.to(kInt64)), 0.5);
    }
    out = out.squeeze(-1);
    if (keepdim) {
      if (!dim) {
        Shape kept = q.dim() == 1 ? Shape{q.numel()} : Shape{};
        for (int64_t i = 0; i < input.dim(); ++i) kept.push_back(1);
        out = out.reshape(kept);
      } else if (input.dim() > 0) {
        out = out.unsqueeze(d + q.dim());
      }
    }
    return out;
  }
};

}  // namespace

Tensor quantile(const Tensor& input, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                std::string_view interpolation) {
  return dispatch(
      Quantile<OpId::quantile>{.dim = dim,
                               .keepdim = keepdim,
                               .interpolation = parse_interpolation(interpolation, "quantile")},
      input, q);
}
Tensor quantile(const Tensor& input, double q, std::optional<int64_t> dim, bool keepdim,
                std::string_view interpolation) {
  check_defined(input, OpId::quantile);
  return quantile(input, full({}, q, {.dtype = input.dtype(), .device = input.device()}), dim,
                  keepdim, interpolation);
}
Tensor nanquantile(const Tensor& input, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                   std::string_view interpolation) {
  return dispatch(Quantile<OpId::nanquantile>{.dim = dim,
                                              .keepdim = keepdim,
                                              .interpolation = parse_interpolation(interpolation,
                                                                                   "nanquantile")},
                  input, q);
}
Tensor nanquantile(const Tensor& input, double q, std::optional<int64_t> dim, bool keepdim,
                   std::string_view interpolation) {
  check_defined(input, OpId::nanquantile);
  return nanquantile(input, full({}, q, {.dtype = input.dtype(), .device = input.device()}), dim,
                     keepdim, interpolation);
}

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
