// CUDA elementwise kernels (elementwise.h): one loop over operands described by
// ElementwiseArgs (NOTE [Elementwise iteration] in elementwise_launch.h), instantiated with a
// small functor per op; a tiled kernel for transposing copies; the random fills.
//
// NOTE [Which kernels are instantiated] Each (op, storage type) that can occur gets three
// kernels: the contiguous loop (16-byte vectors when the pointers are aligned, else one
// element at a time, chosen at run time) and the strided loop with 32-bit and with 64-bit
// index math. Binary ops, comparisons and addcmul/addcdiv run in one dtype: the host
// converts a mismatched input to it first (copy_elements), so no (input type, input type)
// pairs are instantiated. where, masked_fill, fills and same-dtype copies move bits, so
// they are instantiated per element width, not per dtype. Copies between dtypes get every
// (to, from) pair: they are what .to(dtype) runs. With ten dtypes (90 cast pairs) the file
// took 167 s of nvcc on a 2-core machine, the other files compiling beside it.
//
// Float arithmetic is plain C++ on float or double, so nvcc may fuse a * b + c into one FMA
// (a + alpha * b, addcmul): float32 results can then differ from the CPU kernels' in the last
// bit, always within the dtype's tolerance; 16-bit results are rounded once from float.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "halfgrad/kernel/formulas.h"
#include "halfgrad/core/random.h"
#include "halfgrad/cuda/device_utils.cuh"
#include "halfgrad/cuda/elementwise_launch.h"

