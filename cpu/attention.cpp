// The CPU attention kernels (kernel/attention.h): softmax(q k^T * scale, causal) v as batched
// GEMMs around one pass over the rows of the scores (NOTE [CPU attention]), or for bfloat16 on
// a CPU with AVX512-BF16 one head at a time (NOTE [Attention by heads] in
// cpu/attention_heads_avx512.cpp; the path by_heads below picks, cpu/attention.h sets).
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
// The GEMMs run in the inputs' dtype where the CPU's GEMM has a kernel for it (16-bit products
// accumulate in float32 and round once, NOTE [CPU GEMM paths] in cpu/linalg.cpp), so S, P and
// dS are rounded to it before their products, as the ops under autocast round them; the
// softmax itself is not. Where it has none (float16; bfloat16 without a oneDNN kernel), the
// GEMM would widen its operands to float32 at every product, and the kernels compute in float32
// from one widening of q, k, v (and out, dout) instead, rounding only their results. A causal row l
// reads its l + 1 valid keys; the others are stored as 0. lse is float32 (float64 for float64,
// whose gradients would otherwise carry float32's rounding through P = exp(S - lse)).
//
// Each GEMM is one call over all N = prod(N...) matrices. q, k and v as nn::MultiheadAttention
// hands them (views [B, H, L, E] of the projections' [B, L, H, E] outputs) do not merge B and H
// into one batch dim, and are copied to dense [N, L, E] first: oneDNN's batched matmul over the
// dense copies took 15.6 us for the demo's 256 products where four calls over the strided
// views took 57 (and the small kernel, which packs a transposed b per matrix, 68), timed once
// with gemm_with in a program of its own (hg-bench-ops --only attention times the result).
//
// The row passes take rows in chunks of about kChunk values: each chunk's exponentials are one
// vector math call (a causal row's masked keys enter as -inf, whose exponential is 0), so a
// short row (the demo's are 9 keys) does not pay a call, a thread-local lookup and a masked
// tail of its own (softmax over the demo's 2304 rows of 9, one row at a time, took 81 us in
// that same program).
#include "halfgrad/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "halfgrad/config.h"
#include "halfgrad/core/convert.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cpu/attention_heads_avx512.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/nn_common.h"
#include "halfgrad/cpu/row_vectors.h"
#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/kernel/attention.h"

namespace hg::cpu {

namespace {

using kernel::FlashBackward;
using kernel::FlashForward;
using nn_common::acc_t;
using nn_common::parallel_for;

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
inline int64_t valid_keys(int64_t r, int64_t L, int64_t S, bool causal) {
  return causal ? std::min(S, r % L + 1) : S;
}

// ---- the row arithmetic on vectors (NOTE [Row vectors] in cpu/row_vectors.h) -------------

using row_vectors::DoubleVec2;
using row_vectors::FloatVec16;
using row_vectors::FloatVec4;
using row_vectors::FloatVec8;
using row_vectors::kLanes;
using row_vectors::lane_t;
using row_vectors::load_vec;
using row_vectors::row_dot;
using row_vectors::row_sum;
using row_vectors::store_vec;

// x[j] = x[j] * f for j < n; returns their max (NaN is passed over, as std::max passes it;
// -inf for n == 0).
template <class V, class A = lane_t<V>>
HG_ROW_INLINE A scale_and_max(A* x, int64_t n, A f) {
  constexpr int W = kLanes<V>;
  V top = V{} - std::numeric_limits<A>::infinity();
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    V v;
    load_vec(v, x + j);
    v *= f;
    store_vec(x + j, v);
    top = v > top ? v : top;
  }
  A max = -std::numeric_limits<A>::infinity();
  for (int i = 0; i < W; ++i) max = std::max(max, top[i]);
  for (; j < n; ++j) max = std::max(max, x[j] *= f);
  return max;
}

// x[j] = x[j] * f - c for j < n, -inf for n <= j < S (whose exponential is 0).
template <class V, class A = lane_t<V>>
HG_ROW_INLINE void scale_shift_mask(A* x, int64_t n, int64_t S, A f, A c) {
  constexpr int W = kLanes<V>;
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    V v;
    load_vec(v, x + j);
    v = v * f - c;
    store_vec(x + j, v);
  }
  for (; j < n; ++j) x[j] = x[j] * f - c;
  for (; j < S; ++j) x[j] = -std::numeric_limits<A>::infinity();
}

