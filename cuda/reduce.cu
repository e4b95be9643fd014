// CUDA reduction kernels: every fold of cpu/reduce.cpp over the [O, N] view of NOTE [CUDA
// reduction layout] (reduce_launch.h), and the cumulative sum.
//
// NOTE [CUDA reduction kernels] A fold is an op struct (identity, map, combine, finish), as on
// the CPU. Values load as V (float for the 16-bit floats and float32, double for float64, int64
// for integers and bool) and accumulate in V; the result is rounded once when stored.
//   - Row path: a group of threads per output walks its N elements (strided by the group
//     size, so a warp reads neighbours) and combines across the group with warp shuffles,
//     then shared memory. The group is a sub-warp (N <= 32), a warp (N <= 2048) or the block.
//     Contiguous rows whose length is a multiple of 16 bytes read 16-byte vectors.
//   - Column path (the last kept dim has stride 1, e.g. a bias gradient [B*T, C] -> [C]): a
//     block is a tile of neighbouring outputs (threadIdx.x) times a stripe of their elements
//     (threadIdx.y), combined over y in shared memory.
//   - Few outputs with many elements: each output's elements are cut into `splits` pieces,
//     each folded on its own into a workspace, then one thread per output combines its pieces
//     in order. No atomics: the plan depends only on the geometry, so a result is the same bit
//     for bit on every run and every device.
// max_dim/min_dim/argmax fold (value, index) pairs; ties go to the lower index whatever the
// order of combination, so the first occurrence wins as on the CPU, and the first NaN too.
#include <cstdint>
#include <limits>
#include <type_traits>

#include "halfgrad/cuda/reduce_launch.h"
#include "halfgrad/cuda/reduce_utils.cuh"
#include "halfgrad/kernel/formulas.h"

