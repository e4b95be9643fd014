// CPU kernels of the conv family (kernel/conv.h): conv2d and its backward, on im2col and
// cpu::linalg_kernels.gemm.
//
// Dims: N batch, C channels, G groups (Cg = C / G channels each), O output channels
// (Og = O / groups), H/W height/width, K = Cg kH kW (rows of a group's im2col matrix),
// L = Hout Wout (its columns).
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "halfgrad/core/convert.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/nn_common.h"
#include "halfgrad/cpu/onednn_conv.h"
#include "halfgrad/cpu/row_vectors.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cpu {

namespace {

using kernel::acc_dtype;
using kernel::Conv2dBackward;
using kernel::Conv2dParams;
using nn_common::check_input;
using nn_common::kept_buffer;
using nn_common::parallel_for;

// Calls f(TypeTag<T>{}, TypeTag<A>{}) for the storage type T of a floating dtype and its
// accumulation type A: float for float32, float16 and bfloat16, double for float64.
template <class F>
auto dispatch_conv(DType dtype, F&& f) {
  return visit_floating_dtype("conv2d", dtype, [&]<class T>(TypeTag<T>) {
    return f(TypeTag<T>{}, TypeTag<std::conditional_t<std::is_same_v<T, double>, double, float>>{});
  });
}

// The dtype conv2d's products read: a 16-bit dtype itself where the CPU GEMM runs it on a kernel
// of its own (oneDNN's bfloat16 on AVX512-BF16 or AMX), else float32. Without such a kernel
// every GEMM path widens its 16-bit operands to float32 anyway, and widening x, w and dy once,
// before im2col, costs one pass where widening each image's columns for each product cost one
// per product (float16 on x86: its step took 1.07x the float32 one that way, on a Xeon with
// AMX).
DType compute_dtype(DType dtype) {
  const bool sixteen = dtype == kBFloat16 || dtype == kFloat16;
  return sixteen && !gemm_runs_natively(dtype) ? kFloat32 : dtype;
}

// t as a contiguous tensor of dtype (no copy when it already is one).
Tensor contiguous_as(const Tensor& t, DType dtype) { return t.to(dtype).contiguous(); }

// `out` from a primitive that writes a tensor of `dtype`: straight into out when it has that
// dtype, else into a float32 buffer rounded once into out. run(target) returns whether the
// primitive ran (false: out untouched).
template <class Run>
bool run_into(const Tensor& out, DType dtype, Run&& run) {
  if (out.dtype() == dtype) return run(out);
  const Tensor wide = empty(out.sizes(), dtype);
  if (!run(wide)) return false;
  Tensor(out).copy_(wide);
  return true;
}

// ---- conv2d -------------------------------------------------------------------------------
//
// For each image n and group g: cols = im2col(x[n, g]) is [K, L], and
//   forward:  y[n, g] [Og, L]  = w[g] [Og, K] * cols
//   dweight:  dw[g]   [Og, K] += dy[n, g] [Og, L] * cols^T
//   dx:       dcols   [K, L]   = w[g]^T [K, Og] * dy[n, g],  then col2im adds dcols into dx[n, g]
// x, w, dy and the im2col matrices stay in their dtype (T); the products accumulate in A (float,
// double for float64) into outputs kept in A (y, dcols and dx, dw), which are rounded to T once
// at the end.

using kernel::ConvGeometry;

// x and weight on the CPU, then the shared checks and shapes.
ConvGeometry cpu_conv_geometry(const char* op, const Tensor& x, const Tensor& weight,
                               const Conv2dParams& p) {
  check_input(op, "input", x);
  check_input(op, "weight", weight);
  return kernel::conv_geometry(op, x, weight, p);
}

// NOTE [conv2d's matrix product] Every matrix product of conv2d and its backward goes
// through conv_matmul: cpu::linalg_kernels.gemm where the output is the operands' dtype (the
// forward's y: float32 sums rounded once by the GEMM, NOTE [conv2d forward in one product]),
// and for a 16-bit dtype the CPU GEMM runs natively (bfloat16 on AVX512-BF16 or AMX) with a
// float32 output cpu::gemm_into_float32 (dx's columns and dweight), whose 16-bit operands (the
// weight, im2col's columns, dy) are read as they are and whose products are summed into
// float32 (oneDNN's bfloat16 kernel, or float32 tiles where the measurement finds them faster,
// see NOTE [GEMM path by measurement]). Such a convolution widens no tensor first. A 16-bit
// dtype without a native kernel (float16 on x86) is widened to float32 once, before im2col
// (compute_dtype). dx is summed per image in float32 and rounded once per image, dweight
// summed over the images in float32 and rounded once at the end.
//
// c[M, N] = op(a)[M, K] * op(b)[K, N], plus c's old values when accumulate. Row-major with
// row strides lda/ldb/ldc. op(a) = a stored [M, K], or a^T when trans_a (a stored [K, M]);
// op(b) = b stored [K, N], or b^T when trans_b (b stored [N, K]). c is dense (ldc == N), of the
// accumulation type A.
template <class T, class A>
void conv_matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const T* a,
                 int64_t lda, const T* b, int64_t ldb, A* c, int64_t ldc, bool accumulate) {
  HG_CHECK(ldc == N, "conv2d: internal error: the product's output rows are not dense");
  if (M == 0 || N == 0) return;
  constexpr DType dtype = dtype_of<T>;
  // Transposed operands are strided views: the GEMM reads them without a copy.
  const Tensor ta = from_blob(const_cast<T*>(a), {1, M, K}, dtype,
                              trans_a ? Shape{M * lda, 1, lda} : Shape{M * lda, lda, 1});
  const Tensor tb = from_blob(const_cast<T*>(b), {1, K, N}, dtype,
                              trans_b ? Shape{N * ldb, 1, ldb} : Shape{K * ldb, ldb, 1});
  const Tensor tc = from_blob(c, {1, M, N}, dtype_of<A>);
  if constexpr (std::is_same_v<T, A>) {
    linalg_kernels.gemm(ta, tb, tc, 1.0, accumulate ? 1.0 : 0.0);
  } else {
    gemm_into_float32(ta, tb, tc, accumulate ? 1.0 : 0.0);
  }
}

