// CUDA kernels for the indexing ops (kernel/index.h); launchers declared in index_launch.h.
//
// Dims: a tensor indexed along one dim is viewed as [O, S, I] (outer, size at dim, inner);
// N is the number of indices, R the elements of one destination row, M the index tuples of
// index_put, C the classes of one_hot.
//
// Data movement (copies, gathers, index_put without accumulate) moves elements as unsigned
// integers of their width: nothing is converted. Accumulation is NOTE [Sorted accumulation on
// CUDA] (index_launch.h).
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "halfgrad/kernel/formulas.h"
#include "halfgrad/cuda/device_utils.cuh"
#include "halfgrad/cuda/index_launch.h"

namespace hg::cuda::detail {

namespace {

// ---- helpers -------------------------------------------------------------------------------

template <class I>
__device__ __forceinline__ int64_t load_index(const I* index, int64_t offset) {
  return static_cast<int64_t>(index[offset]);
}

__device__ __forceinline__ int64_t grid_start() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() { return int64_t(gridDim.x) * blockDim.x; }

// ---- kernels -------------------------------------------------------------------------------

template <class U>
__global__ void copy_kernel(const Walk walk, U* dst, const U* src) {
  for (int64_t i = grid_start(); i < walk.numel; i += grid_step()) {
    int64_t off[2];
    walk_offsets(walk, i, off);
    dst[off[0]] = src[off[1]];
  }
}

// V is the copy unit (uint4 for 16 bytes); units per row, rows.
template <class V>
__global__ void copy_rows_kernel(char* dst, int64_t dst_pitch, const char* src, int64_t src_pitch,
                                 int64_t units, int64_t rows) {
  const int64_t total = units * rows;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t r = e / units, u = e - r * units;
    reinterpret_cast<V*>(dst + r * dst_pitch)[u] =
        reinterpret_cast<const V*>(src + r * src_pitch)[u];
  }
}

template <class U, class I>
__global__ void gather_kernel(const Walk walk, U* out, const U* x, const I* index,
                              int64_t x_dim_stride, int64_t bound, DeviceErrorSlot* slot,
                              DeviceError code, int32_t dim) {
  for (int64_t i = grid_start(); i < walk.numel; i += grid_step()) {
    int64_t off[3];
    walk_offsets(walk, i, off);
    const int64_t j = load_index(index, off[2]);
    if (j < 0 || j >= bound) {
      report_device_error(slot, code, dim, j, bound);
      continue;
    }
    out[off[0]] = x[off[1] + j * x_dim_stride];
  }
}

// out [O, N, units] of V = x [O, S, units] rows picked by index.
template <class V, class I>
__global__ void gather_rows_kernel(V* out, const V* x, const I* index, int64_t index_stride,
                                   int64_t O, int64_t N, int64_t S, int64_t units,
                                   DeviceErrorSlot* slot, DeviceError code, int32_t dim) {
  const int64_t total = O * N * units;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t row = e / units, u = e - row * units;
    const int64_t o = row / N, n = row - o * N;
    const int64_t j = load_index(index, n * index_stride);
    if (j < 0 || j >= S) {
      if (u == 0) report_device_error(slot, code, dim, j, S);
      continue;
    }
    out[e] = x[(o * S + j) * units + u];
  }
}

template <class I>
__global__ void scatter_keys_kernel(const Walk walk, const I* index, int64_t dim_step,
                                    int64_t bound, bool has_skip, int64_t skip, uint64_t sentinel,
                                    uint64_t* keys, int64_t* values, DeviceErrorSlot* slot,
                                    DeviceError code, int32_t dim) {
  for (int64_t p = grid_start(); p < walk.numel; p += grid_step()) {
    int64_t off[3];
    walk_offsets(walk, p, off);
    const int64_t j = load_index(index, off[0]);
    uint64_t key = sentinel;
    if (j < 0 || j >= bound) {
      report_device_error(slot, code, dim, j, bound);
    } else if (!(has_skip && j == skip)) {
      key = static_cast<uint64_t>(off[1] + j * dim_step);
    }
    if (keys != nullptr) {
      keys[p] = key;
      values[p] = off[2];
    }
  }
}

