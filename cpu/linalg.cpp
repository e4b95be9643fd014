// The CPU GEMM: out[i] = alpha * (a[i] @ b[i]) + beta * out[i].
//
// Dims used throughout: B batch, M rows of a and out, K the reduced dim, N columns of b and
// out. a [B, M, K], b [B, K, N], out [B, M, N] (contiguous).
//
// NOTE [CPU GEMM paths]
//
// The public entry checks shapes, copies any operand whose matrices are neither row- nor
// column-major, and hands a Problem (raw pointers and element strides) to one path:
//
//   float64   Eigen.
//   float32   oneDNN's matmul primitive where halfgrad is built with oneDNN, else Eigen.
//             Measured with hg-bench-ops on a 2-core AMD EPYC VM (AVX-512 and AVX512-BF16,
//             no AMX), 2 OpenMP threads, median of 10 calls, GFLOP/s:
//               shape (MxKxN)     oneDNN brg:avx512_core   Eigen 3.4   Eigen, HALFGRAD_NATIVE
//               1024x1024x1024    219                      75          151
//               4096x768x3072     207                      75          157
//             Eigen sees only the baseline ISA (SSE2) unless the library is built with
//             HALFGRAD_NATIVE; oneDNN picks its kernel for the CPU at run time.
//   bfloat16  oneDNN's matmul: bf16 inputs, f32 accumulation, bf16 output rounded once (AMX
//             on CPUs that have it, AVX512-BF16 otherwise). Without oneDNN, or where oneDNN
//             has only its reference kernel, the float16 path below.
//   float16   no fp16 GEMM hardware path on x86 CPUs before AVX512-FP16: blocks ("tiles") of
//             a and b are widened to float32 (F16C), multiplied by the float32 path over the
//             whole K, and rounded once to float16 at the output.
//
// Problems under kTinyGemm multiply-adds run on halfgrad's small kernel (NOTE [Small GEMM
// kernel]; float64 on Eigen): oneDNN's fixed cost per call, and Eigen's packing, are larger
// than their whole work. oneDNN primitives are cached (NOTE [oneDNN matmul cache]); alpha and beta
// are oneDNN's output scale and sum post-op, so they cost no extra pass over out.
#include "halfgrad/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "halfgrad/config.h"
#include "halfgrad/core/cast.h"
#include "halfgrad/core/convert.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/kernel/checks.h"
#include "halfgrad/core/strided_loop.h"
#include "halfgrad/core/view.h"
#include "halfgrad/cpu/elementwise.h"

#if HALFGRAD_HAS_ONEDNN
#include <dnnl.hpp>
#endif

// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics once Eigen's packing
// code is inlined (a HALFGRAD_NATIVE build on an AVX-512 machine); the values are written
// before they are read. Only Eigen's code is compiled with the warning off.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>

namespace hg::cpu {

namespace {

// The float32 implementation gemm uses (see NOTE [CPU GEMM paths] for the measurement).
constexpr GemmImpl kFloat32Impl = HALFGRAD_HAS_ONEDNN ? GemmImpl::OneDNN : GemmImpl::Eigen;

// Below this many multiply-adds in all, gemm's own choice (GemmImpl::Auto) is the small kernel
// (float64: Eigen): a oneDNN call costs about 1.6 us here whatever its size (measured: 16^3
// 0.5 us Eigen, 1.6 us oneDNN; 32^3 2.2 vs 2.8 us; 48^3 5.3 vs 3.6 us, float32, 2 threads), and
// the small kernel is faster than Eigen on a small layer's products (hg-bench-ops --only
// tiny_gemm, AVX-512, in a noisy period: 16 x 32 x 32 against a transposed weight 0.66 us,
// Eigen 1.18, oneDNN 2.35; into one output column, 16 x 32 x 1, 0.099 against Eigen's 0.107).
constexpr int64_t kTinyGemm = int64_t(1) << 15;

// Below this many multiply-adds per matrix, Eigen runs the batch's matrices on separate
// threads instead of splitting each matrix across threads.
constexpr int64_t kSmallEigenGemm = int64_t(1) << 21;

std::atomic<int64_t> reduced_tile_budget{int64_t(1) << 22};

// ---- the problem as the kernels see it --------------------------------------------------

// B matrices of rows x cols elements, each row-major (col_stride == 1) or column-major
// (row_stride == 1, col_stride >= 2); batch_stride is 0 when one matrix serves every batch.
struct MatrixOperand {
  const char* data;  // element [0, 0, 0]
  int64_t batch_stride;
  int64_t row_stride;
  int64_t col_stride;  // all in elements

