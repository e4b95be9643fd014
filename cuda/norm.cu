// CUDA kernels of softmax, log_softmax, layer_norm, group_norm and batch_norm (forward and
// backward); the contract is kernel/norm.h, the launchers' is norm_launch.h.
//
// Dims: N batch, C channels, G groups (Cg = C / G each), S the flattened spatial size, M a
// normalized row's length, D the softmax dim. T is the storage type, A = acc_t<T> the
// accumulation type (float; double for float64): values load as A, every sum accumulates in
// A and each output is rounded once.
//
// NOTE [CUDA row kernels] softmax and layer_norm over the last dim (the hot case: rows of
// C = 768 .. 50257 in a GPT) give each row a group of threads: a warp for rows up to 1024
// values, the whole block (256 threads) beyond. Each thread reads every group-th value (every
// group-th 16-byte vector when the row length and the pointers allow), the group combines its
// partial results with xor shuffles (then shared memory), so that every thread has the row's
// statistics, and the thread writes its own values. Rows are read again for the output rather
// than held in registers: the second read comes from L2.
//
// NOTE [Online softmax] One pass keeps (max, sum of exp(x - max)) per thread, rescaling the sum
// when the max grows; pairs combine the same way. The CPU's two-pass rules carry over: NaN
// anywhere gives NaN (the NaN enters the sum), and an infinite max (+inf present, or every
// value -inf) gives NaN, because the CPU computes exp(inf - inf) there.
//
// NOTE [Deterministic parameter gradients] Sums over rows (layer_norm's dweight/dbias) and over
// the batch (batch_norm's per-channel sums) are cut into a fixed number of pieces that depends
// only on the shapes; each piece is reduced on its own into a workspace and one thread per
// column combines the pieces in order. No float atomics, so every run gives the same bits.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "halfgrad/cuda/norm_launch.h"
#include "halfgrad/cuda/reduce_utils.cuh"

