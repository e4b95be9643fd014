// The CPU GEMM of float16 and bfloat16 through float32 tiles (NOTE [fp16 GEMM through fp32
// tiles]), of float16 through bfloat16 pairs (NOTE [float16 as bfloat16 pairs]), and the test
// hook that shrinks the tiles.
#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <atomic>
#include <cstdint>
#include <exception>

#include "halfgrad/core/convert.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/core/x86_intrinsics.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
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

// f(start, count) over [0, total) in chunks, on OpenMP threads when there is enough work: the
// conversion of a run that whole lines make, one call per chunk rather than one per line (a
// call per line of a 48-wide matrix cost a fifth of a small float16 product's widening).
template <class F>
void convert_run_in_chunks(int64_t total, F&& f) {
  constexpr int64_t kChunk = int64_t(1) << 14;
  const int64_t chunks = (total + kChunk - 1) / kChunk;
  for_each_line(chunks, std::min(kChunk, total), [&](int64_t chunk) {
    const int64_t start = chunk * kChunk;
    f(start, std::min(kChunk, total - start));
  });
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
  const int64_t line_stride = row_major ? src.row_stride : src.col_stride;
  if (line_stride == length && (matrices == 1 || src.batch_stride == lines * length)) {
    // The lines follow one another in memory as in dst: one run, in chunks.
    convert_run_in_chunks(matrices * lines * length, [&](int64_t start, int64_t count) {
      widen_run(dtype, element(src, 2, batch0, row0, col0) + start * 2, dst + start, count);
    });
  } else {
    for_each_line(matrices * lines, length, [&](int64_t line) {
      const int64_t matrix = line / lines, within = line % lines;
      const char* first = element(src, 2, batch0 + matrix, row0, col0);
      widen_run(dtype, first + within * line_stride * 2, dst + line * length, length);
    });
  }
  return *matrix_operand(dst, src.broadcast() ? 0 : rows * cols, rows, cols, row_major ? cols : 1,
                         row_major ? 1 : rows);
}

// NOTE [float16 as bfloat16 pairs] A float16 value has 11 significant bits, a bfloat16 8 and a
// far wider exponent range, so every finite float16 x is exactly hi + lo with hi = bfloat16(x)
// (rounded to nearest) and lo = x - hi: exact in float32, with at most 3 significant bits left,
// so lo is a bfloat16 too (its float32 bits' low half is zero). A product of float16 values is
// then the sum of four products of bfloat16 values, each exact in float32:
//   a b = a_hi b_hi + a_lo b_hi + a_hi b_lo + a_lo b_lo.
// So a float16 GEMM runs as four bfloat16 GEMMs over K, summed into one float32 tile by
// oneDNN's bfloat16 kernel (AMX, or AVX512-BF16; the second to fourth add into the tile), which
// is rounded once to float16: float32 accumulation over the whole K, as the float32 tiles give,
// with the sums in another order. Each operand block is split once into its two parts, two
// dense blocks of the operand's orientation (hi's, then lo's), in one pass of vector lanes;
// the four products read the parts they need from there. Three things decide whether it
// pays, all measured on a Xeon with AMX by one-off probes of single products, not kept in the
// tree (one thread, 4096 x 256 x 256, float32 3.3 ms; the training steps' figures are
// benchmarks/results' hg-bench-train runs, NOTES.md "float16 on the bfloat16 pairs, again"):
//   - oneDNN 2.6 runs a bfloat16 product with float32 out on its AMX kernel only when both
//     operands are dense: with the parts side by side along K (a's rows 2K apart) it took its
//     older gemm:jit kernel, 1.0 ms a product against 0.6 (ONEDNN_VERBOSE names the kernel);
//   - the float32 out tile is read and written by each product: a 4096 x 256 tile (4 MiB) made
//     the four products memory-bound, so a pairs tile holds at most kPairsOutTile values, which
//     a core's L2 keeps (split 3.5 -> 2.6 ms);
//   - the split itself: a scalar loop was 3.5 of the 17 ms of a 1024^3 product; in lanes it is
//     a few per cent.
// With the three, the pairs take 0.8-0.9 of float32's time on 4096 x 256 x 256, 4096 x 256 x
// 1024 and 4096 x 1024 x 256, and lose where K is long against M (256 x 4096 x 256: 1.1) and
// on small products, whose four oneDNN calls cost more than the products (576 x 48 x 48: 28
// against float32's 17 us). The measurement (NOTE [GEMM path by measurement]) picks per class.
// (One GEMM over 4K with the parts four wide along K was tried again: one AMX call, but 3.6 ms
// on 4096 x 256 x 256, its split writing every value twice and its K four times as long.)

