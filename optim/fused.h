// Helpers shared by the fused optimizer passes (optim/ internal).
//
// NOTE [Fused optimizer pass] Each optimizer updates a parameter in ONE loop over its
// elements that reads the parameter, its gradient and the state buffers, computes the whole
// update in the compute type (float for float32/float16/bfloat16 storage, double for
// float64) and writes each value back once. PyTorch's for-each path runs one kernel per
// formula term and, for 16-bit parameters, rounds to the storage dtype after each term;
// here a 16-bit value is rounded once per step, so 16-bit results can differ from torch's in
// the last bit (never by more than the rounding of the stored value). Float32 and float64
// follow torch's formulas term by term. Elements are independent, so the loop is split over
// OpenMP threads for large parameters and the result does not depend on the thread count.
#pragma once

#include <omp.h>

#include <cstdint>

#include "halfgrad/core/parallel.h"

// NOTE [Vector passes without contraction] The optimizers' AVX-512 passes give the scalar
// loops' bits only if each operation is rounded on its own, as the scalar (SSE) code does: no
// fused multiply-add. GCC takes that for a region of functions (HG_NO_FP_CONTRACT_BEGIN and
// _END around them), clang inside a function body (HG_NO_FP_CONTRACT_HERE at its top).
#if defined(__clang__)
#define HG_NO_FP_CONTRACT_BEGIN
#define HG_NO_FP_CONTRACT_END
#define HG_NO_FP_CONTRACT_HERE _Pragma("clang fp contract(off)")
#else
#define HG_NO_FP_CONTRACT_BEGIN \
  _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=off\")")
#define HG_NO_FP_CONTRACT_END _Pragma("GCC pop_options")
#define HG_NO_FP_CONTRACT_HERE
#endif

#include "halfgrad/core/dtype.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/half.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/stochastic_rounding.h"
#include "halfgrad/optim/optimizer.h"

namespace hg::optim::detail {

template <class T>
struct ComputeTypeOf {
  using type = float;
};
template <>
struct ComputeTypeOf<double> {
  using type = double;
};
template <class T>
using compute_t = typename ComputeTypeOf<T>::type;

template <class C, class T>
inline C load(const T* data, int64_t i) {
  return static_cast<C>(data[i]);
}
template <class T, class C>
inline void store(T* data, int64_t i, C value) {
  data[i] = T(value);
}

// blocks(first, last) over the 16-element blocks [0, (n + 15) / 16) of a vector pass: in one
// call below kParallelGrain elements, else split over the OpenMP threads. The pass's target
// function is called from here, not inlined into the region: an outlined parallel region would
// not carry its target attribute.
template <class Blocks>
void for_blocks_of_16(int64_t n, Blocks&& blocks) {
  const int64_t count = (n + 15) / 16;
  if (n < kParallelGrain) return blocks(int64_t(0), count);
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), thread = omp_get_thread_num();
    blocks(count * thread / threads, count * (thread + 1) / threads);
  }
}

// NOTE [bf16_params] The optimizers' bf16_params option (SGD, Adam, AdamW, RMSprop and Adagrad take
// it) trains bfloat16 parameters with no float32 master copy, as llm.c does: the state buffers are
// float32, each element's update is computed in float32 from the widened parameter, and the new
// value is stored with stochastic rounding (NOTE [Stochastic rounding] in
// core/stochastic_rounding.h). Round to nearest would drop every update smaller than half an ulp of
// the weight (1/256 of it in bfloat16), so small learning rates stop training; rounded
// stochastically the weight moves by the update on average. Each parameter stepped draws
// ceil(numel / 4) Philox blocks from the optimizer's generator, in group and parameter order;
// element i reads word i % 4 of block first + i / 4, as the cast does, on the CPU and in the CUDA
// kernels alike. (On CUDA the words are drawn even when found_inf skips the step, which the host
// cannot see; on the CPU a skipped step draws nothing.)

// bf16_params' check: every parameter of every group is bfloat16.
inline void check_bf16_params(const char* optimizer, const std::vector<ParamGroup>& groups) {
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const DType dtype = groups[g].params[i].dtype();
      HG_CHECK(dtype == kBFloat16,
               "{}: bf16_params expects bfloat16 parameters, got {} (parameter {} of group {}); "
               "convert the model with .to(kBFloat16) first",
               optimizer, dtype_name(dtype), i, g);
    }
  }
}

// param[i] = stochastic_round_bfloat16(value(i), word of element i) for i in [0, n), with the
// words of `draw` (NOTE [bf16_params]); split over threads like parallel_for.
template <class Value>
void store_stochastic(BFloat16* param, int64_t n, Generator::State draw, Value&& value) {
  parallel_for((n + 3) / 4, n, [&](int64_t block) {
    const PhiloxBlock words = random::philox_block(draw.seed, draw.offset + uint64_t(block));
    const int64_t first = block * 4;
    const int64_t count = n - first < 4 ? n - first : 4;
    for (int64_t k = 0; k < count; ++k) {
      param[first + k] = stochastic_round_bfloat16(value(first + k), words.x[k]);
    }
  });
}

}  // namespace hg::optim::detail
