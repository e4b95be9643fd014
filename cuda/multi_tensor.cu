// Multi-tensor kernels (NOTE [Multi-tensor apply] in multi_tensor_launch.h): GradScaler's
// unscale + inf check and scale update, the fused Adam/AdamW, SGD, RMSprop and Adagrad steps,
// the total norm and clipping of clip_grad_norm_, clamping, finiteness checks.
//
// Every kernel that reads a scale or a flag reads it from device memory, so a training step
// built from them never needs the host to look at a value (NOTE [No host sync in the step]
// in multi_tensor.cpp).
#include "halfgrad/cuda/multi_tensor_launch.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "halfgrad/core/random.h"
#include "halfgrad/core/stochastic_rounding.h"
#include "halfgrad/cuda/device_utils.cuh"
#include "halfgrad/kernel/update_rules.h"

namespace hg::cuda::detail {

namespace {

// Threads per block of the chunked kernels; the block reductions assume exactly this many.
constexpr int kBlock = 512;
// Most blocks one launch starts (the blocks walk the chunks grid-stride).
constexpr int64_t kMaxBlocks = 65535LL * 4;

// ---- the chunk table -------------------------------------------------------------------------

// What a multi-tensor launch passes by value. kMaxTensors keeps the table within 3 KiB, leaving
// the rest of the 4 KiB of kernel arguments to the kernel's own.
template <int Lists>
struct ChunkTable {
  static constexpr int kMaxTensors = (3072 - 16) / (8 * Lists + 32);
  void* data[Lists][kMaxTensors];
  int64_t numel[kMaxTensors];
  float* steps[kMaxTensors];
  uint64_t first_block[kMaxTensors];  // the optimizers' bf16_params draws (NOTE [bf16_params])
  int64_t first_chunk[kMaxTensors + 1];  // first_chunk[count]: the chunks of the whole table
  int32_t count;
};
static_assert(sizeof(ChunkTable<1>) <= 3072 && sizeof(ChunkTable<5>) <= 3072);

struct Chunk {
  int tensor;
  int64_t begin, end;  // elements of that tensor
};

template <int Lists>
__device__ __forceinline__ Chunk chunk_at(const ChunkTable<Lists>& table, int64_t chunk) {
  int t = 0;
  while (t + 1 < table.count && chunk >= table.first_chunk[t + 1]) ++t;
  const int64_t begin = (chunk - table.first_chunk[t]) * kChunkSize;
  const int64_t end = begin + kChunkSize < table.numel[t] ? begin + kChunkSize : table.numel[t];
  return {t, begin, end};
}

template <int Lists>
__device__ __forceinline__ int64_t chunks_in(const ChunkTable<Lists>& table) {
  return table.first_chunk[table.count];
}

// ---- element helpers -------------------------------------------------------------------------

__device__ __forceinline__ bool is_finite(float x) { return isfinite(x); }
__device__ __forceinline__ bool is_finite(double x) { return isfinite(x); }

// Replaces each element v of data[begin, end) by f(v) (f: T -> T), this block's threads
// sharing the range. When data is 16-byte aligned the range goes in 16-byte packs (begin is a
// multiple of kChunkSize, so of the pack size), the tail element by element.
template <class T, class F>
__device__ __forceinline__ void map_range(T* data, int64_t begin, int64_t end, F&& f) {
  int64_t tail = begin;
  if (aligned16(data)) {
    constexpr int kSize = Pack<T>::kSize;
    const int64_t packs = (end - begin) / kSize;
    Pack<T>* packed = reinterpret_cast<Pack<T>*>(data + begin);
    for (int64_t k = threadIdx.x; k < packs; k += blockDim.x) {
      Pack<T> pack = packed[k];
#pragma unroll
      for (int j = 0; j < kSize; ++j) pack.v[j] = f(pack.v[j]);
      packed[k] = pack;
    }
    tail = begin + packs * kSize;
  }
  for (int64_t i = tail + threadIdx.x; i < end; i += blockDim.x) data[i] = f(data[i]);
}

// Calls g(v) for each element v of data[begin, end), as map_range reads them.
template <class T, class G>
__device__ __forceinline__ void visit_range(const T* data, int64_t begin, int64_t end, G&& g) {
  int64_t tail = begin;
  if (aligned16(data)) {
    constexpr int kSize = Pack<T>::kSize;
    const int64_t packs = (end - begin) / kSize;
    const Pack<T>* packed = reinterpret_cast<const Pack<T>*>(data + begin);
    for (int64_t k = threadIdx.x; k < packs; k += blockDim.x) {
      const Pack<T> pack = packed[k];
#pragma unroll
      for (int j = 0; j < kSize; ++j) g(pack.v[j]);
    }
    tail = begin + packs * kSize;
  }
  for (int64_t i = tail + threadIdx.x; i < end; i += blockDim.x) g(data[i]);
}

// ---- kernels: GradScaler ---------------------------------------------------------------------

// NOTE [Unscale checks input and result] torch's unscale flags a non-finite gradient as read.
// Here the value stored is checked too: with a scale below 1 a finite gradient can overflow
// when unscaled (to inf in float16), and the step must not apply it. For a scale >= 1 (every
// scale GradScaler makes from its defaults) the two checks agree.
template <class T>
__global__ void __launch_bounds__(kBlock)
    unscale_kernel(const __grid_constant__ ChunkTable<1> table, const float* inv_scale,
                   float* found_inf) {
  using C = compute_t<T>;
  const C factor = C(*inv_scale);
  bool non_finite = false;
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    map_range(static_cast<T*>(table.data[0][k.tensor]), k.begin, k.end, [&](T v) {
      const C x = convert<C>(v);
      const T out = convert<T>(kernel::rules::unscale(x, factor));
      non_finite |= !(is_finite(x) && is_finite(convert<C>(out)));
      return out;
    });
  }
  // Every thread reaches this (the loop bounds are the block's): one store per block.
  if (__syncthreads_or(non_finite) && threadIdx.x == 0) *found_inf = 1.0f;
}

__global__ void reciprocal_scale_kernel(const float* scale, float* inv_scale) {
  *inv_scale = static_cast<float>(1.0 / static_cast<double>(*scale));
}

constexpr int kMaxFlags = 64;
struct FlagList {
  const float* flags[kMaxFlags];
  int32_t count;
};

__global__ void sum_flags_kernel(FlagList list, float* out, bool accumulate) {
  float sum = accumulate ? *out : 0.0f;
  for (int i = 0; i < list.count; ++i) sum += *list.flags[i];
  *out = sum;
}

// One thread: GradScaler::apply_update_rule and check_collapse of the CPU path, on the device
// (NOTE [Scale update on the device] in grad_scaler.cpp).
__global__ void update_scale_kernel(float* scale, int32_t* growth_tracker, int32_t* counters,
                                    const float* found_inf, ScaleUpdateArgs a,
                                    ScalerMonitor* monitor) {
  constexpr int32_t kCountMax = 2147483646;  // counters saturate rather than wrap
  const bool found = found_inf != nullptr && *found_inf != 0.0f;
  float s = *scale;
  if (a.set_scale) {
    s = static_cast<float>(a.new_scale);
  } else if (found) {
    *growth_tracker = 0;
    const int32_t overflows = counters[kOverflowTracker] < kCountMax
                                  ? counters[kOverflowTracker] + 1
                                  : counters[kOverflowTracker];
    counters[kOverflowTracker] = overflows;
    if (int64_t(overflows) > a.hysteresis) {
      float backed_off = static_cast<float>(static_cast<double>(s) * a.backoff_factor);
      if (a.has_min_scale && static_cast<double>(backed_off) < a.min_scale) {
        backed_off = static_cast<float>(a.min_scale);
      }
      s = backed_off;
    }
  } else {
    counters[kOverflowTracker] = 0;
    const int64_t successful = int64_t(*growth_tracker) + 1;
    if (successful == a.growth_interval) {
      float grown = static_cast<float>(static_cast<double>(s) * a.growth_factor);
      if (a.has_max_scale && static_cast<double>(grown) > a.max_scale) {
        const float bound = static_cast<float>(a.max_scale);
        grown = s < bound ? bound : s;  // std::max(s, bound)
      }
      if (isfinite(grown)) s = grown;  // growth only to a finite scale (torch)
      *growth_tracker = 0;
    } else {
      *growth_tracker = static_cast<int32_t>(successful);
    }
  }
  *scale = s;

  // The collapse alarm's bookkeeping (NOTE [Scale collapse alarm] in grad_scaler.h).
  const int32_t previous_skips = counters[kConsecutiveSkips];
  const int32_t skips =
      found ? (previous_skips < kCountMax ? previous_skips + 1 : previous_skips) : 0;
  counters[kConsecutiveSkips] = skips;
  int32_t kind = 0;
  if (a.alarm_after_consecutive_skips > 0 && int64_t(skips) == a.alarm_after_consecutive_skips) {
    kind = 1;
  }
  if (a.has_alarm_floor) {
    if (static_cast<double>(s) < a.alarm_floor && counters[kBelowFloor] == 0) {
      counters[kBelowFloor] = 1;
      if (kind == 0) kind = 2;
    } else if (static_cast<double>(s) >= a.alarm_floor) {
      counters[kBelowFloor] = 0;
    }
  }
  if (kind != 0) {
    const int32_t alarms = counters[kAlarms] + 1;
    counters[kAlarms] = alarms;
    if (monitor != nullptr) {
      volatile ScalerMonitor* m = monitor;
      m->kind = kind;
      m->consecutive_skips = skips;
      m->scale = s;
      __threadfence_system();  // the fields reach the host before the count that announces them
      m->alarms = alarms;
      __threadfence_system();
    }
  }
}

// ---- kernels: fused optimizers ---------------------------------------------------------------

// Stores a parameter's new value: rounded to nearest, or with bf16_params (T bfloat16) rounded
// stochastically with word i % 4 of block first_block + i / 4 of seed, the CPU pass's word.
template <class T, class C>
__device__ __forceinline__ void store_param(T* param, int64_t i, C value, bool stochastic,
                                            uint64_t seed, uint64_t first_block) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if (stochastic) {
      const uint32_t word = random::philox_block(seed, first_block + uint64_t(i) / 4).x[i % 4];
      const BFloat16 rounded = stochastic_round_bfloat16(float(value), word);
      reinterpret_cast<uint16_t*>(param)[i] = rounded.bits;
      return;
    }
  }
  param[i] = convert<T>(value);
}

