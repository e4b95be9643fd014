// Fused scaled dot-product attention on tensor cores, forward and backward, for float16 and
// bfloat16 heads up to 128 wide; the launchers' contract is attention_launch.h.
//
// NOTE [Fused attention] The [L, S] score matrix never reaches global memory, nor shared
// memory: it lives in the registers of the warp that computes it. A block of four warps owns a
// tile of 64 rows (queries, or keys in the dK/dV kernel), each warp 16 of them, and walks the
// other operand in tiles of 64 rows, loaded into shared memory with cp.async one tile ahead of
// the one in use (two buffers). The products are mma.sync m16n8k16 (16-bit inputs, float32
// accumulation), fed by ldmatrix; everything between them (scale, mask, exp, the running max
// and sum) is float32 on the accumulator registers.
//
// NOTE [Fragments of m16n8k16] The PTX ISA fixes which elements each lane holds: with
// g = lane / 4 and t = lane % 4, an accumulator tile [16, 8] holds (g, 2t), (g, 2t+1) in c0, c1
// and (g + 8, 2t), (g + 8, 2t+1) in c2, c3; an A tile [16, 16] holds rows g and g + 8, columns
// 2t, 2t+1 and 2t+8, 2t+9, in the order (g, 2t) (g+8, 2t) (g, 2t+8) (g+8, 2t+8). So the
// accumulators of two neighbouring [16, 8] tiles, rounded to 16 bits in pairs, are the A
// operand [16, 16] of the next product as they stand: P = softmax(S) feeds P V without leaving
// the registers, and the same holds for P^T, dS and dS^T in the backward.
//   forward  block = 64 queries. Per key tile: S = Q K^T, then the online softmax (NOTE
//            [Online softmax] in norm.cu) rescales the output accumulators by exp(m_old - m_new)
//            and adds P V, P rounded to the input dtype. The row's logsumexp is saved.
//   backward delta = rowsum(dO * O) first. Then two kernels, so that no gradient is summed with
//            atomics (the result has the same bits every run):
//              dK, dV: block = 64 keys, walking the query tiles; each warp computes its 16
//                keys' S^T = K Q^T and dP^T = V dO^T, so that P^T and dS^T are A operands:
//                P^T = exp(S^T - lse), dV += P^T dO, dS^T = P^T (dP^T - delta), dK += dS^T Q;
//              dQ:     block = 64 queries, walking the key tiles: the same P and dS, dQ += dS K.
//            dQ and dK take the scale once, at the end. The price of no atomics is S and dP
//            computed twice (7 products per tile pair instead of 5).
// Exponentials are exp2 of scores premultiplied by scale * log2(e). Tiles past L or S are
// zero-filled in shared memory and masked, so padding never produces a NaN; causal masking
// (key j > query i, top-left aligned as torch's is_causal) skips the tiles wholly in the
// future and masks the others element by element where they cross the diagonal.
//
// Operands: each row's E values are contiguous and read as 16-byte vectors (the host makes E,
// the strides and the pointers multiples of 8 elements first); E is padded to D = 32, 64 or
// 128 with zeros, which add nothing to a dot product, and the padded columns are not stored.
// Shared-memory rows are D + 8 elements long: the 16 bytes of padding put the eight rows one
// ldmatrix reads in eight different bank groups.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "halfgrad/cuda/attention_launch.h"
#include "halfgrad/cuda/reduce_utils.cuh"

