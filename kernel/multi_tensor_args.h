// The options of the fused optimizer steps of the multi_tensor family (kernel/multi_tensor.h),
// as plain structs: the CUDA launchers (cuda/multi_tensor_launch.h, compiled by nvcc without
// fmt or Tensor: NOTE [CUDA headers without fmt] in cuda/probe.h) take them as the table's
// functions do.
#pragma once

#include <cstdint>

namespace hg::kernel {

// lr_device, when not null, is a device pointer to the lr, read there in place of lr (NOTE [The
// lr on the device] in optim/optimizer.h); the CUDA backend only, null on the CPU.
struct AdamArgs {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled_weight_decay, amsgrad, maximize;
  const double* lr_device = nullptr;
  // bfloat16 parameters with float32 state, stored with stochastic rounding from the words of
  // `seed` at each tensor's first block (the Tensors' first_blocks); NOTE [bf16_params] in
  // optim/fused.h.
  bool bf16_params = false;
  uint64_t seed = 0;
};

struct SGDArgs {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
  const double* lr_device = nullptr;  // as AdamArgs'
  bool bf16_params = false;           // as AdamArgs': dtype bfloat16, the buffer float32
  uint64_t seed = 0;
};

struct RMSpropArgs {
  double lr, alpha, eps, weight_decay, momentum;
  bool centered, maximize;
  const double* lr_device = nullptr;  // as AdamArgs'
  bool bf16_params = false;           // as AdamArgs': dtype bfloat16, the buffers float32
  uint64_t seed = 0;
};

struct AdagradArgs {
  double lr, lr_decay, weight_decay, eps;
  bool maximize;
  const double* lr_device = nullptr;  // as AdamArgs'
  bool bf16_params = false;           // as AdamArgs': dtype bfloat16, the sum float32
  uint64_t seed = 0;
};

struct AdamaxArgs {
  double lr, beta1, beta2, eps, weight_decay;
  bool maximize;
  const double* lr_device = nullptr;  // as AdamArgs'
  bool bf16_params = false;           // as AdamArgs': dtype bfloat16, the state float32
  uint64_t seed = 0;
};

struct AdadeltaArgs {
  double lr, rho, eps, weight_decay;
  bool maximize;
  const double* lr_device = nullptr;  // as AdamArgs'
  bool bf16_params = false;           // as AdamArgs': dtype bfloat16, the state float32
  uint64_t seed = 0;
};

struct RAdamArgs {
  double lr, beta1, beta2, eps, weight_decay;
  const double* lr_device = nullptr;  // as AdamArgs'
  bool bf16_params = false;           // as AdamArgs': dtype bfloat16, the state float32
  uint64_t seed = 0;
};

struct NAdamArgs {
  double lr, beta1, beta2, eps, weight_decay, momentum_decay;
  bool decoupled_weight_decay, maximize;
  const double* lr_device = nullptr;  // as AdamArgs'
  bool bf16_params = false;           // as AdamArgs': dtype bfloat16, the state float32
  uint64_t seed = 0;
};

}  // namespace hg::kernel
