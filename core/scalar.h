// Scalar: a C++ number given to a tensor op (fill value, `t * 2.0`), kept as the kind of
// number it was: floating, integral or boolean. It never decides a tensor's dtype by
// itself (PyTorch's rule: `half_tensor * 2.0` stays half).
#pragma once

#include <cstdint>
#include <type_traits>

#include "halfgrad/core/half.h"

namespace hg {

class Scalar {
 public:
  enum class Kind : uint8_t { Floating, Integral, Boolean };

  Scalar() : Scalar(int64_t{0}) {}
  template <class T>
  requires std::is_arithmetic_v<T> Scalar(T value) {  // NOLINT: implicit, like a number literal
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::Boolean;
      integral_ = value;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = Kind::Integral;
      integral_ = static_cast<int64_t>(value);
    } else {
      kind_ = Kind::Floating;
      floating_ = static_cast<double>(value);
    }
  }
  Scalar(Half value) : kind_(Kind::Floating), floating_(static_cast<double>(value)) {}
  Scalar(BFloat16 value) : kind_(Kind::Floating), floating_(static_cast<double>(value)) {}

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Floating; }
  bool is_integral() const { return kind_ == Kind::Integral; }
  bool is_boolean() const { return kind_ == Kind::Boolean; }

  double to_double() const { return is_floating() ? floating_ : double(integral_); }
  // The integral value; only for integral and boolean scalars.
  int64_t to_int64() const { return integral_; }

 private:
  Kind kind_;
  union {
    double floating_;
    int64_t integral_;
  };
};

}  // namespace hg