// The parts each of the four products reads: a's (hi, lo, hi, lo), b's (hi, hi, lo, lo).
constexpr std::array<int, 4> kPartsOfA = {0, 1, 0, 1};
constexpr std::array<int, 4> kPartsOfB = {0, 0, 1, 1};

// The hi and lo parts of n contiguous finite float16 values into hi[0, n) and lo[0, n): hi is
// the value rounded to nearest even as a bfloat16 and lo = x - hi, whose float32 bits are
// exact as a bfloat16. The AVX-512 copy takes 16 values a step (widened by vcvtph2ps, hi's
// rounding in integer lanes, as core/convert's); the rest, and CPUs without AVX-512, one at a
// time from float32 chunks.

#if defined(__x86_64__)
__attribute__((target("avx512f"))) int64_t split_values_avx512(const Half* src, int64_t n,
                                                               BFloat16* hi, BFloat16* lo) {
  const __m512i one = _mm512_set1_epi32(1), half_ulp = _mm512_set1_epi32(0x7FFF);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    const __m512i high =
        _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, half_ulp), odd), 16);
    const __m512 rest = _mm512_sub_ps(x, _mm512_castsi512_ps(_mm512_slli_epi32(high, 16)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i), _mm512_cvtepi32_epi16(high));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(rest), 16)));
  }
  return i;
}
#endif

void split_values(const Half* src, int64_t n, BFloat16* hi, BFloat16* lo, int64_t first) {
  constexpr int64_t kChunk = 256;
  float wide[kChunk];
  for (int64_t start = first; start < n; start += kChunk) {
    const int64_t count = std::min(kChunk, n - start);
    convert::half_to_float(src + start, wide, count);
    for (int64_t i = 0; i < count; ++i) {
      const uint32_t bits = std::bit_cast<uint32_t>(wide[i]);
      const uint32_t high = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
      const float rest = wide[i] - std::bit_cast<float>(high << 16);
      hi[start + i].bits = uint16_t(high);
      lo[start + i].bits = uint16_t(std::bit_cast<uint32_t>(rest) >> 16);
    }
  }
}

void split_run(const char* src, int64_t n, BFloat16* hi, BFloat16* lo) {
  const auto* half = reinterpret_cast<const Half*>(src);
  int64_t done = 0;
#if defined(__x86_64__)
  if (cpu_has_avx512f()) done = split_values_avx512(half, n, hi, lo);
#endif
  split_values(half, n, hi, lo, done);
}

// widen_block's counterpart for bfloat16 pairs: the block of a float16 operand as two dense
// bfloat16 blocks of its orientation, hi's at dst and lo's right after it (`part` elements
// on), each a dense operand of its own (NOTE [float16 as bfloat16 pairs] says why).
MatrixOperand split_block(const MatrixOperand& src, int64_t batch0, int64_t batches, int64_t row0,
                          int64_t rows, int64_t col0, int64_t cols, BFloat16* dst) {
  const bool row_major = src.row_major();
  const int64_t matrices = src.broadcast() ? 1 : batches;
  const int64_t lines = row_major ? rows : cols, length = row_major ? cols : rows;
  const int64_t line_stride = row_major ? src.row_stride : src.col_stride;
  const int64_t part = matrices * lines * length;
  if (line_stride == length && (matrices == 1 || src.batch_stride == lines * length)) {
    convert_run_in_chunks(part, [&](int64_t start, int64_t count) {
      split_run(element(src, 2, batch0, row0, col0) + start * 2, count, dst + start,
                dst + part + start);
    });
  } else {
    for_each_line(matrices * lines, length, [&](int64_t line) {
      const int64_t matrix = line / lines, within = line % lines;
      const char* first = element(src, 2, batch0 + matrix, row0, col0) + within * line_stride * 2;
      split_run(first, length, dst + line * length, dst + part + line * length);
    });
  }
  return *matrix_operand(dst, src.broadcast() ? 0 : rows * cols, rows, cols, row_major ? cols : 1,
                         row_major ? 1 : rows);
}

