// CUDA loss kernels (loss_launch.h): the formulas of ops/loss.cpp, computed in the accumulation
// type A (float, or double for float64) and rounded once to the result dtype (NOTE [Loss
// kernels] in ops/loss.cpp), reduced as NOTE [Loss reductions on CUDA] says.
//
// Dims: N batch, C classes, S positions per sample, R = N S rows (positions) of nll_loss and
// cross_entropy; n the elements of a pointwise loss.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "halfgrad/kernel/formulas.h"
#include "halfgrad/cuda/device_utils.cuh"
#include "halfgrad/cuda/loss_launch.h"

namespace hg::cuda::detail {

namespace {

// ---- helpers -------------------------------------------------------------------------------
//
// Math in A goes through the std:: functions: their float overloads for float, so nothing is
// computed in double.

// An operand's element (present, floating) in A.
template <class A>
__device__ __forceinline__ A read(const LossOperand& operand, int64_t offset) {
  switch (operand.dtype) {
    case DType::Float16:
      return A(__half2float(static_cast<const __half*>(operand.data)[offset]));
    case DType::BFloat16:
      return A(__bfloat162float(static_cast<const __nv_bfloat16*>(operand.data)[offset]));
    case DType::Float64:
      return A(static_cast<const double*>(operand.data)[offset]);
    default:
      return A(static_cast<const float*>(operand.data)[offset]);
  }
}

// A weight's element, 1 when the weight is absent.
template <class A>
__device__ __forceinline__ A read_or_one(const LossOperand& operand, int64_t offset) {
  return operand.data != nullptr ? read<A>(operand, offset) : A(1);
}

// value rounded once to dtype (floating) at data[offset].
template <class V>
__device__ __forceinline__ void write(void* data, DType dtype, int64_t offset, V value) {
  switch (dtype) {
    case DType::Float16:
      static_cast<__half*>(data)[offset] = convert<__half>(value);
      break;
    case DType::BFloat16:
      static_cast<__nv_bfloat16*>(data)[offset] = convert<__nv_bfloat16>(value);
      break;
    case DType::Float64:
      static_cast<double*>(data)[offset] = double(value);
      break;
    default:
      static_cast<float*>(data)[offset] = float(value);
      break;
  }
}

template <class A>
__device__ __forceinline__ A class_weight(const ClassWeight& weight, int64_t c) {
  return weight.values.data != nullptr ? read<A>(weight.values, c * weight.stride) : A(1);
}

// std::max's semantics: b only when a < b, so a NaN in a stays.
template <class A>
__device__ __forceinline__ A max_keep_nan(A a, A b) {
  return a < b ? b : a;
}
// -1, 0 or 1, and NaN for NaN.
template <class A>
__device__ __forceinline__ A sign_a(A x) {
  return x > A(0) ? A(1) : x < A(0) ? A(-1) : x;
}
// softplus(-x) = log(1 + exp(-x)) without overflow.
template <class A>
__device__ __forceinline__ A softplus_neg(A x) {
  return max_keep_nan(-x, A(0)) + std::log1p(std::exp(-std::abs(x)));
}

// Sums over a warp; every lane gets the same bits (each step adds the same two values).
template <class A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
template <class A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    v = std::fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sums a and b over the block (kLossThreads threads, all of them calling) in a fixed tree;
// thread 0 gets the totals.
template <class A>
__device__ __forceinline__ void block_sum2(A& a, A& b) {
  __shared__ A shared_a[kLossThreads];
  __shared__ A shared_b[kLossThreads];
  const int t = threadIdx.x;
  shared_a[t] = a;
  shared_b[t] = b;
  __syncthreads();
  for (int half = kLossThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      shared_a[t] += shared_a[t + half];
      shared_b[t] += shared_b[t + half];
    }
    __syncthreads();
  }
  a = shared_a[0];
  b = shared_b[0];
}

// Pass 1's end: block sums of (loss, weight) into partials [2, gridDim.x].
template <class A>
__device__ __forceinline__ void store_partials(A loss, A weight, A* partials) {
  block_sum2(loss, weight);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = loss;
    partials[gridDim.x + blockIdx.x] = weight;
  }
}

__device__ __forceinline__ int64_t grid_start() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() { return int64_t(gridDim.x) * blockDim.x; }