// NOTE [Fused optimizer kernels] Each kernel instantiates the update rule the CPU passes
// instantiate (kernel/update_rules.h, NOTE [Update rules written once]) in the compute type
// (float; double for float64), with the constants computed per chunk from the step count kept on
// the device, each state value rounded to its storage dtype when stored and read back rounded.
// Every product is rounded on its own (the rules' mul is __fmul_rn here), so the results are the
// CPU's bits but for pow in the bias corrections, which CUDA's libdevice does not round
// correctly. A set found_inf returns before anything is read or written, so parameters, state
// and step counts stay bit-identical.

// round_state on the device: through the storage type S and back.
template <class S>
struct RoundThrough {
  template <class C>
  __device__ C operator()(C x) const {
    return convert<C>(convert<S>(x));
  }
};

// 1 / grad_scale in double (1: none), as the CPU passes compute it.
__device__ __forceinline__ double inverse_of(const float* grad_scale) {
  return grad_scale != nullptr ? 1.0 / static_cast<double>(*grad_scale) : 1.0;
}
// The group's lr: read on the device when the optimizer keeps it there (NOTE [The lr on the
// device] in optim/optimizer.h).
template <class Args>
__device__ __forceinline__ double lr_of(const Args& a) {
  return a.lr_device != nullptr ? *a.lr_device : a.lr;
}