namespace hg::cuda::detail {

namespace {

using kernel::Binary;
using kernel::Compare;
using kernel::Unary;
using kernel::visit_bits;

// ---- conversions -------------------------------------------------------------------------

template <class T>
inline constexpr bool is_16bit_float_v =
    std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// int64 -> double rounding to odd (core/cast.h): exact below 2^53; above, the dropped bits
// are folded into the last kept bit, so the rounding to a 16-bit float that follows is the
// only one, as on the CPU.
__device__ __forceinline__ double int64_to_double_round_to_odd(int64_t value) {
  const bool negative = value < 0;
  const uint64_t magnitude = negative ? uint64_t(0) - uint64_t(value) : uint64_t(value);
  const int width = 64 - __clzll(static_cast<long long>(magnitude));
  if (width <= 53) return negative ? -double(magnitude) : double(magnitude);
  const int shift = width - 53;
  const uint64_t dropped = magnitude & ((uint64_t(1) << shift) - 1);
  uint64_t kept = magnitude >> shift;
  if (dropped) kept |= 1;
  const double result = ldexp(double(kept), shift);  // exact: kept < 2^53
  return negative ? -result : result;
}

template <class T>
inline constexpr bool is_floating_storage_v = std::is_floating_point_v<T> || is_16bit_float_v<T>;

// A storage value converted to another storage type with core/cast.h's rules: one rounding
// (integers go to a 16-bit float through double, not float), anything -> bool is `!= 0`.
// Floating -> integer truncates toward zero and saturates, NaN giving 0 (NOTE [Float to
// integer on CUDA] in core/copy.cpp: the CPU's check that values fit would need the host).
template <class To, class From>
__device__ __forceinline__ To cast(From value) {
  if constexpr (std::is_integral_v<To> && !std::is_same_v<To, bool> &&
                is_floating_storage_v<From>) {
    const double v = convert<double>(value);                                  // exact
    constexpr double kLimit = std::is_same_v<To, int64_t> ? 0x1p63 : 0x1p31;  // 2^(bits - 1)
    if (!(v == v)) return To(0);
    if (v >= kLimit) return std::numeric_limits<To>::max();
    if (v < -kLimit) return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  } else if constexpr (is_16bit_float_v<To> && std::is_same_v<From, int64_t>) {
    return convert<To>(int64_to_double_round_to_odd(value));
  } else if constexpr (is_16bit_float_v<To> &&
                       (std::is_same_v<From, int32_t> || std::is_same_v<From, bool>)) {
    return convert<To>(static_cast<double>(value));
  } else {
    return convert<To>(value);
  }
}

// ---- unary -------------------------------------------------------------------------------

// kernel::unary_fn, but integers (the kinds kernel::unary_takes_integers allows) wrap modulo
// 2^n instead of overflowing.
template <Unary Op, class C>
__device__ __forceinline__ C unary_math(C x) {
  if constexpr (std::is_integral_v<C>) {
    using W = kernel::wrap_t<C>;
    if constexpr (Op == Unary::Neg) {
      return C(W(0) - W(x));
    } else if constexpr (Op == Unary::Abs) {
      return kernel::is_negative(x) ? C(W(0) - W(x)) : x;
    } else if constexpr (Op == Unary::Square) {
      return C(W(x) * W(x));
    } else {
      static_assert(Op == Unary::Sign || Op == Unary::Relu || Op == Unary::Floor ||
                    Op == Unary::Ceil || Op == Unary::Trunc || Op == Unary::Round);
      return kernel::unary_fn<Op>(x);
    }
  } else {
    return kernel::unary_fn<Op>(x);
  }
}

template <Unary Op, class T>
struct UnaryFn {
  __device__ __forceinline__ T operator()(T x) const {
    return convert<T>(unary_math<Op>(convert<compute_t<T>>(x)));
  }
};

// ---- binary ------------------------------------------------------------------------------

// Integer a^b for b >= 0 by squaring: modulo 2^n the same product as kernel::binary_fn's
// repeated multiplication, in O(log b) steps. b < 0 gives 1 for a == 1, else 0 (as the CPU).
template <class C>
__device__ __forceinline__ C integer_pow(C a, C b) {
  if (kernel::is_negative(b)) return C(a == C(1) ? 1 : 0);
  using W = kernel::wrap_t<C>;
  W result = 1, base = W(a);
  for (W e = W(b); e != 0; e >>= 1) {
    if (e & 1) result *= base;
    base *= base;
  }
  return C(result);
}

// kernel::binary_fn, but integers wrap modulo 2^n; an integer division by zero gives 0 (the
// CPU kernel has no defined answer; the op layer divides integers in floating point, so it
// does not reach here).
template <Binary Op, class C>
__device__ __forceinline__ C binary_math(C a, C b, C alpha) {
  if constexpr (std::is_integral_v<C>) {
    using W = kernel::wrap_t<C>;
    if constexpr (Op == Binary::Add) {
      return C(W(a) + W(alpha) * W(b));
    } else if constexpr (Op == Binary::Sub) {
      return C(W(a) - W(alpha) * W(b));
    } else if constexpr (Op == Binary::Mul) {
      return C(W(a) * W(b));
    } else if constexpr (Op == Binary::Div) {
      if (b == C(0)) return C(0);
      if (kernel::is_minus_one(b)) return C(W(0) - W(a));  // the minimum wraps, no trap
      return a / b;
    } else if constexpr (Op == Binary::Pow) {
      return integer_pow(a, b);
    } else {
      static_assert(Op == Binary::Maximum || Op == Binary::Minimum || Op == Binary::Fmod ||
                    Op == Binary::Remainder || Op == Binary::Atan2 || Op == Binary::Hypot ||
                    Op == Binary::FloorDiv || Op == Binary::TruncDiv);
      return kernel::binary_fn<Op>(a, b, alpha);
    }
  } else {
    return kernel::binary_fn<Op>(a, b, alpha);
  }
}

template <Binary Op, class T>
struct BinaryFn {
  compute_t<T> alpha;
  __device__ __forceinline__ T operator()(T a, T b) const {
    using C = compute_t<T>;
    return convert<T>(binary_math<Op>(convert<C>(a), convert<C>(b), alpha));
  }
};

// ---- comparisons, selects, clamp, addcmul / addcdiv --------------------------------------

// One kernel per dtype for the six comparisons: the op is the same for every thread, so the
// switch costs a few uniform instructions in a loop bound by memory.
template <class T>
struct CompareFn {
  Compare op;
  __device__ __forceinline__ bool operator()(T a, T b) const {
    using C = compute_t<T>;
    const C u = convert<C>(a), v = convert<C>(b);
    switch (op) {
      case Compare::Eq:
        return u == v;
      case Compare::Ne:
        return u != v;
      case Compare::Lt:
        return u < v;
      case Compare::Le:
        return u <= v;
      case Compare::Gt:
        return u > v;
      case Compare::Ge:
        return u >= v;
    }
    return false;
  }
};

// A select, not a product: an infinite or NaN gradient where x <= threshold gives 0.
template <class T>
struct ThresholdBackwardFn {
  compute_t<T> limit;
  T zero;
  __device__ __forceinline__ T operator()(T grad, T x) const {
    return convert<compute_t<T>>(x) <= limit ? zero : grad;
  }
};

// NaN compares false both ways, so it stays NaN.
template <class T>
struct ClampFn {
  bool has_low, has_high;
  compute_t<T> low, high;
  __device__ __forceinline__ T operator()(T x) const {
    compute_t<T> v = convert<compute_t<T>>(x);
    if (has_low && v < low) v = low;
    if (has_high && v > high) v = high;
    return convert<T>(v);
  }
};

template <bool kDivide, class T>
struct AddcFn {
  compute_t<T> value;
  __device__ __forceinline__ T operator()(T self, T t1, T t2) const {
    using C = compute_t<T>;
    const C x = convert<C>(self), y = convert<C>(t1), z = convert<C>(t2);
    if constexpr (std::is_integral_v<C>) {
      using W = kernel::wrap_t<C>;
      const C product = C(W(value) * W(y));
      C term;
      if constexpr (kDivide) {
        term = z == C(0)                  ? C(0)
               : kernel::is_minus_one(z) ? C(W(0) - W(product))
                                         : C(product / z);
      } else {
        term = C(W(product) * W(z));
      }
      return C(W(x) + W(term));
    } else {
      return convert<T>(kDivide ? x + value * y / z : x + value * y * z);
    }
  }
};

// U: an unsigned integer as wide as the element (these move bits, no conversion).
template <class U>
struct WhereFn {
  __device__ __forceinline__ U operator()(bool condition, U a, U b) const {
    return condition ? a : b;
  }
};

template <class U>
struct MaskedFillFn {
  U fill;
  __device__ __forceinline__ U operator()(U x, bool mask) const { return mask ? fill : x; }
};

template <class To, class From>
struct CastFn {
  __device__ __forceinline__ To operator()(From value) const { return cast<To>(value); }
};

// To or From a float8 type (core/float8.h, whose conversions run on the device too), the
// other float, __half or __nv_bfloat16: one rounding, from float.
template <class To, class From, Overflow kOverflow>
struct Float8CastFn {
  __device__ __forceinline__ To operator()(From value) const {
    if constexpr (is_float8_v<To>) {
      return To(convert<float>(value), kOverflow);
    } else {
      return convert<To>(static_cast<float>(value));
    }
  }
};

template <class U>
struct FillFn {
  U value;
  __device__ __forceinline__ U operator()() const { return value; }
};

// ---- kernels -----------------------------------------------------------------------------

// N consecutive elements, aligned to their size: one 16-byte (or narrower) load or store.
template <class T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// The unsigned type of `kBytes` bytes that loads and stores a Vec in one instruction.
template <int kBytes>
using RawOf = std::conditional_t<
    kBytes == 16, uint4,
    std::conditional_t<kBytes == 8, uint2,
                       std::conditional_t<kBytes == 4, uint32_t,
                                          std::conditional_t<kBytes == 2, uint16_t, uint8_t>>>>;

// Through the raw type: copying the struct itself may become N narrow accesses.
template <class T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  using Raw = RawOf<int(sizeof(T)) * N>;
  static_assert(sizeof(Raw) == sizeof(Vec<T, N>));
  Vec<T, N> v;
  *reinterpret_cast<Raw*>(&v) = *reinterpret_cast<const Raw*>(p);
  return v;
}

template <class T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  using Raw = RawOf<int(sizeof(T)) * N>;
  static_assert(sizeof(Raw) == sizeof(Vec<T, N>));
  *reinterpret_cast<Raw*>(p) = *reinterpret_cast<const Raw*>(&v);
}

