// The CPU GEMMs, kernel/linalg.h's table: the entry points, their argument checks and the path
// each dtype takes. The paths live beside it: cpu/eigen_gemm.cpp, cpu/small_gemm.cpp (NOTE
// [Small GEMM kernel]), cpu/onednn.cpp (NOTE [oneDNN matmul cache]) and cpu/reduced_gemm.cpp
// (NOTE [fp16 GEMM through fp32 tiles]); cpu/linalg_detail.h is what they share.
//
// Dims used throughout: B batch, M rows of a and out, K the reduced dim, N columns of b and
// out. a [B, M, K], b [B, K, N], out [B, M, N] (contiguous).
//
// NOTE [CPU GEMM paths]
//
// The public entry checks shapes, copies any operand whose matrices are neither row- nor
// column-major, and hands a Problem (raw pointers and element strides) to one path
// (cpu::GemmPath), which NOTE [GEMM path by measurement] in cpu/gemm_path.cpp picks per shape
// class (GemmImpl forces an implementation instead, for tests and benchmarks):
//
//   float64   Eigen, the one path.
//   float32   native: oneDNN's matmul primitive where halfgrad is built with oneDNN, else
//             Eigen. Measured with hg-bench-ops on a 2-core AMD EPYC VM (AVX-512 and
//             AVX512-BF16, no AMX), 2 OpenMP threads, median of 10 calls, GFLOP/s:
//               shape (MxKxN)     oneDNN brg:avx512_core   Eigen 3.4   Eigen, HALFGRAD_NATIVE
//               1024x1024x1024    219                      75          151
//               4096x768x3072     207                      75          157
//             Eigen sees only the baseline ISA (SSE2) unless the library is built with
//             HALFGRAD_NATIVE; oneDNN picks its kernel for the CPU at run time.
//             small: halfgrad's own kernel (NOTE [Small GEMM kernel] in cpu/small_gemm.cpp),
//             for products whose whole work is smaller than oneDNN's fixed cost per call.
//   bfloat16  native: oneDNN's matmul: bf16 inputs, f32 accumulation, bf16 output rounded once
//             (AMX on CPUs that have it, AVX512-BF16 otherwise), where oneDNN has more than
//             its reference kernel. tiles: blocks of a and b widened to float32 over the whole
//             K for the float32 kernel, rounded once at the output (cpu/reduced_gemm.cpp);
//             small: the same tiles on the small kernel.
//   float16   native where oneDNN has an f16 kernel (oneDNN 2.6, Debian 12's, has none on x86);
//             tiles and small as for bfloat16; split: each value as two bfloat16 on oneDNN's
//             bfloat16 kernel (NOTE [float16 as bfloat16 pairs] in cpu/reduced_gemm.cpp).
//
// oneDNN primitives are cached (NOTE [oneDNN matmul cache] in cpu/onednn.cpp); alpha and beta
// are oneDNN's output scale and sum post-op, so they cost no extra pass over out.
#include "halfgrad/cpu/linalg.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "halfgrad/config.h"
#include "halfgrad/core/cast.h"
#include "halfgrad/core/convert.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/parallel.h"
#include "halfgrad/core/storage.h"
#include "halfgrad/core/view.h"
#include "halfgrad/cpu/capabilities.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/linalg_detail.h"
#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/kernel/checks.h"
#include "halfgrad/kernel/formulas.h"
#include "halfgrad/kernel/linalg.h"