template <class T, class S, int Lists>
__global__ void __launch_bounds__(kBlock)
    adam_kernel(const __grid_constant__ ChunkTable<Lists> table, AdamArgs a,
                const float* grad_scale, const float* found_inf) {
  static_assert(Lists == 4 || Lists == 5);
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  using C = compute_t<T>;
  const bool scaled = grad_scale != nullptr;
  const double inv_scale = inverse_of(grad_scale), lr = lr_of(a);
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    // The step this update takes (1 on the first), from the count kept on the device.
    const double step = static_cast<double>(*table.steps[k.tensor]) + 1.0;
    const auto constants = kernel::rules::adam_constants<C>(a, lr, scaled, inv_scale, step);
    T* param = static_cast<T*>(table.data[0][k.tensor]);
    const T* grad = static_cast<const T*>(table.data[1][k.tensor]);
    S* exp_avg = static_cast<S*>(table.data[2][k.tensor]);
    S* exp_avg_sq = static_cast<S*>(table.data[3][k.tensor]);
    S* max_exp_avg_sq = nullptr;
    if constexpr (Lists == 5) max_exp_avg_sq = static_cast<S*>(table.data[4][k.tensor]);
    for (int64_t i = k.begin + threadIdx.x; i < k.end; i += blockDim.x) {
      C m = convert<C>(exp_avg[i]), v = convert<C>(exp_avg_sq[i]);
      C vmax = Lists == 5 ? convert<C>(max_exp_avg_sq[i]) : C(0);
      const C p =
          kernel::rules::adam_rule(convert<C>(param[i]), convert<C>(grad[i]), m, v,
                                   Lists == 5 ? &vmax : nullptr, constants, RoundThrough<S>{});
      exp_avg[i] = convert<S>(m);
      exp_avg_sq[i] = convert<S>(v);
      if constexpr (Lists == 5) max_exp_avg_sq[i] = convert<S>(vmax);
      store_param(param, i, p, a.bf16_params, a.seed, table.first_block[k.tensor]);
    }
  }
}

template <class T, class B, int Lists>
__global__ void __launch_bounds__(kBlock)
    sgd_kernel(const __grid_constant__ ChunkTable<Lists> table, SGDArgs a, const float* grad_scale,
               const float* found_inf) {
  static_assert(Lists == 2 || Lists == 3);
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  using C = compute_t<T>;
  const bool scaled = grad_scale != nullptr;
  const double inv_scale = inverse_of(grad_scale), lr = lr_of(a);
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    T* param = static_cast<T*>(table.data[0][k.tensor]);
    const T* grad = static_cast<const T*>(table.data[1][k.tensor]);
    B* buffer = nullptr;
    bool first = false;
    if constexpr (Lists == 3) {
      buffer = static_cast<B*>(table.data[2][k.tensor]);
      first = *table.steps[k.tensor] == 0.0f;  // no step taken yet: the buffer starts as g
    }
    const auto constants = kernel::rules::sgd_constants<C>(a, lr, scaled, inv_scale, first);
    for (int64_t i = k.begin + threadIdx.x; i < k.end; i += blockDim.x) {
      C b = Lists == 3 && !first ? convert<C>(buffer[i]) : C(0);
      const C p = kernel::rules::sgd_rule(convert<C>(param[i]), convert<C>(grad[i]),
                                          Lists == 3 ? &b : nullptr, constants, RoundThrough<B>{});
      if constexpr (Lists == 3) buffer[i] = convert<B>(b);
      store_param(param, i, p, a.bf16_params, a.seed, table.first_block[k.tensor]);
    }
  }
}

// RMSprop; the lists are param, grad, square_avg, then grad_avg (Centered), then momentum_buffer
// (Momentum), the buffers of type S.
template <class T, class S, bool Centered, bool Momentum,
          int Lists = 3 + int(Centered) + int(Momentum)>
__global__ void __launch_bounds__(kBlock)
    rmsprop_kernel(const __grid_constant__ ChunkTable<Lists> table, RMSpropArgs a,
                   const float* grad_scale, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  using C = compute_t<T>;
  const auto constants = kernel::rules::rmsprop_constants<C>(a, lr_of(a), grad_scale != nullptr,
                                                             inverse_of(grad_scale));
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    T* param = static_cast<T*>(table.data[0][k.tensor]);
    const T* grad = static_cast<const T*>(table.data[1][k.tensor]);
    S* square_avg = static_cast<S*>(table.data[2][k.tensor]);
    S* grad_avg = nullptr;
    S* buffer = nullptr;
    if constexpr (Centered) grad_avg = static_cast<S*>(table.data[3][k.tensor]);
    if constexpr (Momentum) buffer = static_cast<S*>(table.data[Lists - 1][k.tensor]);
    for (int64_t i = k.begin + threadIdx.x; i < k.end; i += blockDim.x) {
      C v = convert<C>(square_avg[i]);
      C ga = Centered ? convert<C>(grad_avg[i]) : C(0);
      C b = Momentum ? convert<C>(buffer[i]) : C(0);
      const C p = kernel::rules::rmsprop_rule(convert<C>(param[i]), convert<C>(grad[i]), v,
                                              Centered ? &ga : nullptr, Momentum ? &b : nullptr,
                                              constants, RoundThrough<S>{});
      square_avg[i] = convert<S>(v);
      if constexpr (Centered) grad_avg[i] = convert<S>(ga);
      if constexpr (Momentum) buffer[i] = convert<S>(b);
      store_param(param, i, p, a.bf16_params, a.seed, table.first_block[k.tensor]);
    }
  }
}

