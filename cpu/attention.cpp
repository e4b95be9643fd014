// The CPU attention kernels (kernel/attention.h): softmax(q k^T * scale, causal) v as batched
// GEMMs around one pass over the rows of the scores (NOTE [CPU attention]).
//
// NOTE [CPU attention] The attention of a small model on the CPU is many small matrices: the
// demo's is 256 products of 9 x 12 by 12 x 9. As halfgrad ops (matmul, mul by the scale,
// masked_fill, a cast to float32, softmax, a cast back, matmul) it made seven passes over the
// scores forward and as many nodes backward, each a call with its own set-up, and in 16-bit
// the casts alone cost as much as the softmax. Here:
//   forward   S = q k^T, then one pass over the rows in float32 (float64 for float64): the
//             scale, the causal mask (keys after the query, top-left aligned as torch's
//             is_causal), the max, the exponentials (the vector math pass, NOTE [Vector math]
//             in cpu/vector_math.h), the sum, lse = max + log(sum), and P = exp / sum stored
//             in the scores' dtype in place of S; then out = P v.
//   backward  S = q k^T again and dP = dO v^T; one pass over the rows recomputes P =
//             exp(S * scale - lse) and writes dS = P (dP - rowsum(dO * out)) * scale in place
//             of dP and P in place of S; then dv = P^T dO, dq = dS k, dk = dS^T q.
// The GEMMs run in the inputs' dtype (16-bit products accumulate in float32 and round once,
// NOTE [CPU GEMM paths] in cpu/linalg.cpp), so S, P and dS are rounded to it before their
// products, as the ops under autocast round them; the softmax itself is not. A causal row l
// reads its l + 1 valid keys; the others are stored as 0. lse is float32 (float64 for float64,
// whose gradients would otherwise carry float32's rounding through P = exp(S - lse)).
//
// Each GEMM is one call over all N = prod(N...) matrices. q, k and v as nn::MultiheadAttention
// hands them (views [B, H, L, E] of the projections' [B, L, H, E] outputs) do not merge B and H
// into one batch dim, and are copied to dense [N, L, E] first: oneDNN's batched matmul over the
// dense copies took 15.6 us for the demo's 256 products where four calls over the strided
// views took 57 (and the small kernel, which packs a transposed b per matrix, 68).
//
// The row passes take rows in chunks of about kChunk values: each chunk's exponentials are one
// vector math call (a causal row's masked keys enter as -inf, whose exponential is 0), so a
// short row (the demo's are 9 keys) does not pay a call, a thread-local lookup and a masked
// tail of its own. softmax over the demo's 2304 rows of 9, one row at a time, took 81 us.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cpu/kernels.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/nn_common.h"
#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/kernel/attention.h"

namespace hg::cpu {

namespace {

using kernel::FlashBackward;
using kernel::FlashForward;
using nn_common::acc_t;
using nn_common::load;
using nn_common::parallel_for;
using nn_common::store;

constexpr const char* kOp = "scaled_dot_product_flash_attention";

bool attention_fits(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined() || !q.is_cpu() || !k.is_cpu() || !v.is_cpu()) {
    return false;
  }
  const DType dtype = q.dtype();
  if (!is_floating_point(dtype) || k.dtype() != dtype || v.dtype() != dtype) return false;
  const int64_t dims = q.dim();
  if (dims < 2 || k.dim() != dims || v.dim() != dims) return false;
  for (int64_t d = 0; d < dims - 2; ++d) {
    if (k.size(d) != q.size(d) || v.size(d) != q.size(d)) return false;
  }
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return false;  // the math path
  const int64_t E = q.size(-1), S = k.size(-2);
  return k.size(-1) == E && v.size(-1) == E && v.size(-2) == S;
}

// The dtype of the rows' lse: the accumulation dtype (float64 keeps float64's gradients exact
// to its own precision, as P = exp(S - lse) is recomputed from it).
DType lse_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// Values per chunk of rows in the row passes.
constexpr int64_t kChunk = 4096;

// q's shape without its last dim: the per-row values (lse).
Shape row_shape(const Tensor& q) {
  Shape rows;
  for (int64_t d = 0; d + 1 < q.dim(); ++d) rows.push_back(q.size(d));
  return rows;
}

// t [N..., rows, cols] as [N, rows, cols] in `dtype`: a view where the batch dims merge, else a
// dense copy.
Tensor as_3d(const Tensor& t, int64_t N, DType dtype) {
  return t.to(dtype).reshape({N, t.size(-2), t.size(-1)});
}

// y = exp(y) over n values: the vector math pass for float where there is one, else std::exp.
template <class A>
void exp_run(A* y, int64_t n, VectorMap pass) {
  if constexpr (std::is_same_v<A, float>) {
    if (pass != nullptr) return pass(VectorFn::Exp, y, y, n);
  }
  for (int64_t j = 0; j < n; ++j) y[j] = std::exp(y[j]);
}

// The keys row r may see: all S, or the first l + 1 of query l = r % L when causal.
int64_t valid_keys(int64_t r, int64_t L, int64_t S, bool causal) {
  return causal ? std::min(S, r % L + 1) : S;
}

// Runs f(first_row, rows, buffer) over the R rows of S values in chunks, buffer holding
// rows * S values of A for the chunk (per thread, kept between calls).
template <class A, class F>
void for_each_chunk(int64_t R, int64_t S, F&& f) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, kChunk / S);
  const int64_t chunks = (R + rows_per_chunk - 1) / rows_per_chunk;
  parallel_for(chunks, rows_per_chunk * S, [&](int64_t c) {
    thread_local std::vector<A> buffer;  // grows to the largest chunk, then stays
    const int64_t first = c * rows_per_chunk, rows = std::min(rows_per_chunk, R - first);
    buffer.resize(size_t(rows * S));
    f(first, rows, buffer.data());
  });
}