namespace hg::cpu {

namespace linalg_detail {

// The float32 implementation of the native path (see NOTE [CPU GEMM paths] for the measurement).
constexpr GemmImpl kFloat32Impl = HALFGRAD_HAS_ONEDNN ? GemmImpl::OneDNN : GemmImpl::Eigen;

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
  thread_local std::array<Buffer, kBufferSlots> buffers;
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

void float32_gemm(const Problem& p, GemmImpl impl) {
  if (impl == GemmImpl::Small) return small_gemm(p);
  if (impl == GemmImpl::OneDNN && onednn_gemm(p)) return;
  eigen_gemm<float>(p);
}

void fill_rows(const Problem& p, const char* bias) {
  const size_t row_bytes = size_t(p.n) * element_size(p.dtype);
  for (int64_t r = 0; r < p.batch * p.m; ++r) std::memcpy(p.out + r * row_bytes, bias, row_bytes);
}

void float32_gemm_bias(Problem p, GemmImpl impl) {
  if (impl == GemmImpl::Small) return small_gemm(p);
  if (impl == GemmImpl::OneDNN && onednn_gemm(p)) return;
  fill_rows(p, p.bias);
  p.bias = nullptr;
  p.beta = 1.0;
  float32_gemm(p, impl);
}

bool path_available(DType dtype, GemmPath path) {
  switch (path) {
    case GemmPath::Native:
      return dtype == kFloat64 || dtype == kFloat32 ||
             (dtype == kBFloat16 && onednn_runs_bf16()) ||
             (dtype == kFloat16 && onednn_runs_f16());
    case GemmPath::Tiles:
      return dtype == kBFloat16 || dtype == kFloat16;
    case GemmPath::Small:
      return dtype == kFloat32 || dtype == kBFloat16 || dtype == kFloat16;
    case GemmPath::Split:
      return dtype == kFloat16 && onednn_runs_bf16();
    default:
      return false;
  }
}

void run_path(const Problem& p, GemmPath path) {
  HG_CHECK(path_available(p.dtype, path), "gemm: the {} path cannot run {} on this CPU and build",
           gemm_path_name(path), p.dtype);
  const GemmImpl float32_impl = path == GemmPath::Small ? GemmImpl::Small : kFloat32Impl;
  switch (p.dtype) {
    case kFloat64:
      if (p.bias != nullptr) {  // the bias rows written first, then beta = 1 (NOTE [GEMM with bias])
        Problem summed = p;
        fill_rows(summed, p.bias);
        summed.bias = nullptr;
        summed.beta = 1.0;
        return eigen_gemm<double>(summed);
      }
      return eigen_gemm<double>(p);
    case kFloat32:
      if (p.bias != nullptr) return float32_gemm_bias(p, float32_impl);
      return float32_gemm(p, float32_impl);
    default:
      break;
  }
  // float16 and bfloat16: a oneDNN kernel of the dtype (the tiles where oneDNN refuses the
  // problem), bfloat16 pairs, or float32 tiles on the small kernel or the float32 one.
  if (path == GemmPath::Native && onednn_gemm(p)) return;
  if (path == GemmPath::Split && split_gemm_via_bfloat16(p)) return;
  reduced_gemm_via_float32(p, float32_impl);
}

}  // namespace linalg_detail

namespace {

using linalg_detail::eigen_gemm;
using linalg_detail::fill_rows;
using linalg_detail::kFloat32Impl;
using linalg_detail::float32_gemm;
using linalg_detail::float32_gemm_bias;
using linalg_detail::matrix_operand;
using linalg_detail::MatrixOperand;
using linalg_detail::onednn_gemm;
using linalg_detail::onednn_probe;
using linalg_detail::onednn_runs_bf16;
using linalg_detail::onednn_runs_f16;
using linalg_detail::Problem;
using linalg_detail::run_path;
using linalg_detail::reduced_gemm_via_float32;
using linalg_detail::small_gemm;

// The fixed rule the measured choice starts from (NOTE [GEMM path by measurement] in
// cpu/gemm_path.cpp): kTinyGemm (cpu/linalg_detail.h) multiply-adds in all, below which the small
// kernel is the default, was measured on a 2-core AMD EPYC: a oneDNN call costs about 1.6 us
// whatever its size (16^3 0.5 us Eigen, 1.6 us oneDNN; 32^3 2.2 vs 2.8 us; 48^3 5.3 vs 3.6 us,
// float32, 2 threads), and the small kernel is faster than Eigen on a small layer's products
// (hg-bench-ops --only tiny_gemm, AVX-512: 16 x 32 x 32 against a transposed weight 0.66 us,
// Eigen 1.18, oneDNN 2.35; into one output column, 16 x 32 x 1, 0.099 against Eigen's 0.107).

// ---- the entry --------------------------------------------------------------------------

// p on a forced implementation (gemm_with), or on the path chosen for it (GemmImpl::Auto).
void run(const Problem& p, GemmImpl impl) {
  if (impl == GemmImpl::Auto) return run_path(p, linalg_detail::path_for(p));
  switch (p.dtype) {
    case kFloat64:
      eigen_gemm<double>(p);
      return;
    case kFloat32:
      float32_gemm(p, impl);
      return;
    case kBFloat16:
      if (impl == GemmImpl::Eigen || impl == GemmImpl::Small) {
        return reduced_gemm_via_float32(p, impl);
      }
      if (onednn_runs_bf16() && onednn_gemm(p)) return;
      return reduced_gemm_via_float32(p, kFloat32Impl);
    case kFloat16:
      return reduced_gemm_via_float32(p, impl);
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

void gemm_into_float32(const Tensor& a, const Tensor& b, const Tensor& out, double beta) {
  HG_CHECK(a.defined() && b.defined() && out.defined(),
           "gemm_into_float32: expected defined tensors a, b and out, got an undefined one");
  HG_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3 && a.is_cpu() && b.is_cpu() && out.is_cpu(),
           "gemm_into_float32: expected 3-D CPU tensors a [B, M, K], b [B, K, N] and out [B, M, "
           "N], got shapes {}, {} and {}",
           a.sizes(), b.sizes(), out.sizes());
  HG_CHECK(a.dtype() == b.dtype() && (a.dtype() == kBFloat16 || a.dtype() == kFloat16) &&
               out.dtype() == kFloat32,
           "gemm_into_float32: expected a and b of one 16-bit dtype (float16 or bfloat16) and a "
           "float32 out, got a {}, b {} and out {}",
           a.dtype(), b.dtype(), out.dtype());
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  HG_CHECK(b.size(1) == k && a.size(1) == m && b.size(2) == n &&
               (a.size(0) == batch || a.size(0) == 1) && (b.size(0) == batch || b.size(0) == 1),
           "gemm_into_float32: a of shape {} times b of shape {} does not fit out of shape {}",
           a.sizes(), b.sizes(), out.sizes());
  HG_CHECK(out.is_contiguous() && !spans_overlap(out, a) && !spans_overlap(out, b),
           "gemm_into_float32: out (shape {}, strides {}) must be contiguous and apart from a "
           "and b",
           out.sizes(), out.strides());
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) return scale_out(out, beta);
  Tensor a_copy, b_copy;
  Problem p = problem_of(a, b, out, 1.0, beta, a_copy, b_copy);
  p.float32_out = true;
  run_path(p, linalg_detail::path_for(p));
}

void gemm_on(GemmPath path, const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
             double beta) {
  check_arguments(GemmImpl::Auto, a, b, out);
  HG_CHECK(path == GemmPath::Auto || linalg_detail::path_available(a.dtype(), path),
           "gemm_on: the {} path cannot run {} on this CPU and build", gemm_path_name(path),
           a.dtype());
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  if (batch == 0 || m == 0 || n == 0) return;
  if (k == 0) return scale_out(out, beta);
  Tensor a_copy, b_copy;
  const Problem p = problem_of(a, b, out, alpha, beta, a_copy, b_copy);
  if (path == GemmPath::Auto) return run(p, GemmImpl::Auto);
  run_path(p, path);
}

namespace {

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  gemm_with(GemmImpl::Auto, a, b, out, alpha, beta);
}

// Runs p (alpha 1, beta 0, K > 0) with the bias row added to every output row, on the path
// chosen for it (NOTE [GEMM with bias]).
void run_with_bias(Problem p, const char* bias) {
  p.bias = bias;
  run_path(p, linalg_detail::path_for(p));
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

// NOTE [GEMM with bias] linear's forward adds a bias row to every output row. Written into out
// first and added by the GEMM's beta = 1, it costs a pass that writes out and one that reads it
// back (12 ms of a 138 ms 512 x 4096 x 4096 bfloat16 addmm here, measured under load); oneDNN's
// matmul takes it as a bias argument instead, added to the float32 accumulator before the one
// rounding, which gives the same value as the beta = 1 form. Where oneDNN does not run the
// product (float64, float16 tiles, no oneDNN), the beta = 1 form runs; the small kernel (NOTE
// [Small GEMM kernel] in cpu/small_gemm.cpp) adds the bias at its one store, as oneDNN does.
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
  return elementwise_kernels.unary(kernel::Unary::GeluTanh, pre);
}

// NOTE [GELU backward with the bias sum] linear_gelu's backward multiplies the incoming
// gradient by the GELU's derivative at the saved pre-activation and sums the product's columns
// for the bias. As three kernels (the derivative, the product, the column sum) that read and
// wrote the [M, N] tensors five times, and rounded a 16-bit derivative before the product;
// here one pass over row blocks of kGeluRows rows: each run of up to kGeluChunk values of a
// row is widened to float32 (float32 and float64 are read in place), the derivative is the
// vector math pass of vector_math.h (the scalar formula of kernel/formulas.h where there is
// none, and for float64), the product is rounded once to the dtype (torch's gelu_backward
// computes in float32 and rounds once too), and the rounded values are added to the block's
// column sums (float32; float64 for float64). The blocks' sums are
// then added in block order and rounded once: the bits depend on M and N, never on the thread
// count. For the larger CPU GPT's fc layers (1024 x 1024 bfloat16) the three kernels took
// 0.47 + 0.17 + 0.09 ms on two threads of the Zen 4 EPYC (benchmarks/results/NOTES.md).
constexpr int64_t kGeluRows = 16;
constexpr int64_t kGeluChunk = 1024;

template <class T>
void gelu_backward_blocks(const T* g, const T* pre, T* out, float* block_sums, double* block_sums64,
                          int64_t M, int64_t N, bool tanh_approximation) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const VectorMap pass = std::is_same_v<C, float> ? vector_mapper() : nullptr;
  const VectorFn fn = tanh_approximation ? VectorFn::GeluTanhGrad : VectorFn::GeluGrad;
  const int64_t blocks = (M + kGeluRows - 1) / kGeluRows;
  parallel_for(blocks, M * N, [&](int64_t block) {
    C d[kGeluChunk], gv[kGeluChunk];
    C* sums = nullptr;
    if constexpr (std::is_same_v<C, double>) {
      sums = block_sums64 == nullptr ? nullptr : block_sums64 + block * N;
    } else {
      sums = block_sums == nullptr ? nullptr : block_sums + block * N;
    }
    if (sums != nullptr) std::fill_n(sums, N, C(0));
    const int64_t row_end = std::min(M, (block + 1) * kGeluRows);
    for (int64_t row = block * kGeluRows; row < row_end; ++row) {
      for (int64_t col = 0; col < N; col += kGeluChunk) {
        const int64_t n = std::min(kGeluChunk, N - col);
        const int64_t at = row * N + col;
        // float32 and float64 are read in place; 16-bit chunks are widened first.
        const C* x = nullptr;
        const C* grad = nullptr;
        if constexpr (std::is_same_v<T, C>) {
          x = pre + at, grad = g + at;
        } else {
          convert::to_float(pre + at, d, n);
          convert::to_float(g + at, gv, n);
          x = d, grad = gv;
        }
        // The product: in out itself for float32 and float64, in the chunk for 16-bit.
        C* y = d;
        if constexpr (std::is_same_v<T, C>) y = out + at;
        bool mapped = false;
        if constexpr (std::is_same_v<C, float>) {
          if (pass != nullptr) pass(fn, x, y, n), mapped = true;
        }
        if (!mapped) {
          for (int64_t i = 0; i < n; ++i) {
            y[i] = tanh_approximation ? kernel::gelu_tanh_grad(x[i]) : kernel::gelu_erf_grad(x[i]);
          }
        }
        for (int64_t i = 0; i < n; ++i) y[i] *= grad[i];
        if constexpr (!std::is_same_v<T, C>) {
          convert::from_float(d, out + at, n);
          if (sums != nullptr) convert::to_float(out + at, d, n);  // the rounded values
        }
        if (sums != nullptr) {
          for (int64_t i = 0; i < n; ++i) sums[col + i] += y[i];
        }
      }
    }
  });
}

Tensor gelu_backward(const Tensor& g, const Tensor& pre, bool tanh_approximation,
                     const Tensor& bias_grad) {
  kernel::check_gelu_backward("gelu_backward", g, pre, bias_grad, kCPU);
  const int64_t M = g.size(0), N = g.size(1);
  Tensor out = empty(g.sizes(), g.options());
  if (M == 0 || N == 0) {
    if (bias_grad.defined()) Tensor(bias_grad).zero_();
    return out;
  }
  const int64_t blocks = (M + kGeluRows - 1) / kGeluRows;
  const bool wide = g.dtype() == kFloat64;
  Tensor sums;
  if (bias_grad.defined()) sums = empty({blocks, N}, {.dtype = wide ? kFloat64 : kFloat32});
  visit_floating_dtype("gelu_backward", g.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_backward_blocks<T>(g.data_ptr<T>(), pre.data_ptr<T>(), out.data_ptr<T>(),
                            sums.defined() && !wide ? sums.data_ptr<float>() : nullptr,
                            sums.defined() && wide ? sums.data_ptr<double>() : nullptr, M, N,
                            tanh_approximation);
    if (!sums.defined()) return;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const C* partial = sums.data_ptr<C>();
    std::vector<C> total(partial, partial + N);
    for (int64_t block = 1; block < blocks; ++block) {
      for (int64_t col = 0; col < N; ++col) total[size_t(col)] += partial[block * N + col];
    }
    T* db = bias_grad.data_ptr<T>();
    if constexpr (std::is_same_v<T, C>) {
      std::copy(total.begin(), total.end(), db);
    } else {
      convert::from_float(total.data(), db, N);
    }
  });
  return out;
}

