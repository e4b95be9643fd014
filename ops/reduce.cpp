// Reductions: forward (kernel/reduce.h kernels, accumulating in float32 or float64) and
// backward of each, in op_list.def's order.
#include <cmath>
#include <limits>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/type_promotion.h"

namespace hg {

namespace {

using kernel::Reduction;
using kernel::Scan;
using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

// The reduced dims of a call, resolved (wrapped, sorted); all dims when `dims` is empty.
Shape resolve_dims(const Shape& dims, int64_t ndim, const char* op) {
  Shape out{};
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  std::vector<bool> seen(size_t(std::max<int64_t>(ndim, 1)), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, op);
    HG_CHECK(!seen[w], "{}: dim {} appears more than once in {}", op, w, dims);
    seen[w] = true;
  }
  for (int64_t d = 0; d < std::max<int64_t>(ndim, 1); ++d) {
    if (seen[d] && d < ndim) out.push_back(d);
  }
  return out;
}

// A gradient of a reduced result, expanded back to the input's shape.
Tensor expand_back(const Tensor& grad, const Shape& dims, bool keepdim, const Shape& input_sizes) {
  Tensor g = grad;
  if (!keepdim) {
    for (int64_t d : dims) g = g.unsqueeze(d);  // dims are sorted: each lands in its place
  }
  return g.expand(input_sizes);
}

int64_t count_reduced(const Shape& sizes, const Shape& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= sizes[d];
  return n;
}

void require_floating(const Tensor& x, const char* op) {
  HG_CHECK(x.is_floating_point(), "{}: expected a floating tensor, got {}", op, x.dtype());
}

// ---- sum / mean -----------------------------------------------------------------------------

template <OpId Id>
struct SumMean {
  static constexpr OpId id = Id;
  Shape dims{};
  bool keepdim = false;
  std::optional<DType> dtype{};
  Shape input_sizes{};
  DType input_dtype = kFloat32;

  bool autocast_eligible() const { return !dtype.has_value(); }
  Tensor forward(OpContext&, const Tensor& x) {
    const char* name = Id == OpId::sum ? "sum" : "mean";
    dims = resolve_dims(dims, x.dim(), name);
    input_sizes = x.sizes();
    input_dtype = x.dtype();
    if (Id == OpId::mean && !dtype) require_floating(x, name);
    const DType out_dtype = dtype.value_or(is_floating_point(x.dtype()) ? x.dtype() : kInt64);
    return kernel_for::reduce(x).reduce(Id == OpId::sum ? Reduction::Sum : Reduction::Mean, x, dims,
                                        keepdim, out_dtype, /*p=*/2.0);
  }
  Grads backward(OpContext&, const Grads& grads) {
    Tensor g = expand_back(grads[0], dims, keepdim, input_sizes);
    if (Id == OpId::mean) g = div(g, double(count_reduced(input_sizes, dims)));
    return {g.to(input_dtype)};
  }
};

// ---- prod ------------------------------------------------------------------------------------

struct Prod {
  static constexpr OpId id = OpId::prod;
  Shape dims{};
  bool keepdim = false;
  Tensor forward(OpContext& ctx, const Tensor& x) {
    dims = resolve_dims(dims, x.dim(), "prod");
    Tensor out = kernel_for::reduce(x).reduce(Reduction::Prod, x, dims, keepdim,
                                              is_floating_point(x.dtype()) ? x.dtype() : kInt64,
                                              /*p=*/2.0);
    ctx.save({x});
    ctx.save_output(out);
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), out = ctx.saved(1);
    // d prod / d x_i = prod of the others = out / x_i where x_i != 0. A slice with zeros:
    // only a lone zero gets a gradient (the product of the others), computed directly.
    const Tensor g = expand_back(grads[0], dims, keepdim, x.sizes());
    const Tensor expanded_out = expand_back(out, dims, keepdim, x.sizes());
    const Tensor nonzero = ne(x, 0).to(x.dtype());
    const Tensor safe_x = add(x, (1.0 - nonzero));  // 1 where x == 0
    Tensor others = div(expanded_out, safe_x);
    // Where x == 0: the product of the other elements, i.e. the product with that zero
    // replaced by one (zero again if the slice has another zero).
    const Tensor with_ones = expand_back(prod(safe_x, dims, keepdim), dims, keepdim, x.sizes());
    const Tensor zeros_in_slice =
        expand_back(sum((1.0 - nonzero), dims, keepdim), dims, keepdim, x.sizes());
    const Tensor lone_zero = mul((1.0 - nonzero), eq(zeros_in_slice, 1).to(x.dtype()));
    others = add(mul(others, nonzero), mul(with_ones, lone_zero));
    return {mul(g, others).to(x.dtype())};
  }
};