namespace hg::cuda::detail {

namespace {

constexpr int kWarps = 4;
constexpr int kBlockThreads = kWarps * 32;
constexpr int kTile = 64;               // rows of a tile, queries or keys
constexpr int kWarpRows = 16;           // rows a warp owns: kTile / kWarps
constexpr int kTileBlocks = kTile / 8;  // [16, 8] accumulator tiles across a 64-wide tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

static_assert(kWarps * kWarpRows == kTile, "each warp owns 16 rows of a tile");

// NOTE [Two row tiles per warp] On the query side of the forward and dQ kernels a warp owns R
// row tiles of 16, so the block owns 64 R queries and each K or V fragment read from shared
// memory feeds R products instead of one; but the accumulators double, and with them the
// registers, so fewer blocks fit on a multiprocessor. R = 2 is compiled for heads up to 64
// wide (wider ones would spill) and R = 1 for all; set_flash_query_row_tiles (for benchmarks
// and tests) picks one. The default is 1, measured faster on an H100 (benchmarks/results/
// NOTES.md): with two, the forward's 253 registers per thread leave room for half the blocks,
// and the forward took 0.088 ms instead of 0.079 at 8x12x1024x64.
template <int D>
inline constexpr int kMaxRowTiles = D <= 64 ? 2 : 1;
constexpr int kDefaultRowTiles = 1;
std::atomic<int> query_row_tiles_setting{0};  // 0: kDefaultRowTiles

// The row tiles the kernels for head width D take now.
template <int D>
int query_row_tiles() {
  const int setting = query_row_tiles_setting.load(std::memory_order_relaxed);
  const int wanted = setting == 0 ? kDefaultRowTiles : setting;
  return wanted < kMaxRowTiles<D> ? wanted : kMaxRowTiles<D>;
}

// ---- shared memory layout -------------------------------------------------------------------

constexpr int64_t align128(int64_t bytes) { return (bytes + 127) / 128 * 128; }

template <int D>
struct Layout {
  static constexpr int kLd = D + 8;  // elements per row of a [64, D] tile
  static constexpr int64_t kOperand = align128(int64_t(kTile) * kLd * 2);
  static constexpr int64_t kRowStats = align128(kTile * 4);

  // forward: Q (64 R rows) | K, V twice (the tile in use and the next)
  static constexpr int64_t forward(int R) { return R * kOperand + 4 * kOperand; }
  // dK/dV: K, V | Q, dO, lse, delta twice
  static constexpr int64_t kBackwardKV = 2 * kOperand + 2 * (2 * kOperand + 2 * kRowStats);
  // dQ: Q, dO, lse, delta (64 R rows) | K, V twice
  static constexpr int64_t backward_q(int R) {
    return 2 * R * kOperand + 2 * (2 * kOperand + 2 * R * kRowStats);
  }
  // The most any row-tile setting asks for.
  static constexpr int64_t kForward = forward(kMaxRowTiles<D>);
  static constexpr int64_t kBackward = kBackwardKV > backward_q(kMaxRowTiles<D>)
                                           ? kBackwardKV
                                           : backward_q(kMaxRowTiles<D>);
};

// ---- PTX: shared-memory addresses, cp.async, ldmatrix, mma ------------------------------------

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global src to shared dst, asynchronously; zeros instead when !valid (src is
// then not read, but must be a valid address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Four 8x8 16-bit matrices; lane l gives the address of row l % 8 of matrix l / 8, and gets in
// r[i] its (l / 4, 2 (l % 4)) pair of matrix i (transposed with .trans).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row)));
}

// d += a b: a [16, 16] row-major, b [16, 8] column-major, d [16, 8] float32.
template <class T>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, the first in the low half (the lower column of an operand pair).
template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  uint32_t out;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&out, &h, 4);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&out, &h, 4);
  }
  return out;
}

// 2^x (0 for -inf), the hardware's approximation (relative error about 2^-22).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- tiles ----------------------------------------------------------------------------------

// Starts copying rows [0, rows) x columns [0, E) of a global tile (row stride `stride`) into
// the shared [64 R, D] tile `dst`, zeros elsewhere (E, stride and src multiples of 8 elements).
template <class T, int D, int R = 1>
__device__ void load_tile_async(T* dst, const T* src, int64_t stride, int rows, int E) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < R * kTile * kChunks; i += kBlockThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool valid = r < rows && c < E;
    cp_async16(dst + r * Layout<D>::kLd + c, valid ? src + r * stride + c : src, valid);
  }
}

// Float32 values of the block's `count` rows of a [B, H, L] vector, times `factor`; 0 past
// `rows`.
__device__ void load_row_stats(float* dst, const float* src, int rows, float factor,
                               int count = kTile) {
  for (int i = threadIdx.x; i < count; i += kBlockThreads)
    dst[i] = i < rows ? src[i] * factor : 0.f;
}

// How many of the 16 rows from `first` exist, of `total`.
__device__ __forceinline__ int rows_from(int64_t first, int64_t total) {
  const int64_t rows = total - first;
  return rows <= 0 ? 0 : rows >= kWarpRows ? kWarpRows : int(rows);
}