// Adagrad; lists param, grad, sum (of type S).
template <class T, class S>
__global__ void __launch_bounds__(kBlock)
    adagrad_kernel(const __grid_constant__ ChunkTable<3> table, AdagradArgs a,
                   const float* grad_scale, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  using C = compute_t<T>;
  const bool scaled = grad_scale != nullptr;
  const double inv_scale = inverse_of(grad_scale), lr = lr_of(a);
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    // The step this update takes (1 on the first), from the count kept on the device.
    const double step = static_cast<double>(*table.steps[k.tensor]) + 1.0;
    const auto constants = kernel::rules::adagrad_constants<C>(a, lr, scaled, inv_scale, step);
    T* param = static_cast<T*>(table.data[0][k.tensor]);
    const T* grad = static_cast<const T*>(table.data[1][k.tensor]);
    S* sum = static_cast<S*>(table.data[2][k.tensor]);
    for (int64_t i = k.begin + threadIdx.x; i < k.end; i += blockDim.x) {
      C s_value = convert<C>(sum[i]);
      const C p = kernel::rules::adagrad_rule(convert<C>(param[i]), convert<C>(grad[i]), s_value,
                                              constants, RoundThrough<S>{});
      sum[i] = convert<S>(s_value);
      store_param(param, i, p, a.bf16_params, a.seed, table.first_block[k.tensor]);
    }
  }
}

// Adamax, Adadelta, RAdam and NAdam: lists param, grad and two buffers of type S, and for NAdam
// (Rule::kLists 5) each tensor's mu_product (one float); Rule::constants makes the rule's
// constants for a chunk's step and mu_product (1 without one), Rule::update is the rule
// (kernel/update_rules.h).
template <class T, class S, class Rule, class Args, int Lists = Rule::kLists>
__global__ void __launch_bounds__(kBlock)
    two_buffer_kernel(const __grid_constant__ ChunkTable<Lists> table, Args a,
                      const float* grad_scale, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  using C = compute_t<T>;
  const bool scaled = grad_scale != nullptr;
  const double inv_scale = inverse_of(grad_scale), lr = lr_of(a);
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    // The step this update takes (1 on the first), from the count kept on the device.
    const double step = static_cast<double>(*table.steps[k.tensor]) + 1.0;
    float product = 1.0f;
    if constexpr (Lists == 5) product = *static_cast<const float*>(table.data[4][k.tensor]);
    const auto constants = Rule::template constants<C>(a, lr, scaled, inv_scale, step, product);
    T* param = static_cast<T*>(table.data[0][k.tensor]);
    const T* grad = static_cast<const T*>(table.data[1][k.tensor]);
    S* first = static_cast<S*>(table.data[2][k.tensor]);
    S* second = static_cast<S*>(table.data[3][k.tensor]);
    for (int64_t i = k.begin + threadIdx.x; i < k.end; i += blockDim.x) {
      C x = convert<C>(first[i]), y = convert<C>(second[i]);
      const C p = Rule::update(convert<C>(param[i]), convert<C>(grad[i]), x, y, constants,
                               RoundThrough<S>{});
      first[i] = convert<S>(x);
      second[i] = convert<S>(y);
      store_param(param, i, p, a.bf16_params, a.seed, table.first_block[k.tensor]);
    }
  }
}

struct AdamaxRule {
  static constexpr int kLists = 4;
  template <class C>
  __device__ static auto constants(const AdamaxArgs& a, double lr, bool scaled, double inv_scale,
                                   double step, float /*product*/) {
    return kernel::rules::adamax_constants<C>(a, lr, scaled, inv_scale, step);
  }
  template <class C, class K, class R>
  __device__ static C update(C p, C g, C& m, C& u, const K& k, R round_state) {
    return kernel::rules::adamax_rule(p, g, m, u, k, round_state);
  }
};
struct AdadeltaRule {
  static constexpr int kLists = 4;
  template <class C>
  __device__ static auto constants(const AdadeltaArgs& a, double lr, bool scaled, double inv_scale,
                                   double /*step*/, float /*product*/) {
    return kernel::rules::adadelta_constants<C>(a, lr, scaled, inv_scale);
  }
  template <class C, class K, class R>
  __device__ static C update(C p, C g, C& square_avg, C& acc_delta, const K& k, R round_state) {
    return kernel::rules::adadelta_rule(p, g, square_avg, acc_delta, k, round_state);
  }
};
struct RAdamRule {
  static constexpr int kLists = 4;
  template <class C>
  __device__ static auto constants(const RAdamArgs& a, double lr, bool scaled, double inv_scale,
                                   double step, float /*product*/) {
    return kernel::rules::radam_constants<C>(a, lr, scaled, inv_scale, step);
  }
  template <class C, class K, class R>
  __device__ static C update(C p, C g, C& m, C& v, const K& k, R round_state) {
    return kernel::rules::radam_rule(p, g, m, v, k, round_state);
  }
};
struct NAdamRule {
  static constexpr int kLists = 5;
  template <class C>
  __device__ static auto constants(const NAdamArgs& a, double lr, bool scaled, double inv_scale,
                                   double step, float product) {
    return kernel::rules::nadam_constants<C>(a, lr, scaled, inv_scale, step, product);
  }
  template <class C, class K, class R>
  __device__ static C update(C p, C g, C& m, C& v, const K& k, R round_state) {
    return kernel::rules::nadam_rule(p, g, m, v, k, round_state);
  }
};

constexpr int kMaxSteps = 256;
struct StepList {
  float* steps[kMaxSteps];
  int32_t count;
};

__global__ void advance_steps_kernel(StepList list, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const int i = threadIdx.x;
  if (i < list.count) *list.steps[i] += 1.0f;
}

// NAdam's state after the update kernels read it: each mu_product times this step's momentum
// coefficient (the one nadam_constants computes), then the step count advances. Half as many per
// launch as StepList, so that the list stays within 4 KiB of kernel arguments.
constexpr int kMaxProducts = kMaxSteps / 2;
struct ProductList {
  float* steps[kMaxProducts];
  float* products[kMaxProducts];
  int32_t count;
};

__global__ void advance_nadam_kernel(ProductList list, NAdamArgs a, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const int i = threadIdx.x;
  if (i >= list.count) return;
  const double step = static_cast<double>(*list.steps[i]) + 1.0;
  *list.products[i] =
      kernel::rules::nadam_constants<float>(a, 0.0, false, 1.0, step, *list.products[i]).mu_product;
  *list.steps[i] += 1.0f;
}

// ---- kernels: norms, clipping, checks --------------------------------------------------------