// ---- amax / amin (and max / min over all elements) -----------------------------------------

template <OpId Id>
struct Extreme {
  static constexpr OpId id = Id;
  static constexpr bool kMin = Id == OpId::min || Id == OpId::amin;
  Shape dims{};
  bool keepdim = false;
  Tensor forward(OpContext& ctx, const Tensor& x) {
    dims = resolve_dims(dims, x.dim(), op_name(Id).data());
    Tensor out = kernel_for::reduce(x).reduce(kMin ? Reduction::Amin : Reduction::Amax, x, dims,
                                              keepdim, x.dtype(), /*p=*/2.0);
    ctx.save({x});
    ctx.save_output(out);
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), out = ctx.saved(1);
    // Split evenly among the elements equal to the extreme, as torch's amax and amin.
    const Tensor hit = eq(x, expand_back(out, dims, keepdim, x.sizes())).to(x.dtype());
    const Tensor count = expand_back(sum(hit, dims, keepdim), dims, keepdim, x.sizes());
    return {div(mul(expand_back(grads[0], dims, keepdim, x.sizes()), hit), count)};
  }
};

// ---- argmax ----------------------------------------------------------------------------------

struct Argmax {
  static constexpr OpId id = OpId::argmax;
  std::optional<int64_t> dim{};
  bool keepdim = false;
  Tensor forward(OpContext&, const Tensor& x) {
    return kernel_for::reduce(x).argmax(x, dim, keepdim);
  }
  Grads backward(OpContext&, const Grads&) { return Grads(1); }
};

// ---- var -------------------------------------------------------------------------------------

struct Var {
  static constexpr OpId id = OpId::var;
  Shape dims{};
  int64_t correction = 1;
  bool keepdim = false;
  Tensor forward(OpContext& ctx, const Tensor& x) {
    require_floating(x, "var");
    dims = resolve_dims(dims, x.dim(), "var");
    ctx.save({x});
    return kernel_for::reduce(x).var(x, dims, correction, keepdim, x.dtype());
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0);
    const double n = double(count_reduced(x.sizes(), dims));
    const Tensor centered = sub(x, mean(x, dims, /*keepdim=*/true));
    const Tensor g = expand_back(grads[0], dims, keepdim, x.sizes());
    return {mul(mul(g, centered), 2.0 / std::max(n - double(correction), 0.0))};
  }
};

// ---- norm ------------------------------------------------------------------------------------

struct Norm {
  static constexpr OpId id = OpId::norm;
  double p = 2.0;
  Shape dims{};
  bool keepdim = false;
  Tensor forward(OpContext& ctx, const Tensor& x) {
    require_floating(x, "norm");
    HG_CHECK(p >= 0, "norm: expected p >= 0, got {}", p);
    dims = resolve_dims(dims, x.dim(), "norm");
    Tensor out = kernel_for::reduce(x).reduce(Reduction::Norm, x, dims, keepdim, x.dtype(), p);
    ctx.save({x});
    ctx.save_output(out);
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), out = ctx.saved(1);
    const Tensor g = expand_back(grads[0], dims, keepdim, x.sizes());
    const Tensor n = expand_back(out, dims, keepdim, x.sizes());
    if (p == 0.0) return {zeros_like(x)};
    if (std::isinf(p)) {  // the largest |x| takes the gradient (split among ties)
      const Tensor hit = eq(abs(x), n).to(x.dtype());
      const Tensor count = expand_back(sum(hit, dims, keepdim), dims, keepdim, x.sizes());
      return {div(mul(mul(g, sign(x)), hit), count)};
    }
    // d||x||_p / dx = x |x|^(p-2) / ||x||^(p-1); zero where the norm is zero.
    const Tensor safe_n = add(n, eq(n, 0).to(x.dtype()));
    const Tensor scale =
        p == 2.0 ? div(x, safe_n) : div(mul(sign(x), pow(abs(x), p - 1)), pow(safe_n, p - 1));
    return {mul(mul(g, scale), ne(n, 0).to(x.dtype()))};
  }
};

// ---- logsumexp -------------------------------------------------------------------------------