template <int N>
__device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
}

// ---- warp products --------------------------------------------------------------------------

// The A operand [16, 16] at rows [row0, row0 + 16), columns [16 kk, 16 kk + 16) of a shared
// row-major [64, D] tile.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const void* tile, int row0, int kk) {
  const int lane = threadIdx.x % 32;
  const auto* base = static_cast<const unsigned char*>(tile);
  ldmatrix_x4(a, base + ((row0 + lane % 16) * Layout<D>::kLd + kk * 16 + lane / 16 * 8) * 2);
}

// acc[r][8][4] = a[16, D] b^T for each of the warp's R row tiles r: [16, 64] scores of rows
// row0 + 16 r.. of the shared tile `a_tile` against the 64 rows of the shared [64, D] tile b.
template <class T, int D, int R>
__device__ __forceinline__ void warp_abt(float (&acc)[R][kTileBlocks][4], const T* a_tile, int row0,
                                         const T* b_tile) {
  const int lane = threadIdx.x % 32, quad = lane / 8;
#pragma unroll
  for (int r = 0; r < R; ++r) zero(acc[r]);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r) load_a<D>(a[r], a_tile, row0 + 16 * r, kk);
#pragma unroll
    for (int n2 = 0; n2 < kTileBlocks / 2; ++n2) {
      // b^T's [16, 16] block: rows (of b) 16 n2.., columns 16 kk..; matrices 0, 1 are the
      // first [16, 8] operand (columns kk.. and kk + 8..), 2, 3 the second.
      uint32_t b[4];
      const int row = n2 * 16 + lane % 8 + quad / 2 * 8, col = kk * 16 + quad % 2 * 8;
      ldmatrix_x4(b, b_tile + row * Layout<D>::kLd + col);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        mma<T>(acc[r][2 * n2], a[r], b[0], b[1]);
        mma<T>(acc[r][2 * n2 + 1], a[r], b[2], b[3]);
      }
    }
  }
}

// acc[r][D / 8][4] += p[r] b for each row tile r, p[r] the warp's accumulators of a [16, 64]
// product (NOTE [Fragments of m16n8k16]), b a shared row-major [64, D] tile.
template <class T, int D, int R>
__device__ __forceinline__ void warp_pb(float (&acc)[R][D / 8][4],
                                        const float (&p)[R][kTileBlocks][4], const T* b_tile) {
  const int lane = threadIdx.x % 32, quad = lane / 8;
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    uint32_t a[R][4];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      a[r][0] = pack<T>(p[r][2 * kk][0], p[r][2 * kk][1]);
      a[r][1] = pack<T>(p[r][2 * kk][2], p[r][2 * kk][3]);
      a[r][2] = pack<T>(p[r][2 * kk + 1][0], p[r][2 * kk + 1][1]);
      a[r][3] = pack<T>(p[r][2 * kk + 1][2], p[r][2 * kk + 1][3]);
    }
#pragma unroll
    for (int n2 = 0; n2 < D / 16; ++n2) {
      // b's [16, 16] block at rows 16 kk.., columns 16 n2.., transposed by ldmatrix: matrices
      // 0, 1 (rows kk.. and kk + 8..) are the first [16, 8] operand, 2, 3 the second.
      uint32_t b[4];
      const int row = kk * 16 + lane % 8 + quad % 2 * 8, col = n2 * 16 + quad / 2 * 8;
      ldmatrix_x4_trans(b, b_tile + row * Layout<D>::kLd + col);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        mma<T>(acc[r][2 * n2], a[r], b[0], b[1]);
        mma<T>(acc[r][2 * n2 + 1], a[r], b[2], b[3]);
      }
    }
  }
}

// Writes the warp's [16, D] accumulators times `factor` to global rows [first, first + 16) of
// which `rows` exist (row stride `stride`), columns [0, E).
template <class T, int D>
__device__ __forceinline__ void warp_store(const float (&acc)[D / 8][4], T* dst, int64_t stride,
                                           int rows, int E, float factor) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int col = n * 8 + 2 * t;
    if (col >= E) continue;  // E is a multiple of 8: a whole tile is in or out
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = g + 8 * half;
      if (row < rows) {
        const uint32_t v = pack<T>(acc[n][2 * half] * factor, acc[n][2 * half + 1] * factor);
        *reinterpret_cast<uint32_t*>(dst + row * stride + col) = v;
      }
    }
  }
}

