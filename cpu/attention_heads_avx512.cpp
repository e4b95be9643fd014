// One attention head's forward and backward in bfloat16 on AVX512-BF16 (attention_heads_avx512.h).
// This file alone is compiled with -mavx512bf16 (and the AVX-512 F, BW and VL it needs), and runs
// only where the CPU has them (cpu/attention.cpp checks).
//
// NOTE [Attention by heads] The batched path (NOTE [CPU attention] in cpu/attention.cpp) makes
// each product one oneDNN call over all heads and the softmax one pass over the rows. At the
// larger CPU GPT's 128 heads of 64 x 64 x 32 that is five products of 0.1-0.3 ms each in the
// backward, half of their work on the causal future, and row passes that widen and narrow every
// [N, L, S] buffer through memory: 12-13 ms of a bf16 step of about 80 (NOTES.md). Here one head
// at a time stays in L1 and L2 (q, k and v are 4 KB each; S and P 16 KB and 8 KB), and:
//   - every product is AVX512-BF16's vdpbf16ps (two bfloat16 products summed into a float32
//     lane, as oneDNN's bfloat16 GEMM computes) on 8 rows of register tiles, the operand that
//     is broadcast read as 32-bit pairs of bfloat16 from memory, the other one 16 lanes wide;
//   - a causal head skips the future: a group of 8 query rows reads the key blocks its last row
//     sees, and the key gradients start at the first query that sees them;
//   - the operands are laid out once per head for the products that read them: q and dout as
//     rows of pairs along E; k and v as pairs along E transposed (lanes are keys); k, q, v and
//     dout as pairs of consecutive rows (lanes along E); P and dS are written by the row pass
//     both as rows and as pairs of consecutive query rows, so dv = P^T dout and dk = dS^T q read
//     them without a transpose;
//   - S stays in float32 from its product to the exponentials (the batched path rounds S to
//     bfloat16 first, as the product's output); P and dS are rounded to bfloat16 before their
//     products, as there, with halfgrad's round-to-nearest-even that keeps subnormals (NOTE [bf16
//     vector rounding] in core/convert.cpp); the exponential is SLEEF's expf (1 ulp).
// The row arithmetic is the batched path's, operation for operation (P = exp(S scale - max) /
// sum, lse = max + log(sum), dS = P (dP - rowsum(dout out)) scale), with its sums taken in
// another order. The results depend on neither the thread count nor the head's neighbours.
#include "halfgrad/cpu/attention_heads_avx512.h"

#include "halfgrad/core/x86_intrinsics.h"

#if defined(__x86_64__)
#include <sleef.h>