struct LogSumExp {
  static constexpr OpId id = OpId::logsumexp;
  Shape dims{};
  bool keepdim = false;
  Tensor forward(OpContext& ctx, const Tensor& x) {
    require_floating(x, "logsumexp");
    dims = resolve_dims(dims, x.dim(), "logsumexp");
    Tensor out =
        kernel_for::reduce(x).reduce(Reduction::LogSumExp, x, dims, keepdim, x.dtype(), /*p=*/2.0);
    ctx.save({x});
    ctx.save_output(out);
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), out = ctx.saved(1);
    const Tensor softmax_x = exp(sub(x, expand_back(out, dims, keepdim, x.sizes())));
    return {mul(expand_back(grads[0], dims, keepdim, x.sizes()), softmax_x)};
  }
};

// ---- cumsum ----------------------------------------------------------------------------------

struct Cumsum {
  static constexpr OpId id = OpId::cumsum;
  int64_t dim = 0;
  std::optional<DType> dtype{};
  DType input_dtype = kFloat32;
  bool autocast_eligible() const { return !dtype.has_value(); }
  Tensor forward(OpContext&, const Tensor& x) {
    dim = wrap_dim(dim, x.dim(), "cumsum");
    input_dtype = x.dtype();
    return kernel_for::reduce(x).scan(
        Scan::Sum, x, dim, dtype.value_or(is_floating_point(x.dtype()) ? x.dtype() : kInt64));
  }
  Grads backward(OpContext&, const Grads& grads) {
    // The gradient of an inclusive prefix sum is the suffix sum: total - prefix + self.
    const Tensor& g = grads[0];
    const Tensor total = sum(g, {dim}, /*keepdim=*/true);
    return {add(sub(total, cumsum(g, dim)), g).to(input_dtype)};
  }
};

// x's suffix sums along dim: the gradient of a prefix product or log-sum-exp gathers from the
// positions after it.
Tensor reverse_cumsum(const Tensor& v, int64_t dim) {
  return flip(cumsum(flip(v, {dim}), dim), {dim});
}
Tensor reverse_logcumsumexp(const Tensor& v, int64_t dim) {
  return flip(logcumsumexp(flip(v, {dim}), dim), {dim});
}

// ---- cumprod ---------------------------------------------------------------------------------

struct Cumprod {
  static constexpr OpId id = OpId::cumprod;
  int64_t dim = 0;
  std::optional<DType> dtype{};
  DType input_dtype = kFloat32;
  bool autocast_eligible() const { return !dtype.has_value(); }
  Tensor forward(OpContext& ctx, const Tensor& x) {
    dim = wrap_dim(dim, x.dim(), "cumprod");
    input_dtype = x.dtype();
    Tensor out = kernel_for::reduce(x).scan(
        Scan::Prod, x, dim, dtype.value_or(is_floating_point(x.dtype()) ? x.dtype() : kInt64));
    ctx.save({x});
    ctx.save_output(out);
    return out;
  }
  // d out_j / d x_k = prod_{i <= j, i != k} x_i for j >= k. Before a row's first zero (k < z)
  // that is out_j / x_k, and the out_j from z on are 0; at the first zero it is the prefix
  // product with that zero taken as 1; after it, every product holds the zero.
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor& g = grads[0];
    const Tensor x = ctx.saved(0).to(g.dtype()), out = ctx.saved(1).to(g.dtype());
    if (x.dim() == 0) return {g.to(input_dtype)};
    const Tensor is_zero = eq(x.detach(), 0);
    const Tensor zeros_so_far = cumsum(is_zero, dim);
    const Tensor before_first = eq(zeros_so_far, 0);
    const Tensor first_zero = where(is_zero, eq(zeros_so_far, 1), false);
    const Tensor before = div(reverse_cumsum(mul(g, out), dim), where(before_first, x, 1));
    const Tensor at_first = reverse_cumsum(mul(g, cumprod(where(first_zero, 1, x), dim)), dim);
    return {where(before_first, before, where(first_zero, at_first, 0)).to(input_dtype)};
  }
};

// ---- logcumsumexp ----------------------------------------------------------------------------

