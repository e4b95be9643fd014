// The kinds of elementwise and reduction work a kernel does, shared by every backend (the CPU
// kernels in cpu/, the CUDA kernels in cuda/): an op picks one, the device picks the kernel.
// Free of fmt, so .cu files use the same enums.
#pragma once

#include <cstdint>

namespace hg::kernel {

// One kind per line of unary.def.
enum class Unary : uint8_t {
#define HG_UNARY(kind, takes_integers, formula) kind,
#include "halfgrad/kernel/unary.def"
#undef HG_UNARY
};

enum class Binary : uint8_t { Add, Sub, Mul, Div, Pow, Maximum, Minimum };

enum class Compare : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };

enum class Reduction : uint8_t { Sum, Prod, Mean, Amax, Amin, LogSumExp, Norm };

}  // namespace hg::kernel