// Row r's base offsets in input, target and the per-row gradient.
struct RowBase {
  int64_t input, target, grad;
};
__device__ __forceinline__ RowBase row_base(const ClassRows& rows, int64_t r) {
  const int64_t n = r / rows.S, s = r - n * rows.S;
  int64_t off[3];
  walk_offsets(rows.spatial, s, off);
  return {n * rows.input_n + off[0], n * rows.target_n + off[1], n * rows.grad_n + off[2]};
}

// ---- pointwise losses: forward -------------------------------------------------------------

template <class A, PointwiseLoss K>
__device__ __forceinline__ A pointwise_value(A x, A y, A w, A p, A beta) {
  if constexpr (K == PointwiseLoss::Mse) {
    return (x - y) * (x - y);
  } else if constexpr (K == PointwiseLoss::L1) {
    return std::abs(x - y);
  } else if constexpr (K == PointwiseLoss::SmoothL1) {
    const A d = std::abs(x - y);
    return d < beta ? A(0.5) * d * d / beta : d - A(0.5) * beta;  // beta = 0: l1
  } else if constexpr (K == PointwiseLoss::BinaryCrossEntropy) {
    // Each log clamped at -100, as torch: x = 0 or 1 gives a finite loss.
    const A log_x = max_keep_nan(std::log(x), A(-100));
    const A log_1mx = max_keep_nan(std::log1p(-x), A(-100));
    return -w * (y * log_x + (A(1) - y) * log_1mx);
  } else if constexpr (K == PointwiseLoss::BinaryCrossEntropyWithLogits) {
    return w * ((A(1) - y) * x + (A(1) + (p - A(1)) * y) * softplus_neg(x));
  } else if constexpr (K == PointwiseLoss::KlDiv) {
    return (y == A(0) ? A(0) : y * std::log(y)) - y * x;  // xlogy: 0 where y == 0
  } else {                                                // KlDivLogTarget
    return std::exp(y) * (y - x);
  }
}

// None: out[i] = loss i. Sum / Mean: block sums into partials (a grid of fixed size).
template <class A, PointwiseLoss K>
__global__ void pointwise_loss_kernel(const Walk walk, LossOperand input, LossOperand target,
                                      LossOperand weight, LossOperand pos_weight, A beta,
                                      bool reduce, void* out, DType out_dtype, A* partials,
                                      DeviceErrorSlot* slot) {
  A sum = 0;
  [[maybe_unused]] bool reported = false;
  for (int64_t i = grid_start(); i < walk.numel; i += grid_step()) {
    int64_t off[4];
    walk_offsets(walk, i, off);
    const A x = read<A>(input, off[0]);
    if constexpr (K == PointwiseLoss::BinaryCrossEntropy) {
      // Probabilities only; NaN fails too, as torch. One report per thread at most (the slot
      // is in host-mapped memory: an input of logits would make every element a report).
      if (!(x >= A(0) && x <= A(1)) && !reported) {
        reported = true;
        report_device_error(slot, DeviceError::BinaryCrossEntropyInput, 0,
                            __double_as_longlong(double(x)), 0);
      }
    }
    const A loss = pointwise_value<A, K>(x, read<A>(target, off[1]), read_or_one<A>(weight, off[2]),
                                         read_or_one<A>(pos_weight, off[3]), beta);
    if (reduce) {
      sum += loss;
    } else {
      write(out, out_dtype, i, loss);
    }
  }
  if (reduce) store_partials(sum, A(0), partials);
}

// ---- pointwise losses: backward ------------------------------------------------------------

