// Pooling kernels (pool_launch.h): max_pool2d, avg_pool2d and their backward passes, with the
// CPU kernels' semantics (cpu/pool.cpp) and summation orders.
//
// Dims: N batch, C channels, H/W input height/width, Hout/Wout output height/width, kH/kW
// kernel, sH/sW stride, pH/pW padding. Window (oh, ow) covers input rows oh sH - pH .. + kH
// and columns ow sW - pW .. + kW, cut to the input.
//
// NOTE [Deterministic pooling backward] Both backward passes are gathers: each dx element is
// written by one thread, which sums its contributions in the order the CPU kernel adds them
// (outputs in row-major order), so results repeat bit for bit and float32 matches the CPU's.
// No float atomics.
// - avg_pool2d_backward: input position (h, w) lies in the windows oh in
//   [ceil((h + pH - kH + 1) / sH), floor((h + pH) / sH)] (and likewise ow), which it visits
//   in order, adding each window's dy / divisor.
//
// NOTE [Deterministic max_pool2d backward] max_pool2d_backward knows dy, the indices and the
// input shape, not the windows, so it cannot find the outputs that chose an input position
// by looking around it. It sorts instead: each dy element gets the key plane * H * W + index
// (the flat input position it goes to), a stable radix sort orders the (key, dy) pairs by
// key, keeping equal keys in output order, and the first element of each run of equal keys
// sums the run into dx. An index outside [0, H * W) is reported on the device and given a
// key past every input position, so it sorts last and is skipped. Cost: a sort of dy's
// elements, O(count) with a few passes over the key bits.
#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <limits>

#include "halfgrad/cuda/device_utils.cuh"
#include "halfgrad/cuda/pool_launch.h"

namespace hg::cuda::detail {

namespace {

// ---- kernels -----------------------------------------------------------------------------

// The window of output (oh, ow): input rows [h0, h1), columns [w0, w1), and its size with
// the padding counted (count_include_pad's divisor), as the CPU's window_at.
struct Window {
  int64_t h0, h1, w0, w1, padded_size;
};

__device__ __forceinline__ Window window_at(const PoolShape& s, int64_t oh, int64_t ow) {
  const int64_t h_start = oh * s.sH - s.pH, w_start = ow * s.sW - s.pW;
  const int64_t h_end = min(h_start + s.kH, s.H + s.pH);
  const int64_t w_end = min(w_start + s.kW, s.W + s.pW);
  return {max(h_start, int64_t(0)), min(h_end, s.H), max(w_start, int64_t(0)), min(w_end, s.W),
          (h_end - h_start) * (w_end - w_start)};
}

__device__ __forceinline__ int64_t avg_divisor(const PoolShape& s, const Window& win) {
  if (s.divisor_override > 0) return s.divisor_override;
  return s.count_include_pad ? win.padded_size : (win.h1 - win.h0) * (win.w1 - win.w0);
}

// The first tap at start, start + step, ... that is >= 0.
__device__ __forceinline__ int64_t first_tap(int64_t start, int64_t step) {
  return start >= 0 ? start : start + (-start + step - 1) / step * step;
}

// Splits the row-major linear index i over [N, C, rows, cols].
struct Position {
  int64_t n, c, row, col;
};
__device__ __forceinline__ Position position_of(int64_t i, int64_t C, int64_t rows, int64_t cols) {
  Position p;
  p.col = i % cols;
  i /= cols;
  p.row = i % rows;
  i /= rows;
  p.c = i % C;
  p.n = i / C;
  return p;
}

template <class T>
__global__ void max_pool2d_kernel(const T* x, Strides4 xs, T* out, int64_t* indices, PoolShape s,
                                  int64_t total) {
  using A = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Position o = position_of(i, s.C, s.Hout, s.Wout);
    // The window's taps, as the CPU's: every dH-th row from its start, inside the input.
    const int64_t h_start = o.row * s.sH - s.pH, w_start = o.col * s.sW - s.pW;
    const int64_t h_first = first_tap(h_start, s.dH), w_first = first_tap(w_start, s.dW);
    const int64_t h_end = min(h_start + s.dH * (s.kH - 1) + 1, s.H);
    const int64_t w_end = min(w_start + s.dW * (s.kW - 1) + 1, s.W);
    const T* plane = x + o.n * xs.n + o.c * xs.c;
    A best = -std::numeric_limits<A>::infinity();
    int64_t best_index = h_first * s.W + w_first;
    for (int64_t h = h_first; h < h_end; h += s.dH) {
      for (int64_t w = w_first; w < w_end; w += s.dW) {
        const A v = load(plane + h * xs.h + w * xs.w);
        if (v > best || v != v) {  // NaN propagates (the last NaN wins), as on the CPU
          best = v;
          best_index = h * s.W + w;
        }
      }
    }
    out[i] = convert<T>(best);
    indices[i] = best_index;
  }
}

template <class T>
__global__ void avg_pool2d_kernel(const T* x, Strides4 xs, T* out, PoolShape s, int64_t total) {
  using A = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Position o = position_of(i, s.C, s.Hout, s.Wout);
    const Window win = window_at(s, o.row, o.col);
    const T* plane = x + o.n * xs.n + o.c * xs.c;
    A sum = 0;
    for (int64_t h = win.h0; h < win.h1; ++h) {
      for (int64_t w = win.w0; w < win.w1; ++w) sum += load(plane + h * xs.h + w * xs.w);
    }
    out[i] = convert<T>(sum / A(avg_divisor(s, win)));
  }
}