// cols[(c, ki, kj), (oh, ow)] = x[c, oh sH - pH + ki dH, ow sW - pW + kj dW], zero in the
// padding. x: [Cg, H, W] of one image and group; cols: [K, L].
template <class T>
void im2col(const T* x, const ConvGeometry& g, T* cols) {
  for (int64_t c = 0; c < g.Cg; ++c) {
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        T* row = cols + ((c * g.kH + ki) * g.kW + kj) * g.L();
        for (int64_t oh = 0; oh < g.Hout; ++oh) {
          const int64_t ih = oh * g.sH - g.pH + ki * g.dH;
          T* out = row + oh * g.Wout;
          if (ih < 0 || ih >= g.H) {
            std::fill_n(out, g.Wout, T(0.0f));
            continue;
          }
          const T* in = x + (c * g.H + ih) * g.W;
          if (g.sW == 1) {  // one copy of the row's run inside the input, zeros around it
            const int64_t shift = kj * g.dW - g.pW;  // iw = ow + shift
            const int64_t lo = std::clamp<int64_t>(-shift, 0, g.Wout);
            const int64_t hi = std::clamp<int64_t>(g.W - shift, lo, g.Wout);
            std::fill(out, out + lo, T(0.0f));
            std::copy(in + lo + shift, in + hi + shift, out + lo);
            std::fill(out + hi, out + g.Wout, T(0.0f));
            continue;
          }
          for (int64_t ow = 0; ow < g.Wout; ++ow) {
            const int64_t iw = ow * g.sW - g.pW + kj * g.dW;
            out[ow] = iw >= 0 && iw < g.W ? in[iw] : T(0.0f);
          }
        }
      }
    }
  }
}

// The adjoint of im2col: adds each cols entry into the x position it was read from.
template <class A>
void col2im_add(const A* cols, const ConvGeometry& g, A* dx) {
  for (int64_t c = 0; c < g.Cg; ++c) {
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const A* row = cols + ((c * g.kH + ki) * g.kW + kj) * g.L();
        for (int64_t oh = 0; oh < g.Hout; ++oh) {
          const int64_t ih = oh * g.sH - g.pH + ki * g.dH;
          if (ih < 0 || ih >= g.H) continue;
          const A* in = row + oh * g.Wout;
          A* out = dx + (c * g.H + ih) * g.W;
          if (g.sW == 1) {  // the run inside the input, added in one loop
            const int64_t shift = kj * g.dW - g.pW;
            const int64_t lo = std::clamp<int64_t>(-shift, 0, g.Wout);
            const int64_t hi = std::clamp<int64_t>(g.W - shift, lo, g.Wout);
            for (int64_t ow = lo; ow < hi; ++ow) out[ow + shift] += in[ow];
            continue;
          }
          for (int64_t ow = 0; ow < g.Wout; ++ow) {
            const int64_t iw = ow * g.sW - g.pW + kj * g.dW;
            if (iw >= 0 && iw < g.W) out[iw] += in[ow];
          }
        }
      }
    }
  }
}