template <class A, PointwiseLoss K>
__global__ void pointwise_loss_backward_kernel(const Walk walk, LossOperand input,
                                               LossOperand target, LossOperand grad,
                                               LossOperand weight, LossOperand pos_weight, A beta,
                                               A divisor, void* d_input, DType dx_dtype,
                                               void* d_target, DType dy_dtype) {
  for (int64_t i = grid_start(); i < walk.numel; i += grid_step()) {
    int64_t off[5];
    walk_offsets(walk, i, off);
    const A x = read<A>(input, off[0]), y = read<A>(target, off[1]);
    const A g = read<A>(grad, off[2]) / divisor;
    A dx, dy;
    if constexpr (K == PointwiseLoss::Mse) {
      dx = A(2) * (x - y) * g;
      dy = -dx;
    } else if constexpr (K == PointwiseLoss::L1) {
      dx = g * sign_a(x - y);  // 0 where x == y, as torch
      dy = -dx;
    } else if constexpr (K == PointwiseLoss::SmoothL1) {
      const A d = x - y;
      dx = g * (beta > A(0) && std::abs(d) < beta ? d / beta : sign_a(d));
      dy = -dx;
    } else if constexpr (K == PointwiseLoss::BinaryCrossEntropy) {
      const A gw = g * read_or_one<A>(weight, off[3]);
      dx = gw * (x - y) / std::fmax(x * (A(1) - x), A(1e-12));
      dy = gw * (std::log1p(-x) - std::log(x));  // -logit(x), unclamped as torch's
    } else if constexpr (K == PointwiseLoss::BinaryCrossEntropyWithLogits) {
      const A gw = g * read_or_one<A>(weight, off[3]);
      const A p = read_or_one<A>(pos_weight, off[4]);
      const A sigmoid = A(1) / (A(1) + std::exp(-x));
      dx = gw * ((A(1) + (p - A(1)) * y) * sigmoid - p * y);
      dy = gw * ((p - A(1)) * softplus_neg(x) - x);
    } else if constexpr (K == PointwiseLoss::KlDiv) {
      dx = -g * y;
      dy = y != A(0) ? g * (std::log(y) + A(1) - x) : A(0);  // 0 where y == 0, as torch
    } else {  // KlDivLogTarget: p = exp(y), the target probabilities
      const A gp = g * std::exp(y);
      dx = -gp;
      dy = gp * (y - x + A(1));
    }
    if (d_input != nullptr) write(d_input, dx_dtype, i, dx);
    if (d_target != nullptr) write(d_target, dy_dtype, i, dy);
  }
}

// ---- reductions ----------------------------------------------------------------------------

// Pass 2: one block of kLossThreads sums the partials; the result (divided for Mean) is
// rounded once into out. safe_divisor, when not null, gets the divisor, or 1 where it is 0
// (every target ignored: the backward's coefficients are all 0 and so is its gradient).
template <class A>
__global__ void finish_kernel(const A* partials, int blocks, bool mean, bool divide_by_weights,
                              double divisor, void* out, DType out_dtype, A* safe_divisor) {
  A loss = 0, weight = 0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) {
    loss += partials[i];
    weight += partials[blocks + i];
  }
  block_sum2(loss, weight);
  if (threadIdx.x == 0) {
    const double d = divide_by_weights ? double(weight) : divisor;
    write(out, out_dtype, 0, mean ? double(loss) / d : double(loss));
    if (safe_divisor != nullptr) *safe_divisor = A(d == 0.0 ? 1.0 : d);
  }
}

// Pass 1 over per-row (loss, weight) pairs.
template <class A>
__global__ void row_partials_kernel(const A* row_buffer, int64_t R, A* partials) {
  A loss = 0, weight = 0;
  for (int64_t r = grid_start(); r < R; r += grid_step()) {
    loss += row_buffer[2 * r];
    weight += row_buffer[2 * r + 1];
  }
  store_partials(loss, weight, partials);
}

// ---- nll_loss ------------------------------------------------------------------------------

template <class A>
__global__ void nll_loss_kernel(const ClassRows rows, LossOperand input, const int64_t* target,
                                ClassWeight weight, int64_t ignore_index, bool reduce, void* out,
                                DType out_dtype, A* partials, DeviceErrorSlot* slot) {
  const int64_t R = rows.N * rows.S;
  A loss_sum = 0, weight_sum = 0;
  for (int64_t r = grid_start(); r < R; r += grid_step()) {
    const RowBase base = row_base(rows, r);
    const int64_t k = target[base.target];
    A loss = 0;
    if (k != ignore_index) {
      if (k < 0 || k >= rows.C) {  // reported; the row counts as ignored
        report_device_error(slot, DeviceError::NllLossTarget, 0, k, rows.C);
      } else {
        const A w = class_weight<A>(weight, k);
        loss = -w * read<A>(input, base.input + k * rows.input_c);
        weight_sum += w;
      }
    }
    if (reduce) {
      loss_sum += loss;
    } else {
      write(out, out_dtype, r, loss);
    }
  }
  if (reduce) store_partials(loss_sum, weight_sum, partials);
}

