// CUDA GEMMs on cuBLASLt: the functions and semantics of cpu/gemm.h on one CUDA device.
// float16/bfloat16 inputs multiply on tensor cores with float32 accumulation
// (CUBLAS_COMPUTE_32F) and round once into the output; float32 is exact float32 unless
// hg::set_float32_matmul_precision("high") allows TF32; float64 is float64. One cuBLASLt
// handle and one workspace per device, made on first use.
#pragma once

#include <string>

#include "halfgrad/core/tensor.h"

namespace hg::cuda {

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha = 1.0,
          double beta = 0.0);
void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out);
void gemm_2d(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
             const Tensor& out, const Tensor& bias = {});
// gelu(op(a) op(b) + bias, approximate="tanh") as a new [M, N] tensor, with the pre-activation
// op(a) op(b) + bias written to `pre` (contiguous [M, N], a's dtype): in the GEMM's epilogue
// where cuBLASLt has one for the problem (NOTE [GELU epilogue] in gemm.cpp).
Tensor gemm_2d_gelu(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                    const Tensor& bias, const Tensor& pre);
// "cuBLASLt (tensor cores, fp32 accumulate)" and the like, for reports.
std::string gemm_backend(DType dtype);

}  // namespace hg::cuda
