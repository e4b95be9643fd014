// CPU kernels for the neural-network ops; the contract is in nn_kernels.h.
//
// Dims: N batch, C channels, G groups (Cg = C / G channels each), O output channels
// (Og = O / groups), S the flattened spatial size, H/W height/width, K = Cg kH kW (rows of a
// group's im2col matrix), L = Hout Wout (its columns), D the softmax dim or embedding width.
//
// Every kernel is templated on the storage type T and computes in A = acc_t<T>: float for
// float16/bfloat16/float32, double for float64. Loops that write disjoint parts of the output
// run on OpenMP threads when there is enough work; no kernel's result depends on the number
// of threads (reductions never split across threads).
#include "halfgrad/cpu/nn_kernels.h"

#include "halfgrad/cpu/kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/kernel/checks.h"
#include "halfgrad/core/strided_loop.h"

namespace hg::cpu {

namespace {

// ---- shared helpers -----------------------------------------------------------------------

template <class T>
using acc_t = compute_t<T>;

template <class T>
acc_t<T> load(T value) {
  return cast_value<acc_t<T>>(value);
}
template <class T, class A>
T store(A value) {
  return cast_value<T>(value);
}

// Checks and shapes shared with the CUDA kernels (kernel/checks.h).
using kernel::acc_dtype;
using kernel::check_shape;
using kernel::product;

// Calls f(TypeTag<A>{}) for an accumulation dtype: float32 or float64.
template <class F>
auto dispatch_acc(DType acc, F&& f) {
  return acc == kFloat64 ? f(TypeTag<double>{}) : f(TypeTag<float>{});
}

// Defined, on the CPU, floating.
void check_input(const char* op, const char* what, const Tensor& t) {
  kernel::check_input(op, what, t, kCPU);
}

// t as a contiguous tensor of dtype (no copy when it already is one).
Tensor contiguous_as(const Tensor& t, DType dtype) { return t.to(dtype).contiguous(); }

// The values of an optional parameter in the accumulation type; `fill` when absent.
template <class A>
std::vector<A> values_or(const Tensor& t, int64_t n, A fill) {
  return t.defined() ? t.to_vector<A>() : std::vector<A>(size_t(n), fill);
}

// Runs f(i) for i in [0, count), on OpenMP threads when count * work_per_item (elements
// touched) is worth it. f must not throw: every check happens before a kernel starts.
template <class F>
void parallel_for(int64_t count, int64_t work_per_item, F&& f) {
  const bool parallel = count > 1 && count * work_per_item >= kParallelGrain &&
                        omp_get_max_threads() > 1 && !omp_in_parallel();
  if (!parallel) {
    for (int64_t i = 0; i < count; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) f(i);
}

// Sums term(x) over `chunks` runs of `length` values, the runs `stride` apart. Each block of
// kSumBlock values is summed on its own first, so the rounding error of a float sum grows with
// the block size plus the number of blocks instead of with the count.
constexpr int64_t kSumBlock = 256;

template <class T, class Term>
acc_t<T> blocked_sum(const T* x, int64_t chunks, int64_t length, int64_t stride, Term term) {
  using A = acc_t<T>;
  A total = 0;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const T* run = x + chunk * stride;
    for (int64_t begin = 0; begin < length; begin += kSumBlock) {
      const int64_t end = std::min(length, begin + kSumBlock);
      A partial = 0;
      for (int64_t i = begin; i < end; ++i) partial += term(load(run[i]));
      total += partial;
    }
  }
  return total;
}

template <class A>
struct Moments {
  A mean;
  A var;  // biased: divided by the count
};

// Mean, then the mean squared deviation from it: two passes, so a mean far from zero does not
// cancel the variance away as E[x^2] - E[x]^2 would.
template <class T>
Moments<acc_t<T>> moments(const T* x, int64_t chunks, int64_t length, int64_t stride) {
  using A = acc_t<T>;
  const A count = A(chunks * length);
  const A mean = blocked_sum(x, chunks, length, stride, [](A v) { return v; }) / count;
  const A var = blocked_sum(x, chunks, length, stride,
                            [mean](A v) {
                              const A deviation = v - mean;
                              return deviation * deviation;
                            }) /
                count;
  return {mean, var};
}

template <class A>
A inverse_std(A var, double eps) {
  return A(1) / std::sqrt(var + A(eps));
}

// ---- softmax ------------------------------------------------------------------------------

// x viewed as [outer, D, inner] around the softmax dim.
using kernel::DimSplit;
using kernel::split_at;

// The softmax dim has stride `inner`. A unit of work is one outer index and a slab of up to
// kSlab neighbouring inner positions, so each pass over D reads kSlab contiguous values
// (inner == 1 makes a slab a single contiguous row).
constexpr int64_t kSlab = 64;

template <class F>
void for_each_slab(const DimSplit& s, F&& f) {
  const int64_t slabs = (s.inner + kSlab - 1) / kSlab;
  parallel_for(s.outer * slabs, s.size * std::min(s.inner, kSlab), [&](int64_t unit) {
    const int64_t outer = unit / slabs, first = (unit % slabs) * kSlab;
    f(outer * s.size * s.inner + first, std::min(kSlab, s.inner - first));
  });
}

template <class T, bool kLog>
void softmax_forward_kernel(const T* x, T* y, const DimSplit& s) {
  using A = acc_t<T>;
  for_each_slab(s, [&](int64_t offset, int64_t width) {
    const T* xs = x + offset;
    T* ys = y + offset;
    A max[kSlab], sum[kSlab];
    std::fill_n(max, width, -std::numeric_limits<A>::infinity());
    std::fill_n(sum, width, A(0));
    for (int64_t d = 0; d < s.size; ++d) {
      const T* row = xs + d * s.inner;
      for (int64_t j = 0; j < width; ++j) max[j] = std::max(max[j], load(row[j]));
    }
    for (int64_t d = 0; d < s.size; ++d) {
      const T* row = xs + d * s.inner;
      for (int64_t j = 0; j < width; ++j) sum[j] += std::exp(load(row[j]) - max[j]);
    }
    for (int64_t d = 0; d < s.size; ++d) {
      const T* row = xs + d * s.inner;
      T* out = ys + d * s.inner;
      if constexpr (kLog) {
        for (int64_t j = 0; j < width; ++j) {
          out[j] = store<T>(load(row[j]) - max[j] - std::log(sum[j]));
        }
      } else {
        for (int64_t j = 0; j < width; ++j) {
          out[j] = store<T>(std::exp(load(row[j]) - max[j]) / sum[j]);
        }
      }
    }
  });
}

template <class T, bool kLog>
void softmax_backward_kernel(const T* dy, const T* y, T* dx, const DimSplit& s) {
  using A = acc_t<T>;
  for_each_slab(s, [&](int64_t offset, int64_t width) {
    A sum[kSlab];
    std::fill_n(sum, width, A(0));
    // softmax: sum(dy * y); log_softmax: sum(dy).
    for (int64_t d = 0; d < s.size; ++d) {
      const int64_t row = offset + d * s.inner;
      for (int64_t j = 0; j < width; ++j) {
        sum[j] += kLog ? load(dy[row + j]) : load(dy[row + j]) * load(y[row + j]);
      }
    }
    for (int64_t d = 0; d < s.size; ++d) {
      const int64_t row = offset + d * s.inner;
      for (int64_t j = 0; j < width; ++j) {
        const A g = load(dy[row + j]), out = load(y[row + j]);
        dx[row + j] = store<T>(kLog ? g - std::exp(out) * sum[j] : out * (g - sum[j]));
      }
    }
  });
}

template <bool kLog>
Tensor softmax_forward(const Tensor& x, int64_t dim, const char* op) {
  check_input(op, "input", x);
  const DimSplit split = split_at(x, dim, op);
  const Tensor xc = x.contiguous();
  Tensor y = empty(x.sizes(), x.dtype());
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_forward_kernel<T, kLog>(xc.data_ptr<T>(), y.data_ptr<T>(), split);
  });
  return y;
}