namespace hg::cuda::detail {

namespace {

// ---- values ---------------------------------------------------------------------------------

template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr int kBlock = 256;  // threads of every block here
constexpr int64_t kMaxGrid = int64_t(1) << 20;
// Pieces: aim for about this many blocks (a constant, so results do not depend on the device).
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMaxSplits = 1024;

// Threads per row (NOTE [CUDA row kernels]): a power of two up to 32 for short rows, else the
// block.
int row_group(int64_t M, bool allow_subwarp) {
  if (M > 1024) return kBlock;
  if (!allow_subwarp) return 32;
  int group = 1;
  while (group < M && group < 32) group *= 2;
  return group;
}

unsigned row_grid(int64_t rows, int group) {
  const int64_t per_block = kBlock / group;
  return unsigned(max64(1, min64(ceil_div(rows, per_block), kMaxGrid)));
}

// ---- group reductions -----------------------------------------------------------------------

template <class A>
struct Pair {
  A a;
  A b;
};

template <class A>
__device__ __forceinline__ Pair<A> shfl_xor(Pair<A> p, int mask, int width) {
  return {detail::shfl_xor(p.a, mask, width), detail::shfl_xor(p.b, mask, width)};
}

struct AddOp {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
  template <class A>
  __device__ Pair<A> operator()(Pair<A> x, Pair<A> y) const {
    return {x.a + y.a, x.b + y.b};
  }
};

// (max, sum of exp(x - max)): NOTE [Online softmax]. The max ignores NaN; the sum carries it.
struct SoftmaxOp {
  template <class A>
  __device__ Pair<A> operator()(Pair<A> x, Pair<A> y) const {
    const A max = x.a > y.a ? x.a : y.a;
    if (max == -std::numeric_limits<A>::infinity()) return {max, x.b + y.b};
    return {max, x.b * exp_value(x.a - max) + y.b * exp_value(y.a - max)};
  }
};
template <class A>
__device__ __forceinline__ Pair<A> softmax_add(Pair<A> acc, A v) {
  if (v > acc.a) {
    acc.b = acc.b * exp_value(acc.a - v) + A(1);
    acc.a = v;
  } else if (v != -std::numeric_limits<A>::infinity()) {
    acc.b += exp_value(v - acc.a);  // (a NaN v makes the sum NaN)
  }
  return acc;
}
template <class A>
__device__ __forceinline__ Pair<A> softmax_identity() {
  return {-std::numeric_limits<A>::infinity(), A(0)};
}

// The softmax (kLog: log_softmax) of a row's values from the row's (max, sum of exp(x - max)):
// an infinite max gives NaN (NOTE [Online softmax]).
template <class A, bool kLog>
struct SoftmaxOutput {
  A max, sum, log_sum;
  __device__ explicit SoftmaxOutput(Pair<A> acc)
      : max(acc.a),
        sum(is_inf(acc.a) ? std::numeric_limits<A>::quiet_NaN() : acc.b),
        log_sum(log_value(sum)) {}
  __device__ A operator()(A v) const { return kLog ? v - max - log_sum : exp_value(v - max) / sum; }
};

// Backward, with g = dy and out = y: the row's sum is of softmax_backward_term (softmax:
// sum(dy y); log_softmax: sum(dy)), then dx = softmax_backward_value.
template <bool kLog, class A>
__device__ __forceinline__ A softmax_backward_term(A g, A out) {
  return kLog ? g : g * out;
}
template <bool kLog, class A>
__device__ __forceinline__ A softmax_backward_value(A g, A out, A sum) {
  return kLog ? g - exp_value(out) * sum : out * (g - sum);
}

// ---- walking rows and columns ---------------------------------------------------------------

// Calls f(r, active, lane) for the rows of this thread's group, a group of `group` threads per
// row (NOTE [CUDA row kernels]), lane the thread's place in its group. Every thread of the block
// makes the same calls (f may call group_allreduce, which synchronizes): past the last row,
// with active false.
template <class F>
__device__ __forceinline__ void for_each_row(int64_t rows, int group, F&& f) {
  const int per_block = kBlock / group, lane = int(threadIdx.x) % group;
  for (int64_t first = int64_t(blockIdx.x) * per_block; first < rows;
       first += int64_t(gridDim.x) * per_block) {
    const int64_t r = first + int(threadIdx.x) / group;
    f(r, r < rows, lane);
  }
}

// Calls f(base, active) for the tiles of this block over [outer, D, inner] with the softmax dim
// D in the middle: a tile is blockDim.x neighbouring inner positions j of one outer index o
// (coalesced), base = o D inner + j the element at d = 0. Every thread makes the same calls (f
// may call column_allreduce): past the last j, with active false.
template <class F>
__device__ __forceinline__ void for_each_column_tile(int64_t outer, int64_t D, int64_t inner,
                                                     int64_t tiles_per_outer, F&& f) {
  const int bx = int(blockDim.x), tx = int(threadIdx.x);
  for (int64_t tile = blockIdx.x; tile < outer * tiles_per_outer; tile += gridDim.x) {
    const int64_t o = tile / tiles_per_outer;
    const int64_t j = (tile - o * tiles_per_outer) * bx + tx;
    f(o * D * inner + j, j < inner);
  }
}

// Combines v over the blockDim.y threads of each block column (the same threadIdx.x) by a tree
// in shared memory; every thread gets its column's result. Every thread of the block must call
// it. shared: blockDim.x * blockDim.y values.
template <class V, class Combine>
__device__ __forceinline__ V column_allreduce(V v, const Combine& combine, V* shared) {
  const int bx = int(blockDim.x), by = int(blockDim.y);
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  V* cell = shared + ty * bx + tx;
  *cell = v;
  __syncthreads();
  for (int stride = by / 2; stride > 0; stride /= 2) {
    if (ty < stride) *cell = combine(*cell, cell[stride * bx]);
    __syncthreads();
  }
  v = shared[tx];
  __syncthreads();  // shared is reused by the next tile
  return v;
}

// f(k, value) for the values of row[0, M) that belong to `lane` of a group of `group` threads.
template <class T, bool kVector, class F>
__device__ __forceinline__ void for_lane(const T* row, int64_t M, int lane, int group, F&& f) {
  using A = acc_t<T>;
  if constexpr (kVector) {
    constexpr int kN = kPack<T>;
    for (int64_t k = int64_t(lane) * kN; k < M; k += int64_t(group) * kN) {
      const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(row + k);
#pragma unroll
      for (int j = 0; j < kN; ++j) f(k + j, to_value<A>(pack.v[j]));
    }
  } else {
    for (int64_t k = lane; k < M; k += group) f(k, to_value<A>(row[k]));
  }
}

// The same over two rows read together: f(k, a[k], b[k]).
template <class T, bool kVector, class F>
__device__ __forceinline__ void for_lane2(const T* a, const T* b, int64_t M, int lane, int group,
                                          F&& f) {
  using A = acc_t<T>;
  if constexpr (kVector) {
    constexpr int kN = kPack<T>;
    for (int64_t k = int64_t(lane) * kN; k < M; k += int64_t(group) * kN) {
      const Pack<T> pa = *reinterpret_cast<const Pack<T>*>(a + k);
      const Pack<T> pb = *reinterpret_cast<const Pack<T>*>(b + k);
#pragma unroll
      for (int j = 0; j < kN; ++j) f(k + j, to_value<A>(pa.v[j]), to_value<A>(pb.v[j]));
    }
  } else {
    for (int64_t k = lane; k < M; k += group) f(k, to_value<A>(a[k]), to_value<A>(b[k]));
  }
}

// out[k] = f(k, in[k]) for the lane's values.
template <class T, bool kVector, class F>
__device__ __forceinline__ void map_lane(const T* in, T* out, int64_t M, int lane, int group,
                                         F&& f) {
  using A = acc_t<T>;
  if constexpr (kVector) {
    constexpr int kN = kPack<T>;
    for (int64_t k = int64_t(lane) * kN; k < M; k += int64_t(group) * kN) {
      const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(in + k);
      Pack<T> result;
#pragma unroll
      for (int j = 0; j < kN; ++j) result.v[j] = convert<T>(f(k + j, to_value<A>(pack.v[j])));
      *reinterpret_cast<Pack<T>*>(out + k) = result;
    }
  } else {
    for (int64_t k = lane; k < M; k += group) out[k] = convert<T>(f(k, to_value<A>(in[k])));
  }
}

// out[k] = f(k, a[k], b[k]).
template <class T, bool kVector, class F>
__device__ __forceinline__ void map_lane2(const T* a, const T* b, T* out, int64_t M, int lane,
                                          int group, F&& f) {
  using A = acc_t<T>;
  if constexpr (kVector) {
    constexpr int kN = kPack<T>;
    for (int64_t k = int64_t(lane) * kN; k < M; k += int64_t(group) * kN) {
      const Pack<T> pa = *reinterpret_cast<const Pack<T>*>(a + k);
      const Pack<T> pb = *reinterpret_cast<const Pack<T>*>(b + k);
      Pack<T> result;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        result.v[j] = convert<T>(f(k + j, to_value<A>(pa.v[j]), to_value<A>(pb.v[j])));
      }
      *reinterpret_cast<Pack<T>*>(out + k) = result;
    }
  } else {
    for (int64_t k = lane; k < M; k += group) {
      out[k] = convert<T>(f(k, to_value<A>(a[k]), to_value<A>(b[k])));
    }
  }
}

// ---- kernels: softmax -----------------------------------------------------------------------

// The softmax dim is the last (inner == 1): a group of threads per row.
template <class T, bool kLog, bool kVector>
__global__ void __launch_bounds__(kBlock)
    softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t D, int group) {
  using A = acc_t<T>;
  __shared__ Pair<A> shared[32];
  for_each_row(rows, group, [&](int64_t r, bool active, int lane) {
    Pair<A> acc = softmax_identity<A>();
    if (active) {
      for_lane<T, kVector>(x + r * D, D, lane, group,
                           [&](int64_t, A v) { acc = softmax_add(acc, v); });
    }
    acc = group_allreduce(acc, SoftmaxOp{}, group, shared);
    if (!active) return;
    const SoftmaxOutput<A, kLog> output(acc);
    map_lane<T, kVector>(x + r * D, y + r * D, D, lane, group,
                         [&](int64_t, A v) { return output(v); });
  });
}

