// Device-side helpers shared by halfgrad's .cu files: the storage type of each dtype and its
// conversions to the compute type, launch sizes, and a strided indexer.
//
// NOTE [Storage dtype is not compute dtype on CUDA] As on the CPU (core/cast.h): a float16 or
// bfloat16 value is loaded as float, computed in float and rounded once when stored
// (round to nearest even, overflow to inf, NaN stays NaN: __float2half_rn and
// __float2bfloat16_rn). float64 computes in double; integers in their own type.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "halfgrad/cuda/kernel_args.h"

namespace hg::cuda::detail {

// ---- dtypes ------------------------------------------------------------------------------

// The device type of a host element type (core/dtype.h's cpp_type_t): CUDA's own 16-bit
// floats for Half and BFloat16, the others as they are.
template <class T>
using device_type_t =
    std::conditional_t<std::is_same_v<T, Half>, __half,
                       std::conditional_t<std::is_same_v<T, BFloat16>, __nv_bfloat16, T>>;
template <DType D>
using storage_t = device_type_t<cpp_type_t<D>>;

// The type a value of storage type T computes in: float for the 16-bit floats.
template <class T>
inline constexpr bool kHalfStorage = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
template <class T>
using compute_t = std::conditional_t<kHalfStorage<T>, float, T>;

// Storage -> compute, and compute (or any arithmetic value) -> storage, rounding once.
template <class To, class From>
__host__ __device__ __forceinline__ To convert(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<From, __half>) {
    return convert<To>(__half2float(value));
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return convert<To>(__bfloat162float(value));
  } else if constexpr (std::is_same_v<To, __half>) {
    if constexpr (std::is_same_v<From, double>) {
      return __double2half(value);  // one rounding from double (not via float)
    } else {
      return __float2half_rn(static_cast<float>(value));
    }
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    if constexpr (std::is_same_v<From, double>) {
      return __double2bfloat16(value);
    } else {
      return __float2bfloat16_rn(static_cast<float>(value));
    }
  } else if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else {
    return static_cast<To>(value);
  }
}

template <class T>
__device__ __forceinline__ compute_t<T> load(const T* p) {
  return convert<compute_t<T>>(*p);
}

// NOTE [Rounded products where terms cancel] nvcc fuses `a * b + c` into one multiply-add
// (fma) by default, rounding once instead of twice. Where the formula relies on a product
// cancelling against the same product computed elsewhere, the fusion breaks it: layer_norm's
// dx = rstd (g w - mean(g w) - ...) over one element must be exactly 0, but fma(g, w, -mean)
// leaves the rounding error of g w, times rstd (316 for eps 1e-5). And where the CPU pass
// rounds each operation (the optimizers' update rules, NOTE [Update rules written once], whose
// mul is __fmul_rn on the device), the fused form differs from it by up to an ulp of the larger
// term, which is most of the result when the terms cancel. mul_rn(a, b) is a * b rounded on its
// own, never fused with what follows.
template <class A>
__device__ __forceinline__ A mul_rn(A a, A b) {
  if constexpr (std::is_same_v<A, double>) {
    return __dmul_rn(a, b);
  } else if constexpr (std::is_same_v<A, float>) {
    return __fmul_rn(a, b);
  } else {
    return a * b;
  }
}

// Calls f(tag) with tag's `type` the storage type of dtype (host code choosing a kernel).
template <class T>
struct TypeTag {
  using type = T;
};
// The same among the dtypes Ds: the D equal to dtype, and the last of Ds for any other dtype.
template <DType D, DType... Ds, class F>
decltype(auto) visit_storage_among(DType dtype, F&& f) {
  if constexpr (sizeof...(Ds) > 0) {
    if (dtype != D) return visit_storage_among<Ds...>(dtype, f);
  }
  return f(TypeTag<storage_t<D>>{});
}
template <class F>
decltype(auto) visit_storage(DType dtype, F&& f) {
  return visit_storage_among<DType::Float16, DType::BFloat16, DType::Float64, DType::Int64,
                             DType::Int32, DType::Int16, DType::Int8, DType::UInt8, DType::Bool,
                             DType::Float32>(dtype, f);
}
// The same for the floating dtypes only (callers have checked the dtype is floating).
template <class F>
decltype(auto) visit_floating_storage(DType dtype, F&& f) {
  return visit_storage_among<DType::Float16, DType::BFloat16, DType::Float64, DType::Float32>(dtype,
                                                                                              f);
}

// ---- vector loads ------------------------------------------------------------------------

// 16 bytes of T: one vector load or store.
template <class T>
inline constexpr int kPack = 16 / int(sizeof(T));
template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = kPack<T>;
  T v[kSize];
};

// Whether p may be read and written as Packs.
__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- launch sizes ------------------------------------------------------------------------

inline constexpr int kThreads = 256;
// Blocks for a grid-stride loop over n items: enough to fill the GPU, never more than needed.
inline unsigned grid_for(int64_t n, int threads = kThreads, int64_t max_blocks = 65535 * 8) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

// ---- indexing ----------------------------------------------------------------------------

// Maps a row-major linear index over `sizes` to an element offset through `strides`.
struct Indexer {
  int32_t dim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  Indexer() = default;
  explicit Indexer(const TensorArg& t) : dim(t.dim) {
    for (int d = 0; d < t.dim; ++d) {
      sizes[d] = t.sizes[d];
      strides[d] = t.strides[d];
    }
  }
  __device__ __forceinline__ int64_t offset(int64_t linear) const {
    int64_t off = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < dim) {
        const int64_t size = sizes[d];
        const int64_t q = linear / size;
        off += (linear - q * size) * strides[d];
        linear = q;
      }
    }
    return off;
  }
};

// ---- device-side errors ------------------------------------------------------------------

// Records the first bad index of any kernel on this device (NOTE [Index checks on the device]
// in kernel_args.h); later reports are dropped.
__device__ __forceinline__ void report_device_error(DeviceErrorSlot* slot, DeviceError code,
                                                    int32_t dim, int64_t value, int64_t bound) {
  if (atomicCAS(&slot->code, 0, static_cast<int32_t>(code)) == 0) {
    slot->dim = dim;
    slot->value = value;
    slot->bound = bound;
    __threadfence_system();
  }
}

}  // namespace hg::cuda::detail
