// CPU kernels of the norm family (kernel/norm.h): softmax, log_softmax, layer_norm, group_norm
// and batch_norm, forward and backward.
//
// Dims: N batch, C channels, G groups (Cg = C / G channels each), S the flattened spatial size,
// M a normalized row's length, D the softmax dim.
//
// Every kernel is templated on the storage type T and computes in A = acc_t<T>: float for
// float16/bfloat16/float32, double for float64. Loops that write disjoint parts of the output
// run on OpenMP threads when there is enough work; no kernel's result depends on the number
// of threads (reductions never split across threads).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "halfgrad/core/convert.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/nn_common.h"
#include "halfgrad/cpu/row_vectors.h"
#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cpu {

namespace {

using kernel::acc_dtype;
using kernel::NormBackward;
using kernel::NormForward;
using nn_common::acc_t;
using nn_common::check_input;
using nn_common::load;
using nn_common::parallel_for;
using nn_common::store;

// ---- sums and moments ---------------------------------------------------------------------

// The values of an optional parameter in the accumulation type; `fill` when absent.
template <class A>
std::vector<A> values_or(const Tensor& t, int64_t n, A fill) {
  return t.defined() ? t.to_vector<A>() : std::vector<A>(size_t(n), fill);
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

// The largest of x[0..n) as std::max finds it (a NaN is passed over), -inf for n == 0, in two
// 4-lane accumulators of the baseline's SSE (NOTE [Row vectors] in cpu/row_vectors.h): one
// running max was a chain of dependent maxss, and inlined into the row loop below GCC kept it
// in memory, a store and a load per element (80 % of a bfloat16 log_softmax's time).
__attribute__((noinline)) float row_max(const float* x, int64_t n) {
  using row_vectors::FloatVec4;
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  FloatVec4 a = FloatVec4{} + kLowest, b = a;
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) {
    FloatVec4 u, v;
    row_vectors::load_vec(u, x + d);
    row_vectors::load_vec(v, x + d + 4);
    a = u > a ? u : a;
    b = v > b ? v : b;
  }
  float max = kLowest;
  for (int i = 0; i < 4; ++i) max = std::max(max, std::max(a[i], b[i]));
  for (; d < n; ++d) max = std::max(max, x[d]);
  return max;
}

// The softmax dim innermost (inner == 1): each row contiguous, its exponentials computed
// through the vector math pass (NOTE [Vector math] in vector_math.h) into a per-thread row
// buffer, each once; the same formula and summation order as the slab loops below.
template <class T, bool kLog>
void softmax_rows_vector(const T* x, T* y, const DimSplit& s, VectorMap pass) {
  const int64_t D = s.size;
  constexpr bool kWiden = !std::is_same_v<T, float>;  // float16, bfloat16
  parallel_for(s.outer, D, [&](int64_t r) {
    // Grow to the longest row, then stay: the exponentials, and a 16-bit row widened to
    // float32 by core/convert's vector conversions (its results rounded back the same way).
    thread_local std::vector<float> exps, widened;
    exps.resize(size_t(D));
    const float* row;
    if constexpr (kWiden) {
      widened.resize(size_t(D));
      convert::to_float(x + r * D, widened.data(), D);
      row = widened.data();
    } else {
      row = x + r * D;
    }
    const float max = row_max(row, D);
    for (int64_t d = 0; d < D; ++d) exps[size_t(d)] = row[d] - max;
    pass(VectorFn::Exp, exps.data(), exps.data(), D);
    float sum = 0;
    for (int64_t d = 0; d < D; ++d) sum += exps[size_t(d)];
    // The results (log_softmax: x - max again, the same float operation as before the exp),
    // into the output row (float32) or into exps and then rounded (16-bit).
    float* results;
    if constexpr (kWiden) {
      results = exps.data();
    } else {
      results = y + r * D;
    }
    if constexpr (kLog) {
      const float log_sum = std::log(sum);
      for (int64_t d = 0; d < D; ++d) results[d] = row[d] - max - log_sum;
    } else {
      for (int64_t d = 0; d < D; ++d) results[d] = exps[size_t(d)] / sum;
    }
    if constexpr (kWiden) convert::from_float(results, y + r * D, D);
  });
}

template <class T, bool kLog>
void softmax_forward_kernel(const T* x, T* y, const DimSplit& s) {
  using A = acc_t<T>;
  if constexpr (std::is_same_v<A, float>) {
    if (s.inner == 1) {
      if (const VectorMap pass = vector_mapper())
        return softmax_rows_vector<T, kLog>(x, y, s, pass);
    }
  }
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

// log_softmax's backward with the softmax dim innermost: exp(y) of a row through the vector
// pass, as softmax_rows_vector does.
template <class T>
void log_softmax_backward_rows_vector(const T* dy, const T* y, T* dx, const DimSplit& s,
                                      VectorMap pass) {
  const int64_t D = s.size;
  parallel_for(s.outer, D, [&](int64_t r) {
    thread_local std::vector<float> exps;
    exps.resize(size_t(D));
    const int64_t row = r * D;
    float sum = 0;
    for (int64_t d = 0; d < D; ++d) {
      sum += load(dy[row + d]);
      exps[size_t(d)] = load(y[row + d]);
    }
    pass(VectorFn::Exp, exps.data(), exps.data(), D);
    for (int64_t d = 0; d < D; ++d) {
      dx[row + d] = store<T>(load(dy[row + d]) - exps[size_t(d)] * sum);
    }
  });
}

template <class T, bool kLog>
void softmax_backward_kernel(const T* dy, const T* y, T* dx, const DimSplit& s) {
  using A = acc_t<T>;
  if constexpr (kLog && std::is_same_v<A, float>) {
    if (s.inner == 1) {
      if (const VectorMap pass = vector_mapper()) {
        return log_softmax_backward_rows_vector<T>(dy, y, dx, s, pass);
      }
    }
  }
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

// Saved statistics: shape [count], any floating dtype (read in the accumulation type).
template <class A>
std::vector<A> saved_stat(const char* op, const char* what, const Tensor& t, const Shape& shape,
                          const Tensor& x) {
  kernel::check_saved_stat(op, what, t, shape, x);
  return t.to_vector<A>();
}

// ---- layer_norm rows on vectors (NOTE [Row vectors] in cpu/row_vectors.h) -----------------
//
// float32 rows (layer_norm runs in float32 under autocast), and float16/bfloat16 rows widened
// to float32 by core/convert's vector conversions and rounded once on the way back: the same
// formulas as the generic loops below, with the sums in vector lanes, blocks of kSumBlock
// values summed on their own first as blocked_sum does.

using row_vectors::FloatVec16;
using row_vectors::FloatVec4;
using row_vectors::FloatVec8;
using row_vectors::kLanes;
using row_vectors::lane_sum;
using row_vectors::load_vec;
using row_vectors::store_vec;

template <class V>
HG_ROW_INLINE void layer_norm_row_body(const float* x, float* y, const float* w, const float* b,
                                       int64_t M, float eps, float* mean_out, float* rstd_out) {
  constexpr int W = kLanes<V>;
  float total = 0;
  for (int64_t begin = 0; begin < M; begin += kSumBlock) {
    total += row_vectors::row_sum<V>(x + begin, std::min(kSumBlock, M - begin));
  }
  const float mean = total / float(M);
  float squares = 0;
  for (int64_t begin = 0; begin < M; begin += kSumBlock) {
    squares +=
        row_vectors::row_squared_deviation<V>(x + begin, std::min(kSumBlock, M - begin), mean);
  }
  const float rs = inverse_std(squares / float(M), eps);
  *mean_out = mean;
  *rstd_out = rs;
  int64_t i = 0;
  for (; i + W <= M; i += W) {
    V xv, wv, bv;
    load_vec(xv, x + i);
    load_vec(wv, w + i);
    load_vec(bv, b + i);
    xv = (xv - mean) * rs * wv + bv;
    store_vec(y + i, xv);
  }
  for (; i < M; ++i) y[i] = (x[i] - mean) * rs * w[i] + b[i];
}

// One row's dx; with col_g and col_gx (M values each), also adds the row's g and g * xhat to
// them: the dbias and dweight sums of its block of rows (NOTE [LayerNorm parameter sums]).
template <class V>
HG_ROW_INLINE void layer_norm_backward_row_body(const float* x, const float* g, float* dx,
                                                const float* w, int64_t M, float mu, float rs,
                                                float* col_g, float* col_gx) {
  constexpr int W = kLanes<V>;
  V acc_g = V{}, acc_gx = V{};
  int64_t i = 0;
  for (; i + W <= M; i += W) {
    V xv, gv, wv;
    load_vec(xv, x + i);
    load_vec(gv, g + i);
    load_vec(wv, w + i);
    gv *= wv;
    acc_g += gv;
    acc_gx += gv * ((xv - mu) * rs);
  }
  float sum_g = lane_sum(acc_g), sum_gx = lane_sum(acc_gx);
  for (; i < M; ++i) {
    const float gi = g[i] * w[i];
    sum_g += gi;
    sum_gx += gi * ((x[i] - mu) * rs);
  }
  const float mean_g = sum_g / float(M), mean_gx = sum_gx / float(M);
  i = 0;
  for (; i + W <= M; i += W) {
    V xv, gv, wv;
    load_vec(xv, x + i);
    load_vec(gv, g + i);
    load_vec(wv, w + i);
    const V xhat = (xv - mu) * rs;
    if (col_g != nullptr) {
      V cg, cgx;
      load_vec(cg, col_g + i);
      load_vec(cgx, col_gx + i);
      cg += gv;
      cgx += gv * xhat;
      store_vec(col_g + i, cg);
      store_vec(col_gx + i, cgx);
    }
    gv = rs * (gv * wv - mean_g - xhat * mean_gx);
    store_vec(dx + i, gv);
  }
  for (; i < M; ++i) {
    const float xhat = (x[i] - mu) * rs;
    if (col_g != nullptr) {
      col_g[i] += g[i];
      col_gx[i] += g[i] * xhat;
    }
    dx[i] = rs * (g[i] * w[i] - mean_g - xhat * mean_gx);
  }
}

using LayerNormRow = void (*)(const float*, float*, const float*, const float*, int64_t, float,
                              float*, float*);
using LayerNormBackwardRow = void (*)(const float*, const float*, float*, const float*, int64_t,
                                      float, float, float*, float*);

__attribute__((target("avx512f,avx2,fma"))) void layer_norm_row_avx512(const float* x, float* y,
                                                                       const float* w,
                                                                       const float* b, int64_t M,
                                                                       float eps, float* mean,
                                                                       float* rstd) {
  layer_norm_row_body<FloatVec16>(x, y, w, b, M, eps, mean, rstd);
}
__attribute__((target("avx2,fma"))) void layer_norm_row_avx2(const float* x, float* y,
                                                             const float* w, const float* b,
                                                             int64_t M, float eps, float* mean,
                                                             float* rstd) {
  layer_norm_row_body<FloatVec8>(x, y, w, b, M, eps, mean, rstd);
}
void layer_norm_row_base(const float* x, float* y, const float* w, const float* b, int64_t M,
                         float eps, float* mean, float* rstd) {
  layer_norm_row_body<FloatVec4>(x, y, w, b, M, eps, mean, rstd);
}
__attribute__((target("avx512f,avx2,fma"))) void layer_norm_backward_row_avx512(
    const float* x, const float* g, float* dx, const float* w, int64_t M, float mu, float rs,
    float* col_g, float* col_gx) {
  layer_norm_backward_row_body<FloatVec16>(x, g, dx, w, M, mu, rs, col_g, col_gx);
}
__attribute__((target("avx2,fma"))) void layer_norm_backward_row_avx2(const float* x,
                                                                      const float* g, float* dx,
                                                                      const float* w, int64_t M,
                                                                      float mu, float rs,
                                                                      float* col_g, float* col_gx) {
  layer_norm_backward_row_body<FloatVec8>(x, g, dx, w, M, mu, rs, col_g, col_gx);
}
void layer_norm_backward_row_base(const float* x, const float* g, float* dx, const float* w,
                                  int64_t M, float mu, float rs, float* col_g, float* col_gx) {
  layer_norm_backward_row_body<FloatVec4>(x, g, dx, w, M, mu, rs, col_g, col_gx);
}

// The per-thread float32 buffer of the 16-bit rows widened before the float32 row functions.
float* row_buffer(int64_t n) { return nn_common::kept_buffer<float>(n); }

LayerNormRow layer_norm_row() {
  constexpr LayerNormRow kRows[] = {layer_norm_row_base, layer_norm_row_avx2,
                                    layer_norm_row_avx512};
  return kRows[row_vectors::row_vector_level()];
}
LayerNormBackwardRow layer_norm_backward_row() {
  constexpr LayerNormBackwardRow kRows[] = {
      layer_norm_backward_row_base, layer_norm_backward_row_avx2, layer_norm_backward_row_avx512};
  return kRows[row_vectors::row_vector_level()];
}

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
    if constexpr (std::is_same_v<T, float>) {
      const LayerNormRow row = layer_norm_row();
      parallel_for(rows, M, [&](int64_t r) {
        row(xp + r * M, out + r * M, w.data(), b.data(), M, float(eps), mean + r, rstd + r);
      });
      return;
    } else if constexpr (std::is_same_v<A, float>) {  // float16, bfloat16: rows widened
      const LayerNormRow row = layer_norm_row();
      parallel_for(rows, M, [&](int64_t r) {
        float* const buffer = row_buffer(2 * M);
        convert::to_float(xp + r * M, buffer, M);
        row(buffer, buffer + M, w.data(), b.data(), M, float(eps), mean + r, rstd + r);
        convert::from_float(buffer + M, out + r * M, M);
      });
      return;
    }
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
    if constexpr (std::is_same_v<A, float>) {
      // NOTE [LayerNorm parameter sums] dweight and dbias are column sums over every row. The
      // row pass adds each row's g and g * xhat into sums of its own block of rows while the
      // row is in registers, and the blocks' sums are added in block order at the end: one
      // pass over x and dy instead of a second one by columns. The blocks are fixed by the row
      // count alone (kSumRows rows, at most kSumBlocks blocks), so every sum has one order on
      // any thread count.
      constexpr int64_t kSumRows = 32, kSumBlocks = 256;
      const bool sums = dweight.defined() || dbias.defined();
      const int64_t block_rows = std::max(kSumRows, (rows + kSumBlocks - 1) / kSumBlocks);
      const int64_t blocks = (rows + block_rows - 1) / block_rows;
      std::vector<float> partial(sums ? size_t(blocks * 2 * M) : 0, 0.0f);
      const LayerNormBackwardRow row = layer_norm_backward_row();
      parallel_for(blocks, block_rows * 2 * M, [&](int64_t block) {
        float* const col_g = sums ? partial.data() + block * 2 * M : nullptr;
        float* const col_gx = sums ? col_g + M : nullptr;
        const int64_t end = std::min(rows, (block + 1) * block_rows);
        for (int64_t r = block * block_rows; r < end; ++r) {
          if constexpr (std::is_same_v<T, float>) {
            row(xp + r * M, g + r * M, dx + r * M, w.data(), M, mu[size_t(r)], rs[size_t(r)], col_g,
                col_gx);
          } else {  // float16, bfloat16: rows widened
            float* const buffer = row_buffer(3 * M);
            convert::to_float(xp + r * M, buffer, M);
            convert::to_float(g + r * M, buffer + M, M);
            row(buffer, buffer + M, buffer + 2 * M, w.data(), M, mu[size_t(r)], rs[size_t(r)],
                col_g, col_gx);
            convert::from_float(buffer + 2 * M, dx + r * M, M);
          }
        }
      });
      if (!sums) return;
      // The blocks' sums into block 0's, in block order.
      float* const total = partial.data();
      for (int64_t block = 1; block < blocks; ++block) {
        const float* const sums_of_block = partial.data() + block * 2 * M;
        for (int64_t i = 0; i < 2 * M; ++i) total[i] += sums_of_block[i];
      }
      if (dweight.defined()) std::copy_n(total + M, M, dweight.data_ptr<A>());
      if (dbias.defined()) std::copy_n(total, M, dbias.data_ptr<A>());
      return;
    } else {
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
    }
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

// ---- batch_norm's runs on vectors (NOTE [Row vectors] in cpu/row_vectors.h) --------------
//
// A channel of batch_norm is N runs of S contiguous values. Where the accumulation type is
// float, its runs go through these functions: float32 and bfloat16 runs in place (bfloat16 read
// into float lanes and rounded out of them, NOTE [bfloat16 in float lanes]), float16 runs
// widened once per channel into a per-thread buffer by core/convert's vector conversions (and
// rounded once on the way back). The formulas are the generic loops' below; the sums run in
// vector lanes, per run in blocks of kSumBlock values summed on their own first, the runs'
// partial sums added in order. E is the runs' element type (float or BFloat16).

using row_vectors::narrow_to;
using row_vectors::widen;

// sum of x over n values, blockwise.
template <class V, class E>
HG_ROW_INLINE float bn_sum_body(const E* x, int64_t n) {
  float total = 0;
  for (int64_t begin = 0; begin < n; begin += kSumBlock) {
    total += row_vectors::row_sum<V>(x + begin, std::min(kSumBlock, n - begin));
  }
  return total;
}

// sum of (x - mean)^2 over n values, blockwise.
template <class V, class E>
HG_ROW_INLINE float bn_squares_body(const E* x, int64_t n, float mean) {
  float total = 0;
  for (int64_t begin = 0; begin < n; begin += kSumBlock) {
    total += row_vectors::row_squared_deviation<V>(x + begin, std::min(kSumBlock, n - begin), mean);
  }
  return total;
}

// y = (x - mean) * scale + shift over n values.
template <class V, class E>
HG_ROW_INLINE void bn_apply_body(const E* x, E* y, int64_t n, float mean, float scale,
                                 float shift) {
  constexpr int W = kLanes<V>;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    V v;
    load_vec(v, x + i);
    v = (v - mean) * scale + shift;
    store_vec(y + i, v);
  }
  for (; i < n; ++i) y[i] = narrow_to<E>((widen(x[i]) - mean) * scale + shift);
}

// Adds sum(g) and sum(g (x - mean)) over n values to *sum_g and *sum_gx.
template <class V, class E>
HG_ROW_INLINE void bn_grad_sums_body(const E* x, const E* g, int64_t n, float mean,
                                     float* sum_g, float* sum_gx) {
  constexpr int W = kLanes<V>;
  V acc_g = V{}, acc_gx = V{};
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    V xv, gv;
    load_vec(xv, x + i);
    load_vec(gv, g + i);
    acc_g += gv;
    acc_gx += gv * (xv - mean);
  }
  float run_g = lane_sum(acc_g), run_gx = lane_sum(acc_gx);
  for (; i < n; ++i) {
    run_g += widen(g[i]);
    run_gx += widen(g[i]) * (widen(x[i]) - mean);
  }
  *sum_g += run_g;
  *sum_gx += run_gx;
}

// dx over n values: training r w (g - mean_g - xhat mean_gx), eval g w r.
template <class V, class E>
HG_ROW_INLINE void bn_dx_body(const E* x, const E* g, E* dx, int64_t n, float mean, float r,
                              float wc, float mean_g, float mean_gx, bool training) {
  constexpr int W = kLanes<V>;
  const float rw = r * wc;
  int64_t i = 0;
  if (training) {
    for (; i + W <= n; i += W) {
      V xv, gv;
      load_vec(xv, x + i);
      load_vec(gv, g + i);
      gv = rw * (gv - mean_g - (xv - mean) * r * mean_gx);
      store_vec(dx + i, gv);
    }
    for (; i < n; ++i) {
      dx[i] = narrow_to<E>(rw * (widen(g[i]) - mean_g - (widen(x[i]) - mean) * r * mean_gx));
    }
  } else {
    for (; i + W <= n; i += W) {
      V gv;
      load_vec(gv, g + i);
      gv = gv * wc * r;
      store_vec(dx + i, gv);
    }
    for (; i < n; ++i) dx[i] = narrow_to<E>(widen(g[i]) * wc * r);
  }
}

template <class E>
struct BatchNormRuns {
  float (*sum)(const E* x, int64_t n);
  float (*squares)(const E* x, int64_t n, float mean);
  void (*apply)(const E* x, E* y, int64_t n, float mean, float scale, float shift);
  void (*grad_sums)(const E* x, const E* g, int64_t n, float mean, float* sum_g, float* sum_gx);
  void (*dx)(const E* x, const E* g, E* dx, int64_t n, float mean, float r, float wc,
             float mean_g, float mean_gx, bool training);
};

// The five functions on runs of E compiled for one instruction set (ATTRIBUTES) on vector type V.
#define HG_BATCH_NORM_RUNS(NAME, ATTRIBUTES, V, E)                                               \
  ATTRIBUTES float NAME##_sum(const E* x, int64_t n) { return bn_sum_body<V>(x, n); }            \
  ATTRIBUTES float NAME##_squares(const E* x, int64_t n, float mean) {                           \
    return bn_squares_body<V>(x, n, mean);                                                       \
  }                                                                                              \
  ATTRIBUTES void NAME##_apply(const E* x, E* y, int64_t n, float mean, float scale,             \
                               float shift) {                                                    \
    bn_apply_body<V>(x, y, n, mean, scale, shift);                                               \
  }                                                                                              \
  ATTRIBUTES void NAME##_grad_sums(const E* x, const E* g, int64_t n, float mean, float* sum_g,  \
                                   float* sum_gx) {                                              \
    bn_grad_sums_body<V>(x, g, n, mean, sum_g, sum_gx);                                          \
  }                                                                                              \
  ATTRIBUTES void NAME##_dx(const E* x, const E* g, E* dx, int64_t n, float mean, float r,       \
                            float wc, float mean_g, float mean_gx, bool training) {              \
    bn_dx_body<V>(x, g, dx, n, mean, r, wc, mean_g, mean_gx, training);                          \
  }                                                                                              \
  constexpr BatchNormRuns<E> NAME = {NAME##_sum, NAME##_squares, NAME##_apply,                   \
                                     NAME##_grad_sums, NAME##_dx};

#define HG_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
HG_BATCH_NORM_RUNS(batch_norm_runs_avx512, HG_AVX512, FloatVec16, float)
HG_BATCH_NORM_RUNS(batch_norm_runs_avx2, __attribute__((target("avx2,fma"))), FloatVec8, float)
HG_BATCH_NORM_RUNS(batch_norm_runs_base, , FloatVec4, float)
HG_BATCH_NORM_RUNS(batch_norm_bf16_runs_avx512, HG_AVX512, FloatVec16, BFloat16)
HG_BATCH_NORM_RUNS(batch_norm_bf16_runs_avx2, __attribute__((target("avx2,fma"))), FloatVec8,
                   BFloat16)
HG_BATCH_NORM_RUNS(batch_norm_bf16_runs_base, , FloatVec4, BFloat16)
#undef HG_AVX512
#undef HG_BATCH_NORM_RUNS

template <class E>
const BatchNormRuns<E>& batch_norm_runs() {
  if constexpr (std::is_same_v<E, float>) {
    static const BatchNormRuns<float>* const kRuns[] = {
        &batch_norm_runs_base, &batch_norm_runs_avx2, &batch_norm_runs_avx512};
    return *kRuns[row_vectors::row_vector_level()];
  } else {
    static const BatchNormRuns<BFloat16>* const kRuns[] = {
        &batch_norm_bf16_runs_base, &batch_norm_bf16_runs_avx2, &batch_norm_bf16_runs_avx512};
    return *kRuns[row_vectors::row_vector_level()];
  }
}

}  // namespace