__device__ __forceinline__ bool visible(const FlashGeometry& g, int64_t query, int64_t key) {
  return query < g.L && key < g.S && !(g.causal && key > query);
}

// Whether the tile pair at (q0, k0), q_rows queries and 64 keys, needs masking element by
// element: past L or S, or crossing the causal diagonal.
__device__ __forceinline__ bool needs_mask(const FlashGeometry& g, int64_t q0, int64_t k0,
                                           int q_rows = kTile) {
  return q0 + q_rows > g.L || k0 + kTile > g.S || (g.causal && k0 + kTile - 1 > q0);
}

// Keys a block of q_rows queries from q0 must see: all S, or up to its last query.
__device__ __forceinline__ int64_t key_end(const FlashGeometry& g, int64_t q0, int q_rows) {
  return g.causal ? min64(g.S, q0 + q_rows) : g.S;
}

// The block's tile and (batch, head): the tiles with the most work (causal: the last) first,
// so that the short ones fill the gaps at the end.
struct BlockWork {
  int64_t tile, bh, b, h;
  __device__ BlockWork(const FlashGeometry& g, int64_t tiles) {
    const int64_t heads = g.B * g.H;
    tile = tiles - 1 - int64_t(blockIdx.x) / heads;
    bh = int64_t(blockIdx.x) % heads;
    b = bh / g.H;
    h = bh % g.H;
  }
};

// ---- forward --------------------------------------------------------------------------------

template <class T, int D, int R>
__global__ void __launch_bounds__(kBlockThreads)
    flash_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                         T* __restrict__ out, float* __restrict__ lse, FlashGeometry g,
                         FlashStrides qs, FlashStrides ks, FlashStrides vs, FlashStrides os,
                         int64_t q_tiles) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  using L_ = Layout<D>;
  constexpr int kQueryRows = R * kTile;
  constexpr int kTileElems = int(L_::kOperand / 2);
  extern __shared__ __align__(128) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* skv = sq + R * kTileElems;  // K of buffer i at skv + 2 i tiles, V after it

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, t = lane % 4;
  const BlockWork work(g, q_tiles);
  const int64_t q0 = work.tile * kQueryRows;
  const int E = int(g.E);
  const T* kb = k + work.b * ks.batch + work.h * ks.head;
  const T* vb = v + work.b * vs.batch + work.h * vs.head;
  const int64_t k_tiles = ceil_div(key_end(g, q0, kQueryRows), kTile);

  auto load_kv = [&](int64_t tile, int buffer) {
    const int64_t k0 = tile * kTile;
    const int rows = int(min64(kTile, g.S - k0));
    load_tile_async<T, D>(skv + 2 * buffer * kTileElems, kb + k0 * ks.row, ks.row, rows, E);
    load_tile_async<T, D>(skv + (2 * buffer + 1) * kTileElems, vb + k0 * vs.row, vs.row, rows, E);
  };
  load_tile_async<T, D, R>(sq, q + work.b * qs.batch + work.h * qs.head + q0 * qs.row, qs.row,
                           int(min64(kQueryRows, g.L - q0)), E);
  load_kv(0, 0);
  cp_async_commit();

  const float scale2 = g.scale * kLog2e;
  // Per row tile r, rows gr and gr + 8 (i = 2 r + h): the running max (log2 units) and this
  // lane's part of the running sum of exp2(x - max).
  float m[2 * R], l[2 * R];
#pragma unroll
  for (int i = 0; i < 2 * R; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
  }
  float o[R][D / 8][4];