struct Logcumsumexp {
  static constexpr OpId id = OpId::logcumsumexp;
  int64_t dim = 0;
  Tensor forward(OpContext& ctx, const Tensor& x) {
    require_floating(x, "logcumsumexp");
    dim = wrap_dim(dim, x.dim(), "logcumsumexp");
    Tensor out = kernel_for::reduce(x).scan(Scan::LogSumExp, x, dim, x.dtype());
    ctx.save({x});
    ctx.save_output(out);
    return out;
  }
  // dx_k = sum_{j >= k} g_j exp(x_k - out_j), summed in log space: the positive and the
  // negative parts of g each as a reverse log-cumsum-exp of log|g_j| - out_j (torch's form),
  // so no exp overflows.
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor& g = grads[0];
    const Tensor x = ctx.saved(0), out = ctx.saved(1);
    if (x.dim() == 0) return {g};
    const double inf = std::numeric_limits<double>::infinity();
    const auto part = [&](const Tensor& positive) {
      const Tensor log_g = where(positive, log(where(positive, abs(g), 1)), -inf);
      return exp(add(reverse_logcumsumexp(sub(log_g, out), dim), x));
    };
    return {sub(part(gt(g, 0)), part(lt(g, 0)))};
  }
};

// ---- argmin ----------------------------------------------------------------------------------

struct Argmin {
  static constexpr OpId id = OpId::argmin;
  std::optional<int64_t> dim{};
  bool keepdim = false;
  Tensor forward(OpContext&, const Tensor& x) {
    if (dim) return kernel_for::reduce(x).min_dim(x, *dim, keepdim).indices;
    // The index into x flattened in row-major order; keepdim gives x.dim() dims of size 1.
    HG_CHECK(x.numel() > 0, "argmin: expected a non-empty tensor when no dim is given, got {}",
             x.sizes());
    const Tensor index = kernel_for::reduce(x).min_dim(x.reshape({-1}), 0, false).indices;
    return keepdim ? index.reshape(Shape(size_t(x.dim()), 1)) : index;
  }
  Grads backward(OpContext&, const Grads&) { return Grads(1); }
};

// ---- any / all: bool results, from the count of nonzero (or zero) elements -------------------
//
// Counting rather than a max keeps torch's answer over zero elements (any false, all true);
// NaN is nonzero.
template <OpId Id>
struct AnyAll {
  static constexpr OpId id = Id;
  static constexpr bool kComposite = true;
  Shape dims{};
  bool keepdim = false;
  Tensor forward(OpContext&, const Tensor& x) {
    HG_CHECK(x.defined(), "{}: expected a defined tensor, got an undefined one", op_name(Id));
    const Tensor v = x.detach();
    if constexpr (Id == OpId::any) {
      return gt(sum(ne(v, 0), dims, keepdim, kInt64), 0);
    } else {
      return eq(sum(eq(v, 0), dims, keepdim, kInt64), 0);
    }
  }
};

// ---- std: the square root of var -------------------------------------------------------------

struct Std {
  static constexpr OpId id = OpId::std;
  static constexpr bool kComposite = true;
  Shape dims{};
  int64_t correction = 1;
  bool keepdim = false;
  Tensor forward(OpContext&, const Tensor& x) { return sqrt(var(x, dims, correction, keepdim)); }
};

// ---- cosine_similarity, normalize, cdist ------------------------------------------------------

// x / max(||x||_p, eps) along dim.
struct Normalize {
  static constexpr OpId id = OpId::normalize;
  static constexpr bool kComposite = true;
  double p = 2.0;
  int64_t dim = 1;
  double eps = 1e-12;
  Tensor forward(OpContext&, const Tensor& x) {
    require_floating(x, "normalize");
    const Tensor n = norm(x, p, {dim}, /*keepdim=*/true);
    return div(x, clamp(n, Scalar(eps), std::nullopt));
  }
};

// The sum along dim of x1 / max(||x1||, eps) times x2 / max(||x2||, eps), after broadcasting
// (torch's form since 1.12: each side normalised on its own, so the product of two large norms
// cannot overflow).
struct CosineSimilarity {
  static constexpr OpId id = OpId::cosine_similarity;
  static constexpr bool kComposite = true;
  int64_t dim = 1;
  double eps = 1e-8;
  Tensor forward(OpContext&, const Tensor& x1, const Tensor& x2) {
    require_floating(x1, "cosine_similarity");
    require_floating(x2, "cosine_similarity");
    const Shape shape = broadcast_shapes(x1.sizes(), x2.sizes());
    const int64_t d = wrap_dim(dim, int64_t(shape.size()), "cosine_similarity");
    const auto unit = [&](const Tensor& x) {
      const Tensor full_x = x.expand(shape);
      const Tensor n = norm(full_x, 2.0, {d}, /*keepdim=*/true);
      return div(full_x, clamp(n, Scalar(eps), std::nullopt));
    };
    return sum(mul(unit(x1), unit(x2)), {d});
  }
};