template <int N>
struct Pointers {
  void* data[N];
  uint32_t scalars;  // bit k: operand k is one element read for every index (stride 0)
};

template <int N, class Index>
struct StridedParams {
  using Offset = std::make_signed_t<Index>;
  int32_t dim;
  Index sizes[kMaxDims];
  Offset strides[N][kMaxDims];
  void* data[N];
};

// The loops of NOTE [Elementwise iteration] for out = f(in...), Out and In storage types.
template <class Out, class... In>
struct Loop {
  static constexpr int kOperands = 1 + int(sizeof...(In));
  // Elements per vector: 16 bytes of the widest operand (the others move fewer bytes).
  static constexpr int kVec = int(16 / std::max({sizeof(Out), sizeof(In)...}));

  template <class F, class... V>
  __device__ static __forceinline__ void lanes(const F& f, Vec<Out, kVec>& out, const V&... in) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) out.v[j] = f(in.v[j]...);
  }

  // Vector v of an input, or its one element in every lane when it is a scalar operand.
  template <class T>
  __device__ static __forceinline__ Vec<T, kVec> load_lanes(const void* data, int64_t v,
                                                            bool scalar) {
    const T* const p = static_cast<const T*>(data);
    if (scalar) {
      Vec<T, kVec> splat;
      const T value = *p;
#pragma unroll
      for (int j = 0; j < kVec; ++j) splat.v[j] = value;
      return splat;
    }
    return load_vec<T, kVec>(p + v * kVec);
  }

  template <class F, size_t... K>
  __device__ static __forceinline__ void contiguous(const F& f, const Pointers<kOperands>& p,
                                                    int64_t n, bool vectorized,
                                                    std::index_sequence<K...>) {
    Out* const out = static_cast<Out*>(p.data[0]);
    const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t step = int64_t(gridDim.x) * blockDim.x;
    int64_t tail = 0;
    if (vectorized) {
      const int64_t vectors = n / kVec;
      for (int64_t v = start; v < vectors; v += step) {
        Vec<Out, kVec> result;
        lanes(f, result, load_lanes<In>(p.data[K + 1], v, (p.scalars >> (K + 1)) & 1u)...);
        store_vec(out + v * kVec, result);
      }
      tail = vectors * kVec;
    }
    for (int64_t i = tail + start; i < n; i += step) {
      out[i] = f(static_cast<const In*>(p.data[K + 1])[((p.scalars >> (K + 1)) & 1u) ? 0 : i]...);
    }
  }

  template <class F, class Index, size_t... K>
  __device__ static __forceinline__ void strided(const F& f,
                                                 const StridedParams<kOperands, Index>& p,
                                                 int64_t n, std::index_sequence<K...>) {
    using Offset = std::make_signed_t<Index>;
    const int64_t start = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t step = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = start; i < n; i += step) {
      Offset offset[kOperands];
#pragma unroll
      for (int k = 0; k < kOperands; ++k) offset[k] = 0;
      Index linear = Index(i);
#pragma unroll
      for (int d = kMaxDims - 1; d >= 0; --d) {  // the innermost dim first
        if (d < p.dim) {
          Offset r;
          if (d == 0) {  // what is left is below the outermost size: no division
            r = Offset(linear);
          } else {
            const Index q = linear / p.sizes[d];
            r = Offset(linear - q * p.sizes[d]);
            linear = q;
          }
#pragma unroll
          for (int k = 0; k < kOperands; ++k) offset[k] += r * p.strides[k][d];
        }
      }
      static_cast<Out*>(p.data[0])[offset[0]] =
          f(static_cast<const In*>(p.data[K + 1])[offset[K + 1]]...);
    }
  }
};