// Element e of input's [N, C, S] (row-major) as its row and class.
struct ElementAt {
  int64_t r, c;
};
__device__ __forceinline__ ElementAt element_at(const ClassRows& rows, int64_t e) {
  const int64_t n = e / (rows.C * rows.S), rest = e - n * rows.C * rows.S;
  const int64_t c = rest / rows.S, s = rest - c * rows.S;
  return {n * rows.S + s, c};
}

// The gradient of row r's loss.
template <class A>
__device__ __forceinline__ A row_grad(const LossOperand& grad, bool per_row, const RowBase& base,
                                      const A* divisor) {
  const A g = read<A>(grad, per_row ? base.grad : 0);
  return divisor != nullptr ? g / *divisor : g;
}

// A class index that takes part in the loss: not ignored, in [0, C).
__device__ __forceinline__ bool counts(int64_t k, int64_t ignore_index, int64_t C) {
  return k != ignore_index && k >= 0 && k < C;
}

template <class A>
__global__ void nll_loss_backward_kernel(const ClassRows rows, const int64_t* target,
                                         ClassWeight weight, LossOperand grad, bool grad_per_row,
                                         const A* divisor, int64_t ignore_index, void* d_input,
                                         DType dx_dtype) {
  const int64_t total = rows.N * rows.C * rows.S;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const ElementAt at = element_at(rows, e);
    const RowBase base = row_base(rows, at.r);
    const int64_t k = target[base.target];
    A dx = 0;
    if (at.c == k && counts(k, ignore_index, rows.C)) {
      dx = -row_grad<A>(grad, grad_per_row, base, divisor) * class_weight<A>(weight, k);
    }
    write(d_input, dx_dtype, e, dx);
  }
}

// ---- cross_entropy -------------------------------------------------------------------------
//
// Row r, with z_c = x_c - m (m the row's max), log-sum ls = log sum_c exp(z_c) and
// log-probabilities z_c - ls, has the loss -sum_c a_c (z_c - ls) = ls sum_c a_c - sum_c a_c z_c,
// a_c its target coefficients (ops/loss.cpp): for class index t, (1 - eps) w_t at t plus
// (eps / C) w_c; for probabilities y, w_c ((1 - eps) y_c + eps / C). The class-index form is
// written as -(1 - eps) w_t (z_t - ls) - (eps / C) (sum_c w_c z_c - ls sum_c w_c), so without
// smoothing only z_t and ls enter (no cancellation of large terms).

inline constexpr int kWarp = 32;
inline constexpr int kRowsPerBlock = kLossThreads / kWarp;

template <class A>
__global__ void cross_entropy_kernel(const ClassRows rows, LossOperand input,
                                     const int64_t* target_index, LossOperand target_prob,
                                     ClassWeight weight, int64_t ignore_index, A eps, bool reduce,
                                     void* out, DType out_dtype, A* stats, A* row_buffer,
                                     DeviceErrorSlot* slot) {
  const int lane = threadIdx.x % kWarp;
  const int64_t R = rows.N * rows.S, C = rows.C;
  const A uniform = eps / A(C), share = A(1) - eps;
  for (int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; r < R;
       r += int64_t(gridDim.x) * kRowsPerBlock) {  // one warp per row: r is warp-uniform
    const RowBase base = row_base(rows, r);
    int64_t k = 0;
    bool ignored = false;
    if (target_index != nullptr) {
      k = target_index[base.target];
      if (k != ignore_index && (k < 0 || k >= C)) {  // reported; the row counts as ignored
        if (lane == 0) report_device_error(slot, DeviceError::CrossEntropyTarget, 0, k, C);
      }
      ignored = !counts(k, ignore_index, C);
    }
    if (ignored) {
      if (lane == 0) {
        stats[3 * r] = stats[3 * r + 1] = stats[3 * r + 2] = A(0);
        if (reduce) {
          row_buffer[2 * r] = row_buffer[2 * r + 1] = A(0);
        } else {
          write(out, out_dtype, r, A(0));
        }
      }
      continue;
    }
    A m = -INFINITY;
    for (int64_t c = lane; c < C; c += kWarp)
      m = std::fmax(m, read<A>(input, base.input + c * rows.input_c));
    m = warp_max(m);
    // sum_c exp(z_c), sum_c coef_c z_c and sum_c coef_c, coef the class weight (class indices,
    // only with smoothing) or the coefficient a_c (probabilities).
    A exp_sum = 0, weighted = 0, coef_sum = 0;
    for (int64_t c = lane; c < C; c += kWarp) {
      const A z = read<A>(input, base.input + c * rows.input_c) - m;
      exp_sum += std::exp(z);
      if (target_index == nullptr) {
        const A y = read<A>(target_prob, base.target + c * rows.target_c);
        const A a = class_weight<A>(weight, c) * (share * y + uniform);
        weighted += a * z;
        coef_sum += a;
      } else if (eps > A(0)) {
        const A w = class_weight<A>(weight, c);
        weighted += w * z;
        coef_sum += w;
      }
    }
    exp_sum = warp_sum(exp_sum);
    weighted = warp_sum(weighted);
    coef_sum = warp_sum(coef_sum);
    if (lane != 0) continue;
    const A log_sum = std::log(exp_sum);
    A loss, row_weight, a_total;
    if (target_index != nullptr) {
      const A w_k = class_weight<A>(weight, k);
      const A z_k = read<A>(input, base.input + k * rows.input_c) - m;
      loss = -share * w_k * (z_k - log_sum);
      if (eps > A(0)) loss -= uniform * (weighted - log_sum * coef_sum);
      row_weight = w_k;
      a_total = share * w_k + uniform * coef_sum;
    } else {
      loss = log_sum * coef_sum - weighted;
      row_weight = A(1);
      a_total = coef_sum;
    }
    stats[3 * r] = m;
    stats[3 * r + 1] = log_sum;
    stats[3 * r + 2] = a_total;
    if (reduce) {
      row_buffer[2 * r] = loss;
      row_buffer[2 * r + 1] = row_weight;
    } else {
      write(out, out_dtype, r, loss);
    }
  }
}