// The forward's pass over the R rows of s (N * L rows of S, contiguous): P in place of the
// scores, and each row's lse.
template <class T>
void softmax_rows(T* s, acc_t<T>* lse, int64_t R, int64_t L, int64_t S, bool causal, double scale) {
  using A = acc_t<T>;
  const VectorMap pass = vector_mapper();
  const A f = A(scale), minus_inf = -std::numeric_limits<A>::infinity();
  for_each_chunk<A>(R, S, [&](int64_t first, int64_t rows, A* e) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = first + i, n = valid_keys(r, L, S, causal);
      const T* row = s + r * S;
      A* x = e + i * S;
      A max = minus_inf;
      for (int64_t j = 0; j < n; ++j) {
        x[j] = load(row[j]) * f;
        max = std::max(max, x[j]);
      }
      for (int64_t j = 0; j < n; ++j) x[j] -= max;
      for (int64_t j = n; j < S; ++j) x[j] = minus_inf;
      lse[r] = max;  // the sum's log is added below
    }
    exp_run(e, rows * S, pass);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = first + i, n = valid_keys(r, L, S, causal);
      T* row = s + r * S;
      const A* x = e + i * S;
      A sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += x[j];
      lse[r] += std::log(sum);
      for (int64_t j = 0; j < S; ++j) row[j] = store<T>(x[j] / sum);  // masked: exp(-inf) = 0
    }
  });
}

// The backward's pass over the rows: P = exp(S * scale - lse) in place of s, and dS = P (dP -
// delta) * scale in place of dp, delta = rowsum(dO * out) per row (out and dout [R, Ev],
// contiguous).
template <class T>
void softmax_backward_rows(T* s, T* dp, const acc_t<T>* lse, const T* out, const T* dout, int64_t Ev,
                           int64_t R, int64_t L, int64_t S, bool causal, double scale) {
  using A = acc_t<T>;
  const VectorMap pass = vector_mapper();
  const A f = A(scale), minus_inf = -std::numeric_limits<A>::infinity();
  for_each_chunk<A>(R, S, [&](int64_t first, int64_t rows, A* p) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = first + i, n = valid_keys(r, L, S, causal);
      const T* row = s + r * S;
      A* x = p + i * S;
      const A row_lse = lse[r];
      for (int64_t j = 0; j < n; ++j) x[j] = load(row[j]) * f - row_lse;
      for (int64_t j = n; j < S; ++j) x[j] = minus_inf;
    }
    exp_run(p, rows * S, pass);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = first + i;
      const T* o = out + r * Ev;
      const T* g = dout + r * Ev;
      A delta = 0;
      for (int64_t e = 0; e < Ev; ++e) delta += load(g[e]) * load(o[e]);
      T* s_row = s + r * S;
      T* dp_row = dp + r * S;
      const A* x = p + i * S;
      for (int64_t j = 0; j < S; ++j) {  // masked: P = 0, so dS = 0
        s_row[j] = store<T>(x[j]);
        dp_row[j] = store<T>(x[j] * (load(dp_row[j]) - delta) * f);
      }
    }
  });
}