template <NormKind K>
__device__ __forceinline__ float norm_term(float abs_x, float p) {
  if constexpr (K == NormKind::Two) {
    return abs_x * abs_x;
  } else if constexpr (K == NormKind::P) {
    return powf(abs_x, p);
  } else {
    return abs_x;
  }
}

template <NormKind K>
__device__ __forceinline__ float norm_combine(float a, float b) {
  if constexpr (K == NormKind::Infinity) {
    return kernel::rules::max_propagating_nan(a, b);
  } else {
    return a + b;
  }
}

// The block's values combined in a fixed tree order (deterministic); every thread gets it.
template <NormKind K>
__device__ float block_combine(float value, float* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half >>= 1) {
    if (int(threadIdx.x) < half) {
      shared[threadIdx.x] = norm_combine<K>(shared[threadIdx.x], shared[threadIdx.x + half]);
    }
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();  // shared is reused by the caller's next chunk
  return result;
}

// NOTE [Deterministic total norm] Each chunk's partial is reduced by one block in a fixed
// order and stored at the chunk's index; one block then combines the partials in a fixed
// order. No atomics: the same gradients give the same bits on every run.
template <class T, NormKind K>
__global__ void __launch_bounds__(kBlock)
    norm_partials_kernel(const __grid_constant__ ChunkTable<1> table, float p, float* partials,
                         int64_t chunk_base) {
  __shared__ float shared[kBlock];
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    float accumulated = 0.0f;
    // float64 values are rounded to float32 first, as the CPU path converts the gradients.
    visit_range(static_cast<const T*>(table.data[0][k.tensor]), k.begin, k.end, [&](T v) {
      accumulated = norm_combine<K>(accumulated, norm_term<K>(fabsf(convert<float>(v)), p));
    });
    const float chunk_value = block_combine<K>(accumulated, shared);
    if (threadIdx.x == 0) partials[chunk_base + c] = chunk_value;
  }
}

template <NormKind K>
__global__ void __launch_bounds__(kBlock)
    norm_finish_kernel(const float* partials, int64_t count, float p, float* total) {
  __shared__ float shared[kBlock];
  float accumulated = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += kBlock) {
    accumulated = norm_combine<K>(accumulated, partials[i]);
  }
  const float combined = block_combine<K>(accumulated, shared);
  if (threadIdx.x == 0) {
    if constexpr (K == NormKind::Two) {
      *total = sqrtf(combined);
    } else if constexpr (K == NormKind::P) {
      *total = powf(combined, 1.0f / p);
    } else {
      *total = combined;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    clip_scale_kernel(const __grid_constant__ ChunkTable<1> table, const float* total_norm,
                      double max_norm) {
  using C = compute_t<T>;
  // torch: clip_coef = max_norm / (total + 1e-6), clamped to at most 1 (NaN stays NaN).
  const double coef = max_norm / (static_cast<double>(*total_norm) + 1e-6);
  const C factor = C(coef < 1.0 || coef != coef ? coef : 1.0);
  if (factor == C(1)) return;  // x * 1 == x: nothing to write (the CPU path skips it too)
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    map_range(static_cast<T*>(table.data[0][k.tensor]), k.begin, k.end,
              [&](T v) { return convert<T>(convert<C>(v) * factor); });
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    scale_kernel(const __grid_constant__ ChunkTable<1> table, double factor_value) {
  using C = compute_t<T>;
  const C factor = C(factor_value);
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    map_range(static_cast<T*>(table.data[0][k.tensor]), k.begin, k.end,
              [&](T v) { return convert<T>(convert<C>(v) * factor); });
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    clamp_kernel(const __grid_constant__ ChunkTable<1> table, double low_value, double high_value) {
  using C = compute_t<T>;
  const C low = C(low_value), high = C(high_value);
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    map_range(static_cast<T*>(table.data[0][k.tensor]), k.begin, k.end, [&](T v) {
      C x = convert<C>(v);
      if (x < low) x = low;
      if (x > high) x = high;
      return convert<T>(x);
    });
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    non_finite_check_kernel(const __grid_constant__ ChunkTable<1> table, float* flag) {
  using C = compute_t<T>;
  bool non_finite = false;
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    visit_range(static_cast<const T*>(table.data[0][k.tensor]), k.begin, k.end,
                [&](T v) { non_finite |= !is_finite(convert<C>(v)); });
  }
  if (__syncthreads_or(non_finite) && threadIdx.x == 0) *flag = 1.0f;
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    value_range_kernel(const __grid_constant__ ChunkTable<1> table, unsigned long long* out) {
  using C = compute_t<T>;
  double max_abs = 0.0;
  unsigned long long non_finite = 0;
  const int64_t chunks = chunks_in(table);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const Chunk k = chunk_at(table, c);
    visit_range(static_cast<const T*>(table.data[0][k.tensor]), k.begin, k.end, [&](T v) {
      const C x = convert<C>(v);
      if (is_finite(x)) {
        max_abs = fmax(max_abs, static_cast<double>(x < C(0) ? -x : x));
      } else {
        ++non_finite;
      }
    });
  }
  // Whole warps reach this (kBlock is a multiple of 32); one atomic pair per warp. The bits of
  // non-negative doubles order as the values do, so an integer max is the max.
  for (int offset = 16; offset > 0; offset >>= 1) {
    max_abs = fmax(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, offset));
    non_finite += __shfl_xor_sync(0xffffffffu, non_finite, offset);
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(&out[0], static_cast<unsigned long long>(__double_as_longlong(max_abs)));
    if (non_finite != 0) atomicAdd(&out[1], non_finite);
  }
}

// ---- launch helpers --------------------------------------------------------------------------

// Fills chunk tables from `args` and calls launch(table, chunks, chunk_base) for each: the
// table's chunk count and the index of its first chunk among all of args' chunks. Tensors of
// no element are left out.
template <int Lists, class Launch>
cudaError_t for_each_table(const MultiTensorArgs& args, Launch&& launch) {
  using Table = ChunkTable<Lists>;
  if (args.lists != Lists) return cudaErrorInvalidValue;
  Table table{};
  int64_t chunk_base = 0;
  auto flush = [&]() -> cudaError_t {
    if (table.count == 0) return cudaSuccess;
    const int64_t chunks = table.first_chunk[table.count];
    const cudaError_t status = launch(static_cast<const Table&>(table), chunks, chunk_base);
    chunk_base += chunks;
    table.count = 0;
    return status;
  };
  for (int64_t i = 0; i < args.count; ++i) {
    const int64_t n = args.numel[i];
    if (n <= 0) continue;
    const int t = table.count;
    for (int l = 0; l < Lists; ++l) table.data[l][t] = args.data[l][i];
    table.numel[t] = n;
    table.steps[t] = args.steps != nullptr ? args.steps[i] : nullptr;
    table.first_block[t] = args.first_blocks != nullptr ? args.first_blocks[i] : 0;
    table.first_chunk[t + 1] = table.first_chunk[t] + chunks_of(n);
    table.count = t + 1;
    if (table.count == Table::kMaxTensors) {
      const cudaError_t status = flush();
      if (status != cudaSuccess) return status;
    }
  }
  return flush();
}

inline unsigned blocks_for(int64_t chunks) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(chunks, kMaxBlocks)));
}