template <class A>
__global__ void cross_entropy_backward_kernel(const ClassRows rows, LossOperand input,
                                              const int64_t* target_index, LossOperand target_prob,
                                              ClassWeight weight, LossOperand grad,
                                              bool grad_per_row, const A* divisor, const A* stats,
                                              int64_t ignore_index, A eps, void* d_input,
                                              DType dx_dtype, void* d_target, DType dy_dtype) {
  const int64_t total = rows.N * rows.C * rows.S;
  const A uniform = eps / A(rows.C), share = A(1) - eps;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const ElementAt at = element_at(rows, e);
    const RowBase base = row_base(rows, at.r);
    const A w_c = class_weight<A>(weight, at.c);
    A a_c;
    if (target_index != nullptr) {
      const int64_t k = target_index[base.target];
      if (!counts(k, ignore_index, rows.C)) {
        write(d_input, dx_dtype, e, A(0));
        continue;
      }
      a_c = uniform * w_c + (at.c == k ? share * class_weight<A>(weight, k) : A(0));
    } else {
      a_c = w_c * (share * read<A>(target_prob, base.target + at.c * rows.target_c) + uniform);
    }
    const A g = row_grad<A>(grad, grad_per_row, base, divisor);
    const A* row = stats + 3 * at.r;
    const A log_p = (read<A>(input, base.input + at.c * rows.input_c) - row[0]) - row[1];
    write(d_input, dx_dtype, e, g * (row[2] * std::exp(log_p) - a_c));
    if (d_target != nullptr) write(d_target, dy_dtype, e, -g * share * w_c * log_p);
  }
}

template <class A>
__global__ void class_coefficients_kernel(const ClassRows rows, const int64_t* target,
                                          ClassWeight weight, int64_t ignore_index, A eps,
                                          void* out, DType out_dtype) {
  const int64_t total = rows.N * rows.C * rows.S;
  const A uniform = eps / A(rows.C), share = A(1) - eps;
  for (int64_t e = grid_start(); e < total; e += grid_step()) {
    const ElementAt at = element_at(rows, e);
    const int64_t k = target[row_base(rows, at.r).target];
    A a = 0;
    if (counts(k, ignore_index, rows.C)) {
      if (eps > A(0)) a = uniform * class_weight<A>(weight, at.c);
      if (at.c == k) a += share * class_weight<A>(weight, k);
    }
    write(out, out_dtype, e, a);
  }
}

// Calls f(TypeTag<A>{}) for the accumulation dtype acc.
template <class F>
cudaError_t visit_acc(DType acc, F&& f) {
  if (acc == DType::Float64) return f(TypeTag<double>{});
  return f(TypeTag<float>{});
}