template <bool kLog>
Tensor softmax_backward_impl(const Tensor& dy, const Tensor& y, int64_t dim, const char* op) {
  kernel::check_softmax_backward(op, dy, y, kCPU);
  const DimSplit split = split_at(y, dim, op);
  const Tensor dyc = dy.contiguous(), yc = y.contiguous();
  Tensor dx = empty(y.sizes(), y.dtype());
  visit_floating_dtype(op, y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_kernel<T, kLog>(dyc.data_ptr<T>(), yc.data_ptr<T>(), dx.data_ptr<T>(), split);
  });
  return dx;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_forward<false>(x, dim, "softmax"); }

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_forward<true>(x, dim, "log_softmax");
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim) {
  return softmax_backward_impl<false>(dy, y, dim, "softmax_backward");
}

Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim) {
  return softmax_backward_impl<true>(dy, y, dim, "log_softmax_backward");
}

// ---- layer_norm ---------------------------------------------------------------------------
//
// x: [rows, M] once flattened, M = prod(normalized_shape). xhat = (x - mean) * rstd,
// out = xhat * weight + bias. With g = dy * weight, the backward is
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      (means over the M values of a row)
//   dweight = sum over rows of dy * xhat,  dbias = sum over rows of dy.
// group_norm and batch_norm (training) use the same dx formula over their own sets.

namespace {

// Saved statistics: shape [count], any floating dtype (read in the accumulation type).
template <class A>
std::vector<A> saved_stat(const char* op, const char* what, const Tensor& t, const Shape& shape,
                          const Tensor& x) {
  kernel::check_saved_stat(op, what, t, shape, x);
  return t.to_vector<A>();
}

}  // namespace

NormForward layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  const kernel::LayerNormGeometry ln = kernel::layer_norm_geometry(op, x, normalized_shape, kCPU);
  const int64_t rows = ln.rows, M = ln.M;
  kernel::check_optional_param(op, "weight (of normalized_shape)", weight, normalized_shape, x);
  kernel::check_optional_param(op, "bias (of normalized_shape)", bias, normalized_shape, x);
  const DType acc = acc_dtype(x.dtype());
  NormForward result{empty(x.sizes(), x.dtype()), empty({rows}, acc), empty({rows}, acc)};
  const Tensor xc = x.contiguous();
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const std::vector<A> w = values_or<A>(weight, M, 1), b = values_or<A>(bias, M, 0);
    const T* xp = xc.data_ptr<T>();
    T* out = result.out.data_ptr<T>();
    A* mean = result.mean.data_ptr<A>();
    A* rstd = result.rstd.data_ptr<A>();
    parallel_for(rows, M, [&](int64_t r) {
      const T* xr = xp + r * M;
      const Moments<A> m = moments(xr, 1, M, 0);
      const A rs = inverse_std(m.var, eps);
      mean[r] = m.mean;
      rstd[r] = rs;
      for (int64_t i = 0; i < M; ++i) {
        out[r * M + i] = store<T>((load(xr[i]) - m.mean) * rs * w[i] + b[i]);
      }
    });
  });
  return result;
}

