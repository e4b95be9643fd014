// oneDNN, the CPU library behind halfgrad's bf16 GEMM and convolution (AMX, AVX512-BF16).
// onednn.cpp also holds the GEMM's oneDNN path, which only the GEMM sees (cpu/linalg_detail.h).
#pragma once

#include <string>

namespace hg::cpu {

// True when halfgrad was built with oneDNN (HALFGRAD_ONEDNN=AUTO found it, or ON).
bool onednn_enabled();
// "2.6.3 (cpu_runtime=OMP)", or "not built" without oneDNN.
std::string onednn_version();

}  // namespace hg::cpu