// Calls f(std::integral_constant<PointwiseLoss, K>{}) for kind.
template <class F>
cudaError_t visit_pointwise(PointwiseLoss kind, F&& f) {
  using P = PointwiseLoss;
  return kernel::with_value<P::Mse, P::L1, P::SmoothL1, P::BinaryCrossEntropy,
                            P::BinaryCrossEntropyWithLogits, P::KlDiv, P::KlDivLogTarget>(kind, f);
}

// Pass 2 of a reduction (pass 1 wrote `blocks` partials).
template <class A>
cudaError_t launch_finish(const A* partials, int blocks, LossReduction reduction,
                          bool divide_by_weights, double divisor, void* out, DType out_dtype,
                          void* safe_divisor, cudaStream_t stream) {
  finish_kernel<A><<<1, kLossThreads, 0, stream>>>(
      partials, blocks, reduction == LossReduction::Mean, divide_by_weights, divisor, out,
      out_dtype, static_cast<A*>(safe_divisor));
  return cudaGetLastError();
}

// One thread per element of input's [N, C, S]: launch(TypeTag<A>{}, grid) launches the kernel
// for the accumulation type A of acc on that grid.
template <class F>
cudaError_t launch_per_element(const ClassRows& rows, DType acc, F&& launch) {
  const int64_t total = rows.N * rows.C * rows.S;
  if (total == 0) return cudaSuccess;
  return visit_acc(acc, [&](auto acc_tag) {
    launch(acc_tag, grid_for(total));
    return cudaGetLastError();
  });
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_pointwise_loss(PointwiseLoss kind, double beta, const Walk& walk,
                                  LossOperand input, LossOperand target, LossOperand weight,
                                  LossOperand pos_weight, DType acc, LossReduction reduction,
                                  double divisor, void* out, DType out_dtype, void* partials,
                                  DeviceErrorSlot* slot, cudaStream_t stream) {
  const bool reduce = reduction != LossReduction::None;
  if (!reduce && walk.numel == 0) return cudaSuccess;
  return visit_acc(acc, [&](auto acc_tag) {
    using A = typename decltype(acc_tag)::type;
    return visit_pointwise(kind, [&](auto kind_tag) {
      constexpr PointwiseLoss K = decltype(kind_tag)::value;
      const int blocks = reduce ? loss_partial_blocks(walk.numel) : 0;
      pointwise_loss_kernel<A, K>
          <<<reduce ? unsigned(blocks) : grid_for(walk.numel, kLossThreads), kLossThreads, 0,
             stream>>>(walk, input, target, weight, pos_weight, A(beta), reduce, out, out_dtype,
                       static_cast<A*>(partials), slot);
      cudaError_t status = cudaGetLastError();
      if (status != cudaSuccess || !reduce) return status;
      return launch_finish<A>(static_cast<const A*>(partials), blocks, reduction,
                              /*divide_by_weights=*/false, divisor, out, out_dtype, nullptr,
                              stream);
    });
  });
}

cudaError_t launch_pointwise_loss_backward(PointwiseLoss kind, double beta, const Walk& walk,
                                           LossOperand input, LossOperand target, LossOperand grad,
                                           LossOperand weight, LossOperand pos_weight, DType acc,
                                           double divisor, void* d_input, void* d_target,
                                           cudaStream_t stream) {
  if (walk.numel == 0) return cudaSuccess;
  return visit_acc(acc, [&](auto acc_tag) {
    using A = typename decltype(acc_tag)::type;
    return visit_pointwise(kind, [&](auto kind_tag) {
      constexpr PointwiseLoss K = decltype(kind_tag)::value;
      pointwise_loss_backward_kernel<A, K><<<grid_for(walk.numel), kThreads, 0, stream>>>(
          walk, input, target, grad, weight, pos_weight, A(beta), A(divisor), d_input, input.dtype,
          d_target, target.dtype);
      return cudaGetLastError();
    });
  });
}

cudaError_t launch_nll_loss(const ClassRows& rows, LossOperand input, const int64_t* target,
                            ClassWeight weight, int64_t ignore_index, DType acc,
                            LossReduction reduction, void* out, DType out_dtype, void* partials,
                            void* safe_divisor, DeviceErrorSlot* slot, cudaStream_t stream) {
  const int64_t R = rows.N * rows.S;
  const bool reduce = reduction != LossReduction::None;
  if (!reduce && R == 0) return cudaSuccess;
  return visit_acc(acc, [&](auto acc_tag) {
    using A = typename decltype(acc_tag)::type;
    const int blocks = reduce ? loss_partial_blocks(R) : 0;
    nll_loss_kernel<A>
        <<<reduce ? unsigned(blocks) : grid_for(R, kLossThreads), kLossThreads, 0, stream>>>(
            rows, input, target, weight, ignore_index, reduce, out, out_dtype,
            static_cast<A*>(partials), slot);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess || !reduce) return status;
    return launch_finish<A>(static_cast<const A*>(partials), blocks, reduction,
                            /*divide_by_weights=*/true, 0.0, out, out_dtype, safe_divisor, stream);
  });
}