NormBackward layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const Shape& normalized_shape,
                                 const Tensor& weight, bool has_bias) {
  const char* op = "layer_norm_backward";
  const kernel::LayerNormGeometry ln = kernel::layer_norm_geometry(op, x, normalized_shape, kCPU);
  const int64_t rows = ln.rows, M = ln.M;
  kernel::check_grad_output(op, dy, x);
  kernel::check_optional_param(op, "weight (of normalized_shape)", weight, normalized_shape, x);
  const DType acc = acc_dtype(x.dtype());
  const Tensor xc = x.contiguous(), dyc = dy.contiguous();
  NormBackward result{empty(x.sizes(), x.dtype()), Tensor(), Tensor()};
  Tensor dweight = weight.defined() ? empty(normalized_shape, acc) : Tensor();
  Tensor dbias = has_bias ? empty(normalized_shape, acc) : Tensor();
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const std::vector<A> mu = saved_stat<A>(op, "mean", mean, {rows}, x);
    const std::vector<A> rs = saved_stat<A>(op, "rstd", rstd, {rows}, x);
    const std::vector<A> w = values_or<A>(weight, M, 1);
    const T* xp = xc.data_ptr<T>();
    const T* g = dyc.data_ptr<T>();
    T* dx = result.dx.data_ptr<T>();
    parallel_for(rows, 2 * M, [&](int64_t r) {
      const int64_t base = r * M;
      A sum_g = 0, sum_gx = 0;
      for (int64_t i = 0; i < M; ++i) {
        const A gi = load(g[base + i]) * w[i];
        sum_g += gi;
        sum_gx += gi * (load(xp[base + i]) - mu[r]) * rs[r];
      }
      const A mean_g = sum_g / A(M), mean_gx = sum_gx / A(M);
      for (int64_t i = 0; i < M; ++i) {
        const A xhat = (load(xp[base + i]) - mu[r]) * rs[r];
        dx[base + i] = store<T>(rs[r] * (load(g[base + i]) * w[i] - mean_g - xhat * mean_gx));
      }
    });
    if (!dweight.defined() && !dbias.defined()) return;
    // Column blocks on threads, rows in order inside: each sum has one fixed order.
    constexpr int64_t kColumns = 64;
    A* dw = dweight.defined() ? dweight.data_ptr<A>() : nullptr;
    A* db = dbias.defined() ? dbias.data_ptr<A>() : nullptr;
    parallel_for((M + kColumns - 1) / kColumns, rows * kColumns, [&](int64_t block) {
      const int64_t begin = block * kColumns, end = std::min(M, begin + kColumns);
      A sum_gx[kColumns] = {}, sum_g[kColumns] = {};
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = begin; i < end; ++i) {
          const A gi = load(g[r * M + i]);
          sum_g[i - begin] += gi;
          sum_gx[i - begin] += gi * (load(xp[r * M + i]) - mu[r]) * rs[r];
        }
      }
      for (int64_t i = begin; i < end; ++i) {
        if (dw) dw[i] = sum_gx[i - begin];
        if (db) db[i] = sum_g[i - begin];
      }
    });
  });
  if (dweight.defined()) result.dweight = dweight.to(weight.dtype());
  if (dbias.defined()) result.dbias = dbias.to(weight.defined() ? weight.dtype() : x.dtype());
  return result;
}

// ---- group_norm ---------------------------------------------------------------------------
//
// x: [N, C, S]; group g of sample n is the contiguous block of Cg * S values starting at
// (n C + g Cg) S, normalised as one layer_norm row with a per-channel weight.

NormForward group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight,
                       const Tensor& bias, double eps) {
  const char* op = "group_norm";
  const kernel::GroupNormGeometry gn = kernel::group_norm_geometry(op, x, num_groups, kCPU);
  kernel::check_optional_param(op, "weight ([C])", weight, {gn.C}, x);
  kernel::check_optional_param(op, "bias ([C])", bias, {gn.C}, x);
  const DType acc = acc_dtype(x.dtype());
  NormForward result{empty(x.sizes(), x.dtype()), empty({gn.N, gn.G}, acc),
                     empty({gn.N, gn.G}, acc)};
  const Tensor xc = x.contiguous();
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const std::vector<A> w = values_or<A>(weight, gn.C, 1), b = values_or<A>(bias, gn.C, 0);
    const T* xp = xc.data_ptr<T>();
    T* out = result.out.data_ptr<T>();
    A* mean = result.mean.data_ptr<A>();
    A* rstd = result.rstd.data_ptr<A>();
    const int64_t block = gn.Cg * gn.S;
    parallel_for(gn.N * gn.G, block, [&](int64_t ng) {
      const int64_t n = ng / gn.G, g = ng % gn.G;
      const T* xb = xp + ng * block;
      const Moments<A> m = moments(xb, 1, block, 0);
      const A rs = inverse_std(m.var, eps);
      mean[ng] = m.mean;
      rstd[ng] = rs;
      for (int64_t k = 0; k < gn.Cg; ++k) {
        const int64_t c = g * gn.Cg + k;
        const A scale = rs * w[size_t(c)];
        const T* xc_row = xb + k * gn.S;
        T* out_row = out + (n * gn.C + c) * gn.S;
        for (int64_t s = 0; s < gn.S; ++s) {
          out_row[s] = store<T>((load(xc_row[s]) - m.mean) * scale + b[size_t(c)]);
        }
      }
    });
  });
  return result;
}

NormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, int64_t num_groups, const Tensor& weight,
                                 bool has_bias) {
  const char* op = "group_norm_backward";
  const kernel::GroupNormGeometry gn = kernel::group_norm_geometry(op, x, num_groups, kCPU);
  kernel::check_grad_output(op, dy, x);
  kernel::check_optional_param(op, "weight ([C])", weight, {gn.C}, x);
  const DType acc = acc_dtype(x.dtype());
  const Tensor xc = x.contiguous(), dyc = dy.contiguous();
  NormBackward result{empty(x.sizes(), x.dtype()), Tensor(), Tensor()};
  // Per (n, c): sum of dy * xhat and of dy, reduced over n afterwards in order.
  Tensor channel_gx = empty({gn.N, gn.C}, acc), channel_g = empty({gn.N, gn.C}, acc);
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const std::vector<A> mu = saved_stat<A>(op, "mean", mean, {gn.N, gn.G}, x);
    const std::vector<A> rs = saved_stat<A>(op, "rstd", rstd, {gn.N, gn.G}, x);
    const std::vector<A> w = values_or<A>(weight, gn.C, 1);
    const T* xp = xc.data_ptr<T>();
    const T* g = dyc.data_ptr<T>();
    T* dx = result.dx.data_ptr<T>();
    A* ch_gx = channel_gx.data_ptr<A>();
    A* ch_g = channel_g.data_ptr<A>();
    const int64_t block = gn.Cg * gn.S;
    parallel_for(gn.N * gn.G, 2 * block, [&](int64_t ng) {
      const int64_t n = ng / gn.G, group = ng % gn.G;
      const int64_t base = ng * block;
      const A m = mu[size_t(ng)], r = rs[size_t(ng)];
      A sum_g = 0, sum_gx = 0;
      for (int64_t k = 0; k < gn.Cg; ++k) {
        const int64_t c = group * gn.Cg + k;
        A c_g = 0, c_gx = 0;
        for (int64_t s = 0; s < gn.S; ++s) {
          const int64_t i = base + k * gn.S + s;
          const A gi = load(g[i]);
          c_g += gi;
          c_gx += gi * (load(xp[i]) - m) * r;
        }
        ch_g[n * gn.C + c] = c_g;
        ch_gx[n * gn.C + c] = c_gx;
        sum_g += c_g * w[size_t(c)];
        sum_gx += c_gx * w[size_t(c)];
      }
      const A mean_g = sum_g / A(block), mean_gx = sum_gx / A(block);
      for (int64_t k = 0; k < gn.Cg; ++k) {
        const A wc = w[size_t(group * gn.Cg + k)];
        for (int64_t s = 0; s < gn.S; ++s) {
          const int64_t i = base + k * gn.S + s;
          const A xhat = (load(xp[i]) - m) * r;
          dx[i] = store<T>(r * (load(g[i]) * wc - mean_g - xhat * mean_gx));
        }
      }
    });
    const auto reduce_over_batch = [&](const A* per_sample) {
      Tensor total = zeros({gn.C}, acc);
      A* t = total.data_ptr<A>();
      for (int64_t n = 0; n < gn.N; ++n) {
        for (int64_t c = 0; c < gn.C; ++c) t[c] += per_sample[n * gn.C + c];
      }
      return total;
    };
    if (weight.defined()) result.dweight = reduce_over_batch(ch_gx).to(weight.dtype());
    if (has_bias) {
      result.dbias = reduce_over_batch(ch_g).to(weight.defined() ? weight.dtype() : x.dtype());
    }
  });
  return result;
}

// ---- batch_norm ---------------------------------------------------------------------------
//
// x: [N, C, S]; channel c is N runs of S values, C S apart. Channels run on threads.

NormForward batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps) {
  const char* op = "batch_norm";
  const kernel::BatchNormGeometry bn = kernel::batch_norm_geometry(op, x, kCPU);
  kernel::check_batch_norm(op, x, bn, running_mean, running_var, weight, bias, training);
  const int64_t count = bn.N * bn.S;
  const DType acc = acc_dtype(x.dtype());
  NormForward result{empty(x.sizes(), x.dtype()), empty({bn.C}, acc), empty({bn.C}, acc)};
  const Tensor xc = x.contiguous();
  std::vector<double> batch_var(size_t(bn.C));  // biased, for the running_var update
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const std::vector<A> w = values_or<A>(weight, bn.C, 1), b = values_or<A>(bias, bn.C, 0);
    const std::vector<A> eval_mean = training ? std::vector<A>() : running_mean.to_vector<A>();
    const std::vector<A> eval_var = training ? std::vector<A>() : running_var.to_vector<A>();
    const T* xp = xc.data_ptr<T>();
    T* out = result.out.data_ptr<T>();
    A* mean = result.mean.data_ptr<A>();
    A* rstd = result.rstd.data_ptr<A>();
    parallel_for(bn.C, count, [&](int64_t c) {
      const T* xch = xp + c * bn.S;
      A m, rs;
      if (training) {
        const Moments<A> moment = moments(xch, bn.N, bn.S, bn.C * bn.S);
        m = moment.mean;
        rs = inverse_std(moment.var, eps);
        batch_var[size_t(c)] = double(moment.var);
      } else {
        m = eval_mean[size_t(c)];
        rs = inverse_std(eval_var[size_t(c)], eps);
      }
      mean[c] = m;
      rstd[c] = rs;
      const A scale = rs * w[size_t(c)], shift = b[size_t(c)];
      for (int64_t n = 0; n < bn.N; ++n) {
        const int64_t base = (n * bn.C + c) * bn.S;
        for (int64_t s = 0; s < bn.S; ++s) {
          out[base + s] = store<T>((load(xp[base + s]) - m) * scale + shift);
        }
      }
    });
  });
  if (training && running_mean.defined()) {
    // torch's update, in double, with the unbiased variance; written back in the running
    // statistics' own dtype and layout.
    const std::vector<double> old_mean = running_mean.to_vector<double>();
    const std::vector<double> old_var = running_var.to_vector<double>();
    const std::vector<double> batch_mean = result.mean.to_vector<double>();
    const double unbias = double(count) / double(count - 1);
    std::vector<double> new_mean(size_t(bn.C)), new_var(size_t(bn.C));
    for (size_t c = 0; c < size_t(bn.C); ++c) {
      new_mean[c] = (1 - momentum) * old_mean[c] + momentum * batch_mean[c];
      new_var[c] = (1 - momentum) * old_var[c] + momentum * batch_var[c] * unbias;
    }
    Tensor running_mean_handle = running_mean, running_var_handle = running_var;
    running_mean_handle.copy_(tensor(new_mean, kFloat64));
    running_var_handle.copy_(tensor(new_var, kFloat64));
  }
  return result;
}

NormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                 const Tensor& rstd, const Tensor& weight, bool has_bias,
                                 bool training) {
  const char* op = "batch_norm_backward";
  const kernel::BatchNormGeometry bn = kernel::batch_norm_geometry(op, x, kCPU);
  kernel::check_grad_output(op, dy, x);
  kernel::check_optional_param(op, "weight ([C])", weight, {bn.C}, x);
  const DType acc = acc_dtype(x.dtype());
  const int64_t count = bn.N * bn.S;
  const Tensor xc = x.contiguous(), dyc = dy.contiguous();
  NormBackward result{empty(x.sizes(), x.dtype()), Tensor(), Tensor()};
  Tensor dweight = empty({bn.C}, acc), dbias = empty({bn.C}, acc);
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const std::vector<A> mu = saved_stat<A>(op, "mean", mean, {bn.C}, x);
    const std::vector<A> rs = saved_stat<A>(op, "rstd", rstd, {bn.C}, x);
    const std::vector<A> w = values_or<A>(weight, bn.C, 1);
    const T* xp = xc.data_ptr<T>();
    const T* g = dyc.data_ptr<T>();
    T* dx = result.dx.data_ptr<T>();
    A* dw = dweight.data_ptr<A>();
    A* db = dbias.data_ptr<A>();
    parallel_for(bn.C, 2 * count, [&](int64_t c) {
      const A m = mu[size_t(c)], r = rs[size_t(c)], wc = w[size_t(c)];
      // sum(dy) and sum(dy * xhat), one partial sum per run of S values.
      A sum_g = 0, sum_gx = 0;
      for (int64_t n = 0; n < bn.N; ++n) {
        const int64_t base = (n * bn.C + c) * bn.S;
        A run_g = 0, run_gx = 0;
        for (int64_t s = 0; s < bn.S; ++s) {
          const A gi = load(g[base + s]);
          run_g += gi;
          run_gx += gi * (load(xp[base + s]) - m);
        }
        sum_g += run_g;
        sum_gx += run_gx;
      }
      sum_gx *= r;
      dw[c] = sum_gx;
      db[c] = sum_g;
      // Training: the statistics depend on x; eval: they are constants.
      const A mean_g = sum_g / A(count), mean_gx = sum_gx / A(count);
      for (int64_t n = 0; n < bn.N; ++n) {
        const int64_t base = (n * bn.C + c) * bn.S;
        for (int64_t s = 0; s < bn.S; ++s) {
          const A gi = load(g[base + s]);
          if (training) {
            const A xhat = (load(xp[base + s]) - m) * r;
            dx[base + s] = store<T>(r * wc * (gi - mean_g - xhat * mean_gx));
          } else {
            dx[base + s] = store<T>(gi * wc * r);
          }
        }
      }
    });
  });
  if (weight.defined()) result.dweight = dweight.to(weight.dtype());
  if (has_bias) result.dbias = dbias.to(weight.defined() ? weight.dtype() : x.dtype());
  return result;
}

// ---- conv2d -------------------------------------------------------------------------------
//
// For each image n and group g: cols = im2col(x[n, g]) is [K, L], and
//   forward:  y[n, g] [Og, L]  = w[g] [Og, K] * cols
//   dweight:  dw[g]   [Og, K] += dy[n, g] [Og, L] * cols^T
//   dx:       dcols   [K, L]   = w[g]^T [K, Og] * dy[n, g],  then col2im adds dcols into dx[n, g]
// x, w and dy are first converted to the accumulation type, so the products run in float
// (double for float64) and the output is rounded once.

namespace {

using kernel::ConvGeometry;

// x and weight on the CPU, then the shared checks and shapes.
ConvGeometry cpu_conv_geometry(const char* op, const Tensor& x, const Tensor& weight,
                               const Conv2dParams& p) {
  check_input(op, "input", x);
  check_input(op, "weight", weight);
  return kernel::conv_geometry(op, x, weight, p);
}

// NOTE [conv2d's matrix product] Every matrix product of conv2d and its backward goes
// through conv_matmul, on cpu::gemm (oneDNN for float32, Eigen for float64; 16-bit inputs
// reach here already widened to the float accumulation type).
//
// c[M, N] = op(a)[M, K] * op(b)[K, N], plus c's old values when accumulate. Row-major with
// row strides lda/ldb/ldc. op(a) = a stored [M, K], or a^T when trans_a (a stored [K, M]);
// op(b) = b stored [K, N], or b^T when trans_b (b stored [N, K]). c is dense (ldc == N).
template <class A>
void conv_matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const A* a,
                 int64_t lda, const A* b, int64_t ldb, A* c, int64_t ldc, bool accumulate) {
  HG_CHECK(ldc == N, "conv2d: internal error: the product's output rows are not dense");
  if (M == 0 || N == 0) return;
  constexpr DType dtype = dtype_of<A>;
  // Transposed operands are strided views: the GEMM reads them without a copy.
  const Tensor ta = from_blob(const_cast<A*>(a), {1, M, K}, dtype,
                              trans_a ? Shape{M * lda, 1, lda} : Shape{M * lda, lda, 1});
  const Tensor tb = from_blob(const_cast<A*>(b), {1, K, N}, dtype,
                              trans_b ? Shape{N * ldb, 1, ldb} : Shape{K * ldb, ldb, 1});
  const Tensor tc = from_blob(c, {1, M, N}, dtype);
  linalg_kernels.gemm(ta, tb, tc, 1.0, accumulate ? 1.0 : 0.0);
}

// cols[(c, ki, kj), (oh, ow)] = x[c, oh sH - pH + ki dH, ow sW - pW + kj dW], zero in the
// padding. x: [Cg, H, W] of one image and group; cols: [K, L].
template <class A>
void im2col(const A* x, const ConvGeometry& g, A* cols) {
  for (int64_t c = 0; c < g.Cg; ++c) {
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        A* row = cols + ((c * g.kH + ki) * g.kW + kj) * g.L();
        for (int64_t oh = 0; oh < g.Hout; ++oh) {
          const int64_t ih = oh * g.sH - g.pH + ki * g.dH;
          A* out = row + oh * g.Wout;
          if (ih < 0 || ih >= g.H) {
            std::fill_n(out, g.Wout, A(0));
            continue;
          }
          const A* in = x + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.Wout; ++ow) {
            const int64_t iw = ow * g.sW - g.pW + kj * g.dW;
            out[ow] = iw >= 0 && iw < g.W ? in[iw] : A(0);
          }
        }
      }
    }
  }
}