// The p-norm distance between each row of x1 [B, P, M] and each row of x2 [B, R, M] ([P, M] and
// [R, M] without a batch): [B, P, R]. From the differences themselves (torch's exact path, not
// its matmul shortcut for p = 2, which cancels for near points); the gradient of a zero
// distance is zero (norm's).
struct Cdist {
  static constexpr OpId id = OpId::cdist;
  static constexpr bool kComposite = true;
  double p = 2.0;
  Tensor forward(OpContext&, const Tensor& x1, const Tensor& x2) {
    require_floating(x1, "cdist");
    require_floating(x2, "cdist");
    HG_CHECK(x1.dim() >= 2 && x2.dim() >= 2,
             "cdist: expected inputs of at least 2 dims ([*, P, M] and [*, R, M]), got {} and {}",
             x1.sizes(), x2.sizes());
    HG_CHECK(x1.size(-1) == x2.size(-1),
             "cdist: expected rows of one length M, got {} ({}) and {} ({})", x1.size(-1),
             x1.sizes(), x2.size(-1), x2.sizes());
    HG_CHECK(p >= 0, "cdist: expected p >= 0, got {}", p);
    const Tensor difference = sub(x1.unsqueeze(-2), x2.unsqueeze(-3));  // [*, P, R, M]
    return norm(difference, p, {-1});
  }
};

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  return dispatch(SumMean<OpId::sum>{.dims = dims, .keepdim = keepdim, .dtype = dtype}, x);
}
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim, std::optional<DType> dtype) {
  return dispatch(SumMean<OpId::mean>{.dims = dims, .keepdim = keepdim, .dtype = dtype}, x);
}
Tensor prod(const Tensor& x, const Shape& dims, bool keepdim) {
  return dispatch(Prod{.dims = dims, .keepdim = keepdim}, x);
}
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return dispatch(Extreme<OpId::amax>{.dims = dims, .keepdim = keepdim}, x);
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return dispatch(Extreme<OpId::amin>{.dims = dims, .keepdim = keepdim}, x);
}
Tensor max(const Tensor& x) { return dispatch(Extreme<OpId::max>{}, x); }
Tensor min(const Tensor& x) { return dispatch(Extreme<OpId::min>{}, x); }
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return dispatch(Argmax{.dim = dim, .keepdim = keepdim}, x);
}
Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return dispatch(Var{.dims = dims, .correction = correction, .keepdim = keepdim}, x);
}
Tensor norm(const Tensor& x, double p, const Shape& dims, bool keepdim) {
  return dispatch(Norm{.p = p, .dims = dims, .keepdim = keepdim}, x);
}
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  return dispatch(LogSumExp{.dims = dims, .keepdim = keepdim}, x);
}
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return dispatch(Cumsum{.dim = dim, .dtype = dtype}, x);
}
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  return dispatch(Cumprod{.dim = dim, .dtype = dtype}, x);
}
Tensor logcumsumexp(const Tensor& x, int64_t dim) { return dispatch(Logcumsumexp{.dim = dim}, x); }
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return dispatch(Argmin{.dim = dim, .keepdim = keepdim}, x);
}
Tensor any(const Tensor& x, const Shape& dims, bool keepdim) {
  return dispatch(AnyAll<OpId::any>{.dims = dims, .keepdim = keepdim}, x);
}
Tensor all(const Tensor& x, const Shape& dims, bool keepdim) {
  return dispatch(AnyAll<OpId::all>{.dims = dims, .keepdim = keepdim}, x);
}
Tensor std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return dispatch(Std{.dims = dims, .correction = correction, .keepdim = keepdim}, x);
}
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, const Shape& dims, int64_t correction,
                                    bool keepdim) {
  return {var(x, dims, correction, keepdim), mean(x, dims, keepdim)};
}
std::tuple<Tensor, Tensor> std_mean(const Tensor& x, const Shape& dims, int64_t correction,
                                    bool keepdim) {
  return {std(x, dims, correction, keepdim), mean(x, dims, keepdim)};
}
Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  return dispatch(Normalize{.p = p, .dim = dim, .eps = eps}, x);
}
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  return dispatch(CosineSimilarity{.dim = dim, .eps = eps}, x1, x2);
}
Tensor cdist(const Tensor& x1, const Tensor& x2, double p) {
  return dispatch(Cdist{.p = p}, x1, x2);
}