namespace hg::cuda::detail {

using kernel::Scan;

namespace {

// ---- values ---------------------------------------------------------------------------------

template <class T>
inline constexpr bool kFloatingStorage =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, __half> ||
    std::is_same_v<T, __nv_bfloat16>;

// The value (and accumulator) type of storage type T (NOTE [Reduction accumulators] in
// cpu/reduce.cpp).
template <class T>
using value_t = std::conditional_t<std::is_same_v<T, double>, double,
                                   std::conditional_t<kFloatingStorage<T>, float, int64_t>>;

// int64 arithmetic wraps on overflow (as on the CPU); float and double use the operators.
template <class V>
__device__ __forceinline__ V add_wrap(V a, V b) {
  if constexpr (std::is_integral_v<V>) {
    return V(uint64_t(a) + uint64_t(b));
  } else {
    return a + b;
  }
}
template <class V>
__device__ __forceinline__ V mul_wrap(V a, V b) {
  if constexpr (std::is_integral_v<V>) {
    return V(uint64_t(a) * uint64_t(b));
  } else {
    return a * b;
  }
}

// max/min that propagate NaN.
template <class V>
__device__ __forceinline__ V nan_max(V a, V b) {
  return (b > a || is_nan(b)) ? b : a;
}
template <class V>
__device__ __forceinline__ V nan_min(V a, V b) {
  return (b < a || is_nan(b)) ? b : a;
}

// ---- folds ----------------------------------------------------------------------------------
// identity(), map(x, shift, index) -> Acc, combine(a, b) -> Acc, finish(acc, shift, count) -> V.
// combine is commutative (the shuffles combine in any order).

template <class V>
struct SumOp {
  using Acc = V;
  static constexpr bool kArg = false;
  static constexpr bool kUsesShift = false;
  __device__ Acc identity() const { return V(0); }
  __device__ Acc map(V x, V, int64_t) const { return x; }
  __device__ Acc combine(Acc a, Acc b) const { return add_wrap(a, b); }
  __device__ V finish(Acc a, V, int64_t) const { return a; }
};

template <class V>
struct ProdOp : SumOp<V> {
  __device__ V identity() const { return V(1); }
  __device__ V combine(V a, V b) const { return mul_wrap(a, b); }
};

template <class V>
struct MeanOp : SumOp<V> {
  // Over zero elements 0 / 0 gives NaN, as on the CPU.
  __device__ V finish(V a, V, int64_t count) const { return V(double(a) / double(count)); }
};

template <class V>
struct MaxOp : SumOp<V> {
  __device__ V identity() const {
    if constexpr (std::is_floating_point_v<V>) return -std::numeric_limits<V>::infinity();
    return std::numeric_limits<V>::lowest();
  }
  __device__ V combine(V a, V b) const { return nan_max(a, b); }
};

template <class V>
struct MinOp : SumOp<V> {
  __device__ V identity() const {
    if constexpr (std::is_floating_point_v<V>) return std::numeric_limits<V>::infinity();
    return std::numeric_limits<V>::max();
  }
  __device__ V combine(V a, V b) const { return nan_min(a, b); }
};

// logsumexp pass 1: the max, 0 where infinite (so pass 2 never computes inf - inf).
template <class V>
struct LogSumExpShiftOp : MaxOp<V> {
  __device__ V finish(V a, V, int64_t) const { return is_inf(a) ? V(0) : a; }
};

template <class V>
struct LogSumExpOp : SumOp<V> {
  static constexpr bool kUsesShift = true;
  __device__ V map(V x, V shift, int64_t) const { return exp_value(x - shift); }
  __device__ V finish(V a, V shift, int64_t) const { return log_value(a) + shift; }
};

template <class V>
struct NormZeroOp : SumOp<V> {  // NaN counts as nonzero
  __device__ V map(V x, V, int64_t) const { return x != V(0) ? V(1) : V(0); }
};

template <class V>
struct NormOneOp : SumOp<V> {
  __device__ V map(V x, V, int64_t) const { return abs_value(x); }
};

template <class V>
struct NormTwoOp : SumOp<V> {
  __device__ V map(V x, V, int64_t) const { return x * x; }
  __device__ V finish(V a, V, int64_t) const { return sqrt_value(a); }
};

template <class V>
struct NormInfOp : SumOp<V> {
  __device__ V map(V x, V, int64_t) const { return abs_value(x); }
  __device__ V combine(V a, V b) const { return nan_max(a, b); }
};

template <class V>
struct NormPOp : SumOp<V> {
  V p;
  __device__ V map(V x, V, int64_t) const { return pow_value(abs_value(x), p); }
  __device__ V finish(V a, V, int64_t) const { return pow_value(a, V(1) / p); }
};

template <class V>
struct VarOp : SumOp<V> {
  static constexpr bool kUsesShift = true;
  int64_t correction;
  __device__ V map(V x, V mean, int64_t) const { return (x - mean) * (x - mean); }
  __device__ V finish(V a, V, int64_t count) const {
    const int64_t dof = count - correction;
    return dof > 0 ? V(double(a) / double(dof)) : std::numeric_limits<V>::quiet_NaN();
  }
};

template <class V>
struct ArgAcc {
  V value;
  int64_t index;  // -1: no element yet
};

template <class V, bool kMax>
struct ArgOp {
  using Acc = ArgAcc<V>;
  static constexpr bool kArg = true;
  static constexpr bool kUsesShift = false;
  // a strictly beyond b: NaN is beyond every number.
  __device__ static bool beyond(V a, V b) {
    if (is_nan(b)) return false;
    if (is_nan(a)) return true;
    return kMax ? a > b : a < b;
  }
  __device__ Acc identity() const { return {V(0), -1}; }
  __device__ Acc map(V x, V, int64_t index) const { return {x, index}; }
  // Neither beyond the other (equal, or both NaN): the lower index, so the first occurrence
  // wins in any order of combination.
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    if (beyond(b.value, a.value)) return b;
    if (beyond(a.value, b.value)) return a;
    return b.index < a.index ? b : a;
  }
};

// ---- shuffles and group reductions ----------------------------------------------------------

template <class V>
__device__ __forceinline__ ArgAcc<V> shfl_xor(ArgAcc<V> a, int mask, int width) {
  return {detail::shfl_xor(a.value, mask, width), detail::shfl_xor(a.index, mask, width)};
}

// ---- the pass -------------------------------------------------------------------------------

Indexer make_indexer(const DimList& dims) {
  Indexer indexer;
  indexer.dim = dims.dim;
  for (int d = 0; d < dims.dim; ++d) {
    indexer.sizes[d] = dims.sizes[d];
    indexer.strides[d] = dims.strides[d];
  }
  return indexer;
}

template <class T, class Acc>
struct Pass {
  const T* data;
  Indexer kept;     // the outputs (the column path: all kept dims but the last)
  Indexer reduced;  // an output's elements
  // How k maps to an offset: 0: at most one dim (k times its stride); 1: two dims (one
  // division, e.g. a conv bias gradient's N runs of H W); 2: the indexer.
  int reduced_walk;
  int64_t outputs;  // O
  int64_t count;    // N
  int64_t columns;  // J (column path)
  int64_t splits;   // pieces per output (> 1: partials, then the finish kernel)
  int64_t piece;    // elements per piece
  int group;        // row path: threads per output
  void* out;
  bool out_as_input;
  int64_t* indices;
  const value_t<T>* shift;
  Acc* partials;  // [O, splits]