// NOTE [Scaled fp8 GEMM] scaled_mm multiplies float8 matrices as fp8 tensor cores do: each
// product of two float8 values is exact in float32 (at most 4 x 4 significant bits, exponents
// well inside float32's), the products are summed in float32 over the whole K, the sum is
// multiplied by scale_a * scale_b, the bias is added, and the result is rounded once to out's
// dtype. The CPU has no float8 arithmetic, so it emulates exactly that: a and b widen to
// float32 (exactly), the float32 GEMM sums (oneDNN's or Eigen's summation order, which is not
// the tensor cores': sums may differ in the last bits of float32, far below out's rounding),
// and one pass scales, adds the bias and rounds. On CUDA it is cuBLASLt's fp8 matmul with the
// scales read from device memory (cuda/linalg.cpp), so neither side syncs with the host.
// A contiguous float8 tensor as float32, through a table of the format's 256 values (exact).
template <class F8>
const std::array<float, 256>& float8_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values{};
    for (int bits = 0; bits < 256; ++bits) {
      values[size_t(bits)] = static_cast<float>(F8::from_bits(uint8_t(bits)));
    }
    return values;
  }();
  return table;
}

// A 2-D float8 tensor of any strides as a contiguous float32 one (a transposed operand is
// read in place: its widening is its transpose).
Tensor widen_float8(const Tensor& t) {
  const std::array<float, 256>& values = t.dtype() == kFloat8_e4m3fn
                                             ? float8_values<Float8_e4m3fn>()
                                             : float8_values<Float8_e5m2>();
  Tensor wide = empty(t.sizes(), {.dtype = kFloat32});
  const auto* bits = static_cast<const uint8_t*>(t.data_ptr());
  auto* dst = static_cast<float*>(wide.data_ptr());
  const int64_t rows = t.size(0), cols = t.size(1);
  const int64_t row_stride = t.stride(0), col_stride = t.stride(1);
  if (t.is_contiguous()) {
    const int64_t n = t.numel();
    parallel_for(n, n, [&](int64_t i) { dst[i] = values[bits[i]]; });
  } else {
    parallel_for(rows, rows * cols, [&](int64_t i) {
      const uint8_t* row = bits + i * row_stride;
      float* out = dst + i * cols;
      for (int64_t j = 0; j < cols; ++j) out[j] = values[row[j * col_stride]];
    });
  }
  return wide;
}

