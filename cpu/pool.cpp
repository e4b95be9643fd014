// CPU kernels of the pool family (kernel/pool.h): max_pool2d, avg_pool2d and their backward
// passes. Planes (the flattened leading dims) run on OpenMP threads.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "halfgrad/core/convert.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/nn_common.h"
#include "halfgrad/cpu/row_vectors.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cpu {

namespace {

using kernel::acc_dtype;
using kernel::check_shape;
using kernel::MaxPoolForward;
using kernel::Pool2dParams;
using kernel::product;
using nn_common::acc_t;
using nn_common::check_input;
using nn_common::kept_buffer;
using nn_common::load;
using nn_common::parallel_for;
using nn_common::store;

// ---- pooling ------------------------------------------------------------------------------
//
// x: [planes, H, W] once the leading dims are flattened; planes run on threads. Window
// (oh, ow) covers rows oh sH - pH .. + kH and columns ow sW - pW .. + kW, cut to the input.

using kernel::pool_geometry;
using kernel::PoolGeometry;

// The window of one output position: input rows [h0, h1) and columns [w0, w1), and how many
// positions it covers once the padding counts (for count_include_pad).
struct Window {
  int64_t h0, h1, w0, w1, padded_size;
};

Window window_at(const PoolGeometry& g, int64_t oh, int64_t ow) {
  const int64_t h_start = oh * g.sH - g.pH, w_start = ow * g.sW - g.pW;
  const int64_t h_end = std::min(h_start + g.kH, g.H + g.pH);
  const int64_t w_end = std::min(w_start + g.kW, g.W + g.pW);
  return {std::max<int64_t>(h_start, 0), std::min(h_end, g.H), std::max<int64_t>(w_start, 0),
          std::min(w_end, g.W), (h_end - h_start) * (w_end - w_start)};
}

int64_t avg_divisor(const PoolGeometry& g, const Window& win, bool count_include_pad) {
  if (g.divisor_override > 0) return g.divisor_override;
  return count_include_pad ? win.padded_size : (win.h1 - win.h0) * (win.w1 - win.w0);
}

// The first tap at start, start + step, ... that is >= 0.
int64_t first_tap(int64_t start, int64_t step) {
  return start >= 0 ? start : start + (-start + step - 1) / step * step;
}

// NOTE [Tiling max pool] When the windows tile the input (stride equal to the kernel, no
// padding, no dilation: a CNN's MaxPool2d(2)), an output row reads kH whole input rows, each
// tap once. Those rows are taken as float32 (16-bit rows widened by the vector conversions,
// once), and each window is reduced in the generic loop's order with selects instead of a
// branch per tap: a tap replaces the best when it is greater or NaN, so the first maximum wins
// and NaN propagates, with the generic loop's values and indices. The output row is narrowed
// back in one call (exact: every value came from the input). Windows two columns wide take the
// same selects in vector lanes, a whole plane's windows at once (max_pool_pairs_plane).
bool windows_tile(const PoolGeometry& g) {
  return g.sH == g.kH && g.sW == g.kW && g.pH == 0 && g.pW == 0 && g.dH == 1 && g.dW == 1;
}

// Windows two columns wide (MaxPool2d(2)) in vector lanes: W windows a vector, each row's 2W
// values split into even and odd columns by two shuffles, each tap a select in every lane at
// once, in the scalar loop's order (a tap wins when greater or NaN). The lanes record the
// winning tap (2 i + j for row i, column j); the caller makes the indices from it. Compiled for
// AVX-512, AVX2 and the baseline as the row vectors are (NOTE [Row vectors] in
// cpu/row_vectors.h). Returns how many of the Wout windows it did (whole vectors only).
using row_vectors::FloatVec16;
using row_vectors::FloatVec4;
using row_vectors::FloatVec8;
using IntVec16 = int32_t __attribute__((vector_size(64)));
using IntVec8 = int32_t __attribute__((vector_size(32)));
using IntVec4 = int32_t __attribute__((vector_size(16)));

// Row values [2 ow, 2 ow + 2W) split into the even and the odd columns.
template <class V, size_t... Lane>
HG_ROW_INLINE void split_pairs(const float* row, V& even, V& odd, std::index_sequence<Lane...>) {
  constexpr size_t W = sizeof...(Lane);
  V lo, hi;
  row_vectors::load_vec(lo, row);
  row_vectors::load_vec(hi, row + W);
  even = __builtin_shufflevector(lo, hi, (2 * Lane)...);
  odd = __builtin_shufflevector(lo, hi, (2 * Lane + 1)...);
}

// The function for one instruction set. Its compares are written in the function itself, not
// in an inline helper: GCC lowers a vector compare in the helper for the baseline ISA, lane by
// lane, before inlining it (arithmetic and shuffles survive). Each tap wins where it is
// greater than the best or NaN, by bit-mask blends.
#define HG_MAX_POOL_PAIRS(NAME, ATTRIBUTES, V, I, LANES)                                      \
  ATTRIBUTES int64_t NAME(const float* const* rows, int64_t kH, int64_t Wout, float* best_out, \
                          int32_t* tap_out) {                                                 \
    int64_t ow = 0;                                                                           \
    for (; ow + (LANES) <= Wout; ow += (LANES)) {                                             \
      V best{}, column[2];                                                                    \
      I tap{};                                                                                \
      for (int64_t i = 0; i < kH; ++i) {                                                      \
        split_pairs<V>(rows[i] + 2 * ow, column[0], column[1],                                \
                       std::make_index_sequence<LANES>{});                                    \
        for (int64_t j = 0; j < 2; ++j) {                                                     \
          const V v = column[j];                                                              \
          if (i == 0 && j == 0) {                                                             \
            best = v;                                                                         \
            continue;                                                                         \
          }                                                                                   \
          const I wins = (v > best) | (v != v);                                               \
          best = (V)(((I)v & wins) | ((I)best & ~wins));                                      \
          tap = ((I{} + int32_t(2 * i + j)) & wins) | (tap & ~wins);                          \
        }                                                                                     \
      }                                                                                       \
      row_vectors::store_vec(best_out + ow, best);                                            \
      std::memcpy(tap_out + ow, &tap, sizeof(I));                                             \
    }                                                                                         \
    return ow;                                                                                \
  }

using MaxPoolPairs = int64_t (*)(const float* const*, int64_t, int64_t, float*, int32_t*);

// AVX512DQ, VL and BW too: they keep the compares' masks in vector registers.
HG_MAX_POOL_PAIRS(max_pool_pairs_avx512,
                  __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma"))),
                  FloatVec16, IntVec16, 16)
HG_MAX_POOL_PAIRS(max_pool_pairs_avx2, __attribute__((target("avx2,fma"))), FloatVec8, IntVec8, 8)
HG_MAX_POOL_PAIRS(max_pool_pairs_base, , FloatVec4, IntVec4, 4)
#undef HG_MAX_POOL_PAIRS

MaxPoolPairs max_pool_pairs() {
  static const MaxPoolPairs pairs = [] {
    const int level = row_vectors::row_vector_level();
    const bool dq = __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512bw");
    if (level == 2 && dq) return max_pool_pairs_avx512;
    return level >= 1 ? max_pool_pairs_avx2 : max_pool_pairs_base;
  }();
  return pairs;
}

// A plane's windows two columns wide, all in vector lanes: band i holds row i of every window
// (input rows i, kH + i, 2 kH + i, ... cut to the 2 Wout columns the windows cover, side by
// side, widened to float32), so the windows of the whole plane follow one another in the bands
// however narrow its rows are (a 28-wide plane has 14 windows a row, fewer than a vector's 16).
// The windows past the last whole vector take the same selects one at a time.
template <class T>
void max_pool_pairs_plane(const T* in, const PoolGeometry& g, T* out, int64_t* indices) {
  const int64_t windows = g.Hout * g.Wout, band = 2 * windows;
  float* const buffer = kept_buffer<float>(g.kH * band + windows);
  int32_t* const taps = kept_buffer<int32_t>(windows);
  const float* bands[8];  // kH <= 8 here (max_pool2d picks this path only then)
  for (int64_t i = 0; i < g.kH; ++i) {
    float* b = buffer + i * band;
    for (int64_t oh = 0; oh < g.Hout; ++oh) {
      convert::to_float(in + (oh * g.kH + i) * g.W, b + oh * 2 * g.Wout, 2 * g.Wout);
    }
    bands[i] = b;
  }
  float* best = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    best = out;
  } else {
    best = buffer + g.kH * band;
  }
  const int64_t done = max_pool_pairs()(bands, g.kH, windows, best, taps);
  for (int64_t o = done; o < windows; ++o) {
    float top = bands[0][2 * o];
    int32_t tap = 0;
    for (int32_t t = 1; t < 2 * int32_t(g.kH); ++t) {
      const float v = bands[t / 2][2 * o + t % 2];
      const bool wins = (v > top) | (v != v);
      top = wins ? v : top;
      tap = wins ? t : tap;
    }
    best[o] = top;
    taps[o] = tap;
  }
  for (int64_t oh = 0, o = 0; oh < g.Hout; ++oh) {
    for (int64_t ow = 0; ow < g.Wout; ++ow, ++o) {
      const int32_t tap = taps[o];
      indices[o] = (oh * g.kH + (tap >> 1)) * g.W + 2 * ow + (tap & 1);
    }
  }
  if constexpr (!std::is_same_v<T, float>) convert::from_float(best, out, windows);
}