// Any other dim (inner > 1): a block is bx neighbouring inner positions of one outer index
// (coalesced), its by rows of threads walking D.
template <class T, bool kLog>
__global__ void __launch_bounds__(kBlock)
    softmax_columns_kernel(const T* x, T* y, int64_t outer, int64_t D, int64_t inner,
                           int64_t tiles_per_outer) {
  using A = acc_t<T>;
  __shared__ Pair<A> shared[kBlock];
  const int by = int(blockDim.y), ty = int(threadIdx.y);
  for_each_column_tile(outer, D, inner, tiles_per_outer, [&](int64_t base, bool active) {
    Pair<A> acc = softmax_identity<A>();
    if (active) {
      for (int64_t d = ty; d < D; d += by) acc = softmax_add(acc, to_value<A>(x[base + d * inner]));
    }
    acc = column_allreduce(acc, SoftmaxOp{}, shared);
    if (!active) return;
    const SoftmaxOutput<A, kLog> output(acc);
    for (int64_t d = ty; d < D; d += by) {
      y[base + d * inner] = convert<T>(output(to_value<A>(x[base + d * inner])));
    }
  });
}

template <class T, bool kLog, bool kVector>
__global__ void __launch_bounds__(kBlock)
    softmax_backward_rows_kernel(const T* dy, const T* y, T* dx, int64_t rows, int64_t D,
                                 int group) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  for_each_row(rows, group, [&](int64_t r, bool active, int lane) {
    A sum = A(0);
    if (active) {
      for_lane2<T, kVector>(dy + r * D, y + r * D, D, lane, group, [&](int64_t, A g, A out) {
        sum += softmax_backward_term<kLog>(g, out);
      });
    }
    sum = group_allreduce(sum, AddOp{}, group, shared);
    if (!active) return;
    map_lane2<T, kVector>(
        dy + r * D, y + r * D, dx + r * D, D, lane, group,
        [&](int64_t, A g, A out) { return softmax_backward_value<kLog>(g, out, sum); });
  });
}

template <class T, bool kLog>
__global__ void __launch_bounds__(kBlock)
    softmax_backward_columns_kernel(const T* dy, const T* y, T* dx, int64_t outer, int64_t D,
                                    int64_t inner, int64_t tiles_per_outer) {
  using A = acc_t<T>;
  __shared__ A shared[kBlock];
  const int by = int(blockDim.y), ty = int(threadIdx.y);
  for_each_column_tile(outer, D, inner, tiles_per_outer, [&](int64_t base, bool active) {
    A sum = A(0);
    if (active) {
      for (int64_t d = ty; d < D; d += by) {
        sum += softmax_backward_term<kLog>(to_value<A>(dy[base + d * inner]),
                                           to_value<A>(y[base + d * inner]));
      }
    }
    sum = column_allreduce(sum, AddOp{}, shared);
    if (!active) return;
    for (int64_t d = ty; d < D; d += by) {
      const A g = to_value<A>(dy[base + d * inner]), out = to_value<A>(y[base + d * inner]);
      dx[base + d * inner] = convert<T>(softmax_backward_value<kLog>(g, out, sum));
    }
  });
}

// ---- kernels: layer_norm / group_norm -------------------------------------------------------

// Mean, then the mean squared deviation from it (two passes, as on the CPU), then
// out = (x - mean) rstd weight + bias. kGrouped: group_norm's per-channel weight index.
template <class T, bool kGrouped, bool kVector>
__global__ void __launch_bounds__(kBlock)
    row_norm_forward_kernel(const T* x, T* out, const acc_t<T>* weight, const acc_t<T>* bias,
                            acc_t<T>* mean, acc_t<T>* rstd, RowNormGeometry g, acc_t<T> eps,
                            int group) {
  using A = acc_t<T>;
  __shared__ A shared[32];
  const int64_t M = g.M;
  const int64_t channels_per_group = g.spatial > 0 ? M / g.spatial : 0;  // Cg
  for_each_row(g.rows, group, [&](int64_t r, bool active, int lane) {
    const T* row = x + r * M;
    A sum = A(0);
    if (active) for_lane<T, kVector>(row, M, lane, group, [&](int64_t, A v) { sum += v; });
    const A mu = group_allreduce(sum, AddOp{}, group, shared) / A(M);
    A squares = A(0);
    if (active) {
      for_lane<T, kVector>(row, M, lane, group, [&](int64_t, A v) {
        const A deviation = v - mu;
        squares += deviation * deviation;
      });
    }
    const A var = group_allreduce(squares, AddOp{}, group, shared) / A(M);
    if (!active) return;
    const A rs = A(1) / sqrt_value(var + eps);
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    const int64_t first_channel = kGrouped ? (r % g.groups) * channels_per_group : 0;
    map_lane<T, kVector>(row, out + r * M, M, lane, group, [&](int64_t k, A v) {
      const int64_t c = kGrouped ? first_channel + k / g.spatial : k;
      const A w = weight != nullptr ? weight[c] : A(1);
      const A b = bias != nullptr ? bias[c] : A(0);
      return (v - mu) * rs * w + b;
    });
  });
}

// layer_norm dx, a group of threads per row: with g = dy weight,
// dx = rstd (g - mean(g) - xhat mean(g xhat)).
template <class T, bool kVector>
__global__ void __launch_bounds__(kBlock)
    layer_norm_backward_rows_kernel(const T* dy, const T* x, const acc_t<T>* mean,
                                    const acc_t<T>* rstd, const acc_t<T>* weight, T* dx,
                                    int64_t rows, int64_t M, int group) {
  using A = acc_t<T>;
  __shared__ Pair<A> shared[32];
  for_each_row(rows, group, [&](int64_t r, bool active, int lane) {
    Pair<A> sums{A(0), A(0)};  // sum(g), sum(g xhat)
    A mu = A(0), rs = A(0);
    if (active) {
      mu = mean[r];
      rs = rstd[r];
      for_lane2<T, kVector>(dy + r * M, x + r * M, M, lane, group, [&](int64_t k, A g, A v) {
        // gi rounded on its own, as dx below uses it (NOTE [Rounded products where terms
        // cancel] in device_utils.cuh)
        const A gi = mul_rn(g, weight != nullptr ? weight[k] : A(1));
        sums.a += gi;
        sums.b += gi * (v - mu) * rs;
      });
    }
    sums = group_allreduce(sums, AddOp{}, group, shared);
    if (!active) return;
    const A mean_g = sums.a / A(M), mean_gx = sums.b / A(M);
    map_lane2<T, kVector>(dy + r * M, x + r * M, dx + r * M, M, lane, group,
                          [&](int64_t k, A g, A v) {
                            const A xhat = (v - mu) * rs;
                            const A w = weight != nullptr ? weight[k] : A(1);
                            return rs * (mul_rn(g, w) - mean_g - xhat * mean_gx);
                          });
  });
}

