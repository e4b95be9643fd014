// The CPU GEMM's own API beside its kernel table (cpu::linalg_kernels, kernel/linalg.h): the
// kernel oneDNN picks, and for tests and benchmarks the choice of implementation and the hooks
// that reach the paths' edges. Which library runs each dtype is NOTE [CPU GEMM paths] in
// cpu/linalg.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "halfgrad/core/tensor.h"

namespace hg::cpu {

// The kernel oneDNN picks for a row-major 1024 x 1024 x 1024 GEMM of `dtype`, as its
// implementation name (e.g. "brg:avx512_core_amx" on a CPU with AMX), or "eigen" where
// linalg_kernels.gemm does not use oneDNN for that dtype.
std::string gemm_kernel_name(DType dtype);
// Whether gemm runs dtype on a kernel for that dtype: false for float16 (no x86 fp16 GEMM
// path before AVX512-FP16), and for bfloat16 where oneDNN has only its reference kernel, both
// of which run as float32 tiles (NOTE [fp16 GEMM through fp32 tiles]).
bool gemm_runs_natively(DType dtype);

// ---- for tests and benchmarks ---------------------------------------------------------------

// The implementations linalg_kernels.gemm can run; Auto is its own choice for the dtype.
// float16 (and bfloat16 under Eigen or Small) goes through float32 tiles on the chosen float32
// implementation. Small is halfgrad's own kernel for tiny products (no float64).
enum class GemmImpl { Auto, OneDNN, Eigen, Small };

// linalg_kernels.gemm on a given implementation. Throws hg::Error when that implementation
// cannot run the dtype (OneDNN for float64, or OneDNN in a build without oneDNN).
void gemm_with(GemmImpl impl, const Tensor& a, const Tensor& b, const Tensor& out,
               double alpha = 1.0, double beta = 0.0);

namespace detail {
// The float32 tile budget of the float16 path, in elements per tile buffer (default 2^22).
// Returns the previous budget; tests lower it to exercise the tile edges on small shapes.
int64_t set_reduced_gemm_tile_budget(int64_t elements);
// The copies of the small kernel (NOTE [Small GEMM kernel] in cpu/small_gemm.cpp) this CPU
// runs: levels 0 (baseline) to small_gemm_levels() - 1 (1 AVX2+FMA, 2 AVX-512).
// set_small_gemm_level caps the level used (0 to 2; the CPU's own level caps it too) and
// returns the previous cap; tests run every copy with it.
int small_gemm_levels();
int set_small_gemm_level(int level);
// Primitives in the oneDNN matmul cache (0 without oneDNN).
int64_t onednn_matmul_cache_size();
}  // namespace detail

}  // namespace hg::cpu
