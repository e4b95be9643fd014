// Threads of the CPU kernels (OpenMP; oneDNN and Eigen use the same pool).
#pragma once

#include <omp.h>

#include <cstdint>

namespace hg {

// Work below this many elements runs on the calling thread.
inline constexpr int64_t kParallelGrain = 32768;

// body(i) for i in [0, n): on OpenMP threads (static schedule) when `work` (the elements
// touched, n or more) reaches kParallelGrain, else in a plain loop on the calling thread. The
// plain loop never enters the OpenMP runtime: a region whose `if` clause is false still
// starts and ends a team, which costs more than a small loop. body must not throw.
template <class Body>
void parallel_for(int64_t n, int64_t work, Body&& body) {
  if (work < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// The number of threads CPU ops use (OpenMP's pool; PyTorch's torch::set_num_threads).
void set_num_threads(int threads);
int get_num_threads();

}  // namespace hg