#pragma unroll
  for (int r = 0; r < R; ++r) zero(o[r]);
  const int row0 = warp * kWarpRows * R;  // the warp's first row in the block's tile
  for (int64_t j = 0; j < k_tiles; ++j) {
    const int buffer = int(j % 2);
    if (j + 1 < k_tiles) {
      __syncthreads();  // every warp is done with the buffer the next tile goes to
      load_kv(j + 1, 1 - buffer);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this tile's group (and Q's) has landed; the next may be in flight
    __syncthreads();
    const T* sk = skv + 2 * buffer * kTileElems;
    const T* sv = sk + kTileElems;
    const int64_t k0 = j * kTile;

    float s[R][kTileBlocks][4];
    warp_abt<T, D, R>(s, sq, row0, sk);

    const bool mask = needs_mask(g, q0, k0, kQueryRows);
    float tile_max[2 * R];
#pragma unroll
    for (int i = 0; i < 2 * R; ++i) tile_max[i] = -INFINITY;
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int n = 0; n < kTileBlocks; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 2 * r + e / 2;
          const int64_t query = q0 + row0 + 16 * r + gr + 8 * (e / 2);
          const int64_t key = k0 + n * 8 + 2 * t + e % 2;
          // Rows past L stay unmasked (their Q is zero, their output is not stored), so that
          // their sums stay positive.
          const bool shown = !mask || query >= g.L || visible(g, query, key);
          s[r][n][e] = shown ? s[r][n][e] * scale2 : -INFINITY;
          tile_max[i] = fmaxf(tile_max[i], s[r][n][e]);
        }
      }
    }
    float alpha[2 * R], base[2 * R];
#pragma unroll
    for (int i = 0; i < 2 * R; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      const float m_new = fmaxf(m[i], tile_max[i]);
      base[i] = m_new == -INFINITY ? 0.f : m_new;  // nothing visible yet: every p is 0
      alpha[i] = exp2_approx(m[i] - base[i]);
      m[i] = m_new;
      l[i] *= alpha[i];
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int n = 0; n < kTileBlocks; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 2 * r + e / 2;
          s[r][n][e] = exp2_approx(s[r][n][e] - base[i]);
          l[i] += s[r][n][e];
        }
      }
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[r][n][e] *= alpha[2 * r + e / 2];
      }
    }
    warp_pb<T, D, R>(o, s, sv);
  }
  cp_async_wait<0>();  // no copy outlives the block (the last group is empty)

  // The row sums over the quad of lanes that share each row, then out = o / l.
  float inv[2 * R];
#pragma unroll
  for (int i = 0; i < 2 * R; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    inv[i] = l[i] > 0.f ? 1.f / l[i] : 0.f;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[r][n][e] *= inv[2 * r + e / 2];
    }
    const int64_t first = q0 + row0 + 16 * r;
    warp_store<T, D>(o[r], out + work.b * os.batch + work.h * os.head + first * os.row, os.row,
                     rows_from(first, g.L), E, 1.f);
    if (t == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 2 * r + h;
        const int64_t query = first + gr + 8 * h;
        if (query < g.L) {
          lse[work.bh * g.L + query] = l[i] > 0.f ? (m[i] + log2f(l[i])) * kLn2 : -INFINITY;
        }
      }
    }
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

// The shared memory of both backward kernels: the block's own tiles (`fixed`: K and V, or Q and
// dO; 64 R rows each), and two buffers of the walked side, each two tiles and room for 64 R row
// statistics, lse (in log2 units) and delta, of the query side.
template <class T, int D, int R>
struct BackwardTiles {
  static constexpr int kTileElems = int(Layout<D>::kOperand / 2);
  static constexpr int64_t kStats = R * Layout<D>::kRowStats;
  static constexpr int64_t kBufferBytes = 2 * Layout<D>::kOperand + 2 * kStats;
  static constexpr int64_t bytes() { return 2 * R * Layout<D>::kOperand + 2 * kBufferBytes; }
  unsigned char* smem;
  __device__ explicit BackwardTiles(unsigned char* s) : smem(s) {}
  __device__ T* fixed(int i) const { return reinterpret_cast<T*>(smem) + i * R * kTileElems; }
  __device__ unsigned char* buffer(int b) const {
    return smem + 2 * R * Layout<D>::kOperand + b * kBufferBytes;
  }
  __device__ T* walked(int b, int i) const {
    return reinterpret_cast<T*>(buffer(b)) + i * kTileElems;
  }
  __device__ float* lse(int b) const {
    return reinterpret_cast<float*>(buffer(b) + 2 * Layout<D>::kOperand);
  }
  __device__ float* delta(int b) const { return lse(b) + kStats / 4; }
};
static_assert(BackwardTiles<__half, 64, 1>::bytes() == Layout<64>::kBackwardKV);
static_assert(BackwardTiles<__half, 64, 2>::bytes() == Layout<64>::backward_q(2));
static_assert(BackwardTiles<__half, 128, 1>::bytes() == Layout<128>::backward_q(1));

