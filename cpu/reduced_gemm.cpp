// The CPU GEMM of float16 (and bfloat16 where oneDNN does not run it) through float32 tiles
// (NOTE [fp16 GEMM through fp32 tiles]), and the test hook that shrinks the tiles.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "halfgrad/core/convert.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/half.h"
#include "halfgrad/core/parallel.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/linalg_detail.h"

namespace hg::cpu {

namespace linalg_detail {

namespace {

// The float32 tile budget, in elements per tile buffer (detail::set_reduced_gemm_tile_budget).
std::atomic<int64_t> reduced_tile_budget{int64_t(1) << 22};

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

// The rows x cols blocks starting at (row0, col0) of matrices [batch0, batch0 + batches) of a
// 16-bit operand (of matrix batch0 alone when the operand is broadcast), widened into dst as
// dense float32 blocks of the same orientation (rows stay rows of a row-major operand,
// columns stay columns of a column-major one), one after another.
MatrixOperand widen_block(DType dtype, const MatrixOperand& src, int64_t batch0, int64_t batches,
                          int64_t row0, int64_t rows, int64_t col0, int64_t cols, float* dst) {
  const bool row_major = src.row_major();
  const int64_t matrices = src.broadcast() ? 1 : batches;
  const int64_t lines = row_major ? rows : cols, length = row_major ? cols : rows;
  const int64_t line_bytes = (row_major ? src.row_stride : src.col_stride) * 2;
  for_each_line(matrices * lines, length, [&](int64_t line) {
    const int64_t matrix = line / lines, within = line % lines;
    const char* first = element(src, 2, batch0 + matrix, row0, col0);
    widen_run(dtype, first + within * line_bytes, dst + line * length, length);
  });
  return *matrix_operand(dst, src.broadcast() ? 0 : rows * cols, rows, cols, row_major ? cols : 1,
                         row_major ? 1 : rows);
}
}  // namespace

// NOTE [fp16 GEMM through fp32 tiles] For each batch, b is widened N-block by N-block
// (K x Nb) and a M-block by M-block (Mb x K), each block covering the whole K, so the float32
// GEMM accumulates every product of an output element in float32 and the result is rounded
// to 16 bits once. With beta != 0 the out block is widened too and the float32 GEMM applies
// alpha and beta. Blocks are at most `reduced_tile_budget` floats each (16 MiB by default):
// big enough that the conversions (one per element of a per N-block, of b per M-block, of
// out once) cost little against the 2K flops per output element, small enough to bound the
// memory. A block already widened is reused when the next one is the same (a broadcast
// operand, or a single block along M or N).
// A bias (linear's) is widened once and added in the tiles' float32 accumulators, by the
// float32 GEMM's bias argument: the value of writing it into out and computing with beta = 1,
// without the pass that writes it and the one that widens it back.
// When whole matrices fit in a block, a block holds as many matrices of the batch as the
// budget allows, and the float32 GEMM runs them in one batched call: attention's products are
// hundreds of matrices of a few hundred multiply-adds each, and one float32 call per matrix
// cost the demo's float16 step more than all its other work (its bmm was 45 % of the step).
void reduced_gemm_via_float32(const Problem& p, GemmImpl float32_impl) {
  const int64_t budget = std::max<int64_t>(reduced_tile_budget.load(), 1);
  const int64_t n_block = std::min(p.n, std::max<int64_t>(16, budget / p.k));
  const int64_t m_block = std::min(p.m, std::max<int64_t>(16, budget / std::max(p.k, n_block)));
  const bool whole_matrices = n_block == p.n && m_block == p.m;
  const int64_t batch_block =
      whole_matrices
          ? std::clamp<int64_t>(budget / std::max({p.m * p.k, p.k * p.n, p.m * p.n}), 1, p.batch)
          : 1;
  auto* const a_buffer = static_cast<float*>(
      thread_buffer(kATileSlot, size_t(batch_block * m_block * p.k) * sizeof(float)));
  auto* const b_buffer = static_cast<float*>(
      thread_buffer(kBTileSlot, size_t(batch_block * p.k * n_block) * sizeof(float)));
  auto* const out_buffer = static_cast<float*>(
      thread_buffer(kOutTileSlot, size_t(batch_block * m_block * n_block) * sizeof(float)));
  const MatrixOperand out_matrix{p.out, p.m * p.n, p.n, 1};
  // The bias in float32, once; the tiles' GEMM adds it to its accumulators.
  float* bias = nullptr;
  if (p.bias != nullptr) {
    bias = static_cast<float*>(thread_buffer(kBiasSlot, size_t(p.n) * sizeof(float)));
    widen_run(p.dtype, p.bias, bias, p.n);
  }

  std::array<int64_t, 2> a_held = {-1, -1}, b_held = {-1, -1};  // (first batch, first row/col)
  MatrixOperand a_block{}, b_block{};
  for (int64_t i0 = 0; i0 < p.batch; i0 += batch_block) {
    const int64_t bt = std::min(batch_block, p.batch - i0);
    for (int64_t n0 = 0; n0 < p.n; n0 += n_block) {
      const int64_t nt = std::min(n_block, p.n - n0);
      const std::array<int64_t, 2> b_wanted = {p.b.broadcast() ? 0 : i0, n0};
      if (b_held != b_wanted) {
        b_block = widen_block(p.dtype, p.b, b_wanted[0], bt, 0, p.k, n0, nt, b_buffer);
        b_held = b_wanted;
      }
      for (int64_t m0 = 0; m0 < p.m; m0 += m_block) {
        const int64_t mt = std::min(m_block, p.m - m0);
        const std::array<int64_t, 2> a_wanted = {p.a.broadcast() ? 0 : i0, m0};
        if (a_held != a_wanted) {
          a_block = widen_block(p.dtype, p.a, a_wanted[0], bt, m0, mt, 0, p.k, a_buffer);
          a_held = a_wanted;
        }
        // out_buffer holds the tile's out as dense [bt, mt, nt], widened first when beta reads it.
        if (p.beta != 0) widen_block(p.dtype, out_matrix, i0, bt, m0, mt, n0, nt, out_buffer);
        Problem tile{kFloat32, bt,      mt,      nt,
                     p.k,      a_block, b_block, reinterpret_cast<char*>(out_buffer),
                     p.alpha,  p.beta};
        if (bias != nullptr) {
          tile.bias = reinterpret_cast<const char*>(bias + n0);
          float32_gemm_bias(tile, float32_impl);
        } else {
          float32_gemm(tile, float32_impl);
        }
        // With several matrices in the block, mt == M and nt == N: their rows follow one
        // another in out as in out_buffer.
        for_each_line(bt * mt, nt, [&](int64_t r) {
          char* row = p.out + ((i0 * p.m + m0 + r) * p.n + n0) * 2;
          narrow_run(p.dtype, out_buffer + r * nt, row, nt);
        });
      }
    }
  }
}

}  // namespace linalg_detail

namespace detail {

int64_t set_reduced_gemm_tile_budget(int64_t elements) {
  HG_CHECK(elements > 0, "set_reduced_gemm_tile_budget: expected a positive budget, got {}",
           elements);
  return linalg_detail::reduced_tile_budget.exchange(elements);
}

}  // namespace detail

}  // namespace hg::cpu