namespace hg::cpu::detail {
namespace {

constexpr int64_t kTile = 8;  // rows (or keys) of a register tile

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
int64_t smaller(int64_t a, int64_t b) { return a < b ? a : b; }
int64_t clamp16(int64_t n) { return n < 0 ? 0 : n > 16 ? 16 : n; }

// The sizes of one head's buffers.
struct Dims {
  int64_t L, S, E;
  int64_t E2;    // pairs along E
  int64_t E2P;   // words (pairs) per padded row: E2 rounded up to 16
  int64_t KB;    // blocks of 16 keys
  int64_t SW;    // 16 KB: values per row of S, P, dP, dS
  int64_t EB;    // blocks of 16 along E
  int64_t EW;    // 16 EB
  int64_t Lpad;  // L rounded up to a whole tile
  int64_t L2;    // pairs of query rows
  int64_t S2;    // pairs of key rows
};

Dims dims_of(const HeadShape& h) {
  Dims d{};
  d.L = h.L;
  d.S = h.S;
  d.E = h.E;
  d.E2 = ceil_div(h.E, 2);
  d.E2P = round_up(d.E2, 16);
  d.KB = ceil_div(h.S, 16);
  d.SW = 16 * d.KB;
  d.EB = ceil_div(h.E, 16);
  d.EW = 16 * d.EB;
  d.Lpad = round_up(h.L, kTile);
  d.L2 = ceil_div(h.L, 2);
  d.S2 = ceil_div(h.S, 2);
  return d;
}

// The keys query row i sees.
int64_t valid_keys(const HeadShape& h, int64_t i) { return h.causal ? smaller(h.S, i + 1) : h.S; }

// Hands out 64-byte aligned pieces of the workspace (from address 0 to measure its size).
struct Carve {
  uintptr_t next;
  template <class T>
  T* take(int64_t n) {
    T* const piece = reinterpret_cast<T*>(next);
    next += uintptr_t(round_up(n * int64_t(sizeof(T)), 64));
    return piece;
  }
};

// One pass's pieces of the workspace. Both: q as rows of pairs, k as rows of pairs and
// transposed, S (float32), and P (forward) or dS (backward) as bfloat16 rows. The forward's
// own: v as pairs of rows, each row's max and sum. The backward's own: dout as rows of pairs, v
// as rows and transposed, k, q and dout as pairs of rows, P and dS as pairs of rows, dP (float32)
// and each row's delta.
struct Buffers {
  uint32_t *qrow, *krow, *kT;
  float* s;
  uint16_t* rows16;
  uint32_t* vP;
  float *top, *total;
  uint32_t *dorow, *vrow, *vT, *kP, *qP, *doP, *pI, *dsI;
  float *dp, *delta;
};

// The pieces from `base` (the forward's or the backward's); *end: one past the last.
Buffers carve_buffers(const Dims& d, uintptr_t base, bool backward, uintptr_t* end = nullptr) {
  Carve c{base};
  Buffers b{};
  b.qrow = c.take<uint32_t>(d.Lpad * d.E2P);
  b.krow = c.take<uint32_t>(d.SW * d.E2P);
  b.kT = c.take<uint32_t>(d.E2 * d.SW);
  b.s = c.take<float>(d.Lpad * d.SW);
  b.rows16 = c.take<uint16_t>(d.Lpad * d.SW);
  if (!backward) {
    b.vP = c.take<uint32_t>(d.S2 * d.EW);
    b.top = c.take<float>(round_up(d.L, 16));
    b.total = c.take<float>(round_up(d.L, 16));
  } else {
    b.dorow = c.take<uint32_t>(d.Lpad * d.E2P);
    b.vrow = c.take<uint32_t>(d.SW * d.E2P);
    b.vT = c.take<uint32_t>(d.E2 * d.SW);
    b.kP = c.take<uint32_t>(d.S2 * d.EW);
    b.qP = c.take<uint32_t>(d.L2 * d.EW);
    b.doP = c.take<uint32_t>(d.L2 * d.EW);
    b.pI = c.take<uint32_t>(d.L2 * d.SW);
    b.dsI = c.take<uint32_t>(d.L2 * d.SW);
    b.dp = c.take<float>(d.Lpad * d.SW);
    b.delta = c.take<float>(d.Lpad);
  }
  if (end != nullptr) *end = c.next;
  return b;
}

// ---- lanes -----------------------------------------------------------------------------------

__mmask16 lanes16(int64_t n) {
  n = clamp16(n);
  return __mmask16((1u << n) - 1u);
}
__mmask32 lanes32(int64_t n) {
  return n <= 0 ? __mmask32(0) : n >= 32 ? ~__mmask32(0) : __mmask32((1u << n) - 1u);
}

// n (at most 16) bfloat16 values at p as 32-bit lanes, zero-extended; the other lanes 0.
__m512i load_bits(const uint16_t* p, int64_t n) {
  return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes16(n), p));
}
__m512 widen(__m512i bits) { return _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)); }

// x rounded to bfloat16 as detail::float_to_bfloat16_bits rounds (NOTE [bf16 vector rounding]
// in core/convert.cpp), the bits in each lane's low half.
__m512i round_bits(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), odd), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  return _mm512_mask_mov_epi32(
      rounded, nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040)));
}

// The low halves of bits' first n lanes stored as bfloat16 at p.
void store_bits(uint16_t* p, __m512i bits, int64_t n) {
  _mm256_mask_storeu_epi16(p, lanes16(n), _mm512_cvtepi32_epi16(bits));
}

// acc + a.x b.x + a.y b.y per lane: one 32-bit pair of bfloat16 broadcast against 16 pairs.
__m512 dot_pair(__m512 acc, uint32_t pair, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32(int(pair)), (__m512bh)b);
}