template <class F, class Out, class... In>
__global__ void __launch_bounds__(kThreads)
    contiguous_kernel(Pointers<1 + int(sizeof...(In))> p, int64_t n, bool vectorized, F f) {
  Loop<Out, In...>::contiguous(f, p, n, vectorized, std::index_sequence_for<In...>{});
}

template <class F, class Index, class Out, class... In>
__global__ void __launch_bounds__(kThreads)
    strided_kernel(StridedParams<1 + int(sizeof...(In)), Index> p, int64_t n, F f) {
  Loop<Out, In...>::strided(f, p, n, std::index_sequence_for<In...>{});
}

// ---- the launch of one loop --------------------------------------------------------------

template <class Out, class... In>
struct Launch {
  static constexpr int kOperands = 1 + int(sizeof...(In));
  static constexpr int kVec = Loop<Out, In...>::kVec;

  template <class Index>
  static StridedParams<kOperands, Index> strided_params(const ElementwiseArgs& args) {
    using Offset = std::make_signed_t<Index>;
    StridedParams<kOperands, Index> p{};
    p.dim = args.dim;
    for (int d = 0; d < args.dim; ++d) {
      p.sizes[d] = Index(args.sizes[d]);
      for (int k = 0; k < kOperands; ++k) p.strides[k][d] = Offset(args.strides[k][d]);
    }
    for (int k = 0; k < kOperands; ++k) p.data[k] = args.data[k];
    return p;
  }

