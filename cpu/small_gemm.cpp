// halfgrad's own CPU kernel for tiny float32 GEMMs (NOTE [Small GEMM kernel]), in copies for
// AVX-512, AVX2+FMA and the baseline SSE2 picked at run time, and the test hooks that cap it.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>

#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/error.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/linalg_detail.h"

namespace hg::cpu {

namespace linalg_detail {

namespace {

// NOTE [Small GEMM kernel] A tiny product (a layer of a 32-wide MLP: 16 x 32 x 32 is 16K
// multiply-adds, about 1K AVX-512 FMAs) costs less than the machinery around it in Eigen
// (packing into its own panels, blocking for caches it will not fill) or in oneDNN (a
// primitive call, ~1.6 us). This kernel does only what such a product needs:
//   - b is read in place when it is row-major with whole vectors per row; otherwise it is
//     made a dense row-major K x Np block (Np: N rounded up to the vector width, zero
//     padded), copied or transposed;
//   - for every block of kRows rows of a, up to 4 vectors of output columns are accumulated
//     over the whole K (one fma per element of b, a's element broadcast), kRows x 4
//     independent fma chains that hide the fma latency, and written once, with alpha, beta
//     and the bias applied at the store;
//   - a narrow product (N below the vector width) whose a and b are both contiguous along K
//     (linear's x @ weight^T into one output column) is a dot product per output instead:
//     vectors along K, summed across lanes at the end, so nothing is padded.
// The vectors are GCC/clang vector types, sized per ISA: AVX-512 (16 lanes, 4 rows), AVX2+FMA
// (8 lanes, 2 rows: 16 ymm registers) and the baseline SSE2 (4 lanes, 2 rows), chosen at run
// time. Each copy sums in its own fixed order, so results are the same on every call.
using SmallVec4 = float __attribute__((vector_size(16)));
using SmallVec8 = float __attribute__((vector_size(32)));
using SmallVec16 = float __attribute__((vector_size(64)));

// Vectors read and written at any float alignment (memcpy compiles to one unaligned move).
// They take the vector by reference: GCC notes an ABI change for a vector wider than the
// baseline's registers passed or returned by value.
template <class V>
inline __attribute__((always_inline)) void load_vector(V& v, const float* p) {
  std::memcpy(&v, p, sizeof(V));
}
template <class V>
inline __attribute__((always_inline)) void store_vector(float* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// Rows [i0, i0 + kRows) of out's columns [n0, n0 + kVectors * lanes) (the last vector may run
// past n into the padding; only columns < n are written). b_rows: row k of b at
// b_rows + k * b_stride.
template <class V, int kRows, int kVectors>
inline __attribute__((always_inline)) void small_gemm_block(const Problem& p, int64_t batch,
                                                            const float* b_rows, int64_t b_stride,
                                                            int64_t i0, int64_t n0) {
  constexpr int kLanes = sizeof(V) / sizeof(float);
  const float* a =
      reinterpret_cast<const float*>(p.a.data) + batch * p.a.batch_stride + i0 * p.a.row_stride;
  V acc[kRows][kVectors];
  for (int r = 0; r < kRows; ++r) {
    for (int v = 0; v < kVectors; ++v) acc[r][v] = V{};  // (= {} on the array became a rep stos)
  }
  const float* b_row = b_rows + n0;
  for (int64_t k = 0; k < p.k; ++k, b_row += b_stride) {
    V b[kVectors];
    for (int v = 0; v < kVectors; ++v) load_vector(b[v], b_row + v * kLanes);
    for (int r = 0; r < kRows; ++r) {
      const float ak = a[r * p.a.row_stride + k * p.a.col_stride];
      for (int v = 0; v < kVectors; ++v) acc[r][v] += ak * b[v];
    }
  }
  const float* bias = reinterpret_cast<const float*>(p.bias);
  const float alpha = float(p.alpha), beta = float(p.beta);
  const int64_t full = std::min<int64_t>(kVectors, (p.n - n0) / kLanes);  // whole vectors
  for (int r = 0; r < kRows; ++r) {
    float* out_row = reinterpret_cast<float*>(p.out) + (batch * p.m + i0 + r) * p.n + n0;
    for (int v = 0; v < kVectors; ++v) {
      V result = acc[r][v];
      if (alpha != 1) result *= alpha;
      if (v < full) {
        V other;
        if (beta != 0) {
          load_vector(other, out_row + v * kLanes);
          result += beta * other;
        }
        if (bias != nullptr) {
          load_vector(other, bias + n0 + v * kLanes);
          result += other;
        }
        store_vector(out_row + v * kLanes, result);
      } else {  // the columns of the last, partial vector
        for (int64_t j = 0; j < p.n - n0 - v * kLanes; ++j) {
          const int64_t col = v * kLanes + j;
          float value = result[j];
          if (beta != 0) value += beta * out_row[col];
          if (bias != nullptr) value += bias[n0 + col];
          out_row[col] = value;
        }
      }
    }
  }
}

// All rows of out's columns [n0, n0 + kVectors * lanes): blocks of kRows rows, then single
// rows.
template <class V, int kRows, int kVectors>
inline __attribute__((always_inline)) void small_gemm_columns(const Problem& p, int64_t batch,
                                                              const float* b_rows, int64_t b_stride,
                                                              int64_t n0) {
  int64_t i = 0;
  for (; i + kRows <= p.m; i += kRows) {
    small_gemm_block<V, kRows, kVectors>(p, batch, b_rows, b_stride, i, n0);
  }
  for (; i < p.m; ++i) small_gemm_block<V, 1, kVectors>(p, batch, b_rows, b_stride, i, n0);
}

// One stage of an 8 x 8 transpose held in rows: x and y are rows r and r + d (r & d == 0);
// the d x d blocks off the diagonal of their 2d x 2d block swap places.
template <int d, int... J>
inline __attribute__((always_inline)) void transpose_stage(SmallVec8& x, SmallVec8& y,
                                                           std::integer_sequence<int, J...>) {
  const SmallVec8 low = __builtin_shufflevector(x, y, ((J & d) ? J - d + 8 : J)...);
  const SmallVec8 high = __builtin_shufflevector(x, y, ((J & d) ? J + 8 : J + d)...);
  x = low;
  y = high;
}

template <int d>
inline __attribute__((always_inline)) void transpose_stage(SmallVec8 (&rows)[8]) {
  for (int r = 0; r < 8; ++r) {
    if ((r & d) == 0)
      transpose_stage<d>(rows[r], rows[r + d], std::make_integer_sequence<int, 8>{});
  }
}

// b's matrix `batch` as a dense row-major K x np block in the thread's pack buffer, zero
// padded from column n. A column-major b is transposed 8 x 8 in vector registers (three
// stages of shuffles), its edges element by element.
inline __attribute__((always_inline)) const float* small_pack_b(const Problem& p, int64_t batch,
                                                                int64_t np) {
  auto* packed =
      static_cast<float*>(thread_buffer(kSmallPackSlot, size_t(p.k * np) * sizeof(float)));
  const float* b = reinterpret_cast<const float*>(p.b.data) + batch * p.b.batch_stride;
  if (p.b.row_major()) {
    for (int64_t k = 0; k < p.k; ++k) {
      std::memcpy(packed + k * np, b + k * p.b.row_stride, size_t(p.n) * sizeof(float));
    }
  } else {
    const int64_t ld = p.b.col_stride;  // b[k][j] = b[k + j * ld]
    const int64_t n8 = p.n / 8 * 8, k8 = p.k / 8 * 8;
    for (int64_t j0 = 0; j0 < n8; j0 += 8) {
      for (int64_t k0 = 0; k0 < k8; k0 += 8) {
        SmallVec8 rows[8];
        for (int r = 0; r < 8; ++r) load_vector(rows[r], b + k0 + (j0 + r) * ld);
        transpose_stage<1>(rows);
        transpose_stage<2>(rows);
        transpose_stage<4>(rows);
        for (int r = 0; r < 8; ++r) store_vector(packed + (k0 + r) * np + j0, rows[r]);
      }
      for (int64_t k = k8; k < p.k; ++k) {
        for (int64_t j = j0; j < j0 + 8; ++j) packed[k * np + j] = b[k + j * ld];
      }
    }
    for (int64_t k = 0; k < p.k; ++k) {
      for (int64_t j = n8; j < p.n; ++j) packed[k * np + j] = b[k + j * ld];
    }
  }
  for (int64_t k = 0; k < p.k; ++k) std::fill(packed + k * np + p.n, packed + (k + 1) * np, 0.0f);
  return packed;
}

// The sum of a vector's lanes, halves added pairwise (a fixed order, log2(lanes) dependent
// adds rather than one per lane).
template <class V>
inline __attribute__((always_inline)) float lane_sum(const V& v) {
  if constexpr (sizeof(V) == sizeof(SmallVec16)) {
    const SmallVec8 low = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
    const SmallVec8 high = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
    return lane_sum(SmallVec8(low + high));
  } else if constexpr (sizeof(V) == sizeof(SmallVec8)) {
    const SmallVec4 low = __builtin_shufflevector(v, v, 0, 1, 2, 3);
    const SmallVec4 high = __builtin_shufflevector(v, v, 4, 5, 6, 7);
    return lane_sum(SmallVec4(low + high));
  } else {
    return (v[0] + v[2]) + (v[1] + v[3]);
  }
}

// out[i, j] = alpha * dot(a row i, b column j) + beta * out[i, j] (+ bias[j]), for a and b
// both contiguous along K: vectors along K, then the lanes summed.
template <class V>
inline __attribute__((always_inline)) void small_gemm_dots(const Problem& p, int64_t batch) {
  constexpr int kLanes = sizeof(V) / sizeof(float);
  const float* a = reinterpret_cast<const float*>(p.a.data) + batch * p.a.batch_stride;
  const float* b = reinterpret_cast<const float*>(p.b.data) + batch * p.b.batch_stride;
  const float* bias = reinterpret_cast<const float*>(p.bias);
  const int64_t whole = p.k / kLanes * kLanes;
  for (int64_t i = 0; i < p.m; ++i) {
    const float* a_row = a + i * p.a.row_stride;
    for (int64_t j = 0; j < p.n; ++j) {
      const float* b_col = b + j * p.b.col_stride;
      V acc{}, x, y;
      for (int64_t k = 0; k < whole; k += kLanes) {
        load_vector(x, a_row + k);
        load_vector(y, b_col + k);
        acc += x * y;
      }
      float sum = lane_sum(acc);
      for (int64_t k = whole; k < p.k; ++k) sum += a_row[k] * b_col[k];
      float& out = reinterpret_cast<float*>(p.out)[(batch * p.m + i) * p.n + j];
      float value = float(p.alpha) * sum;
      if (p.beta != 0) value += float(p.beta) * out;
      if (bias != nullptr) value += bias[j];
      out = value;
    }
  }
}

template <class V, int kRows>
inline __attribute__((always_inline)) void small_gemm_body(const Problem& p) {
  constexpr int64_t kLanes = sizeof(V) / sizeof(float);
  const bool dots = p.n < kLanes && p.a.col_stride == 1 && p.b.row_stride == 1;
  const int64_t np = (p.n + kLanes - 1) / kLanes * kLanes;
  for (int64_t i = 0; i < p.batch; ++i) {
    if (dots) {
      small_gemm_dots<V>(p, i);
      continue;
    }
    const bool in_place = p.b.row_major() && p.n % kLanes == 0;
    const float* b_rows = in_place ? reinterpret_cast<const float*>(p.b.data) + i * p.b.batch_stride
                                   : small_pack_b(p, i, np);
    const int64_t b_stride = in_place ? p.b.row_stride : np;
    for (int64_t n0 = 0; n0 < np; n0 += 4 * kLanes) {
      switch (std::min<int64_t>(4, (np - n0) / kLanes)) {
        case 1:
          small_gemm_columns<V, kRows, 1>(p, i, b_rows, b_stride, n0);
          break;
        case 2:
          small_gemm_columns<V, kRows, 2>(p, i, b_rows, b_stride, n0);
          break;
        case 3:
          small_gemm_columns<V, kRows, 3>(p, i, b_rows, b_stride, n0);
          break;
        default:
          small_gemm_columns<V, kRows, 4>(p, i, b_rows, b_stride, n0);
      }
    }
  }
}

void small_gemm_baseline(const Problem& p) { small_gemm_body<SmallVec4, 2>(p); }

#if defined(__x86_64__)
__attribute__((target("avx512f,avx2,fma"))) void small_gemm_avx512(const Problem& p) {
  small_gemm_body<SmallVec16, 4>(p);
}
__attribute__((target("avx2,fma"))) void small_gemm_avx2(const Problem& p) {
  small_gemm_body<SmallVec8, 2>(p);
}
#endif

// The widest copy the small kernel may use (tests lower it to run every copy).
std::atomic<int> small_gemm_level_limit{2};

}  // namespace

// The widest copy of the small kernel this CPU runs: 2 AVX-512, 1 AVX2+FMA, 0 baseline.
int small_gemm_cpu_level() {
#if defined(__x86_64__)
  static const int level =
      cpu_has_avx512f() ? 2
                        : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0);
  return level;
#else
  return 0;
#endif
}

// float32 p (k > 0) on the small kernel, in the widest copy allowed.
void small_gemm(const Problem& p) {
  const int level =
      std::min(small_gemm_cpu_level(), small_gemm_level_limit.load(std::memory_order_relaxed));
#if defined(__x86_64__)
  if (level == 2) return small_gemm_avx512(p);
  if (level == 1) return small_gemm_avx2(p);
#endif
  small_gemm_baseline(p);
}

}  // namespace linalg_detail

namespace detail {

int small_gemm_levels() { return linalg_detail::small_gemm_cpu_level() + 1; }

int set_small_gemm_level(int level) {
  HG_CHECK(level >= 0 && level <= 2,
           "set_small_gemm_level: expected a level from 0 to 2 (this CPU runs 0 to {}), got {}",
           linalg_detail::small_gemm_cpu_level(), level);
  return linalg_detail::small_gemm_level_limit.exchange(level);
}

}  // namespace detail

}  // namespace hg::cpu