// layer_norm dweight/dbias, pass 1: block (32, 8) sums a tile of 32 columns over the rows of
// piece blockIdx.y: part_gx[piece, j] = sum dy xhat, part_g[piece, j] = sum dy.
constexpr int kTileX = 32, kTileY = kBlock / kTileX;

template <class T>
__global__ void __launch_bounds__(kBlock)
    layer_norm_param_partials_kernel(const T* dy, const T* x, const acc_t<T>* mean,
                                     const acc_t<T>* rstd, acc_t<T>* part_gx, acc_t<T>* part_g,
                                     int64_t rows, int64_t M, int64_t rows_per_piece) {
  using A = acc_t<T>;
  __shared__ A shared_gx[kTileY][kTileX];
  __shared__ A shared_g[kTileY][kTileX];
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t j = int64_t(blockIdx.x) * kTileX + tx;
  const int64_t piece = blockIdx.y;
  const int64_t begin = piece * rows_per_piece;
  const int64_t end = min64(rows, begin + rows_per_piece);
  A sum_gx = A(0), sum_g = A(0);
  if (j < M) {
    for (int64_t r = begin + ty; r < end; r += kTileY) {
      const A g = to_value<A>(dy[r * M + j]);
      sum_g += g;
      sum_gx += g * (to_value<A>(x[r * M + j]) - mean[r]) * rstd[r];
    }
  }
  shared_gx[ty][tx] = sum_gx;
  shared_g[ty][tx] = sum_g;
  __syncthreads();
  for (int stride = kTileY / 2; stride > 0; stride /= 2) {
    if (ty < stride) {
      shared_gx[ty][tx] += shared_gx[ty + stride][tx];
      shared_g[ty][tx] += shared_g[ty + stride][tx];
    }
    __syncthreads();
  }
  if (ty == 0 && j < M) {
    part_gx[piece * M + j] = shared_gx[0][tx];
    part_g[piece * M + j] = shared_g[0][tx];
  }
}

// Pass 2: each column's pieces in order.
template <class A>
__global__ void column_pieces_kernel(const A* part_gx, const A* part_g, A* dweight, A* dbias,
                                     int64_t M, int64_t pieces) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < M;
       j += int64_t(gridDim.x) * blockDim.x) {
    A gx = part_gx[j], g = part_g[j];
    for (int64_t p = 1; p < pieces; ++p) {
      gx += part_gx[p * M + j];
      g += part_g[p * M + j];
    }
    if (dweight != nullptr) dweight[j] = gx;
    if (dbias != nullptr) dbias[j] = g;
  }
}

// group_norm backward, pass 1: per (n, c), a row of S values: c_g = sum dy,
// c_gx = sum dy xhat with the statistics of group (n, c / Cg).
template <class T>
__global__ void __launch_bounds__(kBlock)
    group_norm_channel_sums_kernel(const T* dy, const T* x, const acc_t<T>* mean,
                                   const acc_t<T>* rstd, acc_t<T>* channel_g, acc_t<T>* channel_gx,
                                   int64_t N, int64_t C, int64_t S, int64_t G, int group) {
  using A = acc_t<T>;
  __shared__ Pair<A> shared[32];
  const int64_t Cg = C / G;
  for_each_row(N * C, group, [&](int64_t row, bool active, int lane) {
    Pair<A> sums{A(0), A(0)};
    if (active) {
      const int64_t n = row / C, c = row - n * C;
      const int64_t ng = n * G + c / Cg;
      const A m = mean[ng], r = rstd[ng];
      for_lane2<T, false>(dy + row * S, x + row * S, S, lane, group, [&](int64_t, A g, A v) {
        sums.a += g;
        sums.b += g * (v - m) * r;
      });
    }
    sums = group_allreduce(sums, AddOp{}, group, shared);
    if (active && lane == 0) {
      channel_g[row] = sums.a;
      channel_gx[row] = sums.b;
    }
  });
}

// Pass 2: per (n, g), the weighted means over the group: mean(dy w), mean(dy w xhat).
template <class A>
__global__ void group_norm_coefficients_kernel(const A* channel_g, const A* channel_gx,
                                               const A* weight, A* mean_g, A* mean_gx, int64_t N,
                                               int64_t C, int64_t S, int64_t G) {
  const int64_t Cg = C / G;
  for (int64_t ng = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; ng < N * G;
       ng += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = ng / G, group = ng - n * G;
    A sum_g = A(0), sum_gx = A(0);
    for (int64_t k = 0; k < Cg; ++k) {
      const int64_t c = group * Cg + k;
      const A w = weight != nullptr ? weight[c] : A(1);
      sum_g += mul_rn(channel_g[n * C + c], w);
      sum_gx += channel_gx[n * C + c] * w;
    }
    const A block = A(Cg * S);
    mean_g[ng] = sum_g / block;
    mean_gx[ng] = sum_gx / block;
  }
}

// Pass 3: dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)), elementwise.
template <class T>
__global__ void group_norm_dx_kernel(const T* dy, const T* x, const acc_t<T>* mean,
                                     const acc_t<T>* rstd, const acc_t<T>* weight,
                                     const acc_t<T>* mean_g, const acc_t<T>* mean_gx, T* dx,
                                     int64_t total, int64_t C, int64_t S, int64_t G) {
  using A = acc_t<T>;
  const int64_t group_size = C / G * S;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ng = i / group_size, c = (i / S) % C;
    const A r = rstd[ng];
    const A xhat = (to_value<A>(x[i]) - mean[ng]) * r;
    const A w = weight != nullptr ? weight[c] : A(1);
    // dy w rounded as in mean(dy w) (NOTE [Rounded products where terms cancel])
    dx[i] = convert<T>(r * (mul_rn(to_value<A>(dy[i]), w) - mean_g[ng] - xhat * mean_gx[ng]));
  }
}

// Pass 4: dweight[c] = sum over n of c_gx, dbias[c] of c_g, n in order.
template <class A>
__global__ void group_norm_param_kernel(const A* channel_g, const A* channel_gx, A* dweight,
                                        A* dbias, int64_t N, int64_t C) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += int64_t(gridDim.x) * blockDim.x) {
    A g = A(0), gx = A(0);
    for (int64_t n = 0; n < N; ++n) {
      g += channel_g[n * C + c];
      gx += channel_gx[n * C + c];
    }
    if (dweight != nullptr) dweight[c] = gx;
    if (dbias != nullptr) dbias[c] = g;
  }
}

