// Fused scaled dot-product attention on tensor cores, forward and backward, for float16 and
// bfloat16 heads up to 128 wide; the launchers' contract is attention_launch.h.
//
// NOTE [Fused attention] The [L, S] score matrix never reaches global memory. Each block owns a
// tile of 64 rows and walks the other operand in tiles of 64 rows through shared memory; its
// four warps own 16 rows each. The products run on WMMA fragments (16x16x16, 16-bit inputs,
// float32 accumulation); everything between them (scale, mask, exp, the running max and sum)
// is float32, one lane pair per row, each lane on half the row's columns.
//   forward  block = 64 queries. Per key tile: S = Q K^T, then the online softmax (NOTE
//            [Online softmax] in norm.cu) rescales the output accumulator by exp(m_old - m_new)
//            and adds P V, P rounded to the input dtype. The row's logsumexp is saved.
//   backward delta = rowsum(dO * O) first. Then two kernels, so that no gradient is summed with
//            atomics (the result has the same bits every run):
//              dK, dV: block = 64 keys, walking the query tiles:
//                P = exp(S - lse), dV += P^T dO, dP = dO V^T, dS = P (dP - delta), dK += dS^T Q
//              dQ:     block = 64 queries, walking the key tiles: the same P and dS, dQ += dS K.
//            dQ and dK take the scale once, at the end.
// Exponentials are exp2 of scores premultiplied by scale * log2(e). Tiles past L or S are
// zero-filled in shared memory and masked, so padding never produces a NaN; causal masking
// (key j > query i, top-left aligned as torch's is_causal) skips the tiles wholly in the
// future and masks the diagonal ones element by element.
//
// Operands: each row's E values are contiguous and read as 16-byte vectors (the host makes E,
// the strides and the pointers multiples of 8 elements first); E is padded to D = 32, 64 or
// 128 with zeros, which add nothing to a dot product, and the padded columns are not stored.
#include <mma.h>

#include <cmath>
#include <cstdint>

#include "halfgrad/cuda/attention_launch.h"
#include "halfgrad/cuda/reduce_utils.cuh"

namespace hg::cuda::detail {

namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kBlockThreads = kWarps * 32;
constexpr int kTile = 64;      // rows of a tile, queries or keys
constexpr int kWarpRows = 16;  // rows a warp owns: kTile / kWarps
constexpr int kFrag = 16;      // WMMA's m = n = k
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

static_assert(kWarps * kWarpRows == kTile, "each warp owns 16 rows of a tile");

// ---- shared memory layout -------------------------------------------------------------------
// Leading dims pad each row by 16 bytes, which keeps WMMA's rules (a multiple of 8 elements for
// 16-bit tiles, of 4 for float ones; 32-byte aligned fragment pointers) and moves consecutive
// rows to different banks. Regions start on 128 bytes.

constexpr int64_t align128(int64_t bytes) { return (bytes + 127) / 128 * 128; }

template <int D>
struct Layout {
  static constexpr int kLdT = D + 8;                        // [64, D] operand tiles
  static constexpr int kLdP = kTile + 8;                    // [64, 64] P and dS tiles
  static constexpr int kLdF = (D > kTile ? D : kTile) + 4;  // [64, max(64, D)] floats
  static constexpr int64_t kOperand = align128(int64_t(kTile) * kLdT * 2);
  static constexpr int64_t kProbs = align128(int64_t(kTile) * kLdP * 2);
  static constexpr int64_t kFloats = align128(int64_t(kTile) * kLdF * 4);
  static constexpr int64_t kRowStats = align128(kTile * 4);

