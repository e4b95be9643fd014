// hg-info: what this copy of halfgrad was built with and what it finds on this machine.
#include <omp.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "halfgrad/config.h"
#include "halfgrad/core/convert.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/cpu/attention.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/onednn.h"
#include "halfgrad/cpu/onednn_conv.h"
#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/cuda/cuda.h"

int main(int argc, char** argv) {
  CLI::App app{"hg-info: halfgrad's build configuration and the devices it sees"};
  bool measure = true;
  app.add_flag("!--no-measure", measure,
               "skip timing the GEMM and conv2d paths (about two seconds)");
  CLI11_PARSE(app, argc, argv);

  fmt::print("halfgrad      {}\n", HALFGRAD_VERSION);
  fmt::print("compiler      {}\n", __VERSION__);
  fmt::print("cpu threads   {} (OpenMP)\n", omp_get_max_threads());
  fmt::print("fp16/bf16 cvt {} (vector path chosen for this CPU)\n",
             hg::convert::isa_name(hg::convert::best_isa()));
  fmt::print("vector math   {} (SLEEF {}; HALFGRAD_VECTOR_MATH=0 turns it off)\n",
             hg::cpu::vector_math_isa(), HALFGRAD_HAS_SLEEF ? "built" : "not built");
  fmt::print("oneDNN        {}\n", hg::cpu::onednn_version());
  for (hg::DType dtype : {hg::kFloat32, hg::kBFloat16, hg::kFloat16, hg::kFloat64}) {
    fmt::print("GEMM {:<8} {} [{}]\n", hg::dtype_name(dtype),
               hg::cpu::linalg_kernels.backend(dtype), hg::cpu::gemm_kernel_name(dtype));
  }
  // The attention path of a bfloat16 head of 64 x 64 x 32 (NOTE [Attention by heads]).
  fmt::print(
      "attention     bfloat16 64 x 64 x 32 heads: {} (HALFGRAD_CPU_ATTENTION=batched sets "
      "batched)\n",
      hg::cpu::attention_path_name(hg::kBFloat16, 64, 64, 32));
  // The paths gemm measures and keeps (NOTE [GEMM path by measurement]), for square products
  // of three sizes, on this process's threads.
  if (measure) {
    fmt::print("GEMM paths chosen for n x n x n (HALFGRAD_CPU_GEMM sets them):\n");
    for (hg::DType dtype : {hg::kFloat32, hg::kBFloat16, hg::kFloat16}) {
      for (int64_t n : {32, 256, 1024}) {
        const hg::Tensor a = hg::randn({1, n, n}, dtype), b = hg::randn({1, n, n}, dtype);
        hg::cpu::linalg_kernels.gemm(a, b, hg::empty({1, n, n}, dtype), 1.0, 0.0);
      }
    }
    for (const hg::cpu::GemmChoice& choice : hg::cpu::gemm_choices()) {
      fmt::print("  {}\n", hg::cpu::describe(choice));
    }
    // The conv2d paths (NOTE [oneDNN convolutions]) for a 3x3 convolution of 32 to 64
    // channels on 28x28 images, batch 32, each direction.
    fmt::print("conv2d paths chosen (HALFGRAD_CPU_CONV sets them):\n");
    for (hg::DType dtype : {hg::kFloat32, hg::kBFloat16}) {
      const hg::kernel::Conv2dParams params{.padding = {1, 1}};
      const hg::Tensor x = hg::randn({32, 32, 28, 28}, dtype);
      const hg::Tensor w = hg::randn({64, 32, 3, 3}, dtype), b = hg::randn({64}, dtype);
      const hg::Tensor y = hg::cpu::conv_kernels.conv2d(x, w, b, params);
      hg::cpu::conv_kernels.conv2d_backward(y, x, w, true, params, {true, true, true});
    }
    for (const hg::cpu::ConvChoice& choice : hg::cpu::conv_choices()) {
      fmt::print("  {}\n", hg::cpu::describe(choice));
    }
  }
  fmt::print("CUDA backend  {}\n", hg::cuda::is_compiled() ? "built" : "not built");
  fmt::print("CUDA devices  {}\n", hg::cuda::describe());
  return 0;
}