namespace {

// norm(input - other, p), the two broadcast together: torch.dist.
struct Dist {
  static constexpr OpId id = OpId::dist;
  static constexpr bool kComposite = true;
  double p = 2.0;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& other) {
    HG_CHECK(input.is_floating_point() && other.is_floating_point(),
             "dist: expected floating tensors, got {} and {}", input.dtype(), other.dtype());
    return norm(sub(input, other), p);
  }
};

// norm(x1 - x2 + eps, p) over the last dim of the two broadcast together:
// torch.nn.functional.pairwise_distance (eps keeps a zero difference off norm's kink).
struct PairwiseDistance {
  static constexpr OpId id = OpId::pairwise_distance;
  static constexpr bool kComposite = true;
  double p = 2.0;
  double eps = 1e-6;
  bool keepdim = false;
  Tensor forward(OpContext&, const Tensor& x1, const Tensor& x2) {
    require_floating(x1, "pairwise_distance");
    require_floating(x2, "pairwise_distance");
    HG_CHECK(x1.dim() >= 1 || x2.dim() >= 1,
             "pairwise_distance: expected tensors of at least one dim, got two 0-d tensors");
    return norm(add(sub(x1, x2), eps), p, {-1}, keepdim);
  }
};

// The p-norm distance of every pair of rows i < j of input [N, M], in the order (0, 1), (0, 2),
// ..., (N - 2, N - 1): [N (N - 1) / 2], torch.pdist. The rows of each pair are gathered by
// index, so the difference is exact and a zero distance has norm's zero gradient.
struct Pdist {
  static constexpr OpId id = OpId::pdist;
  static constexpr bool kComposite = true;
  double p = 2.0;
  Tensor forward(OpContext&, const Tensor& input) {
    require_floating(input, "pdist");
    HG_CHECK(input.dim() == 2, "pdist: expected input of shape [N, M], got {}", input.sizes());
    const int64_t N = input.size(0);
    std::vector<int64_t> first, second;
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t j = i + 1; j < N; ++j) {
        first.push_back(i);
        second.push_back(j);
      }
    }
    const auto rows = [&](const std::vector<int64_t>& index) {
      const Tensor positions = tensor(index, {int64_t(index.size())}, kInt64).to(input.device());
      return index_select(input, 0, positions);
    };
    return norm(sub(rows(first), rows(second)), p, {1});
  }
};

// Each slice of input along dim (input.select(dim, i)) whose p-norm exceeds maxnorm, scaled to
// that norm: the factor maxnorm / (norm + 1e-7), as torch.renorm. A 16-bit input's norms and
// factors are float32, and the scaled slice rounds once, as torch's accumulate type does.
struct Renorm {
  static constexpr OpId id = OpId::renorm;
  static constexpr bool kComposite = true;
  double p = 2.0;
  int64_t dim = 0;
  double maxnorm = 1.0;
  Tensor forward(OpContext&, const Tensor& input) {
    require_floating(input, "renorm");
    HG_CHECK(input.dim() >= 2, "renorm: expected input of at least 2 dims, got shape {}",
             input.sizes());
    const int64_t d = wrap_dim(dim, input.dim(), "renorm");
    Shape others;
    for (int64_t i = 0; i < input.dim(); ++i) {
      if (i != d) others.push_back(i);
    }
    const bool narrow = input.dtype() == kFloat16 || input.dtype() == kBFloat16;
    const Tensor wide = narrow ? input.to(kFloat32) : input;
    const Tensor norms = norm(wide, p, others, /*keepdim=*/true);
    const Tensor factor =
        where(gt(norms, maxnorm), div(full_like(norms, maxnorm), add(norms, 1e-7)), 1.0);
    const Tensor out = mul(wide, factor);
    return narrow ? out.to(input.dtype()) : out;
  }
};

}  // namespace

Tensor renorm(const Tensor& input, double p, int64_t dim, double maxnorm) {
  HG_CHECK(p > 0.0, "renorm: expected p > 0, got {}", p);
  HG_CHECK(maxnorm >= 0.0, "renorm: expected maxnorm >= 0, got {}", maxnorm);
  return dispatch(Renorm{.p = p, .dim = dim, .maxnorm = maxnorm}, input);
}

Tensor dist(const Tensor& input, const Tensor& other, double p) {
  return dispatch(Dist{.p = p}, input, other);
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  return dispatch(PairwiseDistance{.p = p, .eps = eps, .keepdim = keepdim}, x1, x2);
}

Tensor pdist(const Tensor& input, double p) {
  HG_CHECK(p >= 0.0, "pdist: expected p >= 0, got {}", p);
  return dispatch(Pdist{.p = p}, input);
}

}  // namespace hg