// ---- kernels: batch_norm --------------------------------------------------------------------

enum class ChannelSum { Values, SquaredDeviations, Gradients };

// Per channel c (blockIdx.x) and piece (blockIdx.y) of its count = N S values (n, s) at
// (n C + c) S + s: Values: sum x; SquaredDeviations: sum (x - mean)^2; Gradients: sum dy and
// sum dy (x - mean). part1/part2: [C, pieces].
template <class T, ChannelSum kSum>
__global__ void __launch_bounds__(kBlock)
    channel_partials_kernel(const T* x, const T* dy, const acc_t<T>* mean, acc_t<T>* part1,
                            acc_t<T>* part2, BatchNormGeometry g, int64_t pieces,
                            int64_t piece_length) {
  using A = acc_t<T>;
  __shared__ Pair<A> shared[32];
  const int64_t c = blockIdx.x, piece = blockIdx.y;
  const int64_t count = g.N * g.S;
  const int64_t end = min64(count, (piece + 1) * piece_length);
  const A m = kSum == ChannelSum::Values ? A(0) : mean[c];
  Pair<A> sums{A(0), A(0)};
  int64_t e = piece * piece_length + threadIdx.x;
  if (e < end) {
    // (n, s) of e, stepped by blockDim.x without dividing again.
    int64_t n = e / g.S, s = e - n * g.S;
    const int64_t step_n = blockDim.x / g.S, step_s = blockDim.x % g.S;
    for (; e < end; e += blockDim.x) {
      const int64_t offset = (n * g.C + c) * g.S + s;
      const A v = to_value<A>(x[offset]);
      if constexpr (kSum == ChannelSum::Values) {
        sums.a += v;
      } else if constexpr (kSum == ChannelSum::SquaredDeviations) {
        sums.a += (v - m) * (v - m);
      } else {
        const A gi = to_value<A>(dy[offset]);
        sums.a += gi;
        sums.b += gi * (v - m);
      }
      s += step_s;
      n += step_n;
      if (s >= g.S) {
        s -= g.S;
        ++n;
      }
    }
  }
  sums = group_allreduce(sums, AddOp{}, kBlock, shared);
  if (threadIdx.x == 0) {
    part1[c * pieces + piece] = sums.a;
    if (part2 != nullptr) part2[c * pieces + piece] = sums.b;
  }
}

// Training pass 2: mean[c] = sum x / count.
template <class A>
__global__ void batch_norm_mean_kernel(const A* part, A* mean, int64_t C, int64_t pieces,
                                       int64_t count) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += int64_t(gridDim.x) * blockDim.x) {
    A sum = part[c * pieces];
    for (int64_t p = 1; p < pieces; ++p) sum += part[c * pieces + p];
    mean[c] = sum / A(count);
  }
}

// Training pass 4: the biased variance, rstd, and torch's running-statistics update in double
// with the unbiased variance (as the CPU batch_norm).
template <class A>
__global__ void batch_norm_var_kernel(const A* part, const A* mean, A* rstd,
                                      const double* running_mean, const double* running_var,
                                      double* new_running_mean, double* new_running_var, int64_t C,
                                      int64_t pieces, int64_t count, double momentum, double eps) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += int64_t(gridDim.x) * blockDim.x) {
    A sum = part[c * pieces];
    for (int64_t p = 1; p < pieces; ++p) sum += part[c * pieces + p];
    const A var = sum / A(count);
    rstd[c] = A(1) / sqrt_value(var + A(eps));
    if (running_mean != nullptr) {
      const double unbias = double(count) / double(count - 1);
      new_running_mean[c] = (1 - momentum) * running_mean[c] + momentum * double(mean[c]);
      new_running_var[c] = (1 - momentum) * running_var[c] + momentum * double(var) * unbias;
    }
  }
}

// Eval: the running statistics, read in A.
template <class A>
__global__ void batch_norm_eval_stats_kernel(const double* running_mean, const double* running_var,
                                             A* mean, A* rstd, int64_t C, double eps) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += int64_t(gridDim.x) * blockDim.x) {
    mean[c] = A(running_mean[c]);
    rstd[c] = A(1) / sqrt_value(A(running_var[c]) + A(eps));
  }
}

// out = (x - mean[c]) (rstd[c] weight[c]) + bias[c], elementwise.
template <class T>
__global__ void channel_apply_kernel(const T* x, T* out, const acc_t<T>* weight,
                                     const acc_t<T>* bias, const acc_t<T>* mean,
                                     const acc_t<T>* rstd, int64_t total, int64_t C, int64_t S) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / S) % C;
    const A scale = rstd[c] * (weight != nullptr ? weight[c] : A(1));
    const A shift = bias != nullptr ? bias[c] : A(0);
    out[i] = convert<T>((to_value<A>(x[i]) - mean[c]) * scale + shift);
  }
}

// Backward pass 2: dbias = sum dy, dweight = rstd sum dy (x - mean), and the means dx needs.
template <class A>
__global__ void batch_norm_backward_sums_kernel(const A* part_g, const A* part_gx, const A* rstd,
                                                A* dweight, A* dbias, A* mean_g, A* mean_gx,
                                                int64_t C, int64_t pieces, int64_t count) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += int64_t(gridDim.x) * blockDim.x) {
    A sum_g = part_g[c * pieces], sum_gx = part_gx[c * pieces];
    for (int64_t p = 1; p < pieces; ++p) {
      sum_g += part_g[c * pieces + p];
      sum_gx += part_gx[c * pieces + p];
    }
    sum_gx *= rstd[c];
    dweight[c] = sum_gx;
    dbias[c] = sum_g;
    mean_g[c] = sum_g / A(count);
    mean_gx[c] = sum_gx / A(count);
  }
}

