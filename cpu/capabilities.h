// What the CPU computes natively in 16 bits, for a program choosing its autocast dtype (the
// CPU's counterpart of hg::cuda::is_bf16_supported):
//
//   const DType dtype = hg::cpu::is_bf16_supported() ? hg::kBFloat16 : hg::kFloat32;
//
// "Natively": the CPU GEMM runs the dtype on a kernel for it (oneDNN's AVX512-BF16 or AMX
// kernels for bfloat16, AVX512-FP16 or AMX-FP16 for float16), not as float32 tiles with the
// operands widened (NOTE [CPU GEMM paths] in cpu/linalg.cpp). Both dtypes work everywhere;
// without native support they are slower than float32, not wrong.
#pragma once

namespace hg::cpu {

bool is_bf16_supported();
bool is_fp16_supported();

}  // namespace hg::cpu