// Whether a loop over `count` items of `work` each should run on threads (from its own
// parallel region, one scratch buffer per thread).
bool worth_threads(int64_t count, int64_t work) {
  return count > 1 && count * work >= kParallelGrain && omp_get_max_threads() > 1 &&
         !omp_in_parallel();
}

// Whether values of type A can be stored as dtype by store_as: their own dtype, or a 16-bit
// one from float32. Checked before the kernels' parallel regions (nothing throws inside them).
template <class A>
bool storable_as(DType dtype) {
  return dtype == dtype_of<A> ||
         (std::is_same_v<A, float> && (dtype == kFloat16 || dtype == kBFloat16));
}

// Writes n float32 (or float64) values as `out`'s dtype at element `offset`: a copy when they
// are that dtype, else one rounding each (the 16-bit outputs of a float32 product). out's
// dtype is one storable_as<A> accepts.
template <class A>
void store_as(const A* src, const Tensor& out, int64_t offset, int64_t n) {
  visit_floating_dtype("conv2d", out.dtype(), [&]<class O>(TypeTag<O>) {
    O* dst = out.data_ptr<O>() + offset;
    if constexpr (std::is_same_v<O, A>) {
      std::copy_n(src, n, dst);
    } else if constexpr (std::is_same_v<A, float> && !std::is_same_v<O, double>) {
      convert::from_float(src, dst, n);
    }
  });
}

// NOTE [conv2d forward in one product] The forward writes y in its dtype straight from the
// product: each image's columns get one more row, of ones, and each weight row one more
// column, its output channel's bias, so the product adds the bias inside its float32
// accumulation (exactly: a bias times one) and a 16-bit y is rounded once, by the GEMM. (A
// float32 y, a loop adding the bias and a pass rounding it took 4-5 % of a bf16 CNN step.)
// Where the products run in float32 for a 16-bit dtype (compute_dtype), each image's float32 y
// is rounded into y from a per-thread buffer.
//
// w: [O, Kb] with Kb = K + 1 when the bias is folded in (bias true), else K.
template <class T>
void conv2d_forward_kernel(const T* x, const T* w, bool bias, const Tensor& y,
                           const ConvGeometry& g) {
  const int64_t K = g.K(), L = g.L(), Kb = bias ? K + 1 : K;
  HG_CHECK(storable_as<T>(y.dtype()), "conv2d: internal error: {} products for a {} output",
           dtype_of<T>, y.dtype());
  const bool direct = y.dtype() == dtype_of<T>;  // else T is float32, y 16-bit
  T* const y_direct = direct ? y.data_ptr<T>() : nullptr;
  // Images on threads when there are several; otherwise conv_matmul splits the rows.
#pragma omp parallel if (worth_threads(g.N, g.C * K * L))
  {
    T* const cols = kept_buffer<T>(Kb * L + (direct ? 0 : g.O * L));
    T* const y_image = direct ? nullptr : cols + Kb * L;
    if (bias) std::fill_n(cols + K * L, L, T(1.0f));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      T* const y_n = direct ? y_direct + n * g.O * L : y_image;
      for (int64_t group = 0; group < g.groups; ++group) {
        im2col(x + (n * g.C + group * g.Cg) * g.H * g.W, g, cols);
        conv_matmul(false, false, g.Og, L, Kb, w + group * g.Og * Kb, Kb, cols, L,
                    y_n + group * g.Og * L, L, false);
      }
      if (!direct) store_as(y_image, y, n * g.O * L, g.O * L);
    }
  }
}

// Each image's dx is summed in float32 (col2im adds up to kH kW columns into a position) in a
// per-thread buffer and stored into dx in its dtype, rounded once.
template <class T, class A>
void conv2d_input_grad_kernel(const T* dy, const T* w, const Tensor& dx, const ConvGeometry& g) {
  const int64_t K = g.K(), L = g.L(), image = g.C * g.H * g.W;
  HG_CHECK(storable_as<A>(dx.dtype()), "conv2d_backward: internal error: {} sums for a {} dx",
           dtype_of<A>, dx.dtype());
#pragma omp parallel if (worth_threads(g.N, g.C * K * L))
  {
    A* const dcols = kept_buffer<A>(K * L + image);
    A* const dx_image = dcols + K * L;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      std::fill_n(dx_image, image, A(0));
      for (int64_t group = 0; group < g.groups; ++group) {
        conv_matmul(true, false, K, L, g.Og, w + group * g.Og * K, K,
                    dy + (n * g.O + group * g.Og) * L, L, dcols, L, false);
        col2im_add(dcols, g, dx_image + group * g.Cg * g.H * g.W);
      }
      store_as(dx_image, dx, n * image, image);
    }
  }
}