bool is_floating(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float16 || dtype == DType::BFloat16 ||
         dtype == DType::Float64;
}

// A one-list chunked kernel per table: kernel<T> for T the storage type of dtype, launched as
// make(T tag) returns it.
template <class Launch>
cudaError_t launch_one_list(const MultiTensorArgs& tensors, DType dtype, Launch&& launch) {
  if (!is_floating(dtype)) return cudaErrorInvalidValue;
  return visit_floating_storage(dtype, [&](auto tag) {
    return for_each_table<1>(tensors,
                             [&](const ChunkTable<1>& table, int64_t chunks, int64_t chunk_base) {
                               launch(tag, table, blocks_for(chunks), chunk_base);
                               return cudaGetLastError();
                             });
  });
}

}  // namespace

// ---- launchers: GradScaler -------------------------------------------------------------------

cudaError_t launch_unscale_and_check(const MultiTensorArgs& tensors, DType dtype,
                                     const float* inv_scale, float* found_inf,
                                     cudaStream_t stream) {
  return launch_one_list(
      tensors, dtype, [&](auto tag, const ChunkTable<1>& table, unsigned blocks, int64_t) {
        using T = typename decltype(tag)::type;
        unscale_kernel<T><<<blocks, kBlock, 0, stream>>>(table, inv_scale, found_inf);
      });
}

cudaError_t launch_reciprocal_scale(const float* scale, float* inv_scale, cudaStream_t stream) {
  reciprocal_scale_kernel<<<1, 1, 0, stream>>>(scale, inv_scale);
  return cudaGetLastError();
}

cudaError_t launch_sum_flags(const float* const* flags, int64_t count, float* out,
                             cudaStream_t stream) {
  int64_t done = 0;
  do {
    FlagList list{};
    list.count = static_cast<int32_t>(std::min<int64_t>(kMaxFlags, count - done));
    for (int i = 0; i < list.count; ++i) list.flags[i] = flags[done + i];
    sum_flags_kernel<<<1, 1, 0, stream>>>(list, out, done > 0);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    done += list.count;
  } while (done < count);
  return cudaSuccess;
}

cudaError_t launch_update_scale(float* scale, int32_t* growth_tracker, int32_t* counters,
                                const float* found_inf, const ScaleUpdateArgs& args,
                                ScalerMonitor* monitor, cudaStream_t stream) {
  update_scale_kernel<<<1, 1, 0, stream>>>(scale, growth_tracker, counters, found_inf, args,
                                           monitor);
  return cudaGetLastError();
}

// ---- launchers: fused optimizers -------------------------------------------------------------

namespace {

template <class T, class S>
cudaError_t launch_adam_typed(const MultiTensorArgs& tensors, const AdamArgs& args,
                              const float* grad_scale, const float* found_inf,
                              cudaStream_t stream) {
  auto run = [&](auto lists_tag) {
    constexpr int kLists = decltype(lists_tag)::value;
    return for_each_table<kLists>(
        tensors, [&](const ChunkTable<kLists>& table, int64_t chunks, int64_t) {
          adam_kernel<T, S, kLists>
              <<<blocks_for(chunks), kBlock, 0, stream>>>(table, args, grad_scale, found_inf);
          return cudaGetLastError();
        });
  };
  return args.amsgrad ? run(std::integral_constant<int, 5>{})
                      : run(std::integral_constant<int, 4>{});
}

}  // namespace