  bool row_major() const { return col_stride == 1; }
  bool broadcast() const { return batch_stride == 0; }
};

struct Problem {
  DType dtype;
  int64_t batch, m, n, k;
  MatrixOperand a;  // M x K
  MatrixOperand b;  // K x N
  char* out;        // contiguous [B, M, N]
  double alpha, beta;
  const char* bias = nullptr;  // contiguous [N] added to every row (oneDNN path only), or null
};

// The operand for a rows x cols matrix with the given strides, or nullopt when its layout is
// neither row- nor column-major (a BLAS-style kernel cannot read it). Size-1 dims carry no
// layout information: they get the strides of a dense layout, so equal layouts compare equal
// (the oneDNN cache keys on them).
std::optional<MatrixOperand> matrix_operand(const void* data, int64_t batch_stride, int64_t rows,
                                            int64_t cols, int64_t row_stride, int64_t col_stride) {
  MatrixOperand op{static_cast<const char*>(data), batch_stride, 0, 0};
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols)) {
    op.row_stride = rows == 1 ? cols : row_stride;
    op.col_stride = 1;
    return op;
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows)) {
    op.row_stride = 1;
    op.col_stride = cols == 1 ? rows : col_stride;
    return op;
  }
  return std::nullopt;
}

const char* element(const MatrixOperand& op, size_t element_size, int64_t batch, int64_t row,
                    int64_t col) {
  return op.data + (batch * op.batch_stride + row * op.row_stride + col * op.col_stride) *
                       int64_t(element_size);
}

// A per-thread buffer of at least `bytes`, 64-byte aligned, kept for the thread's next calls
// (fresh pages on every call would cost as much as the work done in them). Slot tells apart
// the buffers one call needs at once.
void* thread_buffer(int slot, size_t bytes) {
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  struct Buffer {
    std::unique_ptr<void, FreeDeleter> memory;
    size_t capacity = 0;
  };
  thread_local std::array<Buffer, 5> buffers;
  Buffer& buffer = buffers.at(size_t(slot));
  if (bytes > buffer.capacity) {
    buffer.memory.reset();
    buffer.capacity = (bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
    buffer.memory.reset(std::aligned_alloc(kCpuAlignment, buffer.capacity));
    HG_CHECK(buffer.memory != nullptr, "gemm: could not allocate a {}-byte work buffer",
             buffer.capacity);
  }
  return buffer.memory.get();
}

enum BufferSlot { kScratchpadSlot, kATileSlot, kBTileSlot, kOutTileSlot, kSmallPackSlot };

// Runs f(line) for lines [0, lines), on OpenMP threads when there is enough work.
template <class F>
void for_each_line(int64_t lines, int64_t length, F&& f) {
  if (lines > 1 && lines * length >= kParallelGrain && omp_get_max_threads() > 1 &&
      !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t line = 0; line < lines; ++line) f(line);
  } else {
    for (int64_t line = 0; line < lines; ++line) f(line);
  }
}

// ---- Eigen ------------------------------------------------------------------------------

template <class T>
using EigenRowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using EigenColMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
template <class Matrix>
using EigenInput = Eigen::Map<const Matrix, Eigen::Unaligned, Eigen::OuterStride<>>;

// Calls f with matrix `batch` of op as an Eigen map of its own storage order, so that
// Eigen's GEMM reads it in place.
template <class T, class F>
void with_eigen_matrix(const MatrixOperand& op, int64_t batch, int64_t rows, int64_t cols, F&& f) {
  const T* data = reinterpret_cast<const T*>(element(op, sizeof(T), batch, 0, 0));
  if (op.row_major()) {
    f(EigenInput<EigenRowMajor<T>>(data, rows, cols, Eigen::OuterStride<>(op.row_stride)));
  } else {
    f(EigenInput<EigenColMajor<T>>(data, rows, cols, Eigen::OuterStride<>(op.col_stride)));
  }
}