// The adjoint of im2col: adds each cols entry into the x position it was read from.
template <class A>
void col2im_add(const A* cols, const ConvGeometry& g, A* dx) {
  for (int64_t c = 0; c < g.Cg; ++c) {
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const A* row = cols + ((c * g.kH + ki) * g.kW + kj) * g.L();
        for (int64_t oh = 0; oh < g.Hout; ++oh) {
          const int64_t ih = oh * g.sH - g.pH + ki * g.dH;
          if (ih < 0 || ih >= g.H) continue;
          const A* in = row + oh * g.Wout;
          A* out = dx + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.Wout; ++ow) {
            const int64_t iw = ow * g.sW - g.pW + kj * g.dW;
            if (iw >= 0 && iw < g.W) out[iw] += in[ow];
          }
        }
      }
    }
  }
}

// Whether a loop over `count` items of `work` each should run on threads (from its own
// parallel region, one scratch buffer per thread).
bool worth_threads(int64_t count, int64_t work) {
  return count > 1 && count * work >= kParallelGrain && omp_get_max_threads() > 1 &&
         !omp_in_parallel();
}

template <class A>
void conv2d_forward_kernel(const A* x, const A* w, const A* bias, A* y, const ConvGeometry& g) {
  const int64_t K = g.K(), L = g.L();
  // Images on threads when there are several; otherwise conv_matmul splits the rows.
#pragma omp parallel if (worth_threads(g.N, g.C * K * L))
  {
    std::vector<A> cols(size_t(K * L));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      for (int64_t group = 0; group < g.groups; ++group) {
        im2col(x + (n * g.C + group * g.Cg) * g.H * g.W, g, cols.data());
        A* y_group = y + (n * g.O + group * g.Og) * L;
        conv_matmul(false, false, g.Og, L, K, w + group * g.Og * K, K, cols.data(), L, y_group, L,
                    false);
        if (bias == nullptr) continue;
        for (int64_t o = 0; o < g.Og; ++o) {
          const A b = bias[group * g.Og + o];
          for (int64_t l = 0; l < L; ++l) y_group[o * L + l] += b;
        }
      }
    }
  }
}

template <class A>
void conv2d_input_grad_kernel(const A* dy, const A* w, A* dx, const ConvGeometry& g) {
  const int64_t K = g.K(), L = g.L();
#pragma omp parallel if (worth_threads(g.N, g.C * K * L))
  {
    std::vector<A> dcols(size_t(K * L));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      A* dx_image = dx + n * g.C * g.H * g.W;
      std::fill_n(dx_image, g.C * g.H * g.W, A(0));
      for (int64_t group = 0; group < g.groups; ++group) {
        conv_matmul(true, false, K, L, g.Og, w + group * g.Og * K, K,
                    dy + (n * g.O + group * g.Og) * L, L, dcols.data(), L, false);
        col2im_add(dcols.data(), g, dx_image + group * g.Cg * g.H * g.W);
      }
    }
  }
}

template <class A>
void conv2d_weight_grad_kernel(const A* dy, const A* x, A* dw, const ConvGeometry& g) {
  const int64_t K = g.K(), L = g.L();
  std::fill_n(dw, g.O * K, A(0));
  // Groups own disjoint rows of dw, so they may run on threads; images are summed in order.
#pragma omp parallel if (worth_threads(g.groups, g.N * g.Og * K * L))
  {
    std::vector<A> cols(size_t(K * L));
#pragma omp for schedule(static)
    for (int64_t group = 0; group < g.groups; ++group) {
      for (int64_t n = 0; n < g.N; ++n) {
        im2col(x + (n * g.C + group * g.Cg) * g.H * g.W, g, cols.data());
        conv_matmul(false, true, g.Og, K, L, dy + (n * g.O + group * g.Og) * L, L, cols.data(), L,
                    dw + group * g.Og * K, K, true);
      }
    }
  }
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const char* op = "conv2d";
  const ConvGeometry g = cpu_conv_geometry(op, x, weight, p);
  if (bias.defined()) {
    check_input(op, "bias ([O])", bias);
    kernel::check_conv_bias(op, bias, g, x.dtype());
  }
  const DType acc = acc_dtype(x.dtype());
  const Tensor xa = contiguous_as(x, acc), wa = contiguous_as(weight, acc);
  const Tensor ba = bias.defined() ? contiguous_as(bias, acc) : Tensor();
  Tensor ya = empty({g.N, g.O, g.Hout, g.Wout}, acc);
  dispatch_acc(acc, [&](auto tag) {
    using A = typename decltype(tag)::type;
    conv2d_forward_kernel<A>(xa.data_ptr<A>(), wa.data_ptr<A>(),
                             ba.defined() ? ba.data_ptr<A>() : nullptr, ya.data_ptr<A>(), g);
  });
  return ya.to(x.dtype());
}