// Backward pass 3: dx through the batch statistics (training) or with them constant (eval).
template <class T>
__global__ void batch_norm_dx_kernel(const T* dy, const T* x, const acc_t<T>* mean,
                                     const acc_t<T>* rstd, const acc_t<T>* weight,
                                     const acc_t<T>* mean_g, const acc_t<T>* mean_gx, T* dx,
                                     bool training, int64_t total, int64_t C, int64_t S) {
  using A = acc_t<T>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = (i / S) % C;
    const A r = rstd[c], g = to_value<A>(dy[i]);
    const A w = weight != nullptr ? weight[c] : A(1);
    if (training) {
      const A xhat = (to_value<A>(x[i]) - mean[c]) * r;
      dx[i] = convert<T>(r * w * (g - mean_g[c] - xhat * mean_gx[c]));
    } else {
      dx[i] = convert<T>(g * w * r);
    }
  }
}

// ---- plans ----------------------------------------------------------------------------------

// layer_norm's dweight/dbias: rows cut into pieces (NOTE [Deterministic parameter gradients]).
struct RowPieces {
  int64_t pieces;
  int64_t rows_per_piece;
};
RowPieces layer_norm_pieces(int64_t rows, int64_t M) {
  const int64_t tiles = max64(1, ceil_div(M, kTileX));
  int64_t pieces =
      min64(min64(ceil_div(rows, 8 * kTileY), ceil_div(kTargetBlocks, tiles)), kMaxSplits);
  pieces = max64(pieces, 1);
  const int64_t rows_per_piece = max64(1, ceil_div(rows, pieces));
  return {max64(1, ceil_div(rows, rows_per_piece)), rows_per_piece};
}

// batch_norm's channels: count = N S values each, cut into pieces.
struct ChannelPieces {
  int64_t pieces;
  int64_t length;
};
ChannelPieces channel_pieces(const BatchNormGeometry& g) {
  const int64_t count = g.N * g.S;
  int64_t pieces =
      min64(min64(ceil_div(count, 4 * kBlock), ceil_div(kTargetBlocks, g.C)), kMaxSplits);
  pieces = max64(pieces, 1);
  const int64_t length = max64(1, ceil_div(count, pieces));
  return {max64(1, ceil_div(count, length)), length};
}

// ---- typed launchers ------------------------------------------------------------------------

// f(std::true_type{}) or f(std::false_type{}) as flag says: a kernel template's bool chosen at
// launch, decltype(constant)::value in f.
template <class F>
decltype(auto) with_flag(bool flag, F&& f) {
  if (flag) return f(std::true_type{});
  return f(std::false_type{});
}

// The softmax column kernels' launch: bx threads along inner (a power of two up to 32) times
// kBlock / bx along D per block, a block per tile of bx inner positions.
struct ColumnLaunch {
  dim3 block;
  int64_t tiles_per_outer;
  unsigned grid;
};
ColumnLaunch column_launch(const SoftmaxGeometry& g) {
  int bx = 1;
  while (bx < g.inner && bx < 32) bx *= 2;
  const int64_t tiles_per_outer = ceil_div(g.inner, bx);
  return {dim3(unsigned(bx), unsigned(kBlock / bx)), tiles_per_outer,
          unsigned(min64(g.outer * tiles_per_outer, kMaxGrid))};
}

template <class T>
cudaError_t softmax_typed(bool log, const T* x, T* y, const SoftmaxGeometry& g,
                          cudaStream_t stream) {
  with_flag(log, [&](auto log_flag) {
    constexpr bool kLog = decltype(log_flag)::value;
    if (g.inner == 1) {
      const int group = row_group(g.size, /*allow_subwarp=*/false);
      const bool vector = g.size % kPack<T> == 0 && aligned16(x) && aligned16(y);
      with_flag(vector, [&](auto vector_flag) {
        softmax_rows_kernel<T, kLog, decltype(vector_flag)::value>
            <<<row_grid(g.outer, group), kBlock, 0, stream>>>(x, y, g.outer, g.size, group);
      });
    } else {
      const ColumnLaunch launch = column_launch(g);
      softmax_columns_kernel<T, kLog><<<launch.grid, launch.block, 0, stream>>>(
          x, y, g.outer, g.size, g.inner, launch.tiles_per_outer);
    }
  });
  return cudaGetLastError();
}

template <class T>
cudaError_t softmax_backward_typed(bool log, const T* dy, const T* y, T* dx,
                                   const SoftmaxGeometry& g, cudaStream_t stream) {
  with_flag(log, [&](auto log_flag) {
    constexpr bool kLog = decltype(log_flag)::value;
    if (g.inner == 1) {
      const int group = row_group(g.size, /*allow_subwarp=*/false);
      const bool vector = g.size % kPack<T> == 0 && aligned16(dy) && aligned16(y) && aligned16(dx);
      with_flag(vector, [&](auto vector_flag) {
        softmax_backward_rows_kernel<T, kLog, decltype(vector_flag)::value>
            <<<row_grid(g.outer, group), kBlock, 0, stream>>>(dy, y, dx, g.outer, g.size, group);
      });
    } else {
      const ColumnLaunch launch = column_launch(g);
      softmax_backward_columns_kernel<T, kLog><<<launch.grid, launch.block, 0, stream>>>(
          dy, y, dx, g.outer, g.size, g.inner, launch.tiles_per_outer);
    }
  });
  return cudaGetLastError();
}

template <class T>
cudaError_t row_norm_forward_typed(const T* x, T* out, const acc_t<T>* weight, const acc_t<T>* bias,
                                   acc_t<T>* mean, acc_t<T>* rstd, const RowNormGeometry& g,
                                   double eps, cudaStream_t stream) {
  using A = acc_t<T>;
  const int group = row_group(g.M, /*allow_subwarp=*/false);
  const unsigned grid = row_grid(g.rows, group);
  const bool grouped = g.groups > 1 || g.spatial > 1;
  const bool vector = g.M % kPack<T> == 0 && aligned16(x) && aligned16(out);
  with_flag(grouped, [&](auto grouped_flag) {
    with_flag(vector, [&](auto vector_flag) {
      row_norm_forward_kernel<T, decltype(grouped_flag)::value, decltype(vector_flag)::value>
          <<<grid, kBlock, 0, stream>>>(x, out, weight, bias, mean, rstd, g, A(eps), group);
    });
  });
  return cudaGetLastError();
}