// The first window index whose window [start, start + kernel) with start = o * stride - pad
// reaches `pos`: ceil((pos + pad - kernel + 1) / stride), at least 0.
__device__ __forceinline__ int64_t first_window(int64_t pos, int64_t kernel, int64_t stride,
                                                int64_t pad) {
  const int64_t reach = pos + pad - kernel;  // windows must start after this
  return reach < 0 ? 0 : reach / stride + 1;
}

// NOTE [Deterministic pooling backward]: a gather over the windows containing each input.
template <class T>
__global__ void avg_pool2d_backward_kernel(const T* dy, Strides4 dys, T* dx, PoolShape s,
                                           int64_t total) {
  using A = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Position in = position_of(i, s.C, s.H, s.W);
    const int64_t oh_first = first_window(in.row, s.kH, s.sH, s.pH);
    const int64_t oh_last = min(s.Hout - 1, (in.row + s.pH) / s.sH);
    const int64_t ow_first = first_window(in.col, s.kW, s.sW, s.pW);
    const int64_t ow_last = min(s.Wout - 1, (in.col + s.pW) / s.sW);
    const T* plane = dy + in.n * dys.n + in.c * dys.c;
    A sum = 0;
    for (int64_t oh = oh_first; oh <= oh_last; ++oh) {
      for (int64_t ow = ow_first; ow <= ow_last; ++ow) {
        const Window win = window_at(s, oh, ow);
        sum += load(plane + oh * dys.h + ow * dys.w) / A(avg_divisor(s, win));
      }
    }
    dx[i] = convert<T>(sum);
  }
}

// NOTE [Deterministic max_pool2d backward], step 1: a (key, value) pair per dy element.
template <class T, class A>
__global__ void max_pool2d_backward_keys_kernel(const T* dy, Strides4 dys, const int64_t* indices,
                                                Strides4 is, PoolShape s, int64_t count,
                                                uint64_t* keys, A* values, DeviceErrorSlot* slot,
                                                DeviceError code, int32_t index_dim) {
  const int64_t plane_size = s.H * s.W;
  const auto past_the_end = uint64_t(s.N * s.C * plane_size);
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    const Position o = position_of(i, s.C, s.Hout, s.Wout);
    const int64_t index = indices[o.n * is.n + o.c * is.c + o.row * is.h + o.col * is.w];
    if (index < 0 || index >= plane_size) {
      report_device_error(slot, code, index_dim, index, plane_size);
      keys[i] = past_the_end;
      values[i] = A(0);
      continue;
    }
    keys[i] = uint64_t((o.n * s.C + o.c) * plane_size + index);
    values[i] = load(dy + o.n * dys.n + o.c * dys.c + o.row * dys.h + o.col * dys.w);
  }
}

// Step 3: the first pair of each run of equal keys writes the run's sum.
template <class T, class A>
__global__ void max_pool2d_backward_sum_kernel(const uint64_t* keys, const A* values, int64_t count,
                                               uint64_t past_the_end, T* dx) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += step) {
    const uint64_t key = keys[i];
    if (key >= past_the_end || (i > 0 && keys[i - 1] == key)) continue;
    A sum = 0;
    for (int64_t j = i; j < count && keys[j] == key; ++j) sum += values[j];
    dx[key] = convert<T>(sum);
  }
}