template <class T>
void max_pool_tiled_plane(const T* in, const PoolGeometry& g, T* out, int64_t* indices) {
  const int64_t used = g.Wout * g.kW;  // the columns the windows cover
  float* const buffer =
      std::is_same_v<T, float> ? nullptr : kept_buffer<float>(g.kH * used + g.Wout);
  for (int64_t oh = 0; oh < g.Hout; ++oh) {
    const int64_t h0 = oh * g.kH;
    const float* rows[8];  // kH <= 8 here (max_pool2d picks this path only then)
    for (int64_t i = 0; i < g.kH; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        rows[i] = in + (h0 + i) * g.W;
      } else {
        convert::to_float(in + (h0 + i) * g.W, buffer + i * used, used);
        rows[i] = buffer + i * used;
      }
    }
    float* best_row = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      best_row = out + oh * g.Wout;
    } else {
      best_row = buffer + g.kH * used;
    }
    int64_t* index_row = indices + oh * g.Wout;
    for (int64_t ow = 0; ow < g.Wout; ++ow) {
      const int64_t w0 = ow * g.kW;
      float best = rows[0][w0];
      int64_t best_index = h0 * g.W + w0;
      for (int64_t i = 0; i < g.kH; ++i) {
        for (int64_t j = i == 0 ? 1 : 0; j < g.kW; ++j) {
          // Masks, not a branch: on a CNN's activations the branch goes either way.
          const float v = rows[i][w0 + j];
          const uint32_t take = uint32_t(v > best) | uint32_t(v != v);
          const uint32_t keep_bits = take - 1u;  // all ones where the best stays
          best = std::bit_cast<float>((std::bit_cast<uint32_t>(v) & ~keep_bits) |
                                      (std::bit_cast<uint32_t>(best) & keep_bits));
          const int64_t keep_index = int64_t(take) - 1;
          best_index = (((h0 + i) * g.W + w0 + j) & ~keep_index) | (best_index & keep_index);
        }
      }
      best_row[ow] = best;
      index_row[ow] = best_index;
    }
    if constexpr (!std::is_same_v<T, float>) convert::from_float(best_row, out + oh * g.Wout, g.Wout);
  }
}