  template <class F>
  static cudaError_t run(const ElementwiseArgs& args, const F& f, cudaStream_t stream) {
    if (args.operands != kOperands) return cudaErrorInvalidValue;
    const int64_t n = args.numel;
    if (n == 0) return cudaSuccess;
    if (args.contiguous) {
      Pointers<kOperands> p{};
      p.scalars = args.scalars;
      constexpr size_t kSizes[kOperands] = {sizeof(Out), sizeof(In)...};
      bool vectorized = true;
      for (int k = 0; k < kOperands; ++k) {
        p.data[k] = args.data[k];
        const bool scalar = (args.scalars >> k) & 1u;
        vectorized = vectorized &&
                     (scalar || reinterpret_cast<uintptr_t>(p.data[k]) % (kSizes[k] * kVec) == 0);
      }
      const int64_t threads = vectorized ? std::max<int64_t>(n / kVec, n % kVec) : n;
      contiguous_kernel<F, Out, In...>
          <<<grid_for(threads), kThreads, 0, stream>>>(p, n, vectorized, f);
    } else if (args.index32) {
      strided_kernel<F, uint32_t, Out, In...>
          <<<grid_for(n), kThreads, 0, stream>>>(strided_params<uint32_t>(args), n, f);
    } else {
      strided_kernel<F, uint64_t, Out, In...>
          <<<grid_for(n), kThreads, 0, stream>>>(strided_params<uint64_t>(args), n, f);
    }
    return cudaGetLastError();
  }
};

// ---- transposing copies ------------------------------------------------------------------

// NOTE [Transposing copies] x.t().contiguous() reads its source across rows: the strided loop
// would make each warp touch 32 rows for 32 elements. A same-dtype copy whose destination
// is row-major over [B,] R, C while the source is column-major over R, C (stride 1 along R)
// goes through a 32 x 32 tile in shared memory instead: read down the source's columns,
// written along the destination's rows, both coalesced.
inline constexpr int kTile = 32;
inline constexpr int kTileRows = 8;
inline constexpr int kTileThreads = kTile * kTileRows;  // a block: kTile x kTileRows threads

struct TransposeParams {
  int64_t rows, cols;        // R, C
  int64_t dst_row_stride;    // the destination's stride along R (along C it is 1)
  int64_t src_col_stride;    // the source's stride along C (along R it is 1)
  int64_t dst_batch_stride;  // along B (0 without a batch dim)
  int64_t src_batch_stride;
};

template <class U>
__global__ void __launch_bounds__(kTileThreads)
    transpose_kernel(U* dst, const U* src, TransposeParams p) {
  __shared__ U tile[kTile][kTile + 1];  // +1: a tile column falls in different banks
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const U* const s = src + int64_t(blockIdx.z) * p.src_batch_stride;
  U* const d = dst + int64_t(blockIdx.z) * p.dst_batch_stride;
  // tile[j][x] = element (r0 + x, c0 + j): consecutive threads read consecutive rows.
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t r = r0 + threadIdx.x, c = c0 + j;
    if (r < p.rows && c < p.cols) tile[j][threadIdx.x] = s[r + c * p.src_col_stride];
  }
  __syncthreads();
  // Element (r0 + j, c0 + x) = tile[x][j]: consecutive threads write consecutive columns.
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t r = r0 + j, c = c0 + threadIdx.x;
    if (r < p.rows && c < p.cols) d[r * p.dst_row_stride + c] = tile[threadIdx.x][j];
  }
}