float row_vectors::sum_floats(const float* x, int64_t n) {
  return batch_norm_runs<float>().sum(x, n);
}

namespace {

// The element type batch_norm's runs of a T tensor are read as: T itself for float32 and
// bfloat16 (in place), float for float16 (widened into a buffer).
template <class T>
using run_t = std::conditional_t<std::is_same_v<T, Half>, float, T>;

// Channel c of a [N, C, S] tensor as runs of E: run n at first + n * stride. Read in place when
// E is T; float16 is widened into `buffer` (N S values; null otherwise).
template <class E>
struct ChannelRuns {
  const E* first;
  int64_t stride;
  const E* run(int64_t n) const { return first + n * stride; }
};

template <class T>
ChannelRuns<run_t<T>> channel_runs(const T* x, int64_t N, int64_t C, int64_t S, int64_t c,
                                   float* buffer) {
  if constexpr (std::is_same_v<run_t<T>, T>) {
    return {x + c * S, C * S};
  } else {
    for (int64_t n = 0; n < N; ++n) convert::to_float(x + (n * C + c) * S, buffer + n * S, S);
    return {buffer, S};
  }
}

// The per-thread buffer batch_norm's runs need: `wide` channels of count values and one run of
// S for float16, nothing for the types read in place.
template <class T>
float* channel_buffer(int64_t wide, int64_t count, int64_t S) {
  if constexpr (std::is_same_v<run_t<T>, T>) {
    return nullptr;
  } else {
    return row_buffer(wide * count + S);
  }
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
    // Channel c's mean and inverse std, written to the result: the batch's (training; its
    // biased variance kept for the running update) from batch_moments(), or the running ones.
    const auto statistics = [&](int64_t c, auto batch_moments) {
      A m, rs;
      if (training) {
        const Moments<A> moment = batch_moments();
        m = moment.mean;
        rs = inverse_std(moment.var, eps);
        batch_var[size_t(c)] = double(moment.var);
      } else {
        m = eval_mean[size_t(c)];
        rs = inverse_std(eval_var[size_t(c)], eps);
      }
      mean[c] = m;
      rstd[c] = rs;
      return std::pair<A, A>{m, rs};
    };
    if constexpr (std::is_same_v<A, float>) {
      const BatchNormRuns<run_t<T>>& runs = batch_norm_runs<run_t<T>>();
      parallel_for(bn.C, count, [&](int64_t c) {
        float* const buffer = channel_buffer<T>(1, count, bn.S);
        const ChannelRuns xf = channel_runs(xp, bn.N, bn.C, bn.S, c, buffer);
        const auto [m, rs] = statistics(c, [&] {
          float total = 0;
          for (int64_t n = 0; n < bn.N; ++n) total += runs.sum(xf.run(n), bn.S);
          const float batch_mean = total / float(count);
          float squares = 0;
          for (int64_t n = 0; n < bn.N; ++n) squares += runs.squares(xf.run(n), bn.S, batch_mean);
          return Moments<A>{batch_mean, squares / float(count)};
        });
        const float scale = rs * w[size_t(c)], shift = b[size_t(c)];
        for (int64_t n = 0; n < bn.N; ++n) {
          T* out_run = out + (n * bn.C + c) * bn.S;
          if constexpr (std::is_same_v<run_t<T>, T>) {
            runs.apply(xf.run(n), out_run, bn.S, m, scale, shift);
          } else {
            float* const y = buffer + count;  // one run, narrowed once
            runs.apply(xf.run(n), y, bn.S, m, scale, shift);
            convert::from_float(y, out_run, bn.S);
          }
        }
      });
      return;
    }
    parallel_for(bn.C, count, [&](int64_t c) {
      const T* xch = xp + c * bn.S;
      const auto [m, rs] =
          statistics(c, [&] { return moments(xch, bn.N, bn.S, bn.C * bn.S); });
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
    if constexpr (std::is_same_v<A, float>) {
      const BatchNormRuns<run_t<T>>& runs = batch_norm_runs<run_t<T>>();
      parallel_for(bn.C, 2 * count, [&](int64_t c) {
        float* const buffer = channel_buffer<T>(2, count, bn.S);
        const ChannelRuns xf = channel_runs(xp, bn.N, bn.C, bn.S, c, buffer);
        const ChannelRuns gf =
            channel_runs(g, bn.N, bn.C, bn.S, c, buffer == nullptr ? nullptr : buffer + count);
        const float m = mu[size_t(c)], r = rs[size_t(c)], wc = w[size_t(c)];
        float sum_g = 0, sum_gx = 0;
        for (int64_t n = 0; n < bn.N; ++n) {
          runs.grad_sums(xf.run(n), gf.run(n), bn.S, m, &sum_g, &sum_gx);
        }
        sum_gx *= r;
        dw[c] = sum_gx;
        db[c] = sum_g;
        const float mean_g = sum_g / float(count), mean_gx = sum_gx / float(count);
        for (int64_t n = 0; n < bn.N; ++n) {
          T* dx_run = dx + (n * bn.C + c) * bn.S;
          if constexpr (std::is_same_v<run_t<T>, T>) {
            runs.dx(xf.run(n), gf.run(n), dx_run, bn.S, m, r, wc, mean_g, mean_gx, training);
          } else {
            float* const d = buffer + 2 * count;  // one run, narrowed once
            runs.dx(xf.run(n), gf.run(n), d, bn.S, m, r, wc, mean_g, mean_gx, training);
            convert::from_float(d, dx_run, bn.S);
          }
        }
      });
      return;
    }
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

}  // namespace

const kernel::NormKernels norm_kernels = HG_NORM_KERNELS;

}  // namespace hg::cpu