__global__ void index_put_keys_kernel(const IndexTuples tuples, uint64_t sentinel, uint64_t* keys,
                                      int64_t* values, DeviceErrorSlot* slot) {
  for (int64_t m = grid_start(); m < tuples.numel; m += grid_step()) {
    // m's coordinates over B, then each index's offset.
    int64_t offsets[kMaxDims] = {};
    int64_t rest = m;
    for (int d = tuples.dim - 1; d >= 0; --d) {
      const int64_t size = tuples.sizes[d];
      const int64_t q = rest / size, coordinate = rest - q * size;
      for (int k = 0; k < tuples.count; ++k) offsets[k] += coordinate * tuples.strides[k][d];
      rest = q;
    }
    uint64_t key = 0;
    bool bad = false;
    for (int k = 0; k < tuples.count; ++k) {
      const int64_t size = tuples.bounds[k];
      int64_t j = tuples.int32[k]
                      ? load_index(static_cast<const int32_t*>(tuples.data[k]), offsets[k])
                      : load_index(static_cast<const int64_t*>(tuples.data[k]), offsets[k]);
      if (j < -size || j >= size) {
        report_device_error(slot, DeviceError::IndexPut, k, j, size);
        bad = true;
        break;
      }
      if (j < 0) j += size;  // negative indices wrap, as in Python
      key = key * static_cast<uint64_t>(size) + static_cast<uint64_t>(j);
    }
    keys[m] = bad ? sentinel : key;
    values[m] = m;
  }
}

// One thread per (o, sorted position k, r): the first position of each run of equal keys sums
// the run (NOTE [Sorted accumulation on CUDA]); the others return at once.
template <class T>
__global__ void segment_rows_kernel(T* out, const T* source, const uint64_t* keys,
                                    const int64_t* values, int64_t n, uint64_t sentinel, int64_t S,
                                    int64_t R, int64_t rows_o_stride, int64_t total,
                                    bool accumulate) {
  using A = compute_t<T>;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t r = e % R, row = e / R;
    const int64_t k = row % n, o = row / n;
    const uint64_t key = keys[k];
    if (key >= sentinel || (k > 0 && keys[k - 1] == key)) continue;
    T* dst = out + (o * S + static_cast<int64_t>(key)) * R + r;
    const T* base = source + o * rows_o_stride + r;
    if (!accumulate) {  // the last write of the run wins
      int64_t last = k;
      while (last + 1 < n && keys[last + 1] == key) ++last;
      *dst = base[values[last] * R];
      continue;
    }
    A sum = load(dst);
    for (int64_t q = k; q < n && keys[q] == key; ++q) {
      sum = kernel::add_wrapping(sum, load(base + values[q] * R));
    }
    *dst = convert<T>(sum);
  }
}

__global__ void one_hot_kernel(const Walk walk, const int64_t* x, int64_t C, int64_t* out,
                               DeviceErrorSlot* slot, int32_t dim) {
  const int64_t total = walk.numel * C;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const int64_t m = e / C, c = e - m * C;
    int64_t off[1];
    walk_offsets(walk, m, off);
    const int64_t value = x[off[0]];
    if (c == 0 && (value < 0 || value >= C))
      report_device_error(slot, DeviceError::OneHot, dim, value, C);
    out[e] = value == c ? 1 : 0;
  }
}

// C == 0: no output, every class is out of range; reported all the same.
__global__ void one_hot_check_kernel(const Walk walk, const int64_t* x, DeviceErrorSlot* slot,
                                     int32_t dim) {
  for (int64_t m = grid_start(); m < walk.numel; m += grid_step()) {
    int64_t off[1];
    walk_offsets(walk, m, off);
    report_device_error(slot, DeviceError::OneHot, dim, x[off[0]], 0);
  }
}

// The widest copy unit (16, 8, 4, 2 or 1 bytes) that divides every size and address given.
int copy_unit(std::initializer_list<uint64_t> quantities) {
  for (int unit = 16; unit > 1; unit /= 2) {
    bool fits = true;
    for (uint64_t q : quantities) fits = fits && q % uint64_t(unit) == 0;
    if (fits) return unit;
  }
  return 1;
}

// Calls f(TypeTag<V>{}) with V the type of a copy unit of `unit` bytes.
template <class F>
cudaError_t visit_unit(int unit, F&& f) {
  if (unit == 16) return f(TypeTag<uint4>{});
  return kernel::visit_bits(size_t(unit), f);
}