void scaled_gemm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 const Tensor& bias, const Tensor& out) {
  const auto [rows, cols, depth] =
      kernel::check_scaled_gemm("scaled_gemm", a, b, scale_a, scale_b, bias, out, kCPU);
  // Plain copies: clang 14 cannot capture structured bindings in the lambdas below.
  const int64_t m = rows, n = cols;
  if (m == 0 || n == 0) return;
  const Tensor sums = empty({m, n}, {.dtype = kFloat32});
  gemm_2d(widen_float8(a), false, widen_float8(b), true, sums, Tensor());
  const float scale = *static_cast<const float*>(scale_a.data_ptr()) *
                      *static_cast<const float*>(scale_b.data_ptr());
  const auto* sum = static_cast<const float*>(sums.data_ptr());
  visit_floating_dtype("scaled_gemm", out.dtype(), [&]<class T>(TypeTag<T>) {
    T* dst = static_cast<T*>(out.data_ptr());
    const T* bias_row = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
    parallel_for(m, m * n, [&](int64_t i) {
      for (int64_t j = 0; j < n; ++j) {
        float value = sum[i * n + j] * scale;
        if (bias_row != nullptr) value += static_cast<float>(bias_row[j]);
        dst[i * n + j] = static_cast<T>(value);
      }
    });
  });
}