MaxPoolForward max_pool2d(const Tensor& x, const Pool2dParams& p) {
  const char* op = "max_pool2d";
  check_input(op, "input", x);
  const PoolGeometry g = pool_geometry(op, x.sizes(), p);
  const Tensor xc = x.contiguous();
  MaxPoolForward result{empty(g.out_shape, x.dtype()), empty(g.out_shape, kInt64)};
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = xc.data_ptr<T>();
    T* out = result.out.data_ptr<T>();
    int64_t* indices = result.indices.data_ptr<int64_t>();
    if constexpr (std::is_same_v<A, float>) {
      if (windows_tile(g) && g.kH <= 8) {
        parallel_for(g.planes, g.Hout * g.Wout * g.kH * g.kW, [&](int64_t plane) {
          const int64_t out_base = plane * g.Hout * g.Wout;
          if (g.kW == 2) {
            max_pool_pairs_plane(xp + plane * g.H * g.W, g, out + out_base, indices + out_base);
          } else {
            max_pool_tiled_plane(xp + plane * g.H * g.W, g, out + out_base, indices + out_base);
          }
        });
        return;
      }
    }
    parallel_for(g.planes, g.Hout * g.Wout * g.kH * g.kW, [&](int64_t plane) {
      const T* in = xp + plane * g.H * g.W;
      const int64_t out_base = plane * g.Hout * g.Wout;
      for (int64_t oh = 0; oh < g.Hout; ++oh) {
        for (int64_t ow = 0; ow < g.Wout; ++ow) {
          // The window's taps: every dH-th row from its start, kH of them, inside the input.
          const int64_t h_start = oh * g.sH - g.pH, w_start = ow * g.sW - g.pW;
          const int64_t h_first = first_tap(h_start, g.dH), w_first = first_tap(w_start, g.dW);
          const int64_t h_end = std::min(h_start + g.dH * (g.kH - 1) + 1, g.H);
          const int64_t w_end = std::min(w_start + g.dW * (g.kW - 1) + 1, g.W);
          A best = -std::numeric_limits<A>::infinity();
          int64_t best_index = h_first * g.W + w_first;
          for (int64_t h = h_first; h < h_end; h += g.dH) {
            for (int64_t w = w_first; w < w_end; w += g.dW) {
              const A v = load(in[h * g.W + w]);
              if (v > best || std::isnan(v)) {  // NaN propagates, as in torch
                best = v;
                best_index = h * g.W + w;
              }
            }
          }
          out[out_base + oh * g.Wout + ow] = store<T>(best);
          indices[out_base + oh * g.Wout + ow] = best_index;
        }
      }
    });
  });
  return result;
}