// Whether a float16 operand holds an infinity or a NaN (exponent bits all ones). An infinite
// x splits into hi = inf and lo = NaN or 0, and inf times a zero lo part of the other operand
// would make NaN where the product is infinite: such products take the float32 tiles.
bool has_nonfinite_half(const MatrixOperand& op, int64_t batch, int64_t rows, int64_t cols) {
  const bool row_major = op.row_major();
  const int64_t matrices = op.broadcast() ? 1 : batch;
  const int64_t lines = row_major ? rows : cols, length = row_major ? cols : rows;
  const int64_t line_stride = row_major ? op.row_stride : op.col_stride;
  const auto* bits = reinterpret_cast<const uint16_t*>(op.data);
  for (int64_t matrix = 0; matrix < matrices; ++matrix) {
    for (int64_t line = 0; line < lines; ++line) {
      const uint16_t* run = bits + matrix * op.batch_stride + line * line_stride;
      // The largest magnitude's bits, as int16 (they fit): a max the compiler runs in lanes.
      int16_t largest = 0;
      for (int64_t i = 0; i < length; ++i) {
        largest = std::max(largest, int16_t(run[i] & 0x7FFFu));
      }
      if (largest >= 0x7C00) return true;
    }
  }
  return false;
}

enum class TileKind { Float32, BFloat16Pairs };

// The most float32 values of a pairs tile's out: 512 KiB, which a core's L2 holds while the
// four products read and write it (NOTE [float16 as bfloat16 pairs]; a one-off probe on a Xeon
// with AMX, one thread, 4096 x 256 x 256 in tiles of 64K, 128K, 256K and 4M values: 2.7, 2.6,
// 3.2 and 3.5 ms).
constexpr int64_t kPairsOutTile = int64_t(1) << 17;
// The most columns of a pairs tile: with all 4096 of a wide product in one tile, its out tile
// held 32 rows, and each block of 32 rows read the whole of b's parts again (a one-off probe,
// two threads: 4096 x 512 x 4096 took 122 ms against float32's 54, 41 ms with the blocks).
constexpr int64_t kPairsMaxColumns = int64_t(1) << 9;