template <class T>
cudaError_t layer_norm_backward_typed(const T* dy, const T* x, const acc_t<T>* mean,
                                      const acc_t<T>* rstd, const acc_t<T>* weight, T* dx,
                                      acc_t<T>* dweight, acc_t<T>* dbias, void* workspace,
                                      int64_t rows, int64_t M, cudaStream_t stream) {
  using A = acc_t<T>;
  if (rows > 0) {
    const int group = row_group(M, /*allow_subwarp=*/false);
    const unsigned grid = row_grid(rows, group);
    const bool vector = M % kPack<T> == 0 && aligned16(dy) && aligned16(x) && aligned16(dx);
    with_flag(vector, [&](auto vector_flag) {
      layer_norm_backward_rows_kernel<T, decltype(vector_flag)::value>
          <<<grid, kBlock, 0, stream>>>(dy, x, mean, rstd, weight, dx, rows, M, group);
    });
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  if ((dweight == nullptr && dbias == nullptr) || M == 0) return cudaSuccess;
  const RowPieces plan = layer_norm_pieces(rows, M);
  A* part_gx = static_cast<A*>(workspace);
  A* part_g = part_gx + plan.pieces * M;
  const dim3 grid(unsigned(ceil_div(M, kTileX)), unsigned(plan.pieces));
  layer_norm_param_partials_kernel<T><<<grid, dim3(kTileX, kTileY), 0, stream>>>(
      dy, x, mean, rstd, part_gx, part_g, rows, M, plan.rows_per_piece);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  column_pieces_kernel<A>
      <<<grid_for(M), kThreads, 0, stream>>>(part_gx, part_g, dweight, dbias, M, plan.pieces);
  return cudaGetLastError();
}

template <class T>
cudaError_t group_norm_backward_typed(const T* dy, const T* x, const acc_t<T>* mean,
                                      const acc_t<T>* rstd, const acc_t<T>* weight, T* dx,
                                      acc_t<T>* dweight, acc_t<T>* dbias, void* workspace,
                                      int64_t N, int64_t C, int64_t S, int64_t G,
                                      cudaStream_t stream) {
  using A = acc_t<T>;
  A* channel_g = static_cast<A*>(workspace);
  A* channel_gx = channel_g + N * C;
  A* mean_g = channel_gx + N * C;
  A* mean_gx = mean_g + N * G;
  cudaError_t status = cudaSuccess;
  if (N * C > 0) {
    const int group = row_group(S, /*allow_subwarp=*/true);
    group_norm_channel_sums_kernel<T><<<row_grid(N * C, group), kBlock, 0, stream>>>(
        dy, x, mean, rstd, channel_g, channel_gx, N, C, S, G, group);
    if ((status = cudaGetLastError()) != cudaSuccess) return status;
    group_norm_coefficients_kernel<A><<<grid_for(N * G), kThreads, 0, stream>>>(
        channel_g, channel_gx, weight, mean_g, mean_gx, N, C, S, G);
    if ((status = cudaGetLastError()) != cudaSuccess) return status;
    const int64_t total = N * C * S;
    if (total > 0) {
      group_norm_dx_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
          dy, x, mean, rstd, weight, mean_g, mean_gx, dx, total, C, S, G);
      if ((status = cudaGetLastError()) != cudaSuccess) return status;
    }
  }
  // (With N = 0 the parameter gradients are zeros, still written.)
  if ((dweight == nullptr && dbias == nullptr) || C == 0) return cudaSuccess;
  group_norm_param_kernel<A>
      <<<grid_for(C), kThreads, 0, stream>>>(channel_g, channel_gx, dweight, dbias, N, C);
  return cudaGetLastError();
}

template <class T>
cudaError_t batch_norm_forward_typed(const T* x, T* out, const acc_t<T>* weight,
                                     const acc_t<T>* bias, acc_t<T>* mean, acc_t<T>* rstd,
                                     const double* running_mean, const double* running_var,
                                     double* new_running_mean, double* new_running_var,
                                     bool training, double momentum, double eps, void* workspace,
                                     const BatchNormGeometry& g, cudaStream_t stream) {
  using A = acc_t<T>;
  if (g.C == 0) return cudaSuccess;
  const int64_t count = g.N * g.S;
  cudaError_t status = cudaSuccess;
  if (training) {
    const ChannelPieces plan = channel_pieces(g);
    A* part = static_cast<A*>(workspace);
    const dim3 grid(unsigned(g.C), unsigned(plan.pieces));
    channel_partials_kernel<T, ChannelSum::Values><<<grid, kBlock, 0, stream>>>(
        x, nullptr, nullptr, part, nullptr, g, plan.pieces, plan.length);
    if ((status = cudaGetLastError()) != cudaSuccess) return status;
    batch_norm_mean_kernel<A>
        <<<grid_for(g.C), kThreads, 0, stream>>>(part, mean, g.C, plan.pieces, count);
    if ((status = cudaGetLastError()) != cudaSuccess) return status;
    channel_partials_kernel<T, ChannelSum::SquaredDeviations>
        <<<grid, kBlock, 0, stream>>>(x, nullptr, mean, part, nullptr, g, plan.pieces, plan.length);
    if ((status = cudaGetLastError()) != cudaSuccess) return status;
    batch_norm_var_kernel<A><<<grid_for(g.C), kThreads, 0, stream>>>(
        part, mean, rstd, running_mean, running_var, new_running_mean, new_running_var, g.C,
        plan.pieces, count, momentum, eps);
  } else {
    batch_norm_eval_stats_kernel<A>
        <<<grid_for(g.C), kThreads, 0, stream>>>(running_mean, running_var, mean, rstd, g.C, eps);
  }
  if ((status = cudaGetLastError()) != cudaSuccess) return status;
  const int64_t total = g.N * g.C * g.S;
  if (total == 0) return cudaSuccess;
  channel_apply_kernel<T>
      <<<grid_for(total), kThreads, 0, stream>>>(x, out, weight, bias, mean, rstd, total, g.C, g.S);
  return cudaGetLastError();
}