  __device__ int64_t reduced_offset(int64_t k) const {
    if (reduced_walk == 0) return k * reduced.strides[0];  // (0 when there is no dim)
    if (reduced_walk == 1) {
      const int64_t outer = k / reduced.sizes[1];
      return outer * reduced.strides[0] + (k - outer * reduced.sizes[1]) * reduced.strides[1];
    }
    return reduced.offset(k);
  }
  __device__ value_t<T> shift_at(int64_t o) const {
    return shift != nullptr ? shift[o] : value_t<T>(0);
  }
};

template <class T, class Op>
__device__ void store_result(const Pass<T, typename Op::Acc>& p, const Op& op, int64_t o,
                             typename Op::Acc acc) {
  using V = value_t<T>;
  if constexpr (Op::kArg) {
    static_cast<T*>(p.out)[o] = convert<T>(acc.value);
    p.indices[o] = acc.index;
  } else {
    const V value = op.finish(acc, p.shift_at(o), p.count);
    if (p.out_as_input) {
      static_cast<T*>(p.out)[o] = convert<T>(value);
    } else {
      static_cast<V*>(p.out)[o] = value;
    }
  }
}

// ---- kernels --------------------------------------------------------------------------------

constexpr int kBlock = 256;  // threads of every reduction block

// Row path: task t = (output t / splits, piece t % splits), one group of threads each.
template <class T, class Op, bool kVector>
__global__ void __launch_bounds__(kBlock) reduce_rows_kernel(Op op, Pass<T, typename Op::Acc> p) {
  using V = value_t<T>;
  using Acc = typename Op::Acc;
  __shared__ Acc shared[32];
  const int group = p.group;
  const int groups = int(blockDim.x) / group;  // tasks per block
  const int lane = int(threadIdx.x) % group;
  const int64_t tasks = p.outputs * p.splits;
  // (The loop condition is the same for the whole block: group_allreduce may synchronize.)
  for (int64_t first = int64_t(blockIdx.x) * groups; first < tasks;
       first += int64_t(gridDim.x) * groups) {
    const int64_t task = first + int(threadIdx.x) / group;
    const bool active = task < tasks;
    Acc acc = op.identity();
    int64_t o = 0;
    if (active) {
      o = p.splits == 1 ? task : task / p.splits;
      const int64_t begin = (task - o * p.splits) * p.piece;
      const int64_t end = begin + p.piece < p.count ? begin + p.piece : p.count;
      const V shift = Op::kUsesShift ? p.shift_at(o) : V(0);
      if constexpr (kVector) {
        // Contiguous rows, N and the piece multiples of the pack: aligned 16-byte loads.
        constexpr int kN = kPack<T>;
        const T* row = p.data + o * p.count;
        for (int64_t k = begin + int64_t(lane) * kN; k < end; k += int64_t(group) * kN) {
          const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(row + k);
#pragma unroll
          for (int j = 0; j < kN; ++j) {
            acc = op.combine(acc, op.map(to_value<V>(pack.v[j]), shift, k + j));
          }
        }
      } else {
        const T* row = p.data + p.kept.offset(o);
        for (int64_t k = begin + lane; k < end; k += group) {
          acc = op.combine(acc, op.map(to_value<V>(row[p.reduced_offset(k)]), shift, k));
        }
      }
    }
    acc = group_allreduce(
        acc, [&](Acc a, Acc b) { return op.combine(a, b); }, group, shared);
    if (active && lane == 0) {
      if (p.splits == 1) {
        store_result(p, op, o, acc);
      } else {
        p.partials[task] = acc;
      }
    }
  }
}

// Column path: block (bx, by); a tile is bx neighbouring outputs of one outer index q, split
// blockIdx.y of their elements, walked by the by rows of threads.
template <class T, class Op>
__global__ void __launch_bounds__(kBlock)
    reduce_columns_kernel(Op op, Pass<T, typename Op::Acc> p, int64_t tiles_per_q) {
  using V = value_t<T>;
  using Acc = typename Op::Acc;
  __shared__ Acc shared[kBlock];
  const int bx = int(blockDim.x), by = int(blockDim.y);
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t tiles = p.outputs / p.columns * tiles_per_q;
  const int64_t split = blockIdx.y;
  const int64_t begin = split * p.piece;
  const int64_t end = begin + p.piece < p.count ? begin + p.piece : p.count;
  Acc* cell = shared + ty * bx + tx;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t q = tile / tiles_per_q;
    const int64_t j = (tile - q * tiles_per_q) * bx + tx;
    const bool active = j < p.columns;
    const int64_t o = q * p.columns + j;
    Acc acc = op.identity();
    if (active) {
      const V shift = Op::kUsesShift ? p.shift_at(o) : V(0);
      const T* column = p.data + p.kept.offset(q) + j;
      for (int64_t k = begin + ty; k < end; k += by) {
        acc = op.combine(acc, op.map(to_value<V>(column[p.reduced_offset(k)]), shift, k));
      }
    }
    *cell = acc;
    __syncthreads();
    for (int stride = by / 2; stride > 0; stride /= 2) {
      if (ty < stride) *cell = op.combine(*cell, cell[stride * bx]);
      __syncthreads();
    }
    if (ty == 0 && active) {
      if (p.splits == 1) {
        store_result(p, op, o, *cell);
      } else {
        p.partials[o * p.splits + split] = *cell;
      }
    }
    __syncthreads();  // shared is reused by the next tile
  }
}

