// Threads of the CPU kernels (OpenMP; oneDNN and Eigen use the same pool).
#pragma once

namespace hg {

// The number of threads CPU ops use (OpenMP's pool; PyTorch's torch::set_num_threads).
void set_num_threads(int threads);
int get_num_threads();

}  // namespace hg
