// The kinds of elementwise, reduction and loss work a kernel does, shared by every backend
// (the CPU kernels in cpu/, the CUDA kernels in cuda/): an op picks one, the device picks the
// kernel. Free of fmt, so .cu files use the same enums.
#pragma once

#include <cstdint>

namespace hg::kernel {

// One kind per line of unary.def.
enum class Unary : uint8_t {
#define HG_UNARY(kind, takes_integers, formula) kind,
#include "halfgrad/kernel/unary.def"
#undef HG_UNARY
};

enum class Binary : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Maximum,
  Minimum,
  Fmod,       // C's fmod: the remainder with the dividend's sign
  Remainder,  // Python's %: the remainder with the divisor's sign
  Atan2,
  Hypot,
  FloorDiv,  // Python's //: the quotient rounded down
  TruncDiv,  // C's /: the quotient rounded toward zero
};

enum class Compare : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

enum class Reduction : uint8_t { Sum, Prod, Mean, Amax, Amin, LogSumExp, Norm };

// The inclusive scans along a dim: cumsum, cumprod, logcumsumexp (kernel/formulas.h's
// scan_combine).
enum class Scan : uint8_t { Sum, Prod, LogSumExp };

// The losses' kinds (kernel/loss.h): here, free of fmt, for the CUDA launchers (loss_launch.h).
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

}  // namespace hg::kernel