// The largest |x| as float32 bits with the sign cleared: for magnitudes the bits order as the
// values do, and every NaN's are above inf's, so the maximum of the bits is the amax, NaN when
// any element is NaN (CUDA's kernel reduces the same bits with atomicMax).
uint32_t magnitude_bits(float value) { return std::bit_cast<uint32_t>(value) & 0x7FFFFFFFu; }

void quantize_fp8(const Tensor& x, const Tensor& scale, const Tensor& amax, const Tensor& out) {
  const int64_t n = kernel::check_quantize_fp8("quantize_fp8", x, scale, amax, out, kCPU);
  const float s = *static_cast<const float*>(scale.data_ptr());
  uint32_t largest = 0;
  visit_floating_dtype("quantize_fp8", x.dtype(), [&]<class In>(TypeTag<In>) {
    const auto* src = static_cast<const In*>(x.data_ptr());
    const auto cast = [&]<class F8>(F8* dst) {
      const auto body = [&](int64_t i, uint32_t& top) {
        const auto value = static_cast<float>(src[i]);
        top = std::max(top, magnitude_bits(value));
        dst[i] = F8(value * s, Overflow::Saturate);
      };
      if (n < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
        for (int64_t i = 0; i < n; ++i) body(i, largest);
        return;
      }
#pragma omp parallel for schedule(static) reduction(max : largest)
      for (int64_t i = 0; i < n; ++i) body(i, largest);
    };
    if (out.dtype() == kFloat8_e4m3fn) {
      cast(static_cast<Float8_e4m3fn*>(out.data_ptr()));
    } else {
      cast(static_cast<Float8_e5m2*>(out.data_ptr()));
    }
  });
  auto* current = static_cast<float*>(amax.data_ptr());
  *current = std::bit_cast<float>(std::max(magnitude_bits(*current), largest));
}

