// for_each_row: walks N strided operands of one shape, calling a kernel on runs along the
// innermost dim. The core of every elementwise CPU kernel: copies, casts, and (in ops/)
// the arithmetic.
//
//   for_each_row<2>(sizes, {dst_ptr, src_ptr}, {dst_byte_strides, src_byte_strides},
//       [](std::array<char*, 2> ptrs, std::array<int64_t, 2> step, int64_t n) { ... });
//
// Before walking, dims are simplified: size-1 dims are dropped and neighbouring dims that
// are laid out back to back in every operand merge into one, so a contiguous tensor of any
// shape is a single row.
#pragma once

#include <omp.h>

#include <array>
#include <cstdint>
#include <cstring>

#include "halfgrad/core/parallel.h"
#include "halfgrad/core/shape.h"
#include "halfgrad/core/tensor.h"

namespace hg {

// A tensor's first byte, and one element read or written at any byte address (the pointers
// for_each_row hands a kernel are not aligned to the element type in general).
inline char* byte_data(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }
template <class T>
T load_bytes(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}
template <class T>
void store_bytes(char* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

// A tensor's strides in bytes, as for_each_row takes them.
inline Shape byte_strides(const Tensor& t) {
  Shape strides = t.strides();
  for (int64_t& s : strides) s *= int64_t(t.element_size());
  return strides;
}

template <size_t N>
struct RowLayout {
  Shape sizes;                   // simplified sizes, innermost last
  std::array<Shape, N> strides;  // per operand, in bytes
};

// Drops size-1 dims and merges dims d-1, d wherever every operand has
// stride[d-1] == stride[d] * size[d].
template <size_t N>
RowLayout<N> simplify_layout(const Shape& sizes, const std::array<Shape, N>& byte_strides) {
  RowLayout<N> out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool merges = !out.sizes.empty();
    for (size_t k = 0; merges && k < N; ++k) {
      merges = out.strides[k].back() == byte_strides[k][d] * sizes[d];
    }
    if (merges) {
      out.sizes.back() *= sizes[d];
      for (size_t k = 0; k < N; ++k) out.strides[k].back() = byte_strides[k][d];
    } else {
      out.sizes.push_back(sizes[d]);
      for (size_t k = 0; k < N; ++k) out.strides[k].push_back(byte_strides[k][d]);
    }
  }
  if (out.sizes.empty()) {  // a single element
    out.sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) out.strides[k].push_back(0);
  }
  return out;
}

// True when every operand walks `sizes` as one run with a fixed step (contiguous, or a
// broadcast scalar: step 0); the steps go to `steps`. The common case, checked without
// building a RowLayout.
template <size_t N>
bool is_single_run(const Shape& sizes, const std::array<Shape, N>& byte_strides,
                   std::array<int64_t, N>& steps) {
  for (size_t k = 0; k < N; ++k) {
    steps[k] = 0;
    bool first = true;
    int64_t next = 0;  // the stride the next outer dim needs to continue the run
    for (size_t d = sizes.size(); d-- > 0;) {
      if (sizes[d] == 1) continue;
      if (first) {
        steps[k] = byte_strides[k][d];
        first = false;
      } else if (byte_strides[k][d] != next) {
        return false;
      }
      next = byte_strides[k][d] * sizes[d];
    }
  }
  return true;
}

// Calls row(ptrs, inner_byte_strides, n) for every innermost run. Rows run on OpenMP
// threads when the shape has at least kParallelGrain elements and `parallel` is true; the
// kernel must then be safe to run on distinct rows at once (it must not throw).
template <size_t N, class Row>
void for_each_row(const Shape& sizes, const std::array<char*, N>& data,
                  const std::array<Shape, N>& byte_strides, Row&& row, bool parallel = true) {
  const int64_t numel = shape_numel(sizes);
  const bool serial = !parallel || numel < kParallelGrain;
  if (std::array<int64_t, N> steps; serial && is_single_run(sizes, byte_strides, steps)) {
    if (numel > 0) row(data, steps, numel);
    return;
  }
  const RowLayout<N> layout = simplify_layout(sizes, byte_strides);
  const int64_t ndim = int64_t(layout.sizes.size());
  const int64_t inner = layout.sizes[ndim - 1];
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < ndim; ++d) rows *= layout.sizes[d];
  if (rows == 0 || inner == 0) return;

  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = layout.strides[k][ndim - 1];

  // Rows [first, last): the multi-index of `first` is decoded once, then advanced like an
  // odometer.
  const auto run_rows = [&](int64_t first, int64_t last) {
    Shape index(size_t(std::max<int64_t>(ndim - 1, 0)), 0);
    int64_t rest = first;
    for (int64_t d = ndim - 2; d >= 0; --d) {
      index[d] = rest % layout.sizes[d];
      rest /= layout.sizes[d];
    }
    std::array<char*, N> ptrs;
    for (size_t k = 0; k < N; ++k) {
      ptrs[k] = data[k];
      for (int64_t d = 0; d + 1 < ndim; ++d) ptrs[k] += index[d] * layout.strides[k][d];
    }
    for (int64_t r = first; r < last; ++r) {
      row(ptrs, inner_strides, inner);
      for (int64_t d = ndim - 2; d >= 0; --d) {  // advance the odometer
        for (size_t k = 0; k < N; ++k) ptrs[k] += layout.strides[k][d];
        if (++index[d] < layout.sizes[d]) break;
        for (size_t k = 0; k < N; ++k) ptrs[k] -= layout.strides[k][d] * layout.sizes[d];
        index[d] = 0;
      }
    }
  };

  const int64_t total = rows * inner;
  const int threads = omp_get_max_threads();
  if (!parallel || total < kParallelGrain || threads == 1 || omp_in_parallel()) {
    run_rows(0, rows);
    return;
  }
  if (rows == 1) {  // one long row: split it
#pragma omp parallel num_threads(threads)
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t begin = inner * t / nt, end = inner * (t + 1) / nt;
      std::array<char*, N> ptrs;
      for (size_t k = 0; k < N; ++k) ptrs[k] = data[k] + begin * inner_strides[k];
      if (end > begin) row(ptrs, inner_strides, end - begin);
    }
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = rows * t / nt, end = rows * (t + 1) / nt;
    if (end > begin) run_rows(begin, end);
  }
}

}  // namespace hg