template <class T>
void eigen_gemm(const Problem& p) {
  const T alpha = T(p.alpha), beta = T(p.beta);
  const auto one_matrix = [&](int64_t i) {
    Eigen::Map<EigenRowMajor<T>> out(reinterpret_cast<T*>(p.out) + i * p.m * p.n, p.m, p.n);
    with_eigen_matrix<T>(p.a, i, p.m, p.k, [&](const auto& a) {
      with_eigen_matrix<T>(p.b, i, p.k, p.n, [&](const auto& b) {
        if (p.beta == 0) {
          out.noalias() = alpha * a * b;  // assigns: NaN in the old out does not survive
        } else {
          if (p.beta != 1) out *= beta;
          out.noalias() += alpha * a * b;
        }
      });
    });
  };
  // Eigen splits one GEMM across OpenMP threads (omp_get_max_threads) and runs serially
  // inside a parallel region, so small matrices of a batch go one per thread instead.
  if (p.batch > 1 && p.m * p.n * p.k <= kSmallEigenGemm && omp_get_max_threads() > 1 &&
      !omp_in_parallel()) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.batch; ++i) one_matrix(i);
  } else {
    for (int64_t i = 0; i < p.batch; ++i) one_matrix(i);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// ---- the small kernel -------------------------------------------------------------------

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

// The widest copy the small kernel may use (tests lower it to run every copy).
std::atomic<int> small_gemm_level_limit{2};

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

// ---- oneDNN -----------------------------------------------------------------------------

#if HALFGRAD_HAS_ONEDNN

// NOTE [oneDNN matmul cache] Creating a matmul primitive costs far more than running a small
// one, so primitives are kept in a process-wide map keyed by everything that shapes them:
// dtype, B, M, N, K, each operand's batch size and strides, alpha, beta, and the OpenMP
// thread count (a primitive splits its work for the threads it was made for, so a call after
// omp_set_num_threads gets its own). The map is behind a mutex; the engine is created once,
// each thread has its own stream, and the scratchpad is the caller's (scratchpad_mode::user,
// a per-thread thread_buffer): with oneDNN's own scratchpad a primitive must run on the
// thread that created it, which a shared cache cannot promise. A layout for which oneDNN
// offers only its reference kernel ("ref:any") is cached as unusable; gemm then copies the
// operands to dense row-major and asks again.

// A tensor viewing an operand's matrices (one matrix when it is broadcast).
Tensor operand_view(const MatrixOperand& op, DType dtype, int64_t batch, int64_t rows,
                    int64_t cols) {
  const int64_t matrices = op.broadcast() ? 1 : batch;
  const int64_t batch_stride = op.broadcast() ? rows * cols : op.batch_stride;
  return from_blob(const_cast<char*>(op.data), {matrices, rows, cols}, dtype,
                   Shape{batch_stride, op.row_stride, op.col_stride});
}

// The operand as a dense row-major copy, which `keep` owns.
MatrixOperand densify(const MatrixOperand& op, DType dtype, int64_t batch, int64_t rows,
                      int64_t cols, Tensor& keep) {
  keep = operand_view(op, dtype, batch, rows, cols).clone();
  return *matrix_operand(keep.data_ptr(), op.broadcast() ? 0 : rows * cols, rows, cols, cols, 1);
}

struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a_desc, b_desc, bias_desc, out_desc, scratchpad_desc;
  std::string implementation;  // oneDNN's name for the kernel, e.g. "brg:avx512_core_amx"
  bool usable = false;
};

using MatmulKey = std::array<int64_t, 15>;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

dnnl::memory::data_type onednn_type(DType dtype) {
  switch (dtype) {
    case kFloat32:
      return dnnl::memory::data_type::f32;
    case kBFloat16:
      return dnnl::memory::data_type::bf16;
    case kFloat16:
      return dnnl::memory::data_type::f16;
    default:
      HG_ERROR("gemm: oneDNN has no matmul for {}", dtype);
  }
}

// oneDNN's view of op: [matrices, rows, cols] with op's strides.
dnnl::memory::desc onednn_desc(const MatrixOperand& op, DType dtype, int64_t batch, int64_t rows,
                               int64_t cols) {
  const int64_t matrices = op.broadcast() ? 1 : batch;
  const int64_t batch_stride = op.broadcast()
                                   ? (op.row_major() ? rows * op.row_stride : cols * op.col_stride)
                                   : op.batch_stride;
  return dnnl::memory::desc({matrices, rows, cols}, onednn_type(dtype),
                            {batch_stride, op.row_stride, op.col_stride});
}

// The primitive for p with p.batch matrices (1 when both operands are broadcast: gemm then
// runs it once per batch).
std::shared_ptr<const CachedMatmul> create_matmul(const Problem& p, int64_t batch) {
  auto made = std::make_shared<CachedMatmul>();
  made->a_desc = onednn_desc(p.a, p.dtype, batch, p.m, p.k);
  made->b_desc = onednn_desc(p.b, p.dtype, batch, p.k, p.n);
  made->out_desc = dnnl::memory::desc({batch, p.m, p.n}, onednn_type(p.dtype), {p.m * p.n, p.n, 1});
  if (p.bias != nullptr) {
    made->bias_desc = dnnl::memory::desc({1, 1, p.n}, onednn_type(p.dtype), {p.n, p.n, 1});
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // float32 stays float32 even when ONEDNN_DEFAULT_FPMATH_MODE allows down-conversion.
  attr.set_fpmath_mode(dnnl::fpmath_mode::strict);
  if (p.alpha != 1) attr.set_output_scales(0, {float(p.alpha)});
  if (p.beta != 0) {
    dnnl::post_ops ops;
    ops.append_sum(float(p.beta));
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::desc desc =
        p.bias != nullptr
            ? dnnl::matmul::desc(made->a_desc, made->b_desc, made->bias_desc, made->out_desc)
            : dnnl::matmul::desc(made->a_desc, made->b_desc, made->out_desc);
    const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    made->implementation = pd.impl_info_str();
    made->usable = !made->implementation.starts_with("ref");
    if (made->usable) {
      made->primitive = dnnl::matmul(pd);
      made->scratchpad_desc = pd.scratchpad_desc();
    }
  } catch (const dnnl::error& e) {  // no implementation for this dtype or layout
    made->implementation = e.what();
    made->usable = false;
  }
  return made;
}

class MatmulCache {
 public:
  std::shared_ptr<const CachedMatmul> get(const Problem& p, int64_t batch) {
    const MatmulKey key = {int64_t(p.dtype),
                           batch,
                           p.m,
                           p.n,
                           p.k,
                           p.a.batch_stride,
                           p.a.row_stride,
                           p.a.col_stride,
                           p.b.batch_stride,
                           p.b.row_stride,
                           p.b.col_stride,
                           std::bit_cast<int64_t>(p.alpha),
                           std::bit_cast<int64_t>(p.beta),
                           omp_get_max_threads(),
                           p.bias != nullptr};
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = entries_.find(key);
    if (found != entries_.end()) return found->second;
    // A program that cycles through endless shapes must not grow the cache without bound.
    if (entries_.size() >= kMaxEntries) entries_.clear();
    auto made = create_matmul(p, batch);
    entries_.emplace(key, made);
    return made;
  }

  int64_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return int64_t(entries_.size());
  }

 private:
  static constexpr size_t kMaxEntries = 4096;
  std::mutex mutex_;
  std::map<MatmulKey, std::shared_ptr<const CachedMatmul>> entries_;
};