// Combines each output's pieces in piece order, then finishes it.
template <class T, class Op>
__global__ void reduce_finish_kernel(Op op, Pass<T, typename Op::Acc> p) {
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < p.outputs;
       o += int64_t(gridDim.x) * blockDim.x) {
    const typename Op::Acc* pieces = p.partials + o * p.splits;
    typename Op::Acc acc = pieces[0];
    for (int64_t s = 1; s < p.splits; ++s) acc = op.combine(acc, pieces[s]);
    store_result(p, op, o, acc);
  }
}

// Scans (cumsum, cumprod, logcumsumexp), folded by kernel::scan_combine.
template <class T>
struct ScanPass {
  const T* x;
  void* out;
  bool out_as_input;
  int64_t rows;
  int64_t length;
  int64_t x_step;
  int64_t out_step;
  Indexer x_rows;
  Indexer out_rows;

  __device__ void store(int64_t offset, value_t<T> value) const {
    if (out_as_input) {
      static_cast<T*>(out)[offset] = convert<T>(value);
    } else {
      static_cast<value_t<T>*>(out)[offset] = value;
    }
  }
};

// One thread per line, in order (short lines, or lines whose neighbours are neighbours in
// memory so that a warp reads neighbouring values).
template <Scan K, class T>
__global__ void scan_lines_kernel(ScanPass<T> p) {
  using V = value_t<T>;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < p.rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const T* x = p.x + p.x_rows.offset(r);
    const int64_t out0 = p.out_rows.offset(r);
    V acc = kernel::scan_identity<K, V>();
    for (int64_t k = 0; k < p.length; ++k) {
      acc = kernel::scan_combine<K, V>(acc, to_value<V>(x[k * p.x_step]));
      p.store(out0 + k * p.out_step, acc);
    }
  }
}