// NOTE [conv2d weight gradient in image chunks] dweight sums a product over every image. The
// images are cut into chunks of kImagesPerChunk (fixed, whatever the thread count), each chunk
// summed in image order into a partial dweight of its own, and the partials added in chunk
// order: the chunks and groups run on threads, and the bits do not depend on how many there
// are. (One accumulator over all images left the images of a single group on one thread,
// whose small products oneDNN then split over the threads at a loss: with two threads the
// weight gradient took twice its one-thread time.)
constexpr int64_t kImagesPerChunk = 8;

template <class T, class A>
void conv2d_weight_grad_kernel(const T* dy, const T* x, A* dw, const ConvGeometry& g) {
  const int64_t K = g.K(), L = g.L();
  const int64_t chunks = (g.N + kImagesPerChunk - 1) / kImagesPerChunk;
  const int64_t group_size = g.Og * K;  // one group's rows of dw
  if (chunks == 0) {
    std::fill_n(dw, g.O * K, A(0));
    return;
  }
  std::vector<A> partials(size_t(chunks * g.O * K));
#pragma omp parallel if (worth_threads(g.groups * chunks, kImagesPerChunk * g.Og * K * L))
  {
    T* const cols = kept_buffer<T>(K * L);
#pragma omp for schedule(static)
    for (int64_t unit = 0; unit < g.groups * chunks; ++unit) {
      const int64_t group = unit / chunks, chunk = unit % chunks;
      A* partial = partials.data() + (chunk * g.groups + group) * group_size;
      const int64_t first = chunk * kImagesPerChunk;
      const int64_t last = std::min(g.N, first + kImagesPerChunk);
      for (int64_t n = first; n < last; ++n) {
        im2col(x + (n * g.C + group * g.Cg) * g.H * g.W, g, cols);
        conv_matmul(false, true, g.Og, K, L, dy + (n * g.O + group * g.Og) * L, L, cols, L,
                    partial, K, n != first);
      }
    }
  }
  // The partials in chunk order (each chunk's are laid out like dw).
  std::copy_n(partials.data(), g.O * K, dw);
  for (int64_t chunk = 1; chunk < chunks; ++chunk) {
    const A* partial = partials.data() + chunk * g.O * K;
    for (int64_t i = 0; i < g.O * K; ++i) dw[i] += partial[i];
  }
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const char* op = "conv2d";
  const ConvGeometry g = cpu_conv_geometry(op, x, weight, p);
  if (bias.defined()) {
    check_input(op, "bias ([O])", bias);
    kernel::check_conv_bias(op, bias, g, x.dtype());
  }
  const DType compute = compute_dtype(x.dtype());
  Tensor y = empty({g.N, g.O, g.Hout, g.Wout}, x.dtype());
  const auto on_im2col = [&] {
    const Tensor xc = contiguous_as(x, compute);
    const Tensor wc = contiguous_as(weight, compute);
    dispatch_conv(compute, [&]<class T, class A>(TypeTag<T>, TypeTag<A>) {
      if (!bias.defined()) {
        conv2d_forward_kernel<T>(xc.data_ptr<T>(), wc.data_ptr<T>(), false, y, g);
        return;
      }
      // The weight with the bias as its last column, [O, K + 1] (NOTE [conv2d forward in one
      // product]).
      const int64_t K = g.K();
      const Tensor bc = contiguous_as(bias, compute);
      Tensor wb = empty({g.O, K + 1}, compute);
      for (int64_t o = 0; o < g.O; ++o) {
        std::copy_n(wc.data_ptr<T>() + o * K, K, wb.data_ptr<T>() + o * (K + 1));
        wb.data_ptr<T>()[o * (K + 1) + K] = bc.data_ptr<T>()[o];
      }
      conv2d_forward_kernel<T>(xc.data_ptr<T>(), wb.data_ptr<T>(), true, y, g);
    });
  };
  if (!conv_detail::onednn_conv_candidate(x.dtype())) {
    on_im2col();
    return y;
  }
  const DType wide = conv_detail::onednn_conv_dtype(x.dtype());
  const auto on_onednn = [&] {
    const Tensor xd = contiguous_as(x, wide), wd = contiguous_as(weight, wide);
    const Tensor bd = bias.defined() ? contiguous_as(bias, wide) : Tensor();
    return run_into(y, wide, [&](const Tensor& out) {
      return conv_detail::onednn_conv_forward(xd, wd, bd, out, g);
    });
  };
  conv_detail::run_conv(ConvDirection::Forward, x.dtype(), g, bias.defined(), on_onednn,
                        on_im2col);
  return y;
}