// ---- layouts ---------------------------------------------------------------------------------

// Rows [0, rows) of m into dst [rows_pad][E2P] words (pairs along E), zero past E and the rows.
void copy_rows(HeadRows m, int64_t rows, int64_t rows_pad, int64_t E, int64_t E2P, uint32_t* dst) {
  for (int64_t r = 0; r < rows_pad; ++r) {
    uint16_t* const to = reinterpret_cast<uint16_t*>(dst + r * E2P);
    for (int64_t c = 0; c < 2 * E2P; c += 32) {
      const __m512i x = r < rows && c < E
                            ? _mm512_maskz_loadu_epi16(lanes32(E - c), m.data + r * m.stride + c)
                            : _mm512_setzero_si512();
      _mm512_storeu_si512(to + c, x);
    }
  }
}

// The 16 x 16 words at src (rows src_stride words apart) transposed to dst (rows dst_stride
// apart), its first `cols` rows stored: four rounds of shuffles, 32-bit, 64-bit, then 128-bit
// lanes twice.
void transpose_tile(const uint32_t* src, int64_t src_stride, uint32_t* dst, int64_t dst_stride,
                    int64_t cols) {
  __m512i r[16], t[16], u[16], v[16], c[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * src_stride);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4 g + k]: rows 4 g .. 4 g + 3 of columns k, k + 4, k + 8, k + 12 (one per 128-bit lane)
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  // v[h + k]: columns k and k + 8 of rows h .. h + 7; v[h + 4 + k]: columns k + 4 and k + 12
  for (int h = 0; h < 16; h += 8) {
    for (int k = 0; k < 4; ++k) {
      v[h + k] = _mm512_shuffle_i32x4(u[h + k], u[h + 4 + k], 0x88);
      v[h + 4 + k] = _mm512_shuffle_i32x4(u[h + k], u[h + 4 + k], 0xDD);
    }
  }
  for (int k = 0; k < 4; ++k) {
    c[k] = _mm512_shuffle_i32x4(v[k], v[8 + k], 0x88);
    c[k + 8] = _mm512_shuffle_i32x4(v[k], v[8 + k], 0xDD);
    c[k + 4] = _mm512_shuffle_i32x4(v[4 + k], v[12 + k], 0x88);
    c[k + 12] = _mm512_shuffle_i32x4(v[4 + k], v[12 + k], 0xDD);
  }
  for (int i = 0; i < cols; ++i) _mm512_storeu_si512(dst + i * dst_stride, c[i]);
}

// The words of rows [SW][E2P] (rows past the keys zero) transposed to dst [E2][SW]: lanes are
// keys.
void transpose_words(const uint32_t* rows_of, const Dims& d, uint32_t* dst) {
  for (int64_t kb = 0; kb < d.KB; ++kb) {
    for (int64_t e0 = 0; e0 < d.E2; e0 += 16) {
      transpose_tile(rows_of + 16 * kb * d.E2P + e0, d.E2P, dst + e0 * d.SW + 16 * kb, d.SW,
                     smaller(16, d.E2 - e0));
    }
  }
}

