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
#include "halfgrad/core/half.h"

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

}  // namespace hg::optim::detail