Conv2dBackward conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               bool has_bias, const Conv2dParams& p, std::array<bool, 3> needed) {
  const char* op = "conv2d_backward";
  const ConvGeometry g = cpu_conv_geometry(op, x, weight, p);
  check_input(op, "grad_output", dy);
  kernel::check_conv_grad_output(op, dy, g, x.dtype());
  const DType acc = acc_dtype(x.dtype()), compute = compute_dtype(x.dtype());
  const bool onednn = conv_detail::onednn_conv_candidate(x.dtype());
  // oneDNN reads dy in onednn_conv_dtype; the im2col path in the products' dtype.
  const DType wide = conv_detail::onednn_conv_dtype(x.dtype());
  Tensor dyc_kept;
  const auto dyc_of = [&]() -> const Tensor& {
    if (!dyc_kept.defined()) dyc_kept = contiguous_as(dy, compute);
    return dyc_kept;
  };
  // (float16 widens dy once for both paths.)
  const Tensor dyd = !onednn ? Tensor() : wide == compute ? dyc_of() : contiguous_as(dy, wide);
  Conv2dBackward result;
  // dbias with dweight from one oneDNN primitive when both are wanted (in float32, as below).
  const bool bias_with_weight = onednn && needed[1] && needed[2] && has_bias;
  Tensor dba_onednn;
  dispatch_conv(compute, [&]<class T, class A>(TypeTag<T>, TypeTag<A>) {
    if (needed[0]) {
      result.dx = empty(x.sizes(), x.dtype());
      const auto on_im2col = [&] {
        const Tensor wc = contiguous_as(weight, compute);
        conv2d_input_grad_kernel<T, A>(dyc_of().data_ptr<T>(), wc.data_ptr<T>(), result.dx, g);
      };
      if (onednn) {
        conv_detail::run_conv(
            ConvDirection::InputGrad, x.dtype(), g, false,
            [&] {
              const Tensor wd = contiguous_as(weight, wide);
              return run_into(result.dx, wide, [&](const Tensor& out) {
                return conv_detail::onednn_conv_input_grad(dyd, wd, out, g);
              });
            },
            on_im2col);
      } else {
        on_im2col();
      }
    }
    if (needed[1]) {
      Tensor dwa = empty(weight.sizes(), acc);
      if (bias_with_weight) dba_onednn = empty({g.O}, acc);
      bool bias_done = false;
      const auto on_im2col = [&] {
        const Tensor xc = contiguous_as(x, compute);
        conv2d_weight_grad_kernel<T, A>(dyc_of().data_ptr<T>(), xc.data_ptr<T>(),
                                        dwa.data_ptr<A>(), g);
        bias_done = false;
      };
      if (onednn) {
        conv_detail::run_conv(
            ConvDirection::WeightGrad, x.dtype(), g, bias_with_weight,
            [&] {
              const Tensor xd = contiguous_as(x, wide);
              const bool ran = conv_detail::onednn_conv_weight_grad(dyd, xd, dwa, dba_onednn, g);
              bias_done = ran && bias_with_weight;
              return ran;
            },
            on_im2col);
      } else {
        on_im2col();
      }
      result.dweight = dwa.to(x.dtype());
      if (bias_done) result.dbias = dba_onednn.to(x.dtype());
    }
    if (needed[2] && has_bias && !result.dbias.defined()) {
      const Tensor& dyc = dyc_of();
      Tensor dba = empty({g.O}, acc);
      const T* d = dyc.data_ptr<T>();
      A* db = dba.data_ptr<A>();
      const int64_t L = g.L();
      parallel_for(g.O, g.N * L, [&](int64_t o) {
        A total = 0;
        for (int64_t n = 0; n < g.N; ++n) {
          const T* run = d + (n * g.O + o) * L;
          if constexpr (std::is_same_v<T, float>) {  // vector lanes (NOTE [Row vectors])
            total += row_vectors::sum_floats(run, L);
          } else if constexpr (std::is_same_v<A, float>) {  // 16-bit runs widened first
            float* const wide = kept_buffer<float>(L);
            convert::to_float(run, wide, L);
            total += row_vectors::sum_floats(wide, L);
          } else {
            A partial = 0;
            for (int64_t l = 0; l < L; ++l) partial += static_cast<A>(run[l]);
            total += partial;
          }
        }
        db[o] = total;
      });
      result.dbias = dba.to(x.dtype());
    }
  });
  return result;
}

}  // namespace

const kernel::ConvKernels conv_kernels = HG_CONV_KERNELS;

}  // namespace hg::cpu