cudaError_t launch_fused_adam(const MultiTensorArgs& tensors, DType param_dtype, DType state_dtype,
                              const AdamArgs& args, const float* grad_scale, const float* found_inf,
                              cudaStream_t stream) {
  if (tensors.steps == nullptr || tensors.lists != (args.amsgrad ? 5 : 4)) {
    return cudaErrorInvalidValue;
  }
  if (args.bf16_params && (param_dtype != DType::BFloat16 || state_dtype != DType::Float32 ||
                           tensors.first_blocks == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (state_dtype == param_dtype) {
    switch (param_dtype) {
      case DType::Float32:
        return launch_adam_typed<float, float>(tensors, args, grad_scale, found_inf, stream);
      case DType::Float16:
        return launch_adam_typed<__half, __half>(tensors, args, grad_scale, found_inf, stream);
      case DType::BFloat16:
        return launch_adam_typed<__nv_bfloat16, __nv_bfloat16>(tensors, args, grad_scale, found_inf,
                                                               stream);
      case DType::Float64:
        return launch_adam_typed<double, double>(tensors, args, grad_scale, found_inf, stream);
      default:
        return cudaErrorInvalidValue;
    }
  }
  if (state_dtype == DType::Float32 && param_dtype == DType::Float16) {
    return launch_adam_typed<__half, float>(tensors, args, grad_scale, found_inf, stream);
  }
  if (state_dtype == DType::Float32 && param_dtype == DType::BFloat16) {
    return launch_adam_typed<__nv_bfloat16, float>(tensors, args, grad_scale, found_inf, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_fused_sgd(const MultiTensorArgs& tensors, DType dtype, const SGDArgs& args,
                             const float* grad_scale, const float* found_inf, cudaStream_t stream) {
  const bool with_buffer = args.momentum != 0;
  if (!is_floating(dtype) || tensors.lists != (with_buffer ? 3 : 2) ||
      (with_buffer && tensors.steps == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (args.bf16_params && (dtype != DType::BFloat16 || tensors.first_blocks == nullptr)) {
    return cudaErrorInvalidValue;
  }
  return visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto run = [&](auto lists_tag, auto buffer_tag) {
      constexpr int kLists = decltype(lists_tag)::value;
      using B = typename decltype(buffer_tag)::type;
      return for_each_table<kLists>(
          tensors, [&](const ChunkTable<kLists>& table, int64_t chunks, int64_t) {
            sgd_kernel<T, B, kLists>
                <<<blocks_for(chunks), kBlock, 0, stream>>>(table, args, grad_scale, found_inf);
            return cudaGetLastError();
          });
    };
    if (!with_buffer) return run(std::integral_constant<int, 2>{}, std::type_identity<T>{});
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      if (args.bf16_params) {
        return run(std::integral_constant<int, 3>{}, std::type_identity<float>{});
      }
    }
    return run(std::integral_constant<int, 3>{}, std::type_identity<T>{});
  });
}

cudaError_t launch_fused_rmsprop(const MultiTensorArgs& tensors, DType dtype,
                                 const RMSpropArgs& args, const float* grad_scale,
                                 const float* found_inf, cudaStream_t stream) {
  const bool momentum = args.momentum > 0;
  if (!is_floating(dtype) || tensors.lists != 3 + int(args.centered) + int(momentum)) {
    return cudaErrorInvalidValue;
  }
  if (args.bf16_params && (dtype != DType::BFloat16 || tensors.first_blocks == nullptr)) {
    return cudaErrorInvalidValue;
  }
  return visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto launch = [&](auto centered_tag, auto momentum_tag, auto state_tag) {
      using S = typename decltype(state_tag)::type;
      constexpr bool kCentered = decltype(centered_tag)::value;
      constexpr bool kMomentum = decltype(momentum_tag)::value;
      constexpr int kLists = 3 + int(kCentered) + int(kMomentum);
      return for_each_table<kLists>(
          tensors, [&](const ChunkTable<kLists>& table, int64_t chunks, int64_t) {
            rmsprop_kernel<T, S, kCentered, kMomentum>
                <<<blocks_for(chunks), kBlock, 0, stream>>>(table, args, grad_scale, found_inf);
            return cudaGetLastError();
          });
    };
    // The buffers float32 for bf16_params, else of the parameter's dtype.
    auto run = [&](auto centered_tag, auto momentum_tag) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        if (args.bf16_params) {
          return launch(centered_tag, momentum_tag, std::type_identity<float>{});
        }
      }
      return launch(centered_tag, momentum_tag, std::type_identity<T>{});
    };
    if (args.centered) {
      return momentum ? run(std::true_type{}, std::true_type{})
                      : run(std::true_type{}, std::false_type{});
    }
    return momentum ? run(std::false_type{}, std::true_type{})
                    : run(std::false_type{}, std::false_type{});
  });
}

// The launch of a rule whose state has one storage type S: the parameters' T, or float32 for
// bfloat16 parameters with bf16_params. kernel_of(T, S) (type tags) gives the kernel, which
// takes a table of Lists lists, the rule's Args, grad_scale and found_inf.
template <int Lists, class Args, class KernelOf>
cudaError_t launch_with_state(const MultiTensorArgs& tensors, DType dtype, const Args& args,
                              const float* grad_scale, const float* found_inf, cudaStream_t stream,
                              KernelOf kernel_of) {
  if (!is_floating(dtype) || tensors.lists != Lists || tensors.steps == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (args.bf16_params && (dtype != DType::BFloat16 || tensors.first_blocks == nullptr)) {
    return cudaErrorInvalidValue;
  }
  return visit_floating_storage(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto run = [&](auto state_tag) {
      const auto kernel = kernel_of(tag, state_tag);
      return for_each_table<Lists>(
          tensors, [&](const ChunkTable<Lists>& table, int64_t chunks, int64_t) {
            kernel<<<blocks_for(chunks), kBlock, 0, stream>>>(table, args, grad_scale, found_inf);
            return cudaGetLastError();
          });
    };
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      if (args.bf16_params) return run(std::type_identity<float>{});
    }
    return run(std::type_identity<T>{});
  });
}

cudaError_t launch_fused_adagrad(const MultiTensorArgs& tensors, DType dtype,
                                 const AdagradArgs& args, const float* grad_scale,
                                 const float* found_inf, cudaStream_t stream) {
  return launch_with_state<3>(
      tensors, dtype, args, grad_scale, found_inf, stream, [](auto tag, auto state_tag) {
        return &adagrad_kernel<typename decltype(tag)::type, typename decltype(state_tag)::type>;
      });
}

// The launch of two_buffer_kernel for Rule (Adamax, Adadelta, RAdam, NAdam).
template <class Rule, class Args>
cudaError_t launch_two_buffers(const MultiTensorArgs& tensors, DType dtype, const Args& args,
                               const float* grad_scale, const float* found_inf,
                               cudaStream_t stream) {
  return launch_with_state<Rule::kLists>(
      tensors, dtype, args, grad_scale, found_inf, stream, [](auto tag, auto state_tag) {
        return &two_buffer_kernel<typename decltype(tag)::type, typename decltype(state_tag)::type,
                                  Rule, Args>;
      });
}

cudaError_t launch_fused_adamax(const MultiTensorArgs& tensors, DType dtype, const AdamaxArgs& args,
                                const float* grad_scale, const float* found_inf,
                                cudaStream_t stream) {
  return launch_two_buffers<AdamaxRule>(tensors, dtype, args, grad_scale, found_inf, stream);
}