template <class F>
void visit_floating(DType dtype, F&& f) {
  switch (dtype) {
    case kFloat32:
      return f(TypeTag<float>{});
    case kFloat64:
      return f(TypeTag<double>{});
    case kFloat16:
      return f(TypeTag<Half>{});
    case kBFloat16:
      return f(TypeTag<BFloat16>{});
    default:
      HG_ERROR("{}: expected a floating dtype, got {}", kOp, dtype);
  }
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out) {
  gemm_with(GemmImpl::Auto, a, b, out);
}

FlashForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                               double scale) {
  HG_CHECK(attention_fits(q, k, v),
           "{}: the CPU kernels do not take q {} {}, k {} {}, v {} {} (expected CPU tensors of one "
           "floating dtype, q [N..., L, E], k and v [N..., S, E])",
           kOp, q.sizes(), q.dtype(), k.sizes(), k.dtype(), v.sizes(), v.dtype());
  const DType dtype = q.dtype();
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), N = q.numel() / (L * E);
  const Tensor q3 = as_3d(q, N, dtype), k3 = as_3d(k, N, dtype), v3 = as_3d(v, N, dtype);
  const Tensor scores = empty({N, L, S}, q.options());
  FlashForward result{empty(q.sizes(), q.options()),
                      empty(row_shape(q), {.dtype = lse_dtype(dtype), .device = q.device()})};
  gemm(q3, k3.transpose(1, 2), scores);
  visit_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_rows<T>(scores.data_ptr<T>(), result.lse.data_ptr<acc_t<T>>(), N * L, L, S, causal,
                    scale);
  });
  gemm(scores, v3, result.out.view({N, L, E}));
  return result;
}

FlashBackward attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& out, const Tensor& lse, bool causal,
                                 double scale) {
  HG_CHECK(attention_fits(q, k, v),
           "{}_backward: the CPU kernels do not take q {} {}, k {} {}, v {} {}", kOp, q.sizes(),
           q.dtype(), k.sizes(), k.dtype(), v.sizes(), v.dtype());
  HG_CHECK(dout.defined() && dout.is_cpu() && dout.sizes() == q.sizes() && out.defined() &&
               out.is_cpu() && out.sizes() == q.sizes(),
           "{}_backward: expected grad_output and out of q's shape {} on the CPU, got {} and {}",
           kOp, q.sizes(), dout.defined() ? dout.sizes() : Shape{},
           out.defined() ? out.sizes() : Shape{});
  HG_CHECK(lse.defined() && lse.is_cpu() && lse.dtype() == lse_dtype(q.dtype()) &&
               lse.sizes() == row_shape(q),
           "{}_backward: expected the forward's lse, {} of shape {} on the CPU, got {}", kOp,
           lse_dtype(q.dtype()), row_shape(q),
           lse.defined() ? fmt::format("{} {}", lse.dtype(), lse.sizes()) : "none");
  const DType dtype = q.dtype();
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), N = q.numel() / (L * E);
  const Tensor q3 = as_3d(q, N, dtype), k3 = as_3d(k, N, dtype), v3 = as_3d(v, N, dtype);
  const Tensor out3 = as_3d(out, N, dtype).contiguous();
  const Tensor dout3 = as_3d(dout, N, dtype).contiguous();
  const Tensor lse_rows = lse.contiguous();
  const Tensor scores = empty({N, L, S}, q.options()), dp = empty({N, L, S}, q.options());
  gemm(q3, k3.transpose(1, 2), scores);
  gemm(dout3, v3.transpose(1, 2), dp);
  visit_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_rows<T>(scores.data_ptr<T>(), dp.data_ptr<T>(), lse_rows.data_ptr<acc_t<T>>(),
                             out3.data_ptr<T>(), dout3.data_ptr<T>(), E, N * L, L, S, causal,
                             scale);
  });
  FlashBackward result{empty(q.sizes(), q.options()), empty(k.sizes(), k.options()),
                       empty(v.sizes(), v.options())};
  gemm(scores.transpose(1, 2), dout3, result.dv.view({N, S, E}));
  gemm(dp, k3, result.dq.view({N, L, E}));
  gemm(dp.transpose(1, 2), q3, result.dk.view({N, S, E}));
  return result;
}

}  // namespace

// clang-format off
const kernel::AttentionKernels attention_kernels{.fits = attention_fits,
    .forward = attention_forward, .backward = attention_backward};
// clang-format on

}  // namespace hg::cpu