// dK and dV for 64 keys: the block walks every query tile that can see them. One row tile per
// warp: the accumulators of two would not fit the registers.
template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads)
    flash_backward_kv_kernel(const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, const T* __restrict__ dout,
                             const float* __restrict__ lse, const float* __restrict__ delta,
                             T* __restrict__ dk, T* __restrict__ dv, FlashGeometry g,
                             FlashStrides qs, FlashStrides ks, FlashStrides vs, FlashStrides dos,
                             int64_t k_tiles) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles<T, D, 1> tiles(smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, t = lane % 4;
  // Causal: the tiles of the first keys see the most queries; BlockWork starts with the last
  // tile, so count the tiles backwards.
  BlockWork work(g, k_tiles);
  if (g.causal) work.tile = k_tiles - 1 - work.tile;
  const int64_t k0 = work.tile * kTile;
  const int E = int(g.E);
  const T* qb = q + work.b * qs.batch + work.h * qs.head;
  const T* dob = dout + work.b * dos.batch + work.h * dos.head;
  const float* lse_b = lse + work.bh * g.L;
  const float* delta_b = delta + work.bh * g.L;
  const int k_rows = int(min64(kTile, g.S - k0));
  load_tile_async<T, D>(tiles.fixed(0), k + work.b * ks.batch + work.h * ks.head + k0 * ks.row,
                        ks.row, k_rows, E);
  load_tile_async<T, D>(tiles.fixed(1), v + work.b * vs.batch + work.h * vs.head + k0 * vs.row,
                        vs.row, k_rows, E);
  // Queries before k0 see none of these keys when causal.
  const int64_t first_tile = g.causal ? k0 / kTile : 0, q_tiles = ceil_div(g.L, kTile);
  auto load_query_side = [&](int64_t tile, int buffer) {
    const int64_t q0 = tile * kTile;
    const int rows = int(min64(kTile, g.L - q0));
    load_tile_async<T, D>(tiles.walked(buffer, 0), qb + q0 * qs.row, qs.row, rows, E);
    load_tile_async<T, D>(tiles.walked(buffer, 1), dob + q0 * dos.row, dos.row, rows, E);
    load_row_stats(tiles.lse(buffer), lse_b + q0, rows, kLog2e);
    load_row_stats(tiles.delta(buffer), delta_b + q0, rows, 1.f);
  };
  if (first_tile < q_tiles) load_query_side(first_tile, 0);
  cp_async_commit();

  const float scale2 = g.scale * kLog2e;
  const int row0 = warp * kWarpRows;  // the warp's 16 keys in the tile
  float dk_acc[1][D / 8][4], dv_acc[1][D / 8][4];
  zero(dk_acc[0]);
  zero(dv_acc[0]);
  for (int64_t j = first_tile; j < q_tiles; ++j) {
    const int buffer = int((j - first_tile) % 2);
    if (j + 1 < q_tiles) {
      __syncthreads();  // every warp is done with the buffer the next tile goes to
      load_query_side(j + 1, 1 - buffer);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // this tile's operands (cp.async) and row statistics (stores) are there
    const T* sq = tiles.walked(buffer, 0);
    const T* sdo = tiles.walked(buffer, 1);
    const float* slse = tiles.lse(buffer);
    const float* sdelta = tiles.delta(buffer);
    const int64_t q0 = j * kTile;

    // S^T and dP^T: [16 keys, 64 queries]; P^T = exp2(S^T scale2 - lse), dS^T = P^T (dP^T - delta)
    float p[1][kTileBlocks][4], ds[1][kTileBlocks][4];
    warp_abt<T, D, 1>(p, tiles.fixed(0), row0, sq);
    warp_abt<T, D, 1>(ds, tiles.fixed(1), row0, sdo);
    const bool mask = needs_mask(g, q0, k0);
#pragma unroll
    for (int n = 0; n < kTileBlocks; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + 2 * t + e % 2;  // the query in the tile
        const int64_t key = k0 + row0 + gr + 8 * (e / 2), query = q0 + col;
        const bool shown = !mask || visible(g, query, key);
        p[0][n][e] = shown ? exp2_approx(p[0][n][e] * scale2 - slse[col]) : 0.f;
        ds[0][n][e] = p[0][n][e] * (ds[0][n][e] - sdelta[col]);
      }
    }
    warp_pb<T, D, 1>(dv_acc, p, sdo);
    warp_pb<T, D, 1>(dk_acc, ds, sq);
  }
  cp_async_wait<0>();  // also when no query tile sees these keys

  const int64_t first = k0 + row0;
  const int rows = rows_from(first, g.S);
  const int64_t out_row = work.bh * g.S + first;  // dk, dv: contiguous [B, H, S, E]
  warp_store<T, D>(dv_acc[0], dv + out_row * g.E, g.E, rows, E, 1.f);
  warp_store<T, D>(dk_acc[0], dk + out_row * g.E, g.E, rows, E, g.scale);
#else
  __trap();
#endif
}