// out's block [batch0, +batches) x [row0, +rows) x [col0, +cols) as dense float32 [batches, rows,
// cols] in dst: widened from a 16-bit out, copied from a float32 one (p.float32_out).
void read_out_block(const Problem& p, int64_t batch0, int64_t batches, int64_t row0, int64_t rows,
                    int64_t col0, int64_t cols, float* dst) {
  const MatrixOperand out_matrix{p.out, p.m * p.n, p.n, 1};
  if (!p.float32_out) {
    widen_block(p.dtype, out_matrix, batch0, batches, row0, rows, col0, cols, dst);
    return;
  }
  for_each_line(batches * rows, cols, [&](int64_t line) {
    const int64_t matrix = line / rows, within = line % rows;
    const auto* first = reinterpret_cast<const float*>(
        element(out_matrix, sizeof(float), batch0 + matrix, row0 + within, col0));
    std::copy_n(first, cols, dst + line * cols);
  });
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
// A bias (linear's) is widened once and added in the tiles' float32 accumulators, by the
// float32 GEMM's bias argument: the value of writing it into out and computing with beta = 1,
// without the pass that writes it and the one that widens it back.
// When whole matrices fit in a block, a block holds as many matrices of the batch as the
// budget allows, and the float32 GEMM runs them in one batched call: attention's products are
// hundreds of matrices of a few hundred multiply-adds each, and one float32 call per matrix
// cost the demo's float16 step more than all its other work (its bmm was 45 % of the step).
// The tiles' loop, for float32 tiles (float32_impl runs them) or bfloat16 pairs (oneDNN's
// bfloat16 kernel with float32 out runs them).
void run_in_tiles(const Problem& p, TileKind kind, GemmImpl float32_impl) {
  const bool pairs = kind == TileKind::BFloat16Pairs;
  const int64_t tile_k = pairs ? 2 * p.k : p.k;  // the tiles' K per block (hi's and lo's)
  const size_t tile_element = pairs ? sizeof(BFloat16) : sizeof(float);
  const int64_t budget = std::max<int64_t>(reduced_tile_budget.load(), 1);
  int64_t n_block = std::min(p.n, std::max<int64_t>(16, budget / tile_k));
  if (pairs && n_block > kPairsMaxColumns) {
    // Columns in equal blocks of at most kPairsMaxColumns (multiples of 16).
    const int64_t blocks = (n_block + kPairsMaxColumns - 1) / kPairsMaxColumns;
    n_block = ((n_block + blocks - 1) / blocks + 15) / 16 * 16;
  }
  int64_t m_block = std::min(p.m, std::max<int64_t>(16, budget / std::max(tile_k, n_block)));
  // The pairs' float32 out tile is read and written by each of the four products: kept to
  // a size the core's L2 holds (NOTE [float16 as bfloat16 pairs]).
  if (pairs) m_block = std::min(m_block, std::max<int64_t>(16, kPairsOutTile / n_block));
  const bool whole_matrices = n_block == p.n && m_block == p.m;
  const int64_t batch_block =
      whole_matrices
          ? std::clamp<int64_t>(budget / std::max({p.m * tile_k, tile_k * p.n, p.m * p.n}), 1,
                                p.batch)
          : 1;
  void* const a_buffer =
      thread_buffer(kATileSlot, size_t(batch_block * m_block * tile_k) * tile_element);
  void* const b_buffer =
      thread_buffer(kBTileSlot, size_t(batch_block * tile_k * n_block) * tile_element);
  auto* const out_buffer = static_cast<float*>(
      thread_buffer(kOutTileSlot, size_t(batch_block * m_block * n_block) * sizeof(float)));
  // The bias in float32, once; the tiles' GEMM adds it to its accumulators.
  float* bias = nullptr;
  if (p.bias != nullptr) {
    bias = static_cast<float*>(thread_buffer(kBiasSlot, size_t(p.n) * sizeof(float)));
    widen_run(p.dtype, p.bias, bias, p.n);
  }
  const auto a_tile = [&](int64_t batch0, int64_t batches, int64_t row0, int64_t rows,
                          void* into) {
    if (pairs) {
      return split_block(p.a, batch0, batches, row0, rows, 0, p.k, static_cast<BFloat16*>(into));
    }
    return widen_block(p.dtype, p.a, batch0, batches, row0, rows, 0, p.k,
                       static_cast<float*>(into));
  };
  const auto b_tile = [&](int64_t batch0, int64_t batches, int64_t col0, int64_t cols) {
    if (pairs) {
      return split_block(p.b, batch0, batches, 0, p.k, col0, cols,
                         static_cast<BFloat16*>(b_buffer));
    }
    return widen_block(p.dtype, p.b, batch0, batches, 0, p.k, col0, cols,
                       static_cast<float*>(b_buffer));
  };

  std::array<int64_t, 2> a_held = {-1, -1}, b_held = {-1, -1};  // (first batch, first row/col)
  MatrixOperand a_block{}, b_block{};
  for (int64_t i0 = 0; i0 < p.batch; i0 += batch_block) {
    const int64_t bt = std::min(batch_block, p.batch - i0);
    for (int64_t n0 = 0; n0 < p.n; n0 += n_block) {
      const int64_t nt = std::min(n_block, p.n - n0);
      const std::array<int64_t, 2> b_wanted = {p.b.broadcast() ? 0 : i0, n0};
      if (b_held != b_wanted) {
        b_block = b_tile(b_wanted[0], bt, n0, nt);
        b_held = b_wanted;
      }
      // The tile at rows [m0, m0 + mt): a's block (split or widened into a_into unless held),
      // the product into out_into, then out's rows written from it.
      const auto run_tile = [&](int64_t m0, void* a_into, float* out_into,
                                std::array<int64_t, 2>& held, MatrixOperand& a_now) {
        const int64_t mt = std::min(m_block, p.m - m0);
        const std::array<int64_t, 2> a_wanted = {p.a.broadcast() ? 0 : i0, m0};
        if (held != a_wanted) {
          a_now = a_tile(a_wanted[0], bt, m0, mt, a_into);
          held = a_wanted;
        }
        // out_into holds the tile's out as dense [bt, mt, nt], widened first when beta reads it.
        if (p.beta != 0) read_out_block(p, i0, bt, m0, mt, n0, nt, out_into);
        Problem tile{pairs ? kBFloat16 : kFloat32,
                     bt,
                     mt,
                     nt,
                     tile_k,
                     a_now,
                     b_block,
                     reinterpret_cast<char*>(out_into),
                     p.alpha,
                     p.beta};
        tile.bias = bias != nullptr ? reinterpret_cast<const char*>(bias + n0) : nullptr;
        if (pairs) {
          // One product per block of K (NOTE [float16 as bfloat16 pairs]), summed into the
          // float32 tile.
          tile.float32_out = true;
          tile.k = p.k;
          for (int64_t part = 0; part < 4; ++part) {
            Problem product = tile;
            const int64_t a_part = kPartsOfA[size_t(part)], b_part = kPartsOfB[size_t(part)];
            product.a.data = a_now.data + a_part * (p.a.broadcast() ? 1 : bt) * mt * p.k * 2;
            product.b.data = b_block.data + b_part * (p.b.broadcast() ? 1 : bt) * p.k * nt * 2;
            if (part > 0) {
              product.beta = 1.0;
              product.bias = nullptr;
            }
            HG_CHECK(onednn_gemm(product),
                     "gemm: oneDNN refused the bfloat16 pairs of a {} x {} x {} float16 product",
                     p.m, p.k, p.n);
          }
        } else if (bias != nullptr) {
          float32_gemm_bias(tile, float32_impl);
        } else {
          float32_gemm(tile, float32_impl);
        }
        // With several matrices in the block, mt == M and nt == N: their rows follow one
        // another in out as in out_into, as they do whenever the tile is out's whole width.
        const auto write_out = [&](int64_t start, int64_t count) {
          const int64_t row = start / nt;
          const int64_t first = (i0 * p.m + m0 + row) * p.n + n0 + (start - row * nt);
          if (p.float32_out) {
            std::copy_n(out_into + start, count, reinterpret_cast<float*>(p.out) + first);
          } else {
            narrow_run(p.dtype, out_into + start, p.out + first * 2, count);
          }
        };
        if (nt == p.n) {
          convert_run_in_chunks(bt * mt * nt, write_out);
        } else {
          for_each_line(bt * mt, nt, [&](int64_t r) { write_out(r * nt, nt); });
        }
      };
      const int64_t m_blocks = (p.m + m_block - 1) / m_block;
      if (pairs && m_blocks > 1 && omp_get_max_threads() > 1 && !omp_in_parallel()) {
        // The pairs' blocks of rows on the threads, each with its own a and out tiles and
        // oneDNN running single-threaded inside: a block's split, its four products and its
        // rounding stay on one core, with its out tile in that core's L2 (NOTE [float16 as
        // bfloat16 pairs]).
        const size_t a_bytes = size_t(batch_block * m_block * tile_k) * tile_element;
        const size_t out_bytes = size_t(batch_block * m_block * n_block) * sizeof(float);
        // An error (oneDNN refusing a product) must not leave the parallel region as an
        // exception: the first one is kept and rethrown after it.
        std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t block = 0; block < m_blocks; ++block) {
          try {
            std::array<int64_t, 2> held = {-1, -1};
            MatrixOperand a_now{};
            run_tile(block * m_block, thread_buffer(kATileSlot, a_bytes),
                     static_cast<float*>(thread_buffer(kOutTileSlot, out_bytes)), held, a_now);
          } catch (...) {
#pragma omp critical(hg_pairs_failure)
            if (!failure) failure = std::current_exception();
          }
        }
        if (failure) std::rethrow_exception(failure);
        a_held = {-1, -1};  // the calling thread's a buffer may have been reused above
      } else {
        for (int64_t m0 = 0; m0 < p.m; m0 += m_block) {
          run_tile(m0, a_buffer, out_buffer, a_held, a_block);
        }
      }
    }
  }
}

}  // namespace

void reduced_gemm_via_float32(const Problem& p, GemmImpl float32_impl) {
  run_in_tiles(p, TileKind::Float32, float32_impl);
}

bool split_gemm_via_bfloat16(const Problem& p) {
  HG_CHECK(p.dtype == kFloat16, "gemm: bfloat16 pairs are for float16 products, got {}", p.dtype);
  if (!onednn_runs_bf16()) return false;
  if (has_nonfinite_half(p.a, p.batch, p.m, p.k) || has_nonfinite_half(p.b, p.batch, p.k, p.n)) {
    run_in_tiles(p, TileKind::Float32, GemmImpl::OneDNN);
  } else {
    run_in_tiles(p, TileKind::BFloat16Pairs, GemmImpl::OneDNN);
  }
  return true;
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