cudaError_t launch_nll_loss_backward(const ClassRows& rows, const int64_t* target,
                                     ClassWeight weight, LossOperand grad, bool grad_per_row,
                                     const void* divisor, int64_t ignore_index, DType acc,
                                     void* d_input, DType d_input_dtype, cudaStream_t stream) {
  return launch_per_element(rows, acc, [&](auto acc_tag, unsigned grid) {
    using A = typename decltype(acc_tag)::type;
    nll_loss_backward_kernel<A><<<grid, kThreads, 0, stream>>>(
        rows, target, weight, grad, grad_per_row, static_cast<const A*>(divisor), ignore_index,
        d_input, d_input_dtype);
  });
}

cudaError_t launch_cross_entropy(const ClassRows& rows, LossOperand input,
                                 const ClassTargets& targets, DType acc, LossReduction reduction,
                                 double prob_divisor, void* out, DType out_dtype, void* stats,
                                 void* row_buffer, void* partials, void* safe_divisor,
                                 DeviceErrorSlot* slot, cudaStream_t stream) {
  const int64_t R = rows.N * rows.S;
  const bool reduce = reduction != LossReduction::None;
  return visit_acc(acc, [&](auto acc_tag) {
    using A = typename decltype(acc_tag)::type;
    if (R > 0) {
      cross_entropy_kernel<A><<<grid_for(R, kRowsPerBlock), kLossThreads, 0, stream>>>(
          rows, input, targets.index, targets.prob, targets.weight, targets.ignore_index,
          A(targets.label_smoothing), reduce, out, out_dtype, static_cast<A*>(stats),
          static_cast<A*>(row_buffer), slot);
      const cudaError_t status = cudaGetLastError();
      if (status != cudaSuccess) return status;
    }
    if (!reduce) return cudaSuccess;
    const int blocks = loss_partial_blocks(R);
    row_partials_kernel<A><<<blocks, kLossThreads, 0, stream>>>(static_cast<const A*>(row_buffer),
                                                                R, static_cast<A*>(partials));
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    return launch_finish<A>(static_cast<const A*>(partials), blocks, reduction,
                            /*divide_by_weights=*/targets.index != nullptr, prob_divisor, out,
                            out_dtype, safe_divisor, stream);
  });
}

cudaError_t launch_cross_entropy_backward(const ClassRows& rows, LossOperand input,
                                          const ClassTargets& targets, LossOperand grad,
                                          bool grad_per_row, const void* divisor, const void* stats,
                                          DType acc, void* d_input, DType d_input_dtype,
                                          void* d_target, DType d_target_dtype,
                                          cudaStream_t stream) {
  return launch_per_element(rows, acc, [&](auto acc_tag, unsigned grid) {
    using A = typename decltype(acc_tag)::type;
    cross_entropy_backward_kernel<A><<<grid, kThreads, 0, stream>>>(
        rows, input, targets.index, targets.prob, targets.weight, grad, grad_per_row,
        static_cast<const A*>(divisor), static_cast<const A*>(stats), targets.ignore_index,
        A(targets.label_smoothing), d_input, d_input_dtype, d_target, d_target_dtype);
  });
}

cudaError_t launch_class_coefficients(const ClassRows& rows, const ClassTargets& targets, DType acc,
                                      void* out, DType out_dtype, cudaStream_t stream) {
  return launch_per_element(rows, acc, [&](auto acc_tag, unsigned grid) {
    using A = typename decltype(acc_tag)::type;
    class_coefficients_kernel<A>
        <<<grid, kThreads, 0, stream>>>(rows, targets.index, targets.weight, targets.ignore_index,
                                        A(targets.label_smoothing), out, out_dtype);
  });
}

}  // namespace hg::cuda::detail