MatmulCache& matmul_cache() {
  static MatmulCache cache;
  return cache;
}

// Runs p on oneDNN with p's layouts; false when oneDNN has no usable kernel for them.
bool onednn_gemm_as_is(const Problem& p) {
  const bool both_broadcast = p.a.broadcast() && p.b.broadcast();
  const std::shared_ptr<const CachedMatmul> matmul =
      matmul_cache().get(p, both_broadcast ? 1 : p.batch);
  if (!matmul->usable) return false;
  const dnnl::engine& engine = cpu_engine();
  const size_t out_matrix_bytes = size_t(p.m * p.n) * element_size(p.dtype);
  const int64_t launches = both_broadcast ? p.batch : 1;
  try {
    std::unordered_map<int, dnnl::memory> args;
    args.emplace(DNNL_ARG_SRC, dnnl::memory(matmul->a_desc, engine, const_cast<char*>(p.a.data)));
    args.emplace(DNNL_ARG_WEIGHTS,
                 dnnl::memory(matmul->b_desc, engine, const_cast<char*>(p.b.data)));
    args.emplace(DNNL_ARG_DST, dnnl::memory(matmul->out_desc, engine, p.out));
    if (p.bias != nullptr) {
      args.emplace(DNNL_ARG_BIAS,
                   dnnl::memory(matmul->bias_desc, engine, const_cast<char*>(p.bias)));
    }
    const size_t scratchpad_bytes = matmul->scratchpad_desc.get_size();
    if (scratchpad_bytes > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD,
                   dnnl::memory(matmul->scratchpad_desc, engine,
                                thread_buffer(kScratchpadSlot, scratchpad_bytes)));
    }
    dnnl::stream& stream = thread_stream();
    for (int64_t i = 0; i < launches; ++i) {
      if (i > 0) args.at(DNNL_ARG_DST).set_data_handle(p.out + i * out_matrix_bytes);
      matmul->primitive.execute(stream, args);
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    HG_ERROR("gemm: oneDNN's matmul ({}) failed on {} [{}, {}, {}] x [{}, {}, {}]: {}",
             matmul->implementation, p.dtype, p.batch, p.m, p.k, p.batch, p.k, p.n, e.what());
  }
  return true;
}

// Runs p on oneDNN, copying the operands to dense row-major when oneDNN has no usable kernel
// for their layouts; false when it has none for the dense layout either.
bool onednn_gemm(const Problem& p) {
  if (onednn_gemm_as_is(p)) return true;
  const bool dense_already =
      p.a.row_major() && p.a.row_stride == p.k && p.b.row_major() && p.b.row_stride == p.n;
  if (dense_already) return false;
  Tensor a_copy, b_copy;
  Problem dense = p;
  dense.a = densify(p.a, p.dtype, p.batch, p.m, p.k, a_copy);
  dense.b = densify(p.b, p.dtype, p.batch, p.k, p.n, b_copy);
  return onednn_gemm_as_is(dense);
}

// The implementation oneDNN picks for a row-major 1024^3 GEMM of dtype.
std::string onednn_probe(DType dtype) {
  const int64_t size = 1024;
  const MatrixOperand dense{nullptr, size * size, size, 1};
  const Problem p{dtype, 1, size, size, size, dense, dense, nullptr, 1.0, 0.0};
  const std::shared_ptr<const CachedMatmul> matmul = matmul_cache().get(p, 1);
  return matmul->usable ? matmul->implementation : "none";
}

bool onednn_runs_bf16() {
  static const bool runs = onednn_probe(kBFloat16) != "none";
  return runs;
}

#else

bool onednn_gemm(const Problem&) { return false; }
bool onednn_runs_bf16() { return false; }

#endif  // HALFGRAD_HAS_ONEDNN

void float32_gemm(const Problem& p, GemmImpl impl) {
  if (impl == GemmImpl::Small) return small_gemm(p);
  if (impl == GemmImpl::OneDNN && onednn_gemm(p)) return;
  eigen_gemm<float>(p);
}

// ---- float16 (and bfloat16 without oneDNN) through float32 tiles -------------------------