// Launches the tiled copy when (dst, src) of args has the layout of NOTE [Transposing
// copies]; returns false (nothing launched) otherwise.
template <class U>
bool try_launch_transpose(const ElementwiseArgs& args, cudaStream_t stream) {
  const int dim = args.dim;
  if (args.operands != 2 || args.contiguous || dim < 2 || dim > 3) return false;
  const int64_t* const dst_strides = args.strides[0];
  const int64_t* const src_strides = args.strides[1];
  if (dst_strides[dim - 1] != 1 || src_strides[dim - 2] != 1) return false;
  TransposeParams p{};
  p.rows = args.sizes[dim - 2];
  p.cols = args.sizes[dim - 1];
  p.dst_row_stride = dst_strides[dim - 2];
  p.src_col_stride = src_strides[dim - 1];
  const int64_t batch = dim == 3 ? args.sizes[0] : 1;
  p.dst_batch_stride = dim == 3 ? dst_strides[0] : 0;
  p.src_batch_stride = dim == 3 ? src_strides[0] : 0;
  const int64_t tiles_down = (p.rows + kTile - 1) / kTile;
  const int64_t tiles_across = (p.cols + kTile - 1) / kTile;
  if (tiles_down > 65535 || batch > 65535 || tiles_across > (int64_t(1) << 31) - 1) return false;
  const dim3 grid{unsigned(tiles_across), unsigned(tiles_down), unsigned(batch)};
  transpose_kernel<U><<<grid, dim3(kTile, kTileRows), 0, stream>>>(
      static_cast<U*>(args.data[0]), static_cast<const U*>(args.data[1]), p);
  return true;
}

// ---- random fills ------------------------------------------------------------------------

// One thread per counter block: the block's four words give P = 4 elements (2 for float64),
// written as random.cpp's fill_uniform writes them.
template <class T>
__global__ void __launch_bounds__(kThreads)
    uniform_kernel(T* out, int64_t n, uint64_t seed, uint64_t first_block, double low, double span,
                   double first_ok, double last_ok, int bits) {
  constexpr int kPerBlock = std::is_same_v<T, double> ? 2 : 4;
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  const T first_value = convert<T>(first_ok), last_value = convert<T>(last_ok);  // exact
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += step) {
    const PhiloxBlock words = random::philox_block(seed, first_block + uint64_t(b));
    double u[kPerBlock];
    if constexpr (std::is_same_v<T, double>) {
      u[0] = random::unit53_from_words(words.x[0], words.x[1]);
      u[1] = random::unit53_from_words(words.x[2], words.x[3]);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) u[k] = random::unit_from_word(words.x[k], bits);
    }
    const int64_t begin = b * kPerBlock;
    const int count = int(n - begin < kPerBlock ? n - begin : kPerBlock);