  // forward: q, k, v | scores (float) | P | output accumulator (float)
  static constexpr int64_t kForward = 3 * kOperand + kFloats + kProbs + kFloats;
  // backward (either kernel): q, dO, k, v | scores/dP/staging (float) | P | dS | lse, delta
  static constexpr int64_t kBackward = 4 * kOperand + kFloats + 2 * kProbs + 2 * kRowStats;
};

// A carve of the dynamic shared memory, in order.
struct Carve {
  unsigned char* next;
  template <class X>
  __device__ X* take(int64_t bytes) {
    X* out = reinterpret_cast<X*>(next);
    next += bytes;
    return out;
  }
};

// ---- tiles ----------------------------------------------------------------------------------

// Copies rows [0, rows) x columns [0, E) of a global tile (row stride `stride`) into the shared
// [64, D] tile `dst`, zeros elsewhere; 16-byte vectors (E, stride and src are multiples of 8
// elements, dst's rows of 16 bytes).
template <class T, int D>
__device__ void load_tile(T* dst, const T* src, int64_t stride, int rows, int E) {
  constexpr int kLd = Layout<D>::kLdT;
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kTile * kChunks; i += kBlockThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    uint4 value = make_uint4(0u, 0u, 0u, 0u);
    if (r < rows && c < E) value = *reinterpret_cast<const uint4*>(src + r * stride + c);
    *reinterpret_cast<uint4*>(dst + r * kLd + c) = value;
  }
}

// Float32 values [rows of the block] of a [B, H, L] vector, times `factor`; 0 past L.
__device__ void load_row_stats(float* dst, const float* src, int rows, float factor) {
  for (int i = threadIdx.x; i < kTile; i += kBlockThreads)
    dst[i] = i < rows ? src[i] * factor : 0.f;
}

// ---- warp products --------------------------------------------------------------------------

template <class T, class Layout_>
using FragA = wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, T, Layout_>;
template <class T, class Layout_>
using FragB = wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, T, Layout_>;
using FragAcc = wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float>;

// out[16, 64] (float, row-major, ld kLdF) = a[16, D] b[64, D]^T: the warp's scores (a = its Q
// rows, b = the K tile) or its dP (a = its dO rows, b = the V tile).
template <class T, int D>
__device__ void warp_abt(const T* a, const T* b, float* out) {
  constexpr int kLdT = Layout<D>::kLdT;
#pragma unroll
  for (int n = 0; n < kTile / kFrag; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.f);
#pragma unroll
    for (int kk = 0; kk < D / kFrag; ++kk) {
      FragA<T, wmma::row_major> fa;
      FragB<T, wmma::col_major> fb;  // b^T: b's row n*16 + j is column j
      wmma::load_matrix_sync(fa, a + kk * kFrag, kLdT);
      wmma::load_matrix_sync(fb, b + n * kFrag * kLdT + kk * kFrag, kLdT);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * kFrag, acc, Layout<D>::kLdF, wmma::mem_row_major);
  }
}