// One block per line: chunks of kBlock * kScanItems values, each thread scanning kScanItems
// neighbours, warps scanning their threads' totals with shuffles, the block its warps' totals.
constexpr int kScanItems = 8;

template <Scan K, class T>
__global__ void __launch_bounds__(kBlock) scan_rows_kernel(ScanPass<T> p) {
  using V = value_t<T>;
  constexpr int kWarps = kBlock / 32;
  __shared__ V warp_totals[kWarps];
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T* x = p.x + p.x_rows.offset(r);
    const int64_t out0 = p.out_rows.offset(r);
    V carry = kernel::scan_identity<K, V>();
    for (int64_t chunk = 0; chunk < p.length; chunk += int64_t(kBlock) * kScanItems) {
      const int64_t first = chunk + int64_t(threadIdx.x) * kScanItems;
      V items[kScanItems];
      V total = kernel::scan_identity<K, V>();
#pragma unroll
      for (int i = 0; i < kScanItems; ++i) {
        const int64_t k = first + i;
        total = kernel::scan_combine<K, V>(
            total, k < p.length ? to_value<V>(x[k * p.x_step]) : kernel::scan_identity<K, V>());
        items[i] = total;
      }
      V inclusive = total;
#pragma unroll
      for (int offset = 1; offset < 32; offset *= 2) {
        const V up = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive = kernel::scan_combine<K, V>(up, inclusive);
      }
      V exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
      if (lane == 0) exclusive = kernel::scan_identity<K, V>();
      if (lane == 31) warp_totals[warp] = inclusive;
      __syncthreads();
      V prefix = carry;
      for (int w = 0; w < warp; ++w) prefix = kernel::scan_combine<K, V>(prefix, warp_totals[w]);
      prefix = kernel::scan_combine<K, V>(prefix, exclusive);
      V block_total = warp_totals[0];
      for (int w = 1; w < kWarps; ++w) {
        block_total = kernel::scan_combine<K, V>(block_total, warp_totals[w]);
      }
#pragma unroll
      for (int i = 0; i < kScanItems; ++i) {
        const int64_t k = first + i;
        if (k < p.length)
          p.store(out0 + k * p.out_step, kernel::scan_combine<K, V>(prefix, items[i]));
      }
      carry = kernel::scan_combine<K, V>(carry, block_total);
      __syncthreads();  // warp_totals is reused by the next chunk
    }
  }
}

// ---- plans ----------------------------------------------------------------------------------

// Aim for about this many blocks in flight (an H100 holds 132 SMs x 8 blocks of 256 threads);
// a constant, not the device's count, so that results do not depend on the device.
constexpr int64_t kTargetBlocks = 1024;
constexpr int64_t kMaxSplits = 1024;
constexpr int64_t kMinPiece = 4096;  // row path: fewest elements a piece is worth
constexpr int64_t kMaxGrid = int64_t(1) << 20;

int next_pow2(int64_t n) {
  int p = 1;
  while (p < n && p < 32) p *= 2;
  return p;
}

struct Plan {
  bool column = false;
  bool vector = false;
  int group = 1;            // row path
  int bx = 32, by = 8;      // column path
  int64_t tiles_per_q = 1;  // column path
  int64_t splits = 1;
  int64_t piece = 1;
};

// True when an output's N elements are one contiguous run and the outputs follow each other.
bool contiguous_rows(const ReduceGeometry& g) {
  if (g.reduced.dim != 1 || g.reduced.strides[0] != 1) return false;
  return g.kept.dim == 0 || (g.kept.dim == 1 && g.kept.strides[0] == g.count);
}

