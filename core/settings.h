// Process-wide numeric settings, with torch's names.
//
//   hg::set_float32_matmul_precision("high");   // float32 GEMMs and convolutions on CUDA may
//                                               // use TF32 tensor cores from now on
//   std::string p = hg::get_float32_matmul_precision();   // "high"
#pragma once

#include <string>
#include <string_view>

namespace hg {

// NOTE [float32 matmul precision] How float32 matrix products on CUDA may trade precision for
// speed, as torch.set_float32_matmul_precision:
//   "highest"  (the default) true float32 arithmetic (24-bit mantissas);
//   "high"     TF32 tensor cores allowed: inputs rounded to 10-bit mantissas, products
//              accumulated in float32;
//   "medium"   as "high" (torch may also use bfloat16 internally there; halfgrad stops at
//              TF32).
// halfgrad applies the same setting to cuDNN's float32 convolutions (torch has a separate
// switch for those). One setting for the whole process, every thread, read at each call; CPU
// kernels ignore it. Anything else throws hg::Error naming the accepted values.
enum class Float32MatmulPrecision { Highest, High, Medium };

void set_float32_matmul_precision(std::string_view precision);
std::string get_float32_matmul_precision();

// The setting as an enum (what kernels read), and whether it allows TF32 (High or Medium).
Float32MatmulPrecision float32_matmul_precision();
bool float32_matmul_allows_tf32();

}  // namespace hg