Conv2dBackward conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               bool has_bias, const Conv2dParams& p, std::array<bool, 3> needed) {
  const char* op = "conv2d_backward";
  const ConvGeometry g = cpu_conv_geometry(op, x, weight, p);
  check_input(op, "grad_output", dy);
  kernel::check_conv_grad_output(op, dy, g, x.dtype());
  const DType acc = acc_dtype(x.dtype());
  const Tensor dya = contiguous_as(dy, acc);
  Conv2dBackward result;
  dispatch_acc(acc, [&](auto tag) {
    using A = typename decltype(tag)::type;
    if (needed[0]) {
      const Tensor wa = contiguous_as(weight, acc);
      Tensor dxa = empty(x.sizes(), acc);
      conv2d_input_grad_kernel<A>(dya.data_ptr<A>(), wa.data_ptr<A>(), dxa.data_ptr<A>(), g);
      result.dx = dxa.to(x.dtype());
    }
    if (needed[1]) {
      const Tensor xa = contiguous_as(x, acc);
      Tensor dwa = empty(weight.sizes(), acc);
      conv2d_weight_grad_kernel<A>(dya.data_ptr<A>(), xa.data_ptr<A>(), dwa.data_ptr<A>(), g);
      result.dweight = dwa.to(x.dtype());
    }
    if (needed[2] && has_bias) {
      Tensor dba = empty({g.O}, acc);
      const A* d = dya.data_ptr<A>();
      A* db = dba.data_ptr<A>();
      const int64_t L = g.L();
      parallel_for(g.O, g.N * L, [&](int64_t o) {
        A total = 0;
        for (int64_t n = 0; n < g.N; ++n) {
          const A* run = d + (n * g.O + o) * L;
          A partial = 0;
          for (int64_t l = 0; l < L; ++l) partial += run[l];
          total += partial;
        }
        db[o] = total;
      });
      result.dbias = dba.to(x.dtype());
    }
  });
  return result;
}

// ---- pooling ------------------------------------------------------------------------------
//
// x: [planes, H, W] once the leading dims are flattened; planes run on threads. Window
// (oh, ow) covers rows oh sH - pH .. + kH and columns ow sW - pW .. + kW, cut to the input.

namespace {

using kernel::pool_geometry;
using kernel::PoolGeometry;

// The window of one output position: input rows [h0, h1) and columns [w0, w1), and how many
// positions it covers once the padding counts (for count_include_pad).
struct Window {
  int64_t h0, h1, w0, w1, padded_size;
};

Window window_at(const PoolGeometry& g, int64_t oh, int64_t ow) {
  const int64_t h_start = oh * g.sH - g.pH, w_start = ow * g.sW - g.pW;
  const int64_t h_end = std::min(h_start + g.kH, g.H + g.pH);
  const int64_t w_end = std::min(w_start + g.kW, g.W + g.pW);
  return {std::max<int64_t>(h_start, 0), std::min(h_end, g.H), std::max<int64_t>(w_start, 0),
          std::min(w_end, g.W), (h_end - h_start) * (w_end - w_start)};
}

int64_t avg_divisor(const Window& win, bool count_include_pad) {
  return count_include_pad ? win.padded_size : (win.h1 - win.h0) * (win.w1 - win.w0);
}

}  // namespace

MaxPoolForward max_pool2d(const Tensor& x, const Pool2dParams& p) {
  const char* op = "max_pool2d";
  check_input(op, "input", x);
  const PoolGeometry g = pool_geometry(op, x.sizes(), p);
  const Tensor xc = x.contiguous();
  MaxPoolForward result{empty(g.out_shape, x.dtype()), empty(g.out_shape, kInt64)};
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = xc.data_ptr<T>();
    T* out = result.out.data_ptr<T>();
    int64_t* indices = result.indices.data_ptr<int64_t>();
    parallel_for(g.planes, g.Hout * g.Wout * g.kH * g.kW, [&](int64_t plane) {
      const T* in = xp + plane * g.H * g.W;
      const int64_t out_base = plane * g.Hout * g.Wout;
      for (int64_t oh = 0; oh < g.Hout; ++oh) {
        for (int64_t ow = 0; ow < g.Wout; ++ow) {
          const Window win = window_at(g, oh, ow);
          A best = -std::numeric_limits<A>::infinity();
          int64_t best_index = win.h0 * g.W + win.w0;
          for (int64_t h = win.h0; h < win.h1; ++h) {
            for (int64_t w = win.w0; w < win.w1; ++w) {
              const A v = load(in[h * g.W + w]);
              if (v > best || std::isnan(v)) {  // NaN propagates, as in torch
                best = v;
                best_index = h * g.W + w;
              }
            }
          }
          out[out_base + oh * g.Wout + ow] = store<T>(best);
          indices[out_base + oh * g.Wout + ow] = best_index;
        }
      }
    });
  });
  return result;
}

Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape) {
  const char* op = "max_pool2d_backward";
  check_input(op, "grad_output", dy);
  kernel::check_max_pool2d_backward(op, dy, indices, input_shape);
  const int64_t dims = int64_t(input_shape.size());
  const int64_t H = input_shape[size_t(dims - 2)], W = input_shape[size_t(dims - 1)];
  const int64_t planes = product(input_shape, 0, size_t(dims - 2));
  const int64_t per_plane = dy.size(-2) * dy.size(-1);
  const Tensor ic = indices.contiguous(), dyc = dy.contiguous();
  const int64_t* idx = ic.data_ptr<int64_t>();
  for (int64_t i = 0; i < ic.numel(); ++i) {
    HG_CHECK(idx[i] >= 0 && idx[i] < H * W,
             "{}: expected indices in [0, {}) (flat positions in a {}x{} plane), got {} at "
             "element {}",
             op, H * W, H, W, idx[i], i);
  }
  const DType acc = acc_dtype(dy.dtype());
  Tensor dxa = zeros(input_shape, acc);
  visit_floating_dtype(op, dy.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* g = dyc.data_ptr<T>();
    A* dx = dxa.data_ptr<A>();
    parallel_for(planes, per_plane, [&](int64_t plane) {
      A* dx_plane = dx + plane * H * W;
      for (int64_t i = plane * per_plane; i < (plane + 1) * per_plane; ++i) {
        dx_plane[idx[i]] += load(g[i]);
      }
    });
  });
  return dxa.to(dy.dtype());
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  const char* op = "avg_pool2d";
  check_input(op, "input", x);
  const PoolGeometry g = pool_geometry(op, x.sizes(), p);
  const Tensor xc = x.contiguous();
  Tensor out = empty(g.out_shape, x.dtype());
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = xc.data_ptr<T>();
    T* y = out.data_ptr<T>();
    parallel_for(g.planes, g.Hout * g.Wout * g.kH * g.kW, [&](int64_t plane) {
      const T* in = xp + plane * g.H * g.W;
      for (int64_t oh = 0; oh < g.Hout; ++oh) {
        for (int64_t ow = 0; ow < g.Wout; ++ow) {
          const Window win = window_at(g, oh, ow);
          A sum = 0;
          for (int64_t h = win.h0; h < win.h1; ++h) {
            for (int64_t w = win.w0; w < win.w1; ++w) sum += load(in[h * g.W + w]);
          }
          y[(plane * g.Hout + oh) * g.Wout + ow] =
              store<T>(sum / A(avg_divisor(win, p.count_include_pad)));
        }
      }
    });
  });
  return out;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& input_shape, const Pool2dParams& p) {
  const char* op = "avg_pool2d_backward";
  check_input(op, "grad_output", dy);
  const PoolGeometry g = pool_geometry(op, input_shape, p);
  check_shape(op, "grad_output (avg_pool2d's output shape)", dy, g.out_shape);
  const Tensor dyc = dy.contiguous();
  const DType acc = acc_dtype(dy.dtype());
  Tensor dxa = zeros(input_shape, acc);
  visit_floating_dtype(op, dy.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = dyc.data_ptr<T>();
    A* dx = dxa.data_ptr<A>();
    parallel_for(g.planes, g.Hout * g.Wout * g.kH * g.kW, [&](int64_t plane) {
      A* dx_plane = dx + plane * g.H * g.W;
      for (int64_t oh = 0; oh < g.Hout; ++oh) {
        for (int64_t ow = 0; ow < g.Wout; ++ow) {
          const Window win = window_at(g, oh, ow);
          const A share = load(gp[(plane * g.Hout + oh) * g.Wout + ow]) /
                          A(avg_divisor(win, p.count_include_pad));
          for (int64_t h = win.h0; h < win.h1; ++h) {
            for (int64_t w = win.w0; w < win.w1; ++w) dx_plane[h * g.W + w] += share;
          }
        }
      }
    });
  });
  return dxa.to(dy.dtype());
}