// The forward's rows [first, first + rows) of one chunk, e the chunk's scores (rows * S of A)
// in the accumulation type: P in place of the scores, each row's lse.
template <class V, class A = lane_t<V>>
HG_ROW_INLINE void forward_chunk_body(A* e, A* lse, int64_t first, int64_t rows, int64_t L,
                                      int64_t S, bool causal, A f, VectorMap pass) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t n = valid_keys(first + i, L, S, causal);
    A* x = e + i * S;
    const A max = scale_and_max<V>(x, n, f);
    scale_shift_mask<V>(x, n, S, A(1), max);
    lse[i] = max;
  }
  exp_run(e, rows * S, pass);
  for (int64_t i = 0; i < rows; ++i) {
    A* x = e + i * S;
    const A sum = row_sum<V>(x, valid_keys(first + i, L, S, causal));
    lse[i] += std::log(sum);
    constexpr int W = kLanes<V>;
    int64_t j = 0;
    for (; j + W <= S; j += W) {
      V v;
      load_vec(v, x + j);
      v /= sum;
      store_vec(x + j, v);
    }
    for (; j < S; ++j) x[j] /= sum;
  }
}

// The backward's rows of one chunk: e the scores and d the dP values (rows * S each), o and g
// the rows of out and dout (rows * Ev each), all in the accumulation type. With recompute,
// P = exp(S * f - lse) in place of e; without, e holds P already (the forward's, kept). Then
// dS = P (dP - rowsum(dO * out)) * f in place of d.
template <class V, class A = lane_t<V>>
HG_ROW_INLINE void backward_chunk_body(A* e, A* d, const A* o, const A* g, const A* lse,
                                       int64_t first, int64_t rows, int64_t L, int64_t S,
                                       int64_t Ev, bool causal, A f, bool recompute,
                                       VectorMap pass) {
  if (recompute) {
    for (int64_t i = 0; i < rows; ++i) {
      scale_shift_mask<V>(e + i * S, valid_keys(first + i, L, S, causal), S, f, lse[i]);
    }
    exp_run(e, rows * S, pass);
  }
  constexpr int W = kLanes<V>;
  for (int64_t i = 0; i < rows; ++i) {
    const A delta = row_dot<V>(g + i * Ev, o + i * Ev, Ev);
    const A* p = e + i * S;
    A* ds = d + i * S;
    int64_t j = 0;
    for (; j + W <= S; j += W) {
      V pv, dv;
      load_vec(pv, p + j);
      load_vec(dv, ds + j);
      dv = pv * (dv - delta) * f;
      store_vec(ds + j, dv);
    }
    for (; j < S; ++j) ds[j] = p[j] * (ds[j] - delta) * f;  // masked: P = 0, so dS = 0
  }
}

using ForwardChunk = void (*)(float*, float*, int64_t, int64_t, int64_t, int64_t, bool, float,
                              VectorMap);
using BackwardChunk = void (*)(float*, float*, const float*, const float*, const float*, int64_t,
                               int64_t, int64_t, int64_t, int64_t, bool, float, bool, VectorMap);