// NOTE [max_pool2d backward by planes] Each plane's gradient is summed in float32 (windows
// that overlap send several taps to one position, and the sum is rounded once) in a per-thread
// plane that stays in cache, then written once into dx in its dtype. (A float32 dx zeroed
// whole, scattered into and rounded in a pass of its own took 13 % of a bf16 CNN step.) The
// indices are checked in the same loop; a bad one is reported after it, dx discarded.
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape) {
  const char* op = "max_pool2d_backward";
  check_input(op, "grad_output", dy);
  kernel::check_max_pool2d_backward(op, dy, indices, input_shape);
  const int64_t dims = int64_t(input_shape.size());
  const int64_t H = input_shape[size_t(dims - 2)], W = input_shape[size_t(dims - 1)];
  const int64_t planes = product(input_shape, 0, size_t(dims - 2));
  const int64_t per_plane = dy.size(-2) * dy.size(-1);
  const Tensor ic = indices.contiguous(), dyc = dy.contiguous();
  const int64_t* idx = ic.data_ptr<int64_t>();
  Tensor dx = empty(input_shape, dy.dtype());
  std::atomic<int64_t> first_bad{ic.numel()};  // the first element whose index is outside
  visit_floating_dtype(op, dy.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* g = dyc.data_ptr<T>();
    T* out = dx.data_ptr<T>();
    parallel_for(planes, per_plane, [&](int64_t plane) {
      T* const out_plane = out + plane * H * W;
      A* sums;
      if constexpr (std::is_same_v<T, A>) {
        sums = out_plane;  // summed in place
      } else {
        sums = kept_buffer<A>(H * W);
      }
      std::fill_n(sums, H * W, A(0));
      for (int64_t i = plane * per_plane; i < (plane + 1) * per_plane; ++i) {
        if (uint64_t(idx[i]) >= uint64_t(H * W)) {
          int64_t seen = first_bad.load();
          while (i < seen && !first_bad.compare_exchange_weak(seen, i)) {
          }
          continue;
        }
        sums[idx[i]] += load(g[i]);
      }
      if constexpr (!std::is_same_v<T, A>) convert::from_float(sums, out_plane, H * W);
    });
  });
  const int64_t bad = first_bad.load();
  HG_CHECK(bad == ic.numel(),
           "{}: expected indices in [0, {}) (flat positions in a {}x{} plane), got {} at "
           "element {}",
           op, H * W, H, W, bad < ic.numel() ? idx[bad] : 0, bad);
  return dx;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  const char* op = "avg_pool2d";
  check_input(op, "input", x);
  const PoolGeometry g = pool_geometry(op, x.sizes(), p);
  const Tensor xc = x.contiguous();
  Tensor out = empty(g.out_shape, x.dtype());
  visit_floating_dtype(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* xp = xc.data_ptr<T>();
    T* y = out.data_ptr<T>();
    parallel_for(g.planes, g.Hout * g.Wout * g.kH * g.kW, [&](int64_t plane) {
      const T* in = xp + plane * g.H * g.W;
      for (int64_t oh = 0; oh < g.Hout; ++oh) {
        for (int64_t ow = 0; ow < g.Wout; ++ow) {
          const Window win = window_at(g, oh, ow);
          A sum = 0;
          for (int64_t h = win.h0; h < win.h1; ++h) {
            for (int64_t w = win.w0; w < win.w1; ++w) sum += load(in[h * g.W + w]);
          }
          y[(plane * g.Hout + oh) * g.Wout + ow] =
              store<T>(sum / A(avg_divisor(g, win, p.count_include_pad)));
        }
      }
    });
  });
  return out;
}

