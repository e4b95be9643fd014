// The CPU kernels' thread count (parallel.h).
#include "halfgrad/core/parallel.h"

#include <omp.h>

#include "halfgrad/core/error.h"

namespace hg {

void set_num_threads(int threads) {
  HG_CHECK(threads >= 1, "set_num_threads: expected at least 1 thread, got {}", threads);
  omp_set_num_threads(threads);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace hg