Plan make_plan(const ReduceGeometry& g, int element_size) {
  Plan plan;
  const int64_t O = g.outputs, N = g.count;
  plan.piece = max64(N, 1);
  if (g.column) {
    plan.column = true;
    plan.bx = next_pow2(g.columns);
    plan.by = kBlock / plan.bx;
    plan.tiles_per_q = ceil_div(g.columns, plan.bx);
    const int64_t tiles = O / g.columns * plan.tiles_per_q;
    if (tiles < kTargetBlocks && N > 8 * plan.by) {
      plan.splits =
          min64(min64(ceil_div(N, 8 * plan.by), ceil_div(kTargetBlocks, tiles)), kMaxSplits);
      plan.piece = ceil_div(N, plan.splits);
      plan.splits = ceil_div(N, plan.piece);
    }
    return plan;
  }
  plan.group = N <= 32 ? next_pow2(N) : N <= 2048 ? 32 : kBlock;
  const int pack = 16 / element_size;
  const uintptr_t address = reinterpret_cast<uintptr_t>(g.data);
  plan.vector = contiguous_rows(g) && N % pack == 0 && address % 16 == 0 && N >= pack;
  if (O < kTargetBlocks && N >= 2 * kMinPiece) {
    plan.splits = min64(min64(ceil_div(N, kMinPiece), ceil_div(kTargetBlocks, O)), kMaxSplits);
    if (plan.splits > 1) {
      plan.group = kBlock;
      plan.piece = ceil_div(ceil_div(N, plan.splits), pack) * pack;  // keeps packs aligned
      plan.splits = ceil_div(N, plan.piece);
    }
  }
  return plan;
}

// ---- running a fold -------------------------------------------------------------------------

template <class T, class Op>
cudaError_t run_fold(const Op& op, const ReduceGeometry& g, const ReduceOutput& out,
                     cudaStream_t stream) {
  using Acc = typename Op::Acc;
  using V = value_t<T>;
  const Plan plan = make_plan(g, int(sizeof(T)));
  Pass<T, Acc> p;
  p.data = static_cast<const T*>(g.data);
  p.kept = make_indexer(g.kept);
  p.reduced = make_indexer(g.reduced);
  p.reduced_walk = g.reduced.dim <= 1 ? 0 : g.reduced.dim == 2 ? 1 : 2;
  p.outputs = g.outputs;
  p.count = g.count;
  p.columns = g.columns;
  p.splits = plan.splits;
  p.piece = plan.piece;
  p.group = plan.group;
  p.out = out.out;
  p.out_as_input = out.out_as_input;
  p.indices = out.indices;
  p.shift = static_cast<const V*>(out.shift);
  p.partials = static_cast<Acc*>(out.workspace);

  if (plan.column) {
    const int64_t tiles = g.outputs / g.columns * plan.tiles_per_q;
    const dim3 grid(unsigned(min64(tiles, kMaxGrid)), unsigned(plan.splits));
    reduce_columns_kernel<T, Op>
        <<<grid, dim3(unsigned(plan.bx), unsigned(plan.by)), 0, stream>>>(op, p, plan.tiles_per_q);
  } else {
    const int64_t tasks = g.outputs * plan.splits;
    const int64_t groups = kBlock / plan.group;
    const unsigned grid = unsigned(min64(ceil_div(tasks, groups), kMaxGrid));
    if (plan.vector) {
      reduce_rows_kernel<T, Op, true><<<grid, kBlock, 0, stream>>>(op, p);
    } else {
      reduce_rows_kernel<T, Op, false><<<grid, kBlock, 0, stream>>>(op, p);
    }
  }
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess || plan.splits == 1) return status;
  reduce_finish_kernel<T, Op><<<grid_for(g.outputs), kThreads, 0, stream>>>(op, p);
  return cudaGetLastError();
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

int64_t reduce_workspace_bytes(const ReduceGeometry& g) {
  if (g.outputs == 0) return 0;
  const Plan plan = make_plan(g, int(element_size(g.dtype)));
  // 16 bytes hold every accumulator (a value and an int64 index at most).
  return plan.splits > 1 ? g.outputs * plan.splits * 16 : 0;
}