__attribute__((target("avx512f,avx2,fma"))) void forward_chunk_avx512(float* e, float* lse,
                                                                      int64_t first, int64_t rows,
                                                                      int64_t L, int64_t S,
                                                                      bool causal, float f,
                                                                      VectorMap pass) {
  forward_chunk_body<FloatVec16>(e, lse, first, rows, L, S, causal, f, pass);
}
__attribute__((target("avx2,fma"))) void forward_chunk_avx2(float* e, float* lse, int64_t first,
                                                            int64_t rows, int64_t L, int64_t S,
                                                            bool causal, float f, VectorMap pass) {
  forward_chunk_body<FloatVec8>(e, lse, first, rows, L, S, causal, f, pass);
}
void forward_chunk_base(float* e, float* lse, int64_t first, int64_t rows, int64_t L, int64_t S,
                        bool causal, float f, VectorMap pass) {
  forward_chunk_body<FloatVec4>(e, lse, first, rows, L, S, causal, f, pass);
}
__attribute__((target("avx512f,avx2,fma"))) void backward_chunk_avx512(
    float* e, float* d, const float* o, const float* g, const float* lse, int64_t first,
    int64_t rows, int64_t L, int64_t S, int64_t Ev, bool causal, float f, bool recompute,
    VectorMap pass) {
  backward_chunk_body<FloatVec16>(e, d, o, g, lse, first, rows, L, S, Ev, causal, f, recompute,
                                  pass);
}
__attribute__((target("avx2,fma"))) void backward_chunk_avx2(float* e, float* d, const float* o,
                                                             const float* g, const float* lse,
                                                             int64_t first, int64_t rows, int64_t L,
                                                             int64_t S, int64_t Ev, bool causal,
                                                             float f, bool recompute,
                                                             VectorMap pass) {
  backward_chunk_body<FloatVec8>(e, d, o, g, lse, first, rows, L, S, Ev, causal, f, recompute,
                                 pass);
}
void backward_chunk_base(float* e, float* d, const float* o, const float* g, const float* lse,
                         int64_t first, int64_t rows, int64_t L, int64_t S, int64_t Ev, bool causal,
                         float f, bool recompute, VectorMap pass) {
  backward_chunk_body<FloatVec4>(e, d, o, g, lse, first, rows, L, S, Ev, causal, f, recompute,
                                 pass);
}

// The widest copy this CPU runs.
ForwardChunk float_forward_chunk() {
  constexpr ForwardChunk kChunks[] = {forward_chunk_base, forward_chunk_avx2, forward_chunk_avx512};
  return kChunks[row_vectors::row_vector_level()];
}
BackwardChunk float_backward_chunk() {
  constexpr BackwardChunk kChunks[] = {backward_chunk_base, backward_chunk_avx2,
                                       backward_chunk_avx512};
  return kChunks[row_vectors::row_vector_level()];
}

// ---- the row passes ---------------------------------------------------------------------------

// n values of T in the accumulation type A (float16/bfloat16 on the vector conversions of
// core/convert.h; float32 and float64 copied), and back.
template <class T, class A>
void widen_values(const T* src, A* dst, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    std::copy_n(src, n, dst);
  } else {
    convert::to_float(src, dst, n);
  }
}
template <class T, class A>
void narrow_values(const A* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    std::copy_n(src, n, dst);
  } else {
    convert::from_float(src, dst, n);
  }
}

// Per-thread work buffers of the row passes, kept between calls.
template <class A>
struct ChunkBuffers {
  std::vector<A> scores, dp, out, dout;
};
template <class A>
ChunkBuffers<A>& chunk_buffers() {
  thread_local ChunkBuffers<A> buffers;  // grow to the largest chunk, then stay
  return buffers;
}

// Runs f(first_row, rows) over the R rows of S values in chunks of about kChunk values (the rows
// of a chunk are contiguous in every [R, ...] buffer).
template <class F>
void for_each_chunk(int64_t R, int64_t S, F&& f) {
  const int64_t rows_per_chunk = std::max<int64_t>(1, kChunk / S);
  const int64_t chunks = (R + rows_per_chunk - 1) / rows_per_chunk;
  parallel_for(chunks, rows_per_chunk * S, [&](int64_t c) {
    const int64_t first = c * rows_per_chunk;
    f(first, std::min(rows_per_chunk, R - first));
  });
}