#pragma unroll
    for (int k = 0; k < kPerBlock; ++k) {
      if (k < count) {
        const T value = convert<T>(random::affine(low, span, u[k]));
        const double wide = convert<double>(value);
        out[begin + k] = wide < first_ok ? first_value : wide > last_ok ? last_value : value;
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    normal_kernel(T* out, int64_t n, uint64_t seed, uint64_t first_block, double mean,
                  double stddev) {
  constexpr int kPerBlock = std::is_same_v<T, double> ? 2 : 4;
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += step) {
    const PhiloxBlock words = random::philox_block(seed, first_block + uint64_t(b));
    const int64_t begin = b * kPerBlock;
    const int count = int(n - begin < kPerBlock ? n - begin : kPerBlock);
    double z[kPerBlock];
    if constexpr (std::is_same_v<T, double>) {
      const random::NormalPair pair =
          random::box_muller(random::open_unit53_from_words(words.x[0], words.x[1]),
                             random::unit53_from_words(words.x[2], words.x[3]));
      z[0] = pair.z0;
      z[1] = pair.z1;
    } else {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        z[2 * half] = z[2 * half + 1] = 0.0;
        if (2 * half < count) {  // a pair past the end of the draw is not needed
          const random::NormalPair pair =
              random::box_muller(random::open_unit_from_word(words.x[2 * half]),
                                 random::unit_from_word(words.x[2 * half + 1], 32));
          z[2 * half] = pair.z0;
          z[2 * half + 1] = pair.z1;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kPerBlock; ++k) {
      if (k < count) out[begin + k] = convert<T>(random::affine(mean, stddev, z[k]));
    }
  }
}

// ---- dispatch helpers --------------------------------------------------------------------

// A double given by the host as the compute type C: rounded to nearest for floating C;
// truncated toward zero for integers, as cast_value does, saturating where cast_value's
// conversion would be undefined (out of range, NaN -> 0).
template <class C>
C host_value_as(double value) {
  if constexpr (std::is_integral_v<C>) {
    if (!(value == value)) return C(0);
    if (value <= double(std::numeric_limits<C>::min())) return std::numeric_limits<C>::min();
    if (value >= double(std::numeric_limits<C>::max())) return std::numeric_limits<C>::max();
    return static_cast<C>(value);
  } else {
    return static_cast<C>(value);
  }
}

// visit_storage for arithmetic: f(TypeTag<T>{}) for every storage type but bool, which the
// host wrappers refuse before they get here.
template <class F>
cudaError_t visit_arithmetic(DType dtype, F&& f) {
  return visit_storage(dtype, [&](auto tag) -> cudaError_t {
    if constexpr (std::is_same_v<typename decltype(tag)::type, bool>) {
      return cudaErrorInvalidValue;
    } else {
      return f(tag);
    }
  });
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------

cudaError_t launch_unary(Unary op, DType dtype, const ElementwiseArgs& args, cudaStream_t stream) {
  return kernel::with_unary(op, [&](auto op_tag) {
    constexpr Unary kOp = decltype(op_tag)::value;
    return visit_arithmetic(dtype, [&](auto tag) -> cudaError_t {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T> && !kernel::unary_takes_integers(kOp)) {
        return cudaErrorInvalidValue;  // refused by the host wrapper before it gets here
      } else {
        return Launch<T, T>::run(args, UnaryFn<kOp, T>{}, stream);
      }
    });
  });
}

cudaError_t launch_binary(Binary op, DType dtype, double alpha, const ElementwiseArgs& args,
                          cudaStream_t stream) {
  return kernel::with_binary(op, [&](auto op_tag) {
    constexpr Binary kOp = decltype(op_tag)::value;
    return visit_arithmetic(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const BinaryFn<kOp, T> f{host_value_as<compute_t<T>>(alpha)};
      return Launch<T, T, T>::run(args, f, stream);
    });
  });
}

cudaError_t launch_compare(Compare op, DType dtype, const ElementwiseArgs& args,
                           cudaStream_t stream) {
  return visit_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Launch<bool, T, T>::run(args, CompareFn<T>{op}, stream);
  });
}

cudaError_t launch_threshold_backward(DType dtype, double threshold, const ElementwiseArgs& args,
                                      cudaStream_t stream) {
  return visit_arithmetic(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const ThresholdBackwardFn<T> f{host_value_as<C>(threshold), convert<T>(C(0))};
    return Launch<T, T, T>::run(args, f, stream);
  });
}

cudaError_t launch_clamp(DType dtype, bool has_low, double low, bool has_high, double high,
                         const ElementwiseArgs& args, cudaStream_t stream) {
  return visit_arithmetic(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const ClampFn<T> f{has_low, has_high, has_low ? host_value_as<C>(low) : C(0),
                       has_high ? host_value_as<C>(high) : C(0)};
    return Launch<T, T>::run(args, f, stream);
  });
}

cudaError_t launch_addc(bool divide, DType dtype, double value, const ElementwiseArgs& args,
                        cudaStream_t stream) {
  return visit_arithmetic(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const compute_t<T> v = host_value_as<compute_t<T>>(value);
    if (divide) return Launch<T, T, T, T>::run(args, AddcFn<true, T>{v}, stream);
    return Launch<T, T, T, T>::run(args, AddcFn<false, T>{v}, stream);
  });
}