// dst [ceil(rows / 2)][EW] words: word (r2, e) pairs m[2 r2][e] (low half) with m[2 r2 + 1][e],
// zero past E and the rows.
void pair_rows(HeadRows m, int64_t rows, const Dims& d, uint32_t* dst) {
  for (int64_t r2 = 0; 2 * r2 < rows; ++r2) {
    const uint16_t* const a = m.data + 2 * r2 * m.stride;
    const bool has_b = 2 * r2 + 1 < rows;
    for (int64_t c = 0; c < d.EW; c += 16) {
      const __m512i lo = load_bits(a + c, d.E - c);
      const __m512i hi = has_b ? load_bits(a + m.stride + c, d.E - c) : _mm512_setzero_si512();
      _mm512_storeu_si512(dst + r2 * d.EW + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
  }
}

// ---- products ----------------------------------------------------------------------------------

// out[i][16 kb + lane] = sum over e2 of a[i][e2] . bT[e2][16 kb + lane] for the query rows of
// each tile and the key blocks its last row sees (rows past L are zero in a).
void rows_by_keys(const HeadShape& h, const Dims& d, const uint32_t* a, const uint32_t* bT,
                  float* out) {
  for (int64_t i0 = 0; i0 < d.L; i0 += kTile) {
    const int64_t blocks = ceil_div(valid_keys(h, smaller(i0 + kTile, d.L) - 1), 16);
    for (int64_t kb = 0; kb < blocks; ++kb) {
      __m512 acc[kTile];
      for (int g = 0; g < kTile; ++g) acc[g] = _mm512_setzero_ps();
      for (int64_t e2 = 0; e2 < d.E2; ++e2) {
        const __m512i b = _mm512_loadu_si512(bT + e2 * d.SW + 16 * kb);
        for (int g = 0; g < kTile; ++g) acc[g] = dot_pair(acc[g], a[(i0 + g) * d.E2P + e2], b);
      }
      for (int g = 0; g < kTile; ++g) _mm512_storeu_ps(out + (i0 + g) * d.SW + 16 * kb, acc[g]);
    }
  }
}

// out[i][e] = sum over key pairs j2 of w[i][j2] . bP[j2][e], rounded to bfloat16, for the rows
// of each tile over the key pairs its last row sees; w rows of SW / 2 words, out rows of E.
void rows_by_pairs(const HeadShape& h, const Dims& d, const uint32_t* w, const uint32_t* bP,
                   uint16_t* out) {
  for (int64_t i0 = 0; i0 < d.L; i0 += kTile) {
    const int64_t rows = smaller(kTile, d.L - i0);
    const int64_t pairs = ceil_div(valid_keys(h, i0 + rows - 1), 2);
    for (int64_t c = 0; c < d.EW; c += 16) {
      __m512 acc[kTile];
      for (int g = 0; g < kTile; ++g) acc[g] = _mm512_setzero_ps();
      for (int64_t j2 = 0; j2 < pairs; ++j2) {
        const __m512i b = _mm512_loadu_si512(bP + j2 * d.EW + c);
        for (int g = 0; g < kTile; ++g) acc[g] = dot_pair(acc[g], w[(i0 + g) * (d.SW / 2) + j2], b);
      }
      for (int g = 0; g < rows; ++g)
        store_bits(out + (i0 + g) * d.E + c, round_bits(acc[g]), d.E - c);
    }
  }
}

// ---- the rows --------------------------------------------------------------------------------

// lse[i] = top[i] + log(total[i]) for i < n.
void finish_lse(const float* top, const float* total, float* lse, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512 t = _mm512_maskz_loadu_ps(m, top + i);
    const __m512 s = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, total + i);
    _mm512_mask_storeu_ps(lse + i, m, _mm512_add_ps(t, Sleef_logf16_u10avx512f(s)));
  }
}

}  // namespace

bool heads_fit(int64_t L, int64_t S, int64_t E) {
  return L >= 1 && S >= 1 && E >= 1 && L <= 1024 && S <= 1024 && E <= 256 &&
         L * round_up(S, 16) <= 32768;
}

size_t heads_workspace_bytes(const HeadShape& shape) {
  const Dims d = dims_of(shape);
  uintptr_t forward = 0, backward = 0;
  carve_buffers(d, 0, false, &forward);
  carve_buffers(d, 0, true, &backward);
  return size_t(forward > backward ? forward : backward);
}