// The forward's pass over the R rows of s (N * L rows of S, contiguous): P in place of the
// scores, and each row's lse.
template <class T>
void softmax_rows(T* s, acc_t<T>* lse, int64_t R, int64_t L, int64_t S, bool causal, double scale) {
  using A = acc_t<T>;
  const VectorMap pass = vector_mapper();
  const A f = A(scale);
  for_each_chunk(R, S, [&](int64_t first, int64_t rows) {
    std::vector<A>& e = chunk_buffers<A>().scores;
    e.resize(size_t(rows * S));
    widen_values(s + first * S, e.data(), rows * S);
    if constexpr (std::is_same_v<A, float>) {
      float_forward_chunk()(e.data(), lse + first, first, rows, L, S, causal, f, pass);
    } else {
      forward_chunk_body<DoubleVec2>(e.data(), lse + first, first, rows, L, S, causal, f, pass);
    }
    narrow_values(e.data(), s + first * S, rows * S);
  });
}

// The backward's pass over the rows: P = exp(S * scale - lse) in place of s (or, with p given,
// the forward's P read from p and s unused), and dS = P (dP - delta) * scale in place of dp,
// delta = rowsum(dO * out) per row (out and dout [R, Ev], contiguous).
template <class T>
void softmax_backward_rows(T* s, const T* p, T* dp, const acc_t<T>* lse, const T* out,
                           const T* dout, int64_t Ev, int64_t R, int64_t L, int64_t S, bool causal,
                           double scale) {
  using A = acc_t<T>;
  const VectorMap pass = vector_mapper();
  const A f = A(scale);
  for_each_chunk(R, S, [&](int64_t first, int64_t rows) {
    ChunkBuffers<A>& b = chunk_buffers<A>();
    b.scores.resize(size_t(rows * S));
    b.dp.resize(size_t(rows * S));
    b.out.resize(size_t(rows * Ev));
    b.dout.resize(size_t(rows * Ev));
    const bool recompute = p == nullptr;
    widen_values((recompute ? s : p) + first * S, b.scores.data(), rows * S);
    widen_values(dp + first * S, b.dp.data(), rows * S);
    widen_values(out + first * Ev, b.out.data(), rows * Ev);
    widen_values(dout + first * Ev, b.dout.data(), rows * Ev);
    if constexpr (std::is_same_v<A, float>) {
      float_backward_chunk()(b.scores.data(), b.dp.data(), b.out.data(), b.dout.data(), lse + first,
                             first, rows, L, S, Ev, causal, f, recompute, pass);
    } else {
      backward_chunk_body<DoubleVec2>(b.scores.data(), b.dp.data(), b.out.data(), b.dout.data(),
                                      lse + first, first, rows, L, S, Ev, causal, f, recompute,
                                      pass);
    }
    if (recompute) narrow_values(b.scores.data(), s + first * S, rows * S);
    narrow_values(b.dp.data(), dp + first * S, rows * S);
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

// The dtype the kernels compute in: q's, or float32 where the CPU's GEMM would run q's dtype as
// float32 tiles anyway (float16, and bfloat16 without a oneDNN kernel): the operands are then
// widened once, not at every product, and S, P and dS are not rounded to 16 bits.
DType compute_dtype(DType dtype) { return gemm_runs_natively(dtype) ? dtype : kFloat32; }

// NOTE [CPU attention keeps P] The forward computes the weights P (in place of the scores, in
// the dtype the kernels compute in, rounded there as the product out = P v reads them), and the
// backward needs them again for dv = P^T dO and dS = P (dP - delta) * scale. Recomputing them
// costs a product S = q k^T and the exponential pass over the rows: about a fifth of the
// backward at the larger CPU GPT's 16 x 8 heads of 64 x 64 (NOTES.md). Where P holds no more
// values than q, k and v together (L S <= (L + 2 S) E: that GPT's 64 x 64 against (64 + 128) x
// 32, the demo's 9 x 9 against 27 x 12), and the caller says a backward will follow, the forward
// hands P over to be saved and the backward reads it; a long sequence (GPT-2's 1024 x 1024
// against 3072 x 64) computes P again from q, k and lse, as FlashAttention does. A kept P in a
// 16-bit dtype is the rounded P, which dS then reads too (recomputed, dS reads P before its
// rounding); dS is rounded to that dtype before its products either way.
bool keeps_probs(int64_t L, int64_t S, int64_t E) { return L * S <= (L + 2 * S) * E; }

// ---- the per-head path (NOTE [Attention by heads] in cpu/attention_heads_avx512.cpp) ----------

std::atomic<AttentionPath>& path_setting() {
  static std::atomic<AttentionPath> setting = [] {
    const char* raw = std::getenv("HALFGRAD_CPU_ATTENTION");
    return raw != nullptr && std::string_view(raw) == "batched" ? AttentionPath::Batched
                                                                : AttentionPath::Auto;
  }();
  return setting;
}

// Whether the heads of q [..., L, E] in the dtype the kernels compute in (compute_dtype) run by
// heads: the same answer for a forward and its backward, so lse and a kept P are the same
// path's.
bool by_heads(DType dtype, int64_t L, int64_t S, int64_t E) {
#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
  return dtype == kBFloat16 &&
         path_setting().load(std::memory_order_relaxed) == AttentionPath::Auto &&
         cpu_has_avx512_bf16() && detail::heads_fit(L, S, E);
#else
  (void)dtype, (void)L, (void)S, (void)E;
  return false;
#endif
}

#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
// t [N..., rows, cols] with its last dim dense (a copy where it is not): each matrix's first
// value, in values from t's data, and its row stride.
struct Heads {
  Tensor t;
  std::vector<int64_t> first;
  int64_t stride;
  detail::HeadRows rows(int64_t n) const {
    return {reinterpret_cast<const uint16_t*>(t.data_ptr<BFloat16>()) + first[size_t(n)], stride};
  }
};

Heads heads_of(const Tensor& tensor, int64_t N) {
  Heads h{tensor.stride(-1) == 1 || tensor.size(-1) == 1 ? tensor : tensor.contiguous(), {}, 0};
  h.stride = h.t.size(-2) == 1 ? h.t.size(-1) : h.t.stride(-2);
  h.first.resize(size_t(N));
  for (int64_t n = 0; n < N; ++n) {
    int64_t rest = n, offset = 0;
    for (int64_t d = h.t.dim() - 3; d >= 0; --d) {
      offset += (rest % h.t.size(d)) * h.t.stride(d);
      rest /= h.t.size(d);
    }
    h.first[size_t(n)] = offset;
  }
  return h;
}

// A 64-byte line of a per-thread workspace.
struct alignas(64) WorkLine {
  unsigned char bytes[64];
};

// f(n, workspace) for each of the N heads, on the threads.
template <class F>
void for_each_head(int64_t N, const detail::HeadShape& shape, F&& f) {
  const int64_t lines = int64_t(detail::heads_workspace_bytes(shape) + 63) / 64;
  parallel_for(N, shape.L * shape.S * shape.E, [&](int64_t n) {
    f(n, static_cast<void*>(nn_common::kept_buffer<WorkLine>(lines)));
  });
}

FlashForward heads_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                           double scale, bool keep_probs) {
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), N = q.numel() / (L * E);
  const Heads qh = heads_of(q, N), kh = heads_of(k, N), vh = heads_of(v, N);
  const Tensor out = empty(q.sizes(), {.dtype = kBFloat16, .device = q.device()});
  const Tensor lse = empty(row_shape(q), {.dtype = kFloat32, .device = q.device()});
  const Tensor probs = keep_probs && keeps_probs(L, S, E)
                           ? empty({N, L, S}, {.dtype = kBFloat16, .device = q.device()})
                           : Tensor();
  auto* const out_bits = reinterpret_cast<uint16_t*>(out.data_ptr<BFloat16>());
  auto* const probs_bits =
      probs.defined() ? reinterpret_cast<uint16_t*>(probs.data_ptr<BFloat16>()) : nullptr;
  float* const lse_rows = lse.data_ptr<float>();
  const detail::HeadShape shape{L, S, E, causal, float(scale)};
  for_each_head(N, shape, [&](int64_t n, void* workspace) {
    detail::head_forward_avx512bf16(
        shape, qh.rows(n), kh.rows(n), vh.rows(n), out_bits + n * L * E, lse_rows + n * L,
        probs_bits != nullptr ? probs_bits + n * L * S : nullptr, workspace);
  });
  return {out, lse, probs};
}

FlashBackward heads_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& probs, bool causal,
                             double scale) {
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), N = q.numel() / (L * E);
  const Heads qh = heads_of(q, N), kh = heads_of(k, N), vh = heads_of(v, N);
  const Heads gh = heads_of(dout.to(kBFloat16), N), oh = heads_of(out.to(kBFloat16), N);
  const Tensor lse_rows = lse.contiguous();
  const TensorOptions options{.dtype = kBFloat16, .device = q.device()};
  const Tensor dq = empty(q.sizes(), options), dk = empty(k.sizes(), options),
               dv = empty(v.sizes(), options);
  auto bits = [](const Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<BFloat16>()); };
  const uint16_t* const kept = probs.defined() ? bits(probs) : nullptr;
  const float* const rows_lse = lse_rows.data_ptr<float>();
  const detail::HeadShape shape{L, S, E, causal, float(scale)};
  for_each_head(N, shape, [&](int64_t n, void* workspace) {
    detail::head_backward_avx512bf16(
        shape, gh.rows(n), qh.rows(n), kh.rows(n), vh.rows(n), oh.rows(n), rows_lse + n * L,
        kept != nullptr ? kept + n * L * S : nullptr, bits(dq) + n * L * E, bits(dk) + n * S * E,
        bits(dv) + n * S * E, workspace);
  });
  return {dq, dk, dv};
}
#endif

FlashForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                               double scale, bool keep_probs) {
  HG_CHECK(attention_fits(q, k, v),
           "{}: the CPU kernels do not take q {} {}, k {} {}, v {} {} (expected CPU tensors of one "
           "floating dtype, q [N..., L, E], k and v [N..., S, E])",
           kOp, q.sizes(), q.dtype(), k.sizes(), k.dtype(), v.sizes(), v.dtype());
  const DType dtype = compute_dtype(q.dtype());
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), N = q.numel() / (L * E);
#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
  if (by_heads(dtype, L, S, E)) return heads_forward(q, k, v, causal, scale, keep_probs);
#endif
  const Tensor q3 = as_3d(q, N, dtype), k3 = as_3d(k, N, dtype), v3 = as_3d(v, N, dtype);
  const TensorOptions options{.dtype = dtype, .device = q.device()};
  const Tensor scores = empty({N, L, S}, options);
  const Tensor out = empty(q.sizes(), options);
  const Tensor lse = empty(row_shape(q), {.dtype = lse_dtype(dtype), .device = q.device()});
  gemm(q3, k3.transpose(1, 2), scores);
  visit_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_rows<T>(scores.data_ptr<T>(), lse.data_ptr<acc_t<T>>(), N * L, L, S, causal, scale);
  });
  gemm(scores, v3, out.view({N, L, E}));
  return {out.to(q.dtype()), lse, keep_probs && keeps_probs(L, S, E) ? scores : Tensor()};
}