uint64_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_copy(const Walk& walk, void* dst, const void* src, int element_size,
                        cudaStream_t stream) {
  if (walk.numel == 0) return cudaSuccess;
  return kernel::visit_bits(size_t(element_size), [&](auto tag) {
    using U = typename decltype(tag)::type;
    copy_kernel<U><<<grid_for(walk.numel), kThreads, 0, stream>>>(walk, static_cast<U*>(dst),
                                                                  static_cast<const U*>(src));
    return cudaGetLastError();
  });
}

cudaError_t launch_copy_rows(void* dst, int64_t dst_pitch, const void* src, int64_t src_pitch,
                             int64_t width_bytes, int64_t rows, cudaStream_t stream) {
  if (width_bytes == 0 || rows == 0) return cudaSuccess;
  if (dst_pitch == width_bytes && src_pitch == width_bytes) {  // one dense block
    width_bytes *= rows;
    dst_pitch = src_pitch = width_bytes;
    rows = 1;
  }
  const int unit = copy_unit({uint64_t(width_bytes), uint64_t(dst_pitch), uint64_t(src_pitch),
                              address(dst), address(src)});
  return visit_unit(unit, [&](auto tag) {
    using V = typename decltype(tag)::type;
    const int64_t units = width_bytes / int64_t(sizeof(V));
    copy_rows_kernel<V><<<grid_for(units * rows), kThreads, 0, stream>>>(
        static_cast<char*>(dst), dst_pitch, static_cast<const char*>(src), src_pitch, units, rows);
    return cudaGetLastError();
  });
}

cudaError_t launch_gather(const Walk& walk, void* out, const void* x, const void* index,
                          bool index_int32, int element_size, int64_t x_dim_stride, int64_t bound,
                          DeviceErrorSlot* slot, DeviceError code, int32_t dim,
                          cudaStream_t stream) {
  if (walk.numel == 0) return cudaSuccess;
  return kernel::visit_bits(size_t(element_size), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const unsigned grid = grid_for(walk.numel);
    if (index_int32) {
      gather_kernel<U, int32_t><<<grid, kThreads, 0, stream>>>(
          walk, static_cast<U*>(out), static_cast<const U*>(x), static_cast<const int32_t*>(index),
          x_dim_stride, bound, slot, code, dim);
    } else {
      gather_kernel<U, int64_t><<<grid, kThreads, 0, stream>>>(
          walk, static_cast<U*>(out), static_cast<const U*>(x), static_cast<const int64_t*>(index),
          x_dim_stride, bound, slot, code, dim);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_gather_rows(void* out, const void* x, const void* index, bool index_int32,
                               int64_t index_stride, int64_t O, int64_t N, int64_t S,
                               int64_t row_bytes, DeviceErrorSlot* slot, DeviceError code,
                               int32_t dim, cudaStream_t stream) {
  if (O == 0 || N == 0 || row_bytes == 0) return cudaSuccess;
  const int unit = copy_unit({uint64_t(row_bytes), address(out), address(x)});
  return visit_unit(unit, [&](auto tag) {
    using V = typename decltype(tag)::type;
    const int64_t units = row_bytes / int64_t(sizeof(V));
    const unsigned grid = grid_for(O * N * units);
    if (index_int32) {
      gather_rows_kernel<V, int32_t><<<grid, kThreads, 0, stream>>>(
          static_cast<V*>(out), static_cast<const V*>(x), static_cast<const int32_t*>(index),
          index_stride, O, N, S, units, slot, code, dim);
    } else {
      gather_rows_kernel<V, int64_t><<<grid, kThreads, 0, stream>>>(
          static_cast<V*>(out), static_cast<const V*>(x), static_cast<const int64_t*>(index),
          index_stride, O, N, S, units, slot, code, dim);
    }
    return cudaGetLastError();
  });
}

cudaError_t launch_scatter_keys(const Walk& walk, const void* index, bool index_int32,
                                int64_t dim_step, int64_t bound, bool has_skip, int64_t skip,
                                uint64_t sentinel, uint64_t* keys, int64_t* values,
                                DeviceErrorSlot* slot, DeviceError code, int32_t dim,
                                cudaStream_t stream) {
  if (walk.numel == 0) return cudaSuccess;
  const unsigned grid = grid_for(walk.numel);
  if (index_int32) {
    scatter_keys_kernel<int32_t>
        <<<grid, kThreads, 0, stream>>>(walk, static_cast<const int32_t*>(index), dim_step, bound,
                                        has_skip, skip, sentinel, keys, values, slot, code, dim);
  } else {
    scatter_keys_kernel<int64_t>
        <<<grid, kThreads, 0, stream>>>(walk, static_cast<const int64_t*>(index), dim_step, bound,
                                        has_skip, skip, sentinel, keys, values, slot, code, dim);
  }
  return cudaGetLastError();
}

cudaError_t launch_index_put_keys(const IndexTuples& tuples, uint64_t sentinel, uint64_t* keys,
                                  int64_t* values, DeviceErrorSlot* slot, cudaStream_t stream) {
  if (tuples.numel == 0) return cudaSuccess;
  index_put_keys_kernel<<<grid_for(tuples.numel), kThreads, 0, stream>>>(tuples, sentinel, keys,
                                                                         values, slot);
  return cudaGetLastError();
}

cudaError_t sort_pairs_temp_bytes(int64_t n, int end_bit, size_t* bytes) {
  *bytes = 0;
  return cub::DeviceRadixSort::SortPairs(
      nullptr, *bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), n, 0, end_bit);
}

cudaError_t launch_sort_pairs(void* temp, size_t temp_bytes, const uint64_t* keys_in,
                              uint64_t* keys_out, const int64_t* values_in, int64_t* values_out,
                              int64_t n, int end_bit, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const cudaError_t status = cub::DeviceRadixSort::SortPairs(
      temp, temp_bytes, keys_in, keys_out, values_in, values_out, n, 0, end_bit, stream);
  return status != cudaSuccess ? status : cudaGetLastError();
}

// ---- argsort ----------------------------------------------------------------------------------

template <class U>
__global__ void sort_keys_kernel(const U* x, int64_t count, DType dtype, bool descending,
                                 uint64_t* keys, int64_t* values) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    keys[i] = kernel::sort_key(uint64_t(x[i]), dtype, descending);
    values[i] = i;
  }
}