// n contiguous float16/bfloat16 values to float, on the CPU's best vector path
// (core/convert).
void widen_run(DType dtype, const char* src, float* dst, int64_t n) {
  if (dtype == kFloat16) {
    convert::half_to_float(reinterpret_cast<const Half*>(src), dst, n);
  } else {
    convert::bfloat16_to_float(reinterpret_cast<const BFloat16*>(src), dst, n);
  }
}

// n floats to contiguous float16/bfloat16, rounded to nearest even.
void narrow_run(DType dtype, const float* src, char* dst, int64_t n) {
  if (dtype == kFloat16) {
    convert::float_to_half(src, reinterpret_cast<Half*>(dst), n);
  } else {
    convert::float_to_bfloat16(src, reinterpret_cast<BFloat16*>(dst), n);
  }
}

// The rows x cols block of matrix `batch` of a 16-bit operand starting at (row0, col0),
// widened into dst as a dense float32 block of the same orientation (rows stay rows of a
// row-major operand, columns stay columns of a column-major one).
MatrixOperand widen_block(DType dtype, const MatrixOperand& src, int64_t batch, int64_t row0,
                          int64_t rows, int64_t col0, int64_t cols, float* dst) {
  const char* first = element(src, 2, batch, row0, col0);
  const bool row_major = src.row_major();
  const int64_t lines = row_major ? rows : cols, length = row_major ? cols : rows;
  const int64_t line_bytes = (row_major ? src.row_stride : src.col_stride) * 2;
  for_each_line(lines, length, [&](int64_t line) {
    widen_run(dtype, first + line * line_bytes, dst + line * length, length);
  });
  return *matrix_operand(dst, 0, rows, cols, row_major ? cols : 1, row_major ? 1 : rows);
}

// NOTE [fp16 GEMM through fp32 tiles] For each batch, b is widened N-block by N-block
// (K x Nb) and a M-block by M-block (Mb x K), each block covering the whole K, so the float32
// GEMM accumulates every product of an output element in float32 and the result is rounded
// to 16 bits once. With beta != 0 the out block is widened too and the float32 GEMM applies
// alpha and beta. Blocks are at most `reduced_tile_budget` floats each (16 MiB by default):
// big enough that the conversions (one per element of a per N-block, of b per M-block, of
// out once) cost little against the 2K flops per output element, small enough to bound the
// memory. A block already widened is reused when the next one is the same (a broadcast
// operand, or a single block along M or N).
void reduced_gemm_via_float32(const Problem& p, GemmImpl float32_impl) {
  const int64_t budget = std::max<int64_t>(reduced_tile_budget.load(), 1);
  const int64_t n_block = std::min(p.n, std::max<int64_t>(16, budget / p.k));
  const int64_t m_block = std::min(p.m, std::max<int64_t>(16, budget / std::max(p.k, n_block)));
  auto* const a_buffer =
      static_cast<float*>(thread_buffer(kATileSlot, size_t(m_block * p.k) * sizeof(float)));
  auto* const b_buffer =
      static_cast<float*>(thread_buffer(kBTileSlot, size_t(p.k * n_block) * sizeof(float)));
  auto* const out_buffer =
      static_cast<float*>(thread_buffer(kOutTileSlot, size_t(m_block * n_block) * sizeof(float)));
  const MatrixOperand out_matrix{p.out, p.m * p.n, p.n, 1};

  std::array<int64_t, 2> a_held = {-1, -1}, b_held = {-1, -1};  // (batch, first row/col)
  MatrixOperand a_block{}, b_block{};
  for (int64_t i = 0; i < p.batch; ++i) {
    for (int64_t n0 = 0; n0 < p.n; n0 += n_block) {
      const int64_t nt = std::min(n_block, p.n - n0);
      const std::array<int64_t, 2> b_wanted = {p.b.broadcast() ? 0 : i, n0};
      if (b_held != b_wanted) {
        b_block = widen_block(p.dtype, p.b, b_wanted[0], 0, p.k, n0, nt, b_buffer);
        b_held = b_wanted;
      }
      for (int64_t m0 = 0; m0 < p.m; m0 += m_block) {
        const int64_t mt = std::min(m_block, p.m - m0);
        const std::array<int64_t, 2> a_wanted = {p.a.broadcast() ? 0 : i, m0};
        if (a_held != a_wanted) {
          a_block = widen_block(p.dtype, p.a, a_wanted[0], m0, mt, 0, p.k, a_buffer);
          a_held = a_wanted;
        }
        MatrixOperand out_block = *matrix_operand(out_buffer, 0, mt, nt, nt, 1);
        if (p.beta != 0) {
          out_block = widen_block(p.dtype, out_matrix, i, m0, mt, n0, nt, out_buffer);
        }
        const Problem tile{kFloat32, 1,       mt,      nt,
                           p.k,      a_block, b_block, reinterpret_cast<char*>(out_buffer),
                           p.alpha,  p.beta};
        float32_gemm(tile, float32_impl);
        for_each_line(mt, nt, [&](int64_t r) {
          char* row = p.out + ((i * p.m + m0 + r) * p.n + n0) * 2;
          narrow_run(p.dtype, out_buffer + r * nt, row, nt);
        });
      }
    }
  }
}

