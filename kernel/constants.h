// The constants of formulas.h (GELU, erf, erfinv), in a header of their own: the vector math
// files (cpu/vector_math_formulas.inc) include no inline code (NOTE [Vector math]).
#pragma once

namespace hg::kernel {

inline constexpr double kSqrtHalf = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluCoef = 0.044715;
inline constexpr double kTwoOverSqrtPi = 1.12837916709551257390;  // d/dx erf(x) at 0
inline constexpr double kHalfSqrtPi = 0.88622692545275801365;     // d/dy erfinv(y) at 0

}  // namespace hg::kernel