__global__ void row_keys_kernel(const int64_t* positions, int64_t count, int64_t length,
                                uint64_t* keys) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    keys[i] = uint64_t(positions[i] / length);
  }
}

__global__ void positions_in_row_kernel(const int64_t* positions, int64_t count, int64_t length,
                                        int64_t* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = positions[i] % length;
  }
}

cudaError_t launch_sort_keys(DType dtype, const void* x, int64_t count, bool descending,
                             uint64_t* keys, int64_t* values, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  kernel::visit_bits(element_size(dtype), [&](auto tag) {
    using U = typename decltype(tag)::type;
    sort_keys_kernel<U><<<grid_for(count), kThreads, 0, stream>>>(static_cast<const U*>(x), count,
                                                                 dtype, descending, keys, values);
  });
  return cudaGetLastError();
}

cudaError_t launch_row_keys(const int64_t* positions, int64_t count, int64_t length,
                            uint64_t* keys, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  row_keys_kernel<<<grid_for(count), kThreads, 0, stream>>>(positions, count, length, keys);
  return cudaGetLastError();
}

cudaError_t launch_positions_in_row(const int64_t* positions, int64_t count, int64_t length,
                                    int64_t* out, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  positions_in_row_kernel<<<grid_for(count), kThreads, 0, stream>>>(positions, count, length, out);
  return cudaGetLastError();
}

cudaError_t launch_segment_rows(DType dtype, void* out, const void* source, const uint64_t* keys,
                                const int64_t* values, int64_t n, uint64_t sentinel, int64_t O,
                                int64_t S, int64_t R, int64_t rows_o_stride, bool accumulate,
                                cudaStream_t stream) {
  const int64_t total = O * n * R;
  if (total == 0) return cudaSuccess;
  return visit_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    segment_rows_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(source), keys, values, n, sentinel, S, R,
        rows_o_stride, total, accumulate);
    return cudaGetLastError();
  });
}

cudaError_t launch_one_hot(const Walk& walk, const int64_t* x, int64_t M, int64_t C, int64_t* out,
                           DeviceErrorSlot* slot, int32_t dim, cudaStream_t stream) {
  if (M == 0) return cudaSuccess;
  if (C == 0) {
    one_hot_check_kernel<<<grid_for(M), kThreads, 0, stream>>>(walk, x, slot, dim);
  } else {
    one_hot_kernel<<<grid_for(M * C), kThreads, 0, stream>>>(walk, x, C, out, slot, dim);
  }
  return cudaGetLastError();
}

}  // namespace hg::cuda::detail