// dQ for 64 R queries (NOTE [Two row tiles per warp]): the block walks every key tile they can
// see.
template <class T, int D, int R>
__global__ void __launch_bounds__(kBlockThreads)
    flash_backward_q_kernel(const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, const T* __restrict__ dout,
                            const float* __restrict__ lse, const float* __restrict__ delta,
                            T* __restrict__ dq, FlashGeometry g, FlashStrides qs, FlashStrides ks,
                            FlashStrides vs, FlashStrides dos, int64_t q_tiles) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr int kQueryRows = R * kTile;
  extern __shared__ __align__(128) unsigned char smem[];
  const BackwardTiles<T, D, R> tiles(smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, t = lane % 4;
  const BlockWork work(g, q_tiles);
  const int64_t q0 = work.tile * kQueryRows;
  const int E = int(g.E);
  const T* kb = k + work.b * ks.batch + work.h * ks.head;
  const T* vb = v + work.b * vs.batch + work.h * vs.head;
  const int q_rows = int(min64(kQueryRows, g.L - q0));
  load_tile_async<T, D, R>(tiles.fixed(0), q + work.b * qs.batch + work.h * qs.head + q0 * qs.row,
                           qs.row, q_rows, E);
  load_tile_async<T, D, R>(tiles.fixed(1),
                           dout + work.b * dos.batch + work.h * dos.head + q0 * dos.row, dos.row,
                           q_rows, E);
  // lse and delta of the block's queries, in buffer 0's row statistics (the key side has none).
  load_row_stats(tiles.lse(0), lse + work.bh * g.L + q0, q_rows, kLog2e, kQueryRows);
  load_row_stats(tiles.delta(0), delta + work.bh * g.L + q0, q_rows, 1.f, kQueryRows);
  const int64_t k_tiles = ceil_div(key_end(g, q0, kQueryRows), kTile);
  auto load_key_side = [&](int64_t tile, int buffer) {
    const int64_t k0 = tile * kTile;
    const int rows = int(min64(kTile, g.S - k0));
    load_tile_async<T, D>(tiles.walked(buffer, 0), kb + k0 * ks.row, ks.row, rows, E);
    load_tile_async<T, D>(tiles.walked(buffer, 1), vb + k0 * vs.row, vs.row, rows, E);
  };
  load_key_side(0, 0);
  cp_async_commit();
  __syncthreads();  // the row statistics are there

  const float scale2 = g.scale * kLog2e;
  const int row0 = warp * kWarpRows * R;  // the warp's first query in the tile
  float lse2[2 * R], row_delta[2 * R];    // rows gr and gr + 8 of each row tile
#pragma unroll
  for (int i = 0; i < 2 * R; ++i) {
    const int row = row0 + 16 * (i / 2) + gr + 8 * (i % 2);
    lse2[i] = tiles.lse(0)[row];
    row_delta[i] = tiles.delta(0)[row];
  }
  float dq_acc[R][D / 8][4];
#pragma unroll
  for (int r = 0; r < R; ++r) zero(dq_acc[r]);
  for (int64_t j = 0; j < k_tiles; ++j) {
    const int buffer = int(j % 2);
    if (j + 1 < k_tiles) {
      __syncthreads();
      load_key_side(j + 1, 1 - buffer);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const T* sk = tiles.walked(buffer, 0);
    const T* sv = tiles.walked(buffer, 1);
    const int64_t k0 = j * kTile;

    float p[R][kTileBlocks][4], ds[R][kTileBlocks][4];
    warp_abt<T, D, R>(p, tiles.fixed(0), row0, sk);
    warp_abt<T, D, R>(ds, tiles.fixed(1), row0, sv);
    const bool mask = needs_mask(g, q0, k0, kQueryRows);
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int n = 0; n < kTileBlocks; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 2 * r + e / 2;
          const int64_t query = q0 + row0 + 16 * r + gr + 8 * (e / 2);
          const int64_t key = k0 + n * 8 + 2 * t + e % 2;
          const bool shown = !mask || visible(g, query, key);
          p[r][n][e] = shown ? exp2_approx(p[r][n][e] * scale2 - lse2[i]) : 0.f;
          ds[r][n][e] = p[r][n][e] * (ds[r][n][e] - row_delta[i]);
        }
      }
    }
    warp_pb<T, D, R>(dq_acc, ds, sk);
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t first = q0 + row0 + 16 * r;
    const int64_t out_row = work.bh * g.L + first;  // dq: contiguous [B, H, L, E]
    warp_store<T, D>(dq_acc[r], dq + out_row * g.E, g.E, rows_from(first, g.L), E, g.scale);
  }
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

