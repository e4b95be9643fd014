// The kinds of the CUDA losses, shared by the host API (loss.h) and the launchers
// (loss_launch.h). Free of fmt and of CUDA headers.
#pragma once

#include <cstdint>

namespace hg::cuda {

enum class LossReduction : uint8_t { None, Mean, Sum };

enum class PointwiseLoss : uint8_t {
  Mse,                           // (x - y)^2
  L1,                            // |x - y|
  SmoothL1,                      // 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta
  BinaryCrossEntropy,            // -w (y log x + (1 - y) log(1 - x)), logs clamped at -100
  BinaryCrossEntropyWithLogits,  // w ((1 - y) x + (1 + (p - 1) y) softplus(-x))
  KlDiv,                         // y log y - y x (0 log 0 = 0)
  KlDivLogTarget,                // exp(y) (y - x)
};

}  // namespace hg::cuda