FlashBackward attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                 const Tensor& v, const Tensor& out, const Tensor& lse,
                                 const Tensor& probs, bool causal, double scale) {
  HG_CHECK(attention_fits(q, k, v),
           "{}_backward: the CPU kernels do not take q {} {}, k {} {}, v {} {}", kOp, q.sizes(),
           q.dtype(), k.sizes(), k.dtype(), v.sizes(), v.dtype());
  HG_CHECK(dout.defined() && dout.is_cpu() && dout.sizes() == q.sizes() && out.defined() &&
               out.is_cpu() && out.sizes() == q.sizes(),
           "{}_backward: expected grad_output and out of q's shape {} on the CPU, got {} and {}",
           kOp, q.sizes(), dout.defined() ? dout.sizes() : Shape{},
           out.defined() ? out.sizes() : Shape{});
  HG_CHECK(lse.defined() && lse.is_cpu() && lse.dtype() == lse_dtype(compute_dtype(q.dtype())) &&
               lse.sizes() == row_shape(q),
           "{}_backward: expected the forward's lse, {} of shape {} on the CPU, got {}", kOp,
           lse_dtype(compute_dtype(q.dtype())), row_shape(q),
           lse.defined() ? fmt::format("{} {}", lse.dtype(), lse.sizes()) : "none");
  const DType dtype = compute_dtype(q.dtype());
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), N = q.numel() / (L * E);
  HG_CHECK(!probs.defined() || (probs.is_cpu() && probs.dtype() == dtype &&
                                probs.sizes() == Shape{N, L, S} && probs.is_contiguous()),
           "{}_backward: expected the forward's kept weights, contiguous {} of shape [{}, {}, {}] "
           "on the CPU, or none, got {}",
           kOp, dtype, N, L, S,
           probs.defined() ? fmt::format("{} {}", probs.dtype(), probs.sizes()) : "none");