// ---- the entry --------------------------------------------------------------------------

void run(const Problem& p, GemmImpl impl) {
  if (impl == GemmImpl::Auto && p.batch * p.m * p.n * p.k < kTinyGemm) {
    impl = p.dtype == kFloat64 ? GemmImpl::Eigen : GemmImpl::Small;
  }
  switch (p.dtype) {
    case kFloat64:
      eigen_gemm<double>(p);
      return;
    case kFloat32:
      float32_gemm(p, impl == GemmImpl::Auto ? kFloat32Impl : impl);
      return;
    case kBFloat16:
      if (impl == GemmImpl::Eigen || impl == GemmImpl::Small) {
        return reduced_gemm_via_float32(p, impl);
      }
      if (onednn_runs_bf16() && onednn_gemm(p)) return;
      return reduced_gemm_via_float32(p, kFloat32Impl);
    case kFloat16:
      return reduced_gemm_via_float32(p, impl == GemmImpl::Auto ? kFloat32Impl : impl);
    default:
      HG_ERROR("gemm: no kernel for {}", p.dtype);
  }
}

// out = beta * out, for K == 0 (beta == 0 writes zeros, whatever out held).
void scale_out(const Tensor& out, double beta) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_floating_v<T>) {
      T* data = static_cast<T*>(out.data_ptr());
      for (int64_t i = 0; i < out.numel(); ++i) {
        const double old = beta == 0 ? 0.0 : static_cast<double>(data[i]);
        data[i] = cast_value<T>(static_cast<compute_t<T>>(beta * old));
      }
    }
  });
}

using kernel::spans_overlap;

void check_arguments(GemmImpl impl, const Tensor& a, const Tensor& b, const Tensor& out) {
  HG_CHECK(a.defined() && b.defined() && out.defined(),
           "gemm: expected defined tensors a, b and out, got an undefined one");
  HG_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3,
           "gemm: expected 3-D tensors a [B, M, K], b [B, K, N] and out [B, M, N], got a of "
           "shape {}, b of shape {} and out of shape {}",
           a.sizes(), b.sizes(), out.sizes());
  HG_CHECK(a.is_cpu() && b.is_cpu() && out.is_cpu(),
           "gemm: expected CPU tensors, got a on {}, b on {} and out on {}", a.device(), b.device(),
           out.device());
  HG_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype() && a.is_floating_point(),
           "gemm: expected a, b and out of one floating dtype, got a {} {}, b {} {} and out "
           "{} {}",
           a.dtype(), a.sizes(), b.dtype(), b.sizes(), out.dtype(), out.sizes());
  HG_CHECK(a.size(2) == b.size(1),
           "gemm: a of shape {} and b of shape {} cannot be multiplied: a has K = {} columns, "
           "b has {} rows",
           a.sizes(), b.sizes(), a.size(2), b.size(1));
  const int64_t batch = out.size(0);
  HG_CHECK(out.size(1) == a.size(1) && out.size(2) == b.size(2) &&
               (a.size(0) == batch || a.size(0) == 1) && (b.size(0) == batch || b.size(0) == 1),
           "gemm: out of shape {} does not fit a of shape {} times b of shape {}: expected out "
           "[B, {}, {}] with a's and b's batch size B or 1",
           out.sizes(), a.sizes(), b.sizes(), a.size(1), b.size(2));
  HG_CHECK(out.is_contiguous(), "gemm: out (shape {}, strides {}) must be contiguous", out.sizes(),
           out.strides());
  HG_CHECK(!spans_overlap(out, a) && !spans_overlap(out, b),
           "gemm: out (shape {}) overlaps a (shape {}) or b (shape {}) in memory", out.sizes(),
           a.sizes(), b.sizes());
  HG_CHECK(!(impl == GemmImpl::OneDNN && a.dtype() == kFloat64),
           "gemm: oneDNN has no float64 matmul (use GemmImpl::Eigen or Auto)");
  HG_CHECK(!(impl == GemmImpl::Small && a.dtype() == kFloat64),
           "gemm: the small kernel has no float64 path (use GemmImpl::Eigen or Auto)");
  HG_CHECK(!(impl == GemmImpl::OneDNN && !HALFGRAD_HAS_ONEDNN),
           "gemm: GemmImpl::OneDNN asked for, but this halfgrad was built without oneDNN");
}

// The operand for t [B or 1, rows, cols]; copies t to contiguous (into `keep`) when its
// matrices are neither row- nor column-major.
MatrixOperand operand_of(const Tensor& t, Tensor& keep) {
  const bool broadcast = t.size(0) == 1 || t.stride(0) == 0;
  const int64_t rows = t.size(1), cols = t.size(2);
  if (auto op = matrix_operand(t.data_ptr(), broadcast ? 0 : t.stride(0), rows, cols, t.stride(1),
                               t.stride(2))) {
    return *op;
  }
  keep = (broadcast ? t.narrow(0, 0, 1) : t).contiguous();
  return *matrix_operand(keep.data_ptr(), broadcast ? 0 : rows * cols, rows, cols, cols, 1);
}