void head_forward_avx512bf16(const HeadShape& h, HeadRows q, HeadRows k, HeadRows v, uint16_t* out,
                             float* lse, uint16_t* probs, void* workspace) {
  const Dims d = dims_of(h);
  const Buffers b = carve_buffers(d, reinterpret_cast<uintptr_t>(workspace), false);
  copy_rows(q, d.L, d.Lpad, d.E, d.E2P, b.qrow);
  copy_rows(k, d.S, d.SW, d.E, d.E2P, b.krow);
  transpose_words(b.krow, d, b.kT);
  pair_rows(v, d.S, d, b.vP);
  rows_by_keys(h, d, b.qrow, b.kT, b.s);  // S = q k^T

  const __m512 f = _mm512_set1_ps(h.scale);
  const __m512 minus_inf = _mm512_set1_ps(-__builtin_inff());
  for (int64_t i = 0; i < d.L; ++i) {
    const int64_t n = valid_keys(h, i), blocks = ceil_div(n, 16);
    float* const x = b.s + i * d.SW;
    __m512 top = minus_inf;
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const __m512 y = _mm512_mask_mov_ps(minus_inf, lanes16(n - 16 * kb),
                                          _mm512_mul_ps(_mm512_loadu_ps(x + 16 * kb), f));
      _mm512_storeu_ps(x + 16 * kb, y);
      top = _mm512_max_ps(y, top);  // a NaN y is passed over, as the batched path's max does
    }
    const float row_top = _mm512_reduce_max_ps(top);
    const __m512 shift = _mm512_set1_ps(row_top);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const __m512 e = Sleef_expf16_u10avx512f(_mm512_sub_ps(_mm512_loadu_ps(x + 16 * kb), shift));
      _mm512_storeu_ps(x + 16 * kb, e);
      sum = _mm512_add_ps(sum, e);
    }
    const float row_total = _mm512_reduce_add_ps(sum);
    b.top[i] = row_top;
    b.total[i] = row_total;
    const __m512 total = _mm512_set1_ps(row_total);
    for (int64_t kb = 0; kb < d.KB; ++kb) {
      const __m512i bits = kb < blocks
                               ? round_bits(_mm512_div_ps(_mm512_loadu_ps(x + 16 * kb), total))
                               : _mm512_setzero_si512();
      store_bits(b.rows16 + i * d.SW + 16 * kb, bits, 16);
      if (probs != nullptr) store_bits(probs + i * d.S + 16 * kb, bits, d.S - 16 * kb);
    }
  }
  for (int64_t i = d.L; i < d.Lpad; ++i) {
    for (int64_t c = 0; c < d.SW; c += 16)
      store_bits(b.rows16 + i * d.SW + c, _mm512_setzero_si512(), 16);
  }
  finish_lse(b.top, b.total, lse, d.L);
  rows_by_pairs(h, d, reinterpret_cast<const uint32_t*>(b.rows16), b.vP, out);  // out = P v
}