cudaError_t launch_reduce(ReduceKind kind, const ReduceGeometry& g, const ReduceOutput& out,
                          cudaStream_t stream) {
  if (g.outputs == 0) return cudaSuccess;
  return visit_storage(g.dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    using V = value_t<T>;
    switch (kind) {
      case ReduceKind::Sum:
        return run_fold<T>(SumOp<V>{}, g, out, stream);
      case ReduceKind::Prod:
        return run_fold<T>(ProdOp<V>{}, g, out, stream);
      case ReduceKind::Amax:
        return run_fold<T>(MaxOp<V>{}, g, out, stream);
      case ReduceKind::Amin:
        return run_fold<T>(MinOp<V>{}, g, out, stream);
      case ReduceKind::ArgMax:
        return run_fold<T>(ArgOp<V, true>{}, g, out, stream);
      case ReduceKind::ArgMin:
        return run_fold<T>(ArgOp<V, false>{}, g, out, stream);
      default:
        break;
    }
    if constexpr (std::is_floating_point_v<V>) {  // the host checked for floating input
      switch (kind) {
        case ReduceKind::Mean:
          return run_fold<T>(MeanOp<V>{}, g, out, stream);
        case ReduceKind::LogSumExpShift:
          return run_fold<T>(LogSumExpShiftOp<V>{}, g, out, stream);
        case ReduceKind::LogSumExp:
          return run_fold<T>(LogSumExpOp<V>{}, g, out, stream);
        case ReduceKind::NormZero:
          return run_fold<T>(NormZeroOp<V>{}, g, out, stream);
        case ReduceKind::NormOne:
          return run_fold<T>(NormOneOp<V>{}, g, out, stream);
        case ReduceKind::NormTwo:
          return run_fold<T>(NormTwoOp<V>{}, g, out, stream);
        case ReduceKind::NormInf:
          return run_fold<T>(NormInfOp<V>{}, g, out, stream);
        case ReduceKind::NormP: {
          NormPOp<V> op;
          op.p = V(out.p);
          return run_fold<T>(op, g, out, stream);
        }
        case ReduceKind::Var: {
          VarOp<V> op;
          op.correction = out.correction;
          return run_fold<T>(op, g, out, stream);
        }
        default:
          break;
      }
    }
    return cudaErrorInvalidValue;
  });
}

cudaError_t launch_scan(Scan kind, const ScanGeometry& g, cudaStream_t stream) {
  if (g.rows == 0 || g.length == 0) return cudaSuccess;
  return visit_storage(g.dtype, [&](auto tag) -> cudaError_t {
    using T = typename decltype(tag)::type;
    if (kind == Scan::LogSumExp && !kFloatingStorage<T>) return cudaErrorInvalidValue;
    ScanPass<T> p;
    p.x = static_cast<const T*>(g.x);
    p.out = g.out;
    p.out_as_input = g.out_as_input;
    p.rows = g.rows;
    p.length = g.length;
    p.x_step = g.x_step;
    p.out_step = g.out_step;
    p.x_rows = make_indexer(g.x_rows);
    p.out_rows = make_indexer(g.out_rows);
    // A block per line when the line is long and its values are neighbours in memory (or
    // there are too few lines to fill the GPU); a thread per line otherwise.
    const bool per_thread = g.length <= 64 || (g.rows >= 128 && g.x_step != 1);
    kernel::with_scan(kind, [&](auto scan_kind) {
      constexpr Scan K = decltype(scan_kind)::value;
      if constexpr (K == Scan::LogSumExp && !kFloatingStorage<T>) {
        return;  // refused above
      } else if (per_thread) {
        scan_lines_kernel<K, T><<<grid_for(g.rows), kThreads, 0, stream>>>(p);
      } else {
        scan_rows_kernel<K, T><<<unsigned(min64(g.rows, kMaxGrid)), kBlock, 0, stream>>>(p);
      }
    });
    return cudaGetLastError();
  });
}

}  // namespace hg::cuda::detail