#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
  if (by_heads(dtype, L, S, E)) {
    return heads_backward(dout, q, k, v, out, lse, probs, causal, scale);
  }
#endif
  const Tensor q3 = as_3d(q, N, dtype), k3 = as_3d(k, N, dtype), v3 = as_3d(v, N, dtype);
  const Tensor out3 = as_3d(out, N, dtype).contiguous();
  const Tensor dout3 = as_3d(dout, N, dtype).contiguous();
  const Tensor lse_rows = lse.contiguous();
  const TensorOptions options{.dtype = dtype, .device = q.device()};
  // P: the forward's, or S = q k^T here with P written over it by the row pass.
  const Tensor scores = probs.defined() ? probs : empty({N, L, S}, options);
  const Tensor dp = empty({N, L, S}, options);
  if (!probs.defined()) gemm(q3, k3.transpose(1, 2), scores);
  gemm(dout3, v3.transpose(1, 2), dp);
  visit_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* const s = probs.defined() ? nullptr : scores.data_ptr<T>();
    const T* const p = probs.defined() ? probs.data_ptr<T>() : nullptr;
    softmax_backward_rows<T>(s, p, dp.data_ptr<T>(), lse_rows.data_ptr<acc_t<T>>(),
                             out3.data_ptr<T>(), dout3.data_ptr<T>(), E, N * L, L, S, causal,
                             scale);
  });
  const Tensor dq = empty(q.sizes(), options), dk = empty(k.sizes(), options),
               dv = empty(v.sizes(), options);
  gemm(scores.transpose(1, 2), dout3, dv.view({N, S, E}));
  gemm(dp, k3, dq.view({N, L, E}));
  gemm(dp.transpose(1, 2), q3, dk.view({N, S, E}));
  return {dq.to(q.dtype()), dk.to(k.dtype()), dv.to(v.dtype())};
}

}  // namespace

void set_attention_path(AttentionPath path) {
  path_setting().store(path, std::memory_order_relaxed);
}
AttentionPath get_attention_path() { return path_setting().load(std::memory_order_relaxed); }

const char* attention_path_name(DType dtype, int64_t L, int64_t S, int64_t E) {
  return is_floating_point(dtype) && by_heads(compute_dtype(dtype), L, S, E) ? "heads" : "batched";
}

// clang-format off
const kernel::AttentionKernels attention_kernels{.fits = attention_fits,
    .forward = attention_forward, .backward = attention_backward};
// clang-format on

}  // namespace hg::cpu