void head_backward_avx512bf16(const HeadShape& h, HeadRows dout, HeadRows q, HeadRows k, HeadRows v,
                              HeadRows out, const float* lse, const uint16_t* probs, uint16_t* dq,
                              uint16_t* dk, uint16_t* dv, void* workspace) {
  const Dims d = dims_of(h);
  const Buffers b = carve_buffers(d, reinterpret_cast<uintptr_t>(workspace), true);
  const bool recompute = probs == nullptr;
  copy_rows(dout, d.L, d.Lpad, d.E, d.E2P, b.dorow);
  copy_rows(v, d.S, d.SW, d.E, d.E2P, b.vrow);
  transpose_words(b.vrow, d, b.vT);
  pair_rows(k, d.S, d, b.kP);
  pair_rows(q, d.L, d, b.qP);
  pair_rows(dout, d.L, d, b.doP);
  rows_by_keys(h, d, b.dorow, b.vT, b.dp);  // dP = dout v^T
  if (recompute) {
    copy_rows(q, d.L, d.Lpad, d.E, d.E2P, b.qrow);
    copy_rows(k, d.S, d.SW, d.E, d.E2P, b.krow);
    transpose_words(b.krow, d, b.kT);
    rows_by_keys(h, d, b.qrow, b.kT, b.s);  // S = q k^T
  }
  // delta = rowsum(dout out), in float32 from the bfloat16 values.
  for (int64_t i = 0; i < d.L; ++i) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t c = 0; c < d.E; c += 16) {
      acc = _mm512_fmadd_ps(widen(load_bits(dout.data + i * dout.stride + c, d.E - c)),
                            widen(load_bits(out.data + i * out.stride + c, d.E - c)), acc);
    }
    b.delta[i] = _mm512_reduce_add_ps(acc);
  }

  // P and dS, two query rows at a time: dS as rows (for dq = dS k) and both as pairs of rows
  // (for dv = P^T dout and dk = dS^T q).
  const __m512 f = _mm512_set1_ps(h.scale);
  const __m512 minus_inf = _mm512_set1_ps(-__builtin_inff());
  for (int64_t i2 = 0; i2 < d.L2; ++i2) {
    const int64_t r0 = 2 * i2;
    const int64_t blocks = ceil_div(valid_keys(h, smaller(r0 + 1, d.L - 1)), 16);
    for (int64_t kb = 0; kb < d.KB; ++kb) {
      __m512i p_bits[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      __m512i ds_bits[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
      for (int r = 0; r < 2 && kb < blocks; ++r) {
        const int64_t i = r0 + r;
        if (i >= d.L) break;
        const __mmask16 seen = lanes16(valid_keys(h, i) - 16 * kb);
        __m512 p;
        if (recompute) {
          const __m512 y = _mm512_sub_ps(
              _mm512_mul_ps(_mm512_loadu_ps(b.s + i * d.SW + 16 * kb), f), _mm512_set1_ps(lse[i]));
          p = Sleef_expf16_u10avx512f(_mm512_mask_mov_ps(minus_inf, seen, y));
          p_bits[r] = _mm512_maskz_mov_epi32(seen, round_bits(p));
        } else {
          p_bits[r] =
              _mm512_maskz_mov_epi32(seen, load_bits(probs + i * d.S + 16 * kb, d.S - 16 * kb));
          p = widen(p_bits[r]);
        }
        const __m512 dp = _mm512_loadu_ps(b.dp + i * d.SW + 16 * kb);
        const __m512 ds = _mm512_maskz_mul_ps(
            seen, _mm512_mul_ps(p, _mm512_sub_ps(dp, _mm512_set1_ps(b.delta[i]))), f);
        ds_bits[r] = _mm512_maskz_mov_epi32(seen, round_bits(ds));
      }
      const int64_t at = i2 * d.SW + 16 * kb;
      _mm512_storeu_si512(b.pI + at, _mm512_or_si512(p_bits[0], _mm512_slli_epi32(p_bits[1], 16)));
      _mm512_storeu_si512(b.dsI + at,
                          _mm512_or_si512(ds_bits[0], _mm512_slli_epi32(ds_bits[1], 16)));
      store_bits(b.rows16 + r0 * d.SW + 16 * kb, ds_bits[0], 16);
      store_bits(b.rows16 + (r0 + 1) * d.SW + 16 * kb, ds_bits[1], 16);
    }
  }
  for (int64_t i = 2 * d.L2; i < d.Lpad; ++i) {
    for (int64_t c = 0; c < d.SW; c += 16)
      store_bits(b.rows16 + i * d.SW + c, _mm512_setzero_si512(), 16);
  }

  // dv = P^T dout and dk = dS^T q, kTile keys at a time, from the first query pair that sees them.
  for (int64_t c = 0; c < d.EW; c += 16) {
    for (int64_t j0 = 0; j0 < d.S; j0 += kTile) {
      __m512 acc_v[kTile], acc_k[kTile];
      for (int g = 0; g < kTile; ++g) acc_v[g] = acc_k[g] = _mm512_setzero_ps();
      for (int64_t i2 = h.causal ? j0 / 2 : 0; i2 < d.L2; ++i2) {
        const __m512i dov = _mm512_loadu_si512(b.doP + i2 * d.EW + c);
        const __m512i qv = _mm512_loadu_si512(b.qP + i2 * d.EW + c);
        const uint32_t* const pw = b.pI + i2 * d.SW + j0;
        const uint32_t* const dw = b.dsI + i2 * d.SW + j0;
        for (int g = 0; g < kTile; ++g) {
          acc_v[g] = dot_pair(acc_v[g], pw[g], dov);
          acc_k[g] = dot_pair(acc_k[g], dw[g], qv);
        }
      }
      for (int g = 0; g < kTile && j0 + g < d.S; ++g) {
        store_bits(dv + (j0 + g) * d.E + c, round_bits(acc_v[g]), d.E - c);
        store_bits(dk + (j0 + g) * d.E + c, round_bits(acc_k[g]), d.E - c);
      }
    }
  }
  rows_by_pairs(h, d, reinterpret_cast<const uint32_t*>(b.rows16), b.kP, dq);  // dq = dS k
}

}  // namespace hg::cpu::detail
#endif