// The Problem for checked tensors a [B, M, K], b [B, K, N], out [B, M, N] (K > 0); the
// copies of operands that needed one are kept in a_copy and b_copy.
Problem problem_of(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta,
                   Tensor& a_copy, Tensor& b_copy) {
  return Problem{a.dtype(),
                 out.size(0),
                 out.size(1),
                 out.size(2),
                 a.size(2),
                 operand_of(a, a_copy),
                 operand_of(b, b_copy),
                 static_cast<char*>(out.data_ptr()),
                 alpha,
                 beta};
}

}  // namespace

void gemm_with(GemmImpl impl, const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
               double beta) {
  check_arguments(impl, a, b, out);
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) return scale_out(out, beta);
  Tensor a_copy, b_copy;
  run(problem_of(a, b, out, alpha, beta, a_copy, b_copy), impl);
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  gemm_with(GemmImpl::Auto, a, b, out, alpha, beta);
}

namespace {

// out's rows, every one set to the bias row (all of p.dtype).
void fill_rows(const Problem& p, const char* bias) {
  const size_t row_bytes = size_t(p.n) * element_size(p.dtype);
  for (int64_t r = 0; r < p.batch * p.m; ++r) std::memcpy(p.out + r * row_bytes, bias, row_bytes);
}

// Runs p (alpha 1, beta 0, K > 0) with the bias row added to every output row.
void run_with_bias(Problem p, const char* bias) {
  const int64_t macs = p.batch * p.m * p.n * p.k;
  const bool small_runs = macs < kTinyGemm && p.dtype == kFloat32;
  const bool onednn_runs =
      macs >= kTinyGemm && ((p.dtype == kFloat32 && kFloat32Impl == GemmImpl::OneDNN) ||
                            (p.dtype == kBFloat16 && onednn_runs_bf16()));
  if (small_runs || onednn_runs) {
    p.bias = bias;
    if (small_runs) return small_gemm(p);
    if (onednn_gemm(p)) return;
    p.bias = nullptr;
  }
  fill_rows(p, bias);
  p.beta = 1.0;
  run(p, GemmImpl::Auto);
}

void check_bias(const char* fn, const Tensor& bias, int64_t n, DType dtype) {
  HG_CHECK(bias.dim() == 1 && bias.size(0) == n && bias.dtype() == dtype && bias.is_cpu() &&
               bias.is_contiguous(),
           "{}: expected a contiguous CPU bias of shape [{}] and dtype {}, got {} {}", fn, n, dtype,
           bias.dtype(), bias.sizes());
}

// The operand for op(t), t 2-D (op: transpose or not); copies t to contiguous (into `keep`)
// when its layout is neither row- nor column-major.
MatrixOperand operand_2d(const Tensor& t, bool transpose, Tensor& keep) {
  const int64_t rows = t.size(transpose ? 1 : 0), cols = t.size(transpose ? 0 : 1);
  const int64_t row_stride = t.stride(transpose ? 1 : 0), col_stride = t.stride(transpose ? 0 : 1);
  if (auto op = matrix_operand(t.data_ptr(), 0, rows, cols, row_stride, col_stride)) return *op;
  keep = (transpose ? core::transpose(t, 0, 1) : t).contiguous();
  return *matrix_operand(keep.data_ptr(), 0, rows, cols, cols, 1);
}

}  // namespace

// NOTE [GEMM with bias] linear's forward adds a bias row to every output row. Written into out
// first and added by the GEMM's beta = 1, it costs a pass that writes out and one that reads it
// back (12 ms of a 138 ms 512 x 4096 x 4096 bfloat16 addmm here, measured under load); oneDNN's
// matmul takes it as a bias argument instead, added to the float32 accumulator before the one
// rounding, which gives the same value as the beta = 1 form. Where oneDNN does not run the
// product (float64, float16 tiles, no oneDNN), the beta = 1 form runs; the small kernel (NOTE
// [Small GEMM kernel]) adds the bias at its one store, as oneDNN does.
void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  check_arguments(GemmImpl::Auto, a, b, out);
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  HG_CHECK(bias.defined(), "gemm_bias: expected a bias of shape [{}], got an undefined tensor", n);
  check_bias("gemm_bias", bias, n, out.dtype());
  if (batch == 0 || m == 0 || n == 0) return;
  Tensor a_copy, b_copy;
  const Problem p = problem_of(a, b, out, 1.0, 0.0, a_copy, b_copy);
  const auto* bias_data = static_cast<const char*>(bias.data_ptr());
  if (k == 0) return fill_rows(p, bias_data);
  run_with_bias(p, bias_data);
}