Tensor avg_pool2d_backward(const Tensor& dy, const Shape& input_shape, const Pool2dParams& p) {
  const char* op = "avg_pool2d_backward";
  check_input(op, "grad_output", dy);
  const PoolGeometry g = pool_geometry(op, input_shape, p);
  check_shape(op, "grad_output (avg_pool2d's output shape)", dy, g.out_shape);
  const Tensor dyc = dy.contiguous();
  const DType acc = acc_dtype(dy.dtype());
  Tensor dxa = zeros(input_shape, acc);
  visit_floating_dtype(op, dy.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    const T* gp = dyc.data_ptr<T>();
    A* dx = dxa.data_ptr<A>();
    parallel_for(g.planes, g.Hout * g.Wout * g.kH * g.kW, [&](int64_t plane) {
      A* dx_plane = dx + plane * g.H * g.W;
      for (int64_t oh = 0; oh < g.Hout; ++oh) {
        for (int64_t ow = 0; ow < g.Wout; ++ow) {
          const Window win = window_at(g, oh, ow);
          const A share = load(gp[(plane * g.Hout + oh) * g.Wout + ow]) /
                          A(avg_divisor(g, win, p.count_include_pad));
          for (int64_t h = win.h0; h < win.h1; ++h) {
            for (int64_t w = win.w0; w < win.w1; ++w) dx_plane[h * g.W + w] += share;
          }
        }
      }
    });
  });
  return dxa.to(dy.dtype());
}

}  // namespace

const kernel::PoolKernels pool_kernels = HG_POOL_KERNELS;

}  // namespace hg::cpu