// Calls f(TypeTag<A>{}) with A the accumulation type of dtype: double for float64, else float.
template <class F>
decltype(auto) visit_accumulator(DType dtype, F&& f) {
  if (dtype == DType::Float64) return f(TypeTag<double>{});
  return f(TypeTag<float>{});
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------

cudaError_t launch_max_pool2d(const void* x, Strides4 x_strides, void* out, int64_t* indices,
                              DType dtype, const PoolShape& shape, cudaStream_t stream) {
  const int64_t total = shape.N * shape.C * shape.Hout * shape.Wout;
  if (total == 0) return cudaSuccess;
  visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool2d_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(x), x_strides, static_cast<T*>(out), indices, shape, total);
  });
  return cudaGetLastError();
}

cudaError_t launch_avg_pool2d(const void* x, Strides4 x_strides, void* out, DType dtype,
                              const PoolShape& shape, cudaStream_t stream) {
  const int64_t total = shape.N * shape.C * shape.Hout * shape.Wout;
  if (total == 0) return cudaSuccess;
  visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool2d_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(x), x_strides, static_cast<T*>(out), shape, total);
  });
  return cudaGetLastError();
}

cudaError_t launch_avg_pool2d_backward(const void* dy, Strides4 dy_strides, void* dx, DType dtype,
                                       const PoolShape& shape, cudaStream_t stream) {
  const int64_t total = shape.N * shape.C * shape.H * shape.W;
  if (total == 0) return cudaSuccess;
  visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool2d_backward_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), dy_strides, static_cast<T*>(dx), shape, total);
  });
  return cudaGetLastError();
}

int max_pool2d_backward_key_bits(int64_t elements) {
  // Keys run up to `elements` itself (the key of a bad index), so its bits are needed.
  int bits = 1;
  while (bits < 64 && (uint64_t(elements) >> bits) != 0) ++bits;
  return bits;
}

cudaError_t max_pool2d_backward_sort_bytes(int64_t count, int key_bits, DType dtype,
                                           size_t* bytes) {
  return visit_accumulator(dtype, [&](auto tag) {
    using A = typename decltype(tag)::type;
    // With no storage given, the sort only reports how much it needs.
    return cub::DeviceRadixSort::SortPairs(
        nullptr, *bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
        static_cast<const A*>(nullptr), static_cast<A*>(nullptr), count, 0, key_bits);
  });
}

cudaError_t launch_max_pool2d_backward(const void* dy, Strides4 dy_strides, const int64_t* indices,
                                       Strides4 index_strides, void* dx, DType dtype,
                                       const PoolShape& shape, int key_bits,
                                       const MaxPoolBackwardScratch& scratch, DeviceErrorSlot* slot,
                                       DeviceError code, int32_t index_dim, cudaStream_t stream) {
  const int64_t elements = shape.N * shape.C * shape.H * shape.W;
  const int64_t count = shape.N * shape.C * shape.Hout * shape.Wout;
  if (elements > 0) {
    cudaError_t status =
        cudaMemsetAsync(dx, 0, size_t(elements) * element_size(dtype), stream);  // 0.0 bits
    if (status != cudaSuccess) return status;
  }
  if (count == 0) return cudaSuccess;
  return visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    auto* keys_in = static_cast<uint64_t*>(scratch.keys_in);
    auto* keys_out = static_cast<uint64_t*>(scratch.keys_out);
    auto* values_in = static_cast<A*>(scratch.values_in);
    auto* values_out = static_cast<A*>(scratch.values_out);
    max_pool2d_backward_keys_kernel<T, A><<<grid_for(count), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), dy_strides, indices, index_strides, shape, count, keys_in,
        values_in, slot, code, index_dim);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    size_t sort_bytes = scratch.sort_bytes;
    status = cub::DeviceRadixSort::SortPairs(scratch.sort_storage, sort_bytes, keys_in, keys_out,
                                             values_in, values_out, count, 0, key_bits, stream);
    if (status != cudaSuccess) return status;
    max_pool2d_backward_sum_kernel<T, A><<<grid_for(count), kThreads, 0, stream>>>(
        keys_out, values_out, count, uint64_t(elements), static_cast<T*>(dx));
    return cudaGetLastError();
  });
}

}  // namespace hg::cuda::detail