cudaError_t launch_fused_adadelta(const MultiTensorArgs& tensors, DType dtype,
                                  const AdadeltaArgs& args, const float* grad_scale,
                                  const float* found_inf, cudaStream_t stream) {
  return launch_two_buffers<AdadeltaRule>(tensors, dtype, args, grad_scale, found_inf, stream);
}

cudaError_t launch_fused_radam(const MultiTensorArgs& tensors, DType dtype, const RAdamArgs& args,
                               const float* grad_scale, const float* found_inf,
                               cudaStream_t stream) {
  return launch_two_buffers<RAdamRule>(tensors, dtype, args, grad_scale, found_inf, stream);
}

cudaError_t launch_fused_nadam(const MultiTensorArgs& tensors, DType dtype, const NAdamArgs& args,
                               const float* grad_scale, const float* found_inf,
                               cudaStream_t stream) {
  return launch_two_buffers<NAdamRule>(tensors, dtype, args, grad_scale, found_inf, stream);
}

cudaError_t launch_advance_nadam(float* const* steps, float* const* products, int64_t count,
                                 const NAdamArgs& args, const float* found_inf,
                                 cudaStream_t stream) {
  for (int64_t done = 0; done < count;) {
    ProductList list{};
    list.count = static_cast<int32_t>(std::min<int64_t>(kMaxProducts, count - done));
    for (int i = 0; i < list.count; ++i) {
      list.steps[i] = steps[done + i];
      list.products[i] = products[done + i];
    }
    advance_nadam_kernel<<<1, kMaxProducts, 0, stream>>>(list, args, found_inf);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    done += list.count;
  }
  return cudaSuccess;
}

cudaError_t launch_advance_steps(float* const* steps, int64_t count, const float* found_inf,
                                 cudaStream_t stream) {
  for (int64_t done = 0; done < count;) {
    StepList list{};
    list.count = static_cast<int32_t>(std::min<int64_t>(kMaxSteps, count - done));
    for (int i = 0; i < list.count; ++i) list.steps[i] = steps[done + i];
    advance_steps_kernel<<<1, kMaxSteps, 0, stream>>>(list, found_inf);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
    done += list.count;
  }
  return cudaSuccess;
}

// ---- launchers: norms, clipping, checks ------------------------------------------------------

namespace {

template <class F>
cudaError_t visit_norm_kind(NormKind kind, F&& f) {
  switch (kind) {
    case NormKind::One:
      return f(std::integral_constant<NormKind, NormKind::One>{});
    case NormKind::Two:
      return f(std::integral_constant<NormKind, NormKind::Two>{});
    case NormKind::Infinity:
      return f(std::integral_constant<NormKind, NormKind::Infinity>{});
    case NormKind::P:
      return f(std::integral_constant<NormKind, NormKind::P>{});
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_norm_partials(const MultiTensorArgs& tensors, DType dtype, NormKind kind,
                                 float p, float* partials, int64_t chunk_base,
                                 cudaStream_t stream) {
  return visit_norm_kind(kind, [&](auto kind_tag) {
    constexpr NormKind K = decltype(kind_tag)::value;
    return launch_one_list(
        tensors, dtype,
        [&](auto tag, const ChunkTable<1>& table, unsigned blocks, int64_t table_base) {
          using T = typename decltype(tag)::type;
          norm_partials_kernel<T, K>
              <<<blocks, kBlock, 0, stream>>>(table, p, partials, chunk_base + table_base);
        });
  });
}

cudaError_t launch_norm_finish(const float* partials, int64_t count, NormKind kind, float p,
                               float* total, cudaStream_t stream) {
  return visit_norm_kind(kind, [&](auto kind_tag) {
    constexpr NormKind K = decltype(kind_tag)::value;
    norm_finish_kernel<K><<<1, kBlock, 0, stream>>>(partials, count, p, total);
    return cudaGetLastError();
  });
}

cudaError_t launch_clip_scale(const MultiTensorArgs& tensors, DType dtype, const float* total_norm,
                              double max_norm, cudaStream_t stream) {
  return launch_one_list(
      tensors, dtype, [&](auto tag, const ChunkTable<1>& table, unsigned blocks, int64_t) {
        using T = typename decltype(tag)::type;
        clip_scale_kernel<T><<<blocks, kBlock, 0, stream>>>(table, total_norm, max_norm);
      });
}

cudaError_t launch_scale(const MultiTensorArgs& tensors, DType dtype, double factor,
                         cudaStream_t stream) {
  return launch_one_list(tensors, dtype,
                         [&](auto tag, const ChunkTable<1>& table, unsigned blocks, int64_t) {
                           using T = typename decltype(tag)::type;
                           scale_kernel<T><<<blocks, kBlock, 0, stream>>>(table, factor);
                         });
}

cudaError_t launch_clamp(const MultiTensorArgs& tensors, DType dtype, double low, double high,
                         cudaStream_t stream) {
  return launch_one_list(tensors, dtype,
                         [&](auto tag, const ChunkTable<1>& table, unsigned blocks, int64_t) {
                           using T = typename decltype(tag)::type;
                           clamp_kernel<T><<<blocks, kBlock, 0, stream>>>(table, low, high);
                         });
}

cudaError_t launch_non_finite_check(const MultiTensorArgs& tensors, DType dtype, float* flag,
                                    cudaStream_t stream) {
  return launch_one_list(tensors, dtype,
                         [&](auto tag, const ChunkTable<1>& table, unsigned blocks, int64_t) {
                           using T = typename decltype(tag)::type;
                           non_finite_check_kernel<T><<<blocks, kBlock, 0, stream>>>(table, flag);
                         });
}

cudaError_t launch_value_range(const MultiTensorArgs& tensors, DType dtype, unsigned long long* out,
                               cudaStream_t stream) {
  return launch_one_list(tensors, dtype,
                         [&](auto tag, const ChunkTable<1>& table, unsigned blocks, int64_t) {
                           using T = typename decltype(tag)::type;
                           value_range_kernel<T><<<blocks, kBlock, 0, stream>>>(table, out);
                         });
}

}  // namespace hg::cuda::detail