void gemm_2d(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
             const Tensor& out, const Tensor& bias) {
  HG_CHECK(a.defined() && b.defined() && out.defined(),
           "gemm_2d: expected defined tensors a, b and out, got an undefined one");
  HG_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2,
           "gemm_2d: expected 2-D tensors a, b and out, got shapes {}, {} and {}", a.sizes(),
           b.sizes(), out.sizes());
  HG_CHECK(a.is_cpu() && b.is_cpu() && out.is_cpu(),
           "gemm_2d: expected CPU tensors, got a on {}, b on {} and out on {}", a.device(),
           b.device(), out.device());
  HG_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype() && a.is_floating_point(),
           "gemm_2d: expected a, b and out of one floating dtype, got {}, {} and {}", a.dtype(),
           b.dtype(), out.dtype());
  const int64_t m = a.size(transpose_a ? 1 : 0), k = a.size(transpose_a ? 0 : 1);
  const int64_t n = b.size(transpose_b ? 0 : 1);
  HG_CHECK(b.size(transpose_b ? 1 : 0) == k && out.size(0) == m && out.size(1) == n,
           "gemm_2d: a of shape {}{} times b of shape {}{} does not fit out of shape {}", a.sizes(),
           transpose_a ? " (transposed)" : "", b.sizes(), transpose_b ? " (transposed)" : "",
           out.sizes());
  HG_CHECK(out.is_contiguous(), "gemm_2d: out (shape {}, strides {}) must be contiguous",
           out.sizes(), out.strides());
  HG_CHECK(!spans_overlap(out, a) && !spans_overlap(out, b),
           "gemm_2d: out (shape {}) overlaps a (shape {}) or b (shape {}) in memory", out.sizes(),
           a.sizes(), b.sizes());
  if (bias.defined()) check_bias("gemm_2d", bias, n, out.dtype());
  if (m == 0 || n == 0) return;
  Tensor a_copy, b_copy;
  const Problem p{a.dtype(),
                  1,
                  m,
                  n,
                  k,
                  k == 0 ? MatrixOperand{} : operand_2d(a, transpose_a, a_copy),
                  k == 0 ? MatrixOperand{} : operand_2d(b, transpose_b, b_copy),
                  static_cast<char*>(out.data_ptr()),
                  1.0,
                  0.0};
  const auto* bias_data = bias.defined() ? static_cast<const char*>(bias.data_ptr()) : nullptr;
  if (k == 0) {
    if (bias_data != nullptr) return fill_rows(p, bias_data);
    return scale_out(out, 0.0);
  }
  if (bias_data != nullptr) return run_with_bias(p, bias_data);
  run(p, GemmImpl::Auto);
}

Tensor gemm_2d_gelu(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                    const Tensor& bias, const Tensor& pre) {
  gemm_2d(a, transpose_a, b, transpose_b, pre, bias);
  return unary(kernel::Unary::GeluTanh, pre);
}

std::string gemm_backend(DType dtype) {
  const char* float32 = kFloat32Impl == GemmImpl::OneDNN ? "onednn" : "eigen";
  switch (dtype) {
    case kFloat64:
      return "eigen";
    case kFloat32:
      return float32;
    case kBFloat16:
      return onednn_runs_bf16() ? "onednn" : fmt::format("{}(bf16 via fp32 tiles)", float32);
    case kFloat16:
      return fmt::format("{}(fp16 via fp32 tiles)", float32);
    default:
      HG_ERROR("gemm_backend: expected a floating dtype, got {}", dtype);
  }
}

std::string gemm_kernel_name(DType dtype) {
#if HALFGRAD_HAS_ONEDNN
  switch (dtype) {
    case kFloat32:
      return onednn_probe(kFloat32);
    case kBFloat16:
      return onednn_runs_bf16() ? onednn_probe(kBFloat16)
                                : onednn_probe(kFloat32) + " (fp32 tiles)";
    case kFloat16:
      return onednn_probe(kFloat32) + " (fp32 tiles)";
    default:
      break;
  }
#endif
  HG_CHECK(is_floating_point(dtype), "gemm_kernel_name: expected a floating dtype, got {}", dtype);
  return dtype == kFloat64 || dtype == kFloat32 ? "eigen" : "eigen (fp32 tiles)";
}

namespace detail {

int64_t set_reduced_gemm_tile_budget(int64_t elements) {
  HG_CHECK(elements > 0, "set_reduced_gemm_tile_budget: expected a positive budget, got {}",
           elements);
  return reduced_tile_budget.exchange(elements);
}

int small_gemm_levels() { return small_gemm_cpu_level() + 1; }

int set_small_gemm_level(int level) {
  HG_CHECK(level >= 0 && level <= 2,
           "set_small_gemm_level: expected a level from 0 to 2 (this CPU runs 0 to {}), got {}",
           small_gemm_cpu_level(), level);
  return small_gemm_level_limit.exchange(level);
}

int64_t onednn_matmul_cache_size() {
#if HALFGRAD_HAS_ONEDNN
  return matmul_cache().size();
#else
  return 0;
#endif
}

}  // namespace detail

}  // namespace hg::cpu
