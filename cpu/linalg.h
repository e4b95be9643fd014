// The CPU GEMM's own API beside its kernel table (cpu::linalg_kernels, kernel/linalg.h): the
// kernel oneDNN picks, and for tests and benchmarks the choice of implementation and the hooks
// that reach the paths' edges. Which library runs each dtype is NOTE [CPU GEMM paths] in
// cpu/linalg.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// out[i] = a[i] @ b[i] + beta * out[i] for 16-bit a and b and a float32 out: the products summed
// in float32 and kept there, for kernels that go on in float32 before their one rounding (the
// 16-bit convolutions, NOTE [conv2d's matrix product] in cpu/conv.cpp). a [B or 1, M, K] and
// b [B or 1, K, N] of one dtype, float16 or bfloat16, row- or column-major matrices (other
// layouts are copied); out contiguous float32 [B, M, N], not overlapping them. The path is
// chosen as gemm's is (its own shape classes, "float32 out").
void gemm_into_float32(const Tensor& a, const Tensor& b, const Tensor& out, double beta);

// ---- the path each GEMM takes (NOTE [GEMM path by measurement] in cpu/gemm_path.cpp) -------

// The ways the CPU GEMM can run a product. All give float32 accumulation over the whole K and
// one rounding of a 16-bit output; they differ in speed and in the order of the sums.
enum class GemmPath {
  Auto,    // chosen by measurement, per dtype, shape class and thread count (the default)
  Native,  // the dtype's own kernel: oneDNN's float32 and bfloat16 (AMX or AVX512-BF16), float16
           // where oneDNN has one; Eigen for float64 (and float32 in a build without oneDNN)
  Tiles,   // 16-bit operands widened into float32 blocks for the float32 kernel
  Small,   // halfgrad's small kernel (NOTE [Small GEMM kernel]); 16-bit through float32 tiles
  Split,   // float16 as pairs of bfloat16 on oneDNN's bfloat16 kernel, products exact
};

// "auto", "native", "tiles", "small", "split".
std::string_view gemm_path_name(GemmPath path);
// The paths this CPU and build can run dtype on, Auto not included (float64: Native only).
std::vector<GemmPath> gemm_paths(DType dtype);
// Fixes the path of dtype's GEMMs from now on, for every thread; Auto goes back to measuring.
// HALFGRAD_CPU_GEMM in the environment sets these at the first GEMM ("tiles" for every dtype
// that has it, or "bf16:native,fp16:split", ...). Throws hg::Error naming the paths there are
// when path is not one of gemm_paths(dtype).
void set_gemm_path(DType dtype, GemmPath path);
GemmPath get_gemm_path(DType dtype);

// One shape class's path, as gemm chose it (or was told).
struct GemmChoice {
  DType dtype;
  std::string shape_class;  // "B 1, M <= 1024, N <= 256, K <= 64, b transposed, bias"
  int threads;              // OpenMP threads the products run on
  GemmPath path;
  bool measured = false;  // chosen by timing the candidates
  bool set = false;       // by set_gemm_path or HALFGRAD_CPU_GEMM
  bool restored = false;  // from another process's record (cpu/kernel_choices.h)
  std::vector<std::pair<GemmPath, double>> microseconds;  // each candidate's best time
  int64_t calls = 0;  // products of the class run so far
};
// Every class chosen so far in this process, in the order first met.
std::vector<GemmChoice> gemm_choices();
// One line for a choice: "bf16 B 1, M <= 1024, ...; 2 threads: native (native 12.1 us, tiles
// 30.2 us), 120 calls".
std::string describe(const GemmChoice& choice);

// ---- for tests and benchmarks ---------------------------------------------------------------

// linalg_kernels.gemm on a given path (Auto: the measured one). Throws hg::Error when the path
// cannot run the dtype here.
void gemm_on(GemmPath path, const Tensor& a, const Tensor& b, const Tensor& out, double alpha = 1.0,
             double beta = 0.0);

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
// Forgets every measured choice (gemm_choices() empties; the next product of each class
// measures again). Returns how many there were.
int64_t clear_gemm_choices();
}  // namespace detail

}  // namespace hg::cpu