// acc[n] += a[16, 64] b[64, D], n over D's 16-column blocks, b the row-major operand tile. a is
// read from a [64, 64] tile of ld kLdP, its k-th 16-wide block at a + k * a_step, laid out as
// ALayout says:
//   row_major, a_step 16:          the warp's own 16 rows (P V, dS K);
//   col_major, a_step 16 * kLdP:   the transpose of the warp's 16 columns (P^T dO, dS^T Q for
//                                  the warp's 16 keys): a's row k*16 + j is column j.
template <class ALayout, class T, int D>
__device__ void warp_accumulate(const T* a, int a_step, const T* b, FragAcc (&acc)[D / kFrag]) {
#pragma unroll
  for (int kk = 0; kk < kTile / kFrag; ++kk) {
    FragA<T, ALayout> fa;
    wmma::load_matrix_sync(fa, a + kk * a_step, Layout<D>::kLdP);
#pragma unroll
    for (int n = 0; n < D / kFrag; ++n) {
      FragB<T, wmma::row_major> fb;
      wmma::load_matrix_sync(fb, b + kk * kFrag * Layout<D>::kLdT + n * kFrag, Layout<D>::kLdT);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes the warp's accumulators [16, D] times `factor` to global rows (row stride `stride`) of
// which `rows` exist, columns [0, E): through `staging` (the warp's 16 float rows).
template <class T, int D>
__device__ void warp_store(FragAcc (&acc)[D / kFrag], float* staging, T* dst, int64_t stride,
                           int rows, int E, float factor) {
  constexpr int kLdF = Layout<D>::kLdF;
#pragma unroll
  for (int n = 0; n < D / kFrag; ++n) {
    wmma::store_matrix_sync(staging + n * kFrag, acc[n], kLdF, wmma::mem_row_major);
  }
  __syncwarp();
  const int lane = threadIdx.x % 32, r = lane / 2, half = lane % 2;
  if (r < rows) {
    for (int c = half * (D / 2); c < (half + 1) * (D / 2) && c < E; ++c) {
      dst[r * stride + c] = convert<T>(staging[r * kLdF + c] * factor);
    }
  }
  __syncwarp();
}

// Keys of the tile a block of 64 queries from q0 must see: all S, or up to its last query.
__device__ __forceinline__ int64_t key_end(const FlashGeometry& g, int64_t q0) {
  return g.causal ? min64(g.S, q0 + kTile) : g.S;
}

__device__ __forceinline__ bool visible(const FlashGeometry& g, int64_t query, int64_t key) {
  return query < g.L && key < g.S && !(g.causal && key > query);
}

// ---- forward --------------------------------------------------------------------------------

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads)
    flash_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                         T* __restrict__ out, float* __restrict__ lse, FlashGeometry g,
                         FlashStrides qs, FlashStrides ks, FlashStrides vs, FlashStrides os,
                         int64_t q_tiles) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L_ = Layout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  Carve carve{smem};
  T* sq = carve.take<T>(L_::kOperand);
  T* sk = carve.take<T>(L_::kOperand);
  T* sv = carve.take<T>(L_::kOperand);
  float* ss = carve.take<float>(L_::kFloats);
  T* sp = carve.take<T>(L_::kProbs);
  float* so = carve.take<float>(L_::kFloats);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;  // this lane's row of the warp's 16, half its columns
  const int64_t tile = blockIdx.x % q_tiles, bh = blockIdx.x / q_tiles;
  const int64_t b = bh / g.H, h = bh % g.H;
  const int64_t q0 = tile * kTile;
  const int E = int(g.E);
  const T* kb = k + b * ks.batch + h * ks.head;
  const T* vb = v + b * vs.batch + h * vs.head;

  load_tile<T, D>(sq, q + b * qs.batch + h * qs.head + q0 * qs.row, qs.row,
                  int(min64(kTile, g.L - q0)), E);
  for (int i = threadIdx.x; i < kTile * L_::kLdF; i += kBlockThreads) so[i] = 0.f;

  const int wrow = warp * kWarpRows + r;  // the lane's row in the tile
  const int64_t query = q0 + wrow;
  const float scale2 = g.scale * kLog2e;
  float m = -INFINITY, l = 0.f;  // running max (log2 units) and sum of exp2(x - m)
  const int64_t keys = key_end(g, q0);
  for (int64_t k0 = 0; k0 < keys; k0 += kTile) {
    const int k_rows = int(min64(kTile, g.S - k0));
    __syncthreads();  // the previous tile's K and V are no longer read
    load_tile<T, D>(sk, kb + k0 * ks.row, ks.row, k_rows, E);
    load_tile<T, D>(sv, vb + k0 * vs.row, vs.row, k_rows, E);
    __syncthreads();

    float* sw = ss + warp * kWarpRows * L_::kLdF;
    warp_abt<T, D>(sq + warp * kWarpRows * L_::kLdT, sk, sw);
    __syncwarp();

    const float* srow = sw + r * L_::kLdF + half * 32;
    float x[32];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      x[c] = visible(g, query, k0 + half * 32 + c) ? srow[c] * scale2 : -INFINITY;
      tile_max = fmaxf(tile_max, x[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float base = m_new == -INFINITY ? 0.f : m_new;  // nothing visible yet: all p are 0
    const float alpha = exp2f(m - base);
    float sum = 0.f;
    T* prow = sp + wrow * L_::kLdP + half * 32;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const float p = exp2f(x[c] - base);
      sum += p;
      prow[c] = convert<T>(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    float* orow = so + wrow * L_::kLdF + half * (D / 2);
    for (int c = 0; c < D / 2; ++c) orow[c] *= alpha;
    __syncwarp();

    FragAcc acc[D / kFrag];
    float* ow = so + warp * kWarpRows * L_::kLdF;
#pragma unroll
    for (int n = 0; n < D / kFrag; ++n) {
      wmma::load_matrix_sync(acc[n], ow + n * kFrag, L_::kLdF, wmma::mem_row_major);
    }
    warp_accumulate<wmma::row_major, T, D>(sp + warp * kWarpRows * L_::kLdP, kFrag, sv, acc);
#pragma unroll
    for (int n = 0; n < D / kFrag; ++n) {
      wmma::store_matrix_sync(ow + n * kFrag, acc[n], L_::kLdF, wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (query < g.L) {
    const float inv = l > 0.f ? 1.f / l : 0.f;
    T* orow = out + b * os.batch + h * os.head + query * os.row;
    const float* acc_row = so + wrow * L_::kLdF;
    for (int c = half * (D / 2); c < (half + 1) * (D / 2) && c < E; ++c) {
      orow[c] = convert<T>(acc_row[c] * inv);
    }
    if (half == 0) lse[bh * g.L + query] = l > 0.f ? (m + log2f(l)) * kLn2 : -INFINITY;
  }
#else
  __trap();  // the host launches these only on compute capability 8.0 and newer
#endif
}

// ---- backward -------------------------------------------------------------------------------

// delta[row] = sum over E of dO[row] * O[row]: one warp per row.
template <class T>
__global__ void flash_delta_kernel(const T* __restrict__ out, const T* __restrict__ dout,
                                   float* __restrict__ delta, FlashGeometry g, FlashStrides os,
                                   FlashStrides dos) {
  const int64_t rows = g.B * g.H * g.L;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t i = row % g.L, bh = row / g.L, b = bh / g.H, h = bh % g.H;
  const T* o = out + b * os.batch + h * os.head + i * os.row;
  const T* d = dout + b * dos.batch + h * dos.head + i * dos.row;
  float acc = 0.f;
  for (int64_t c = lane; c < g.E; c += 32) acc += convert<float>(o[c]) * convert<float>(d[c]);
  for (int mask = 16; mask > 0; mask /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, mask);
  if (lane == 0) delta[row] = acc;
}

// The shared memory of both backward kernels.
template <class T, int D>
struct BackwardTiles {
  T *sq, *sdo, *sk, *sv;
  float* ss;  // scores, then dP; the gradients' staging at the end
  T *sp, *sds;
  float *slse, *sdelta;  // per query row of the tile: lse in log2 units, delta

  __device__ explicit BackwardTiles(unsigned char* smem) {
    using L_ = Layout<D>;
    Carve carve{smem};
    sq = carve.take<T>(L_::kOperand);
    sdo = carve.take<T>(L_::kOperand);
    sk = carve.take<T>(L_::kOperand);
    sv = carve.take<T>(L_::kOperand);
    ss = carve.take<float>(L_::kFloats);
    sp = carve.take<T>(L_::kProbs);
    sds = carve.take<T>(L_::kProbs);
    slse = carve.take<float>(L_::kRowStats);
    sdelta = carve.take<float>(L_::kRowStats);
  }
};

// For the warp's 16 query rows of the tile at q0 against the key tile at k0 (both in `t`):
// P (into sp, and `p` for this lane's 32 columns) and dS = P (dP - delta) (into sds).
template <class T, int D>
__device__ void warp_probs_and_dscores(const BackwardTiles<T, D>& t, const FlashGeometry& g,
                                       int64_t q0, int64_t k0) {
  using L_ = Layout<D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int wrow = warp * kWarpRows + r;
  const int64_t query = q0 + wrow;
  float* sw = t.ss + warp * kWarpRows * L_::kLdF;
  const float* srow = sw + r * L_::kLdF + half * 32;
  const float scale2 = g.scale * kLog2e;

  warp_abt<T, D>(t.sq + warp * kWarpRows * L_::kLdT, t.sk, sw);  // S
  __syncwarp();
  float p[32];
  const float lse2 = t.slse[wrow];
  T* prow = t.sp + wrow * L_::kLdP + half * 32;
#pragma unroll
  for (int c = 0; c < 32; ++c) {
    p[c] = visible(g, query, k0 + half * 32 + c) ? exp2f(srow[c] * scale2 - lse2) : 0.f;
    prow[c] = convert<T>(p[c]);
  }
  __syncwarp();
  warp_abt<T, D>(t.sdo + warp * kWarpRows * L_::kLdT, t.sv, sw);  // dP
  __syncwarp();
  const float delta = t.sdelta[wrow];
  T* dsrow = t.sds + wrow * L_::kLdP + half * 32;
#pragma unroll
  for (int c = 0; c < 32; ++c) dsrow[c] = convert<T>(p[c] * (srow[c] - delta));
  __syncwarp();
}

// Loads the query-side tiles at q0: Q, dO, and lse (to log2 units) and delta of its rows.
template <class T, int D>
__device__ void load_query_side(const BackwardTiles<T, D>& t, const T* qb, const T* dob,
                                const float* lse, const float* delta, const FlashGeometry& g,
                                const FlashStrides& qs, const FlashStrides& dos, int64_t q0) {
  const int rows = int(min64(kTile, g.L - q0));
  load_tile<T, D>(t.sq, qb + q0 * qs.row, qs.row, rows, int(g.E));
  load_tile<T, D>(t.sdo, dob + q0 * dos.row, dos.row, rows, int(g.E));
  load_row_stats(t.slse, lse + q0, rows, kLog2e);
  load_row_stats(t.sdelta, delta + q0, rows, 1.f);
}

template <class T, int D>
__device__ void load_key_side(const BackwardTiles<T, D>& t, const T* kb, const T* vb,
                              const FlashGeometry& g, const FlashStrides& ks,
                              const FlashStrides& vs, int64_t k0) {
  const int rows = int(min64(kTile, g.S - k0));
  load_tile<T, D>(t.sk, kb + k0 * ks.row, ks.row, rows, int(g.E));
  load_tile<T, D>(t.sv, vb + k0 * vs.row, vs.row, rows, int(g.E));
}

// dK and dV for 64 keys: the block walks every query tile that can see them.
template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads)
    flash_backward_kv_kernel(const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, const T* __restrict__ dout,
                             const float* __restrict__ lse, const float* __restrict__ delta,
                             T* __restrict__ dk, T* __restrict__ dv, FlashGeometry g,
                             FlashStrides qs, FlashStrides ks, FlashStrides vs, FlashStrides dos,
                             int64_t k_tiles) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L_ = Layout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles<T, D> t(smem);
  const int warp = threadIdx.x / 32;
  const int64_t tile = blockIdx.x % k_tiles, bh = blockIdx.x / k_tiles;
  const int64_t b = bh / g.H, h = bh % g.H;
  const int64_t k0 = tile * kTile;
  const T* qb = q + b * qs.batch + h * qs.head;
  const T* dob = dout + b * dos.batch + h * dos.head;
  load_key_side(t, k + b * ks.batch + h * ks.head, v + b * vs.batch + h * vs.head, g, ks, vs, k0);

  FragAcc dk_acc[D / kFrag], dv_acc[D / kFrag];
#pragma unroll
  for (int n = 0; n < D / kFrag; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.f);
    wmma::fill_fragment(dv_acc[n], 0.f);
  }
  // Queries before k0 see none of these keys when causal.
  for (int64_t q0 = g.causal ? k0 : 0; q0 < g.L; q0 += kTile) {
    __syncthreads();  // the previous query tile is no longer read
    load_query_side(t, qb, dob, lse + bh * g.L, delta + bh * g.L, g, qs, dos, q0);
    __syncthreads();
    warp_probs_and_dscores(t, g, q0, k0);
    __syncthreads();  // every warp's rows of P and dS are written
    // The warp's 16 keys are columns of P and dS: dV += P^T dO, dK += dS^T Q.
    const int keys = warp * kWarpRows, step = kFrag * L_::kLdP;
    warp_accumulate<wmma::col_major, T, D>(t.sp + keys, step, t.sdo, dv_acc);
    warp_accumulate<wmma::col_major, T, D>(t.sds + keys, step, t.sq, dk_acc);
  }

  const int rows = int(min64(kWarpRows, g.S - k0 - warp * kWarpRows));
  const int64_t first = k0 + warp * kWarpRows;
  float* staging = t.ss + warp * kWarpRows * L_::kLdF;
  const int64_t out_row = bh * g.S + first;  // dk, dv: contiguous [B, H, S, E]
  warp_store<T, D>(dv_acc, staging, dv + out_row * g.E, g.E, rows, int(g.E), 1.f);
  warp_store<T, D>(dk_acc, staging, dk + out_row * g.E, g.E, rows, int(g.E), g.scale);
#else
  __trap();
#endif
}

// dQ for 64 queries: the block walks every key tile they can see.
template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads)
    flash_backward_q_kernel(const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, const T* __restrict__ dout,
                            const float* __restrict__ lse, const float* __restrict__ delta,
                            T* __restrict__ dq, FlashGeometry g, FlashStrides qs, FlashStrides ks,
                            FlashStrides vs, FlashStrides dos, int64_t q_tiles) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L_ = Layout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles<T, D> t(smem);
  const int warp = threadIdx.x / 32;
  const int64_t tile = blockIdx.x % q_tiles, bh = blockIdx.x / q_tiles;
  const int64_t b = bh / g.H, h = bh % g.H;
  const int64_t q0 = tile * kTile;
  const T* kb = k + b * ks.batch + h * ks.head;
  const T* vb = v + b * vs.batch + h * vs.head;
  load_query_side(t, q + b * qs.batch + h * qs.head, dout + b * dos.batch + h * dos.head,
                  lse + bh * g.L, delta + bh * g.L, g, qs, dos, q0);

  FragAcc dq_acc[D / kFrag];
#pragma unroll
  for (int n = 0; n < D / kFrag; ++n) wmma::fill_fragment(dq_acc[n], 0.f);
  const int64_t keys = key_end(g, q0);
  for (int64_t k0 = 0; k0 < keys; k0 += kTile) {
    __syncthreads();  // the previous key tile is no longer read
    load_key_side(t, kb, vb, g, ks, vs, k0);
    __syncthreads();
    warp_probs_and_dscores(t, g, q0, k0);
    // dQ += dS K over the warp's own rows of dS (written by this warp: __syncwarp sufficed)
    warp_accumulate<wmma::row_major, T, D>(t.sds + warp * kWarpRows * L_::kLdP, kFrag, t.sk,
                                           dq_acc);
  }

  const int rows = int(min64(kWarpRows, g.L - q0 - warp * kWarpRows));
  float* staging = t.ss + warp * kWarpRows * L_::kLdF;
  const int64_t out_row = bh * g.L + q0 + warp * kWarpRows;  // dq: contiguous [B, H, L, E]
  warp_store<T, D>(dq_acc, staging, dq + out_row * g.E, g.E, rows, int(g.E), g.scale);
#else
  __trap();
#endif
}

// ---- dispatch -------------------------------------------------------------------------------

// Calls f.template operator()<D>() with D the padded head width of E (E <= 128).
template <class F>
cudaError_t with_head_width(int64_t E, F&& f) {
  if (E <= 32) return f.template operator()<32>();
  if (E <= 64) return f.template operator()<64>();
  return f.template operator()<128>();
}

// Lets `kernel` use `bytes` of dynamic shared memory (beyond the default 48 KiB).
template <class Kernel>
cudaError_t allow_smem(Kernel kernel, int64_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

template <class F>
cudaError_t with_flash_type(DType dtype, F&& f) {
  if (dtype == DType::Float16) return f(TypeTag<__half>{});
  if (dtype == DType::BFloat16) return f(TypeTag<__nv_bfloat16>{});
  return cudaErrorInvalidValue;  // the host checks the dtype first
}

unsigned blocks_for(int64_t tiles, const FlashGeometry& g) { return unsigned(tiles * g.B * g.H); }

}  // namespace

cudaError_t flash_kernels_compiled_for_current_device(bool* compiled) {
  cudaFuncAttributes attributes{};
  const cudaError_t status = cudaFuncGetAttributes(&attributes, flash_forward_kernel<__half, 64>);
  // The virtual architecture the kernel was compiled from (the JIT keeps it): 80 and up has
  // the WMMA code, below that the __trap.
  *compiled = status == cudaSuccess && attributes.ptxVersion >= 80;
  return status;
}

int64_t flash_forward_smem_bytes(int64_t E) {
  if (E <= 32) return Layout<32>::kForward;
  if (E <= 64) return Layout<64>::kForward;
  return Layout<128>::kForward;
}

int64_t flash_backward_smem_bytes(int64_t E) {
  if (E <= 32) return Layout<32>::kBackward;
  if (E <= 64) return Layout<64>::kBackward;
  return Layout<128>::kBackward;
}

cudaError_t launch_flash_attention_forward(const void* q, const void* k, const void* v, void* out,
                                           float* lse, DType dtype, const FlashGeometry& g,
                                           const FlashStrides& qs, const FlashStrides& ks,
                                           const FlashStrides& vs, const FlashStrides& os,
                                           cudaStream_t stream) {
  const int64_t q_tiles = ceil_div(g.L, kTile);
  return with_flash_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_head_width(g.E, [&]<int D>() {
      const auto kernel = flash_forward_kernel<T, D>;
      if (cudaError_t status = allow_smem(kernel, Layout<D>::kForward); status != cudaSuccess) {
        return status;
      }
      kernel<<<blocks_for(q_tiles, g), kBlockThreads, Layout<D>::kForward, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
          static_cast<T*>(out), lse, g, qs, ks, vs, os, q_tiles);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_flash_attention_backward(const void* q, const void* k, const void* v,
                                            const void* out, const void* dout, const float* lse,
                                            float* delta, void* dq, void* dk, void* dv, DType dtype,
                                            const FlashGeometry& g, const FlashStrides& qs,
                                            const FlashStrides& ks, const FlashStrides& vs,
                                            const FlashStrides& os, const FlashStrides& dos,
                                            cudaStream_t stream) {
  const int64_t q_tiles = ceil_div(g.L, kTile), k_tiles = ceil_div(g.S, kTile);
  return with_flash_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* tq = static_cast<const T*>(q);
    const T* tk = static_cast<const T*>(k);
    const T* tv = static_cast<const T*>(v);
    const T* tdo = static_cast<const T*>(dout);
    const int64_t rows = g.B * g.H * g.L;
    constexpr int kRowsPerBlock = 256 / 32;
    flash_delta_kernel<T><<<unsigned(ceil_div(rows, kRowsPerBlock)), 256, 0, stream>>>(
        static_cast<const T*>(out), tdo, delta, g, os, dos);
    if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
    return with_head_width(g.E, [&]<int D>() {
      constexpr int64_t kSmem = Layout<D>::kBackward;
      const auto kv_kernel = flash_backward_kv_kernel<T, D>;
      const auto q_kernel = flash_backward_q_kernel<T, D>;
      if (cudaError_t status = allow_smem(kv_kernel, kSmem); status != cudaSuccess) return status;
      if (cudaError_t status = allow_smem(q_kernel, kSmem); status != cudaSuccess) return status;
      kv_kernel<<<blocks_for(k_tiles, g), kBlockThreads, kSmem, stream>>>(
          tq, tk, tv, tdo, lse, delta, static_cast<T*>(dk), static_cast<T*>(dv), g, qs, ks, vs, dos,
          k_tiles);
      if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
      q_kernel<<<blocks_for(q_tiles, g), kBlockThreads, kSmem, stream>>>(
          tq, tk, tv, tdo, lse, delta, static_cast<T*>(dq), g, qs, ks, vs, dos, q_tiles);
      return cudaGetLastError();
    });
  });
}

}  // namespace hg::cuda::detail