cudaError_t launch_where(size_t element_size, const ElementwiseArgs& args, cudaStream_t stream) {
  return visit_bits(element_size, [&](auto tag) {
    using U = typename decltype(tag)::type;
    return Launch<U, bool, U, U>::run(args, WhereFn<U>{}, stream);
  });
}

cudaError_t launch_masked_fill(size_t element_size, uint64_t fill_bits, const ElementwiseArgs& args,
                               cudaStream_t stream) {
  return visit_bits(element_size, [&](auto tag) {
    using U = typename decltype(tag)::type;
    return Launch<U, U, bool>::run(args, MaskedFillFn<U>{U(fill_bits)}, stream);
  });
}

cudaError_t launch_copy(DType to, DType from, const ElementwiseArgs& args, cudaStream_t stream) {
  if (to == from) {
    return visit_bits(element_size(to), [&](auto tag) {
      using U = typename decltype(tag)::type;
      if (args.numel > 0 && try_launch_transpose<U>(args, stream)) return cudaGetLastError();
      return Launch<U, U>::run(args, CastFn<U, U>{}, stream);
    });
  }
  return visit_storage(to, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    return visit_storage(from, [&](auto from_tag) -> cudaError_t {
      using From = typename decltype(from_tag)::type;
      if constexpr (std::is_same_v<To, From>) {
        return cudaErrorInvalidValue;  // moved as bits above
      } else {
        return Launch<To, From>::run(args, CastFn<To, From>{}, stream);
      }
    });
  });
}

cudaError_t launch_float8_copy(DType to, DType from, bool saturate, const ElementwiseArgs& args,
                               cudaStream_t stream) {
  // NOTE [Float8 is conversion only] (core/dtype.h): 18 (to, from, overflow) loops, against
  // launch_copy's 90 pairs, by leaving float8 <-> float64, integers and the other float8 out.
  const auto visit = [](DType dtype, auto&& f) {
    return visit_storage_among<DType::Float8_e4m3fn, DType::Float8_e5m2, DType::Float16,
                               DType::BFloat16, DType::Float32>(dtype, f);
  };
  return visit(to, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    return visit(from, [&](auto from_tag) -> cudaError_t {
      using From = typename decltype(from_tag)::type;
      if constexpr (is_float8_v<To> == is_float8_v<From>) {
        return cudaErrorInvalidValue;  // refused by the host wrapper before it gets here
      } else if constexpr (is_float8_v<To>) {
        if (saturate) {
          return Launch<To, From>::run(args, Float8CastFn<To, From, Overflow::Saturate>{}, stream);
        }
        return Launch<To, From>::run(args, Float8CastFn<To, From, Overflow::NonFinite>{}, stream);
      } else {
        return Launch<To, From>::run(args, Float8CastFn<To, From, Overflow::NonFinite>{}, stream);
      }
    });
  });
}

cudaError_t launch_fill(size_t element_size, uint64_t value_bits, const ElementwiseArgs& args,
                        cudaStream_t stream) {
  return visit_bits(element_size, [&](auto tag) {
    using U = typename decltype(tag)::type;
    return Launch<U>::run(args, FillFn<U>{U(value_bits)}, stream);
  });
}

cudaError_t launch_fill_uniform(DType dtype, void* dst, int64_t n, uint64_t seed,
                                uint64_t first_block, double low, double span, double first_ok,
                                double last_ok, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int bits = random::uniform_bits(dtype);
  return visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t blocks =
        (n + random::elements_per_block(dtype) - 1) / random::elements_per_block(dtype);
    uniform_kernel<T><<<grid_for(blocks), kThreads, 0, stream>>>(
        static_cast<T*>(dst), n, seed, first_block, low, span, first_ok, last_ok, bits);
    return cudaGetLastError();
  });
}

cudaError_t launch_fill_normal(DType dtype, void* dst, int64_t n, uint64_t seed,
                               uint64_t first_block, double mean, double stddev,
                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t blocks =
        (n + random::elements_per_block(dtype) - 1) / random::elements_per_block(dtype);
    normal_kernel<T><<<grid_for(blocks), kThreads, 0, stream>>>(static_cast<T*>(dst), n, seed,
                                                                first_block, mean, stddev);
    return cudaGetLastError();
  });
}

}  // namespace hg::cuda::detail