template <class T>
cudaError_t batch_norm_backward_typed(const T* dy, const T* x, const acc_t<T>* mean,
                                      const acc_t<T>* rstd, const acc_t<T>* weight, T* dx,
                                      acc_t<T>* dweight, acc_t<T>* dbias, bool training,
                                      void* workspace, const BatchNormGeometry& g,
                                      cudaStream_t stream) {
  using A = acc_t<T>;
  if (g.C == 0) return cudaSuccess;
  const ChannelPieces plan = channel_pieces(g);
  A* part_g = static_cast<A*>(workspace);
  A* part_gx = part_g + g.C * plan.pieces;
  A* mean_g = part_gx + g.C * plan.pieces;
  A* mean_gx = mean_g + g.C;
  const dim3 grid(unsigned(g.C), unsigned(plan.pieces));
  channel_partials_kernel<T, ChannelSum::Gradients>
      <<<grid, kBlock, 0, stream>>>(x, dy, mean, part_g, part_gx, g, plan.pieces, plan.length);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  batch_norm_backward_sums_kernel<A><<<grid_for(g.C), kThreads, 0, stream>>>(
      part_g, part_gx, rstd, dweight, dbias, mean_g, mean_gx, g.C, plan.pieces, g.N * g.S);
  if ((status = cudaGetLastError()) != cudaSuccess) return status;
  const int64_t total = g.N * g.C * g.S;
  if (total == 0) return cudaSuccess;
  batch_norm_dx_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
      dy, x, mean, rstd, weight, mean_g, mean_gx, dx, training, total, g.C, g.S);
  return cudaGetLastError();
}

template <class F>
cudaError_t visit_norm_dtype(DType dtype, F&& f) {
  if (!is_floating_point(dtype)) return cudaErrorInvalidValue;  // the host checked
  return visit_floating_storage(dtype, f);
}

// Calls f(dy, x, mean, rstd, weight, dx, dweight, dbias) with the pointers of a norm's backward
// typed for dtype: T for the tensors, acc_t<T> for the statistics and parameters.
template <class F>
cudaError_t visit_norm_backward(DType dtype, const void* dy, const void* x, const void* mean,
                                const void* rstd, const void* weight, void* dx, void* dweight,
                                void* dbias, F&& f) {
  return visit_norm_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    return f(static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const A*>(mean),
             static_cast<const A*>(rstd), static_cast<const A*>(weight), static_cast<T*>(dx),
             static_cast<A*>(dweight), static_cast<A*>(dbias));
  });
}

int64_t acc_size(DType dtype) { return dtype == DType::Float64 ? 8 : 4; }

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

cudaError_t launch_softmax(bool log, const void* x, void* y, DType dtype, const SoftmaxGeometry& g,
                           cudaStream_t stream) {
  if (g.outer * g.size * g.inner == 0) return cudaSuccess;
  return visit_norm_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return softmax_typed<T>(log, static_cast<const T*>(x), static_cast<T*>(y), g, stream);
  });
}

cudaError_t launch_softmax_backward(bool log, const void* dy, const void* y, void* dx, DType dtype,
                                    const SoftmaxGeometry& g, cudaStream_t stream) {
  if (g.outer * g.size * g.inner == 0) return cudaSuccess;
  return visit_norm_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return softmax_backward_typed<T>(log, static_cast<const T*>(dy), static_cast<const T*>(y),
                                     static_cast<T*>(dx), g, stream);
  });
}

cudaError_t launch_row_norm_forward(const void* x, void* out, DType dtype, const void* weight,
                                    const void* bias, void* mean, void* rstd,
                                    const RowNormGeometry& g, double eps, cudaStream_t stream) {
  if (g.rows == 0) return cudaSuccess;
  return visit_norm_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    return row_norm_forward_typed<T>(static_cast<const T*>(x), static_cast<T*>(out),
                                     static_cast<const A*>(weight), static_cast<const A*>(bias),
                                     static_cast<A*>(mean), static_cast<A*>(rstd), g, eps, stream);
  });
}

int64_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t M, DType dtype) {
  return 2 * layer_norm_pieces(rows, M).pieces * M * acc_size(dtype);
}

cudaError_t launch_layer_norm_backward(const void* dy, const void* x, const void* mean,
                                       const void* rstd, const void* weight, void* dx,
                                       void* dweight, void* dbias, void* workspace, DType dtype,
                                       int64_t rows, int64_t M, cudaStream_t stream) {
  return visit_norm_backward(
      dtype, dy, x, mean, rstd, weight, dx, dweight, dbias, [&](auto... typed) {
        return layer_norm_backward_typed(typed..., workspace, rows, M, stream);
      });
}

int64_t group_norm_backward_workspace_bytes(int64_t N, int64_t C, int64_t G, DType dtype) {
  return (2 * N * C + 2 * N * G) * acc_size(dtype);
}

cudaError_t launch_group_norm_backward(const void* dy, const void* x, const void* mean,
                                       const void* rstd, const void* weight, void* dx,
                                       void* dweight, void* dbias, void* workspace, DType dtype,
                                       int64_t N, int64_t C, int64_t S, int64_t G,
                                       cudaStream_t stream) {
  return visit_norm_backward(
      dtype, dy, x, mean, rstd, weight, dx, dweight, dbias, [&](auto... typed) {
        return group_norm_backward_typed(typed..., workspace, N, C, S, G, stream);
      });
}

int64_t batch_norm_workspace_bytes(const BatchNormGeometry& g, DType dtype) {
  return (2 * g.C * channel_pieces(g).pieces + 2 * g.C) * acc_size(dtype);
}

cudaError_t launch_batch_norm_forward(const void* x, void* out, DType dtype, const void* weight,
                                      const void* bias, void* mean, void* rstd,
                                      const double* running_mean, const double* running_var,
                                      double* new_running_mean, double* new_running_var,
                                      bool training, double momentum, double eps, void* workspace,
                                      const BatchNormGeometry& g, cudaStream_t stream) {
  return visit_norm_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    return batch_norm_forward_typed<T>(static_cast<const T*>(x), static_cast<T*>(out),
                                       static_cast<const A*>(weight), static_cast<const A*>(bias),
                                       static_cast<A*>(mean), static_cast<A*>(rstd), running_mean,
                                       running_var, new_running_mean, new_running_var, training,
                                       momentum, eps, workspace, g, stream);
  });
}

cudaError_t launch_batch_norm_backward(const void* dy, const void* x, const void* mean,
                                       const void* rstd, const void* weight, void* dx,
                                       void* dweight, void* dbias, bool training, void* workspace,
                                       DType dtype, const BatchNormGeometry& g,
                                       cudaStream_t stream) {
  return visit_norm_backward(
      dtype, dy, x, mean, rstd, weight, dx, dweight, dbias, [&](auto... typed) {
        return batch_norm_backward_typed(typed..., training, workspace, g, stream);
      });
}

}  // namespace hg::cuda::detail