// What runs a dtype's GEMMs on path (gemm_backend's words).
std::string path_backend(DType dtype, GemmPath path) {
  const char* float32 = kFloat32Impl == GemmImpl::OneDNN ? "onednn" : "eigen";
  const std::string_view short_name = dtype == kFloat16 ? "fp16" : "bf16";
  switch (path) {
    case GemmPath::Native:
      return dtype == kFloat64 ? "eigen" : dtype == kFloat32 ? float32 : "onednn";
    case GemmPath::Tiles:
      return fmt::format("{}({} via fp32 tiles)", float32, short_name);
    case GemmPath::Small:
      return dtype == kFloat32 ? "small" : fmt::format("small({} via fp32 tiles)", short_name);
    case GemmPath::Split:
      return "onednn(fp16 as bf16 pairs)";
    default:
      return "auto";
  }
}

// The set path's backend, or under Auto the candidates measurement chooses among.
std::string gemm_backend(DType dtype) {
  HG_CHECK(is_floating_point(dtype) && !is_float8(dtype),
           "gemm_backend: expected a floating dtype, got {}", dtype);
  if (dtype == kFloat64) return "eigen";  // its one path
  const GemmPath set = get_gemm_path(dtype);
  if (set != GemmPath::Auto) return path_backend(dtype, set);
  std::vector<std::string> names;
  for (GemmPath path : gemm_paths(dtype)) names.push_back(path_backend(dtype, path));
  return fmt::format("measured: {}", fmt::join(names, " | "));
}

}  // namespace

std::string gemm_kernel_name(DType dtype) {
#if HALFGRAD_HAS_ONEDNN
  switch (dtype) {
    case kFloat32:
      return onednn_probe(kFloat32);
    case kBFloat16:
      return onednn_runs_bf16() ? onednn_probe(kBFloat16)
                                : onednn_probe(kFloat32) + " (fp32 tiles)";
    case kFloat16:
      return onednn_runs_f16() ? onednn_probe(kFloat16) : onednn_probe(kFloat32) + " (fp32 tiles)";
    default:
      break;
  }
#endif
  HG_CHECK(is_floating_point(dtype), "gemm_kernel_name: expected a floating dtype, got {}", dtype);
  return dtype == kFloat64 || dtype == kFloat32 ? "eigen" : "eigen (fp32 tiles)";
}

bool gemm_runs_natively(DType dtype) {
  switch (dtype) {
    case kFloat64:
    case kFloat32:
      return true;
    case kBFloat16:
      return onednn_runs_bf16();
    case kFloat16:
      return onednn_runs_f16();
    default:
      return false;
  }
}

bool is_bf16_supported() { return gemm_runs_natively(kBFloat16); }
bool is_fp16_supported() { return gemm_runs_natively(kFloat16); }

const kernel::LinalgKernels linalg_kernels = HG_LINALG_KERNELS;

}  // namespace hg::cpu