// Calls f.template operator()<R>() with R the row tiles the kernels for head width D take now.
template <int D, class F>
cudaError_t with_row_tiles(F&& f) {
  if constexpr (kMaxRowTiles<D> >= 2) {
    if (query_row_tiles<D>() == 2) return f.template operator()<2>();
  }
  return f.template operator()<1>();
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

void set_flash_query_row_tiles(int row_tiles) {
  query_row_tiles_setting.store(row_tiles == 1 || row_tiles == 2 ? row_tiles : 0,
                                std::memory_order_relaxed);
}

cudaError_t flash_kernels_compiled_for_current_device(bool* compiled) {
  cudaFuncAttributes attributes{};
  const cudaError_t status =
      cudaFuncGetAttributes(&attributes, flash_forward_kernel<__half, 64, 1>);
  // The virtual architecture the kernel was compiled from (the JIT keeps it): 80 and up has
  // the mma.sync code, below that the __trap.
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
  return with_flash_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return with_head_width(g.E, [&]<int D>() {
      return with_row_tiles<D>([&]<int R>() {
        const int64_t q_tiles = ceil_div(g.L, R * kTile);
        constexpr int64_t kSmem = Layout<D>::forward(R);
        const auto kernel = flash_forward_kernel<T, D, R>;
        if (cudaError_t status = allow_smem(kernel, kSmem); status != cudaSuccess) return status;
        kernel<<<blocks_for(q_tiles, g), kBlockThreads, kSmem, stream>>>(
            static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
            static_cast<T*>(out), lse, g, qs, ks, vs, os, q_tiles);
        return cudaGetLastError();
      });
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
  const int64_t k_tiles = ceil_div(g.S, kTile);
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
      constexpr int64_t kSmemKV = Layout<D>::kBackwardKV;
      const auto kv_kernel = flash_backward_kv_kernel<T, D>;
      if (cudaError_t status = allow_smem(kv_kernel, kSmemKV); status != cudaSuccess) {
        return status;
      }
      kv_kernel<<<blocks_for(k_tiles, g), kBlockThreads, kSmemKV, stream>>>(
          tq, tk, tv, tdo, lse, delta, static_cast<T*>(dk), static_cast<T*>(dv), g, qs, ks, vs, dos,
          k_tiles);
      if (cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;
      return with_row_tiles<D>([&]<int R>() {
        const int64_t q_tiles = ceil_div(g.L, R * kTile);
        constexpr int64_t kSmemQ = Layout<D>::backward_q(R);
        const auto q_kernel = flash_backward_q_kernel<T, D, R>;
        if (cudaError_t status = allow_smem(q_kernel, kSmemQ); status != cudaSuccess) return status;
        q_kernel<<<blocks_for(q_tiles, g), kBlockThreads, kSmemQ, stream>>>(
            tq, tk, tv, tdo, lse, delta, static_cast<T*>(dq), g, qs, ks, vs, dos, q_tiles);
        return cudaGetLastError();
      });
    });
  });
}

}  // namespace hg::cuda::detail