// ---- embedding ----------------------------------------------------------------------------

Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                          int64_t padding_idx) {
  const char* op = "embedding_backward";
  check_input(op, "grad_output", dy);
  kernel::check_embedding_indices(op, indices);
  kernel::check_embedding_sizes(op, dy, indices, num_embeddings, padding_idx);
  const int64_t D = dy.dim() > 0 ? dy.size(-1) : 1;
  const std::vector<int64_t> rows = indices.to_vector<int64_t>();
  for (size_t t = 0; t < rows.size(); ++t) {
    HG_CHECK(rows[t] >= 0 && rows[t] < num_embeddings,
             "{}: expected indices in [0, {}) (num_embeddings), got {} at element {}", op,
             num_embeddings, rows[t], t);
  }
  const Tensor dyc = dy.contiguous();
  const DType acc = acc_dtype(dy.dtype());
  Tensor dwa = zeros({num_embeddings, D}, acc);
  visit_floating_dtype(op, dy.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* g = dyc.data_ptr<T>();
    A* dw = dwa.data_ptr<A>();
    // Column blocks on threads, tokens in order inside: no two threads touch one value.
    constexpr int64_t kColumns = 64;
    const int64_t tokens = int64_t(rows.size());
    parallel_for((D + kColumns - 1) / kColumns, tokens * kColumns, [&](int64_t block) {
      const int64_t begin = block * kColumns, end = std::min(D, begin + kColumns);
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t row = rows[size_t(t)];
        if (row == padding_idx) continue;
        for (int64_t j = begin; j < end; ++j) dw[row * D + j] += load(g[t * D + j]);
      }
    });
  });
  return dwa.to(dy.dtype());
}

// ---- dropout ------------------------------------------------------------------------------

DropoutForward dropout(const Tensor& x, double p, Generator& gen) {
  const char* op = "dropout";
  kernel::check_dropout(op, x, p, kCPU);
  if (p == 0.0) return {x.clone(), ones(x.sizes(), x.dtype())};
  if (p == 1.0) return {zeros(x.sizes(), x.dtype()), zeros(x.sizes(), x.dtype())};
  const int64_t n = x.numel();
  std::vector<float> uniforms(static_cast<size_t>(n));
  random::fill_uniform(kFloat32, uniforms.data(), n, 0.0, 1.0, gen);
  const Tensor xc = x.contiguous();
  DropoutForward result{empty(x.sizes(), x.dtype()), empty(x.sizes(), x.dtype())};
  const double keep = 1.0 - p;
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    // out = x * mask with the mask value as stored, so forward and the backward's dy * mask
    // scale by the same number (and a dropped NaN stays NaN, as x * 0 does in torch).
    const T scale = store<T>(1.0 / keep);
    const acc_t<T> scale_value = load(scale);
    const T* in = xc.data_ptr<T>();
    T* out = result.out.data_ptr<T>();
    T* mask = result.mask.data_ptr<T>();
    constexpr int64_t kChunk = 4096;
    parallel_for((n + kChunk - 1) / kChunk, kChunk, [&](int64_t chunk) {
      const int64_t begin = chunk * kChunk, end = std::min(n, begin + kChunk);
      for (int64_t i = begin; i < end; ++i) {
        const bool kept = double(uniforms[size_t(i)]) < keep;
        mask[i] = kept ? scale : store<T>(0.0);
        out[i] = store<T>(load(in[i]) * (kept ? scale_value : acc_t<T>(0)));
      }
    });
  });
  return result;
}

}  // namespace hg::cpu
