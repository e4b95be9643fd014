// Helpers shared by the CPU kernels of the nn families (cpu/norm.cpp, conv.cpp, pool.cpp,
// embedding.cpp, dropout.cpp): loads and stores in the accumulation type, the input check and
// the threaded loop.
#pragma once

#include <omp.h>

#include <cstdint>
#include <vector>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/parallel.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cpu::nn_common {

// Every kernel is templated on the storage type T and computes in A = acc_t<T>: float for
// float16/bfloat16/float32, double for float64.
template <class T>
using acc_t = compute_t<T>;

template <class T>
acc_t<T> load(T value) {
  return cast_value<acc_t<T>>(value);
}
template <class T, class A>
T store(A value) {
  return cast_value<T>(value);
}

// Defined, on the CPU, floating.
inline void check_input(const char* op, const char* what, const Tensor& t) {
  kernel::check_input(op, what, t, kCPU);
}

// Runs f(i) for i in [0, count), on OpenMP threads when count * work_per_item (elements
// touched) is worth it. f must not throw: every check happens before a kernel starts. No
// kernel's result depends on the number of threads (reductions never split across threads).
template <class F>
void parallel_for(int64_t count, int64_t work_per_item, F&& f) {
  const bool parallel = count > 1 && count * work_per_item >= kParallelGrain &&
                        omp_get_max_threads() > 1 && !omp_in_parallel();
  if (!parallel) {
    for (int64_t i = 0; i < count; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) f(i);
}

// A per-thread buffer of at least n values of V, kept for the thread's next calls (a fresh one
// per call faults its pages in every time: for conv2d's 0.5-1 MB image columns that was a fifth
// of a CNN step, in the kernel). One buffer per V and thread, shared by every kernel here: a
// kernel uses it between two of its own statements and never across a call to another kernel
// that may take it too.
template <class V>
V* kept_buffer(int64_t n) {
  thread_local std::vector<V> buffer;
  if (int64_t(buffer.size()) < n) buffer.resize(size_t(n));
  return buffer.data();
}

}  // namespace hg::cpu::nn_common
